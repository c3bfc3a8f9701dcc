"""Pods' user namespaces: the subordinate range reserved for them, each container's maps, bind
sources staged for an unprivileged bubblewrap, the masked /proc and /sys paths, and a mapped
container's view of itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trimaran.runtime.idmap import IdRangeError, PodsRange, container_idmap, reserve_range, subordinate_ranges
from trimaran.runtime.sandbox import MASKED_PATHS, READ_ONLY_PATHS, build_argv, proc_masks, sandbox_available
from trimaran.runtime.security import DEFAULT_CAPABILITIES, ContainerSecurity, container_security
from trimaran.runtime.shim import STAGE_DIR, stage_sources
from trimaran.runtime.volumes import Mount

ROOT = ContainerSecurity(0, 0, DEFAULT_CAPABILITIES, "RuntimeDefault", read_only_root=False, privileged=False)


def test_a_range_is_reserved_after_the_highest_in_use_and_an_existing_one_honoured(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("alice:100000:65536\nbob:165536:65536")  # no newline at the end
    subgid.write_text("alice:100000:65536\ncarol:300000:1000\n")
    assert reserve_range(subuid=subuid, subgid=subgid, passwd_max=1000) == (301000, 301000)
    assert ("trimaran", 301000, 65536) in subordinate_ranges(subuid)
    assert subuid.read_text().splitlines()[-2:] == ["bob:165536:65536", "trimaran:301000:65536"]
    # Read again, not appended again.
    assert reserve_range(subuid=subuid, subgid=subgid, passwd_max=1000) == (301000, 301000)
    assert subgid.read_text().count("trimaran:") == 1
    # An administrator's entries are kept as written, even with different bases.
    subuid.write_text("trimaran:500000:65536\n")
    subgid.write_text("trimaran:600000:70000\n")
    assert reserve_range(subuid=subuid, subgid=subgid) == (500000, 600000)
    subgid.write_text("trimaran:600000:10\n")
    with pytest.raises(IdRangeError, match="holds 10 ids"):
        reserve_range(subuid=subuid, subgid=subgid)


def test_empty_files_give_a_range_above_the_hosts_users(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"  # subgid missing altogether
    subuid.touch()
    assert reserve_range(subuid=subuid, subgid=subgid, passwd_max=65534) == (100000, 100000)
    assert reserve_range(subuid=tmp_path / "u2", subgid=tmp_path / "g2", passwd_max=250000) == (250001, 250001)


def test_as_root_every_id_is_the_range_and_bubblewrap_runs_as_the_containers_uid_outside() -> None:
    pods = PodsRange(100000, 200000)
    idmap = container_idmap(1000, 1000, (5, 2000), pods)
    assert idmap is not None
    assert idmap.uid_map == ((0, 100000, 65536),) and idmap.gid_map == ((0, 200000, 65536),)
    assert idmap.run_as == (101000, 201000, (200005, 202000)) and not idmap.helper
    assert (idmap.host_uid(0), idmap.host_gid(42)) == (100000, 200042)
    assert container_idmap(0, 0, (), pods).run_as == (100000, 200000, ())
    with pytest.raises(IdRangeError, match="runAsUser 65536"):
        container_idmap(65536, 0, (), pods)


def test_an_ordinary_user_is_the_containers_own_uid_and_the_rest_subordinate() -> None:
    pods = PodsRange(300000, 400000, owner=(1000, 1001))
    idmap = container_idmap(1000, 0, (), pods)
    assert idmap.uid_map == ((0, 300000, 1000), (1000, 1000, 1), (1001, 301000, 64535))
    assert idmap.gid_map == ((0, 1001, 1), (1, 400000, 65535))
    assert idmap.run_as is None and idmap.helper
    assert sum(count for _, _, count in idmap.uid_map) == 65536
    assert container_idmap(0, 0, (), pods).uid_map[0] == (0, 1000, 1)
    assert json.loads(json.dumps(idmap.to_json()))["uid_map"][1] == [1000, 1000, 1]


def test_masks_follow_the_kubelets_lists_and_unmasked_or_privileged_clear_them() -> None:
    args = proc_masks(ROOT)
    for path in MASKED_PATHS:
        if os.path.isdir(path):
            assert ["--tmpfs", path, "--remount-ro", path] == args[args.index(path) - 1:args.index(path) + 3]
        elif os.path.exists(path):
            assert args[args.index(path) - 2:args.index(path)] == ["--ro-bind", "/dev/null"]
        else:
            assert path not in args
    for path in READ_ONLY_PATHS:
        if os.path.exists(path):
            assert args[args.index(path) - 1:args.index(path) + 2] == ["--ro-bind", path, path]
        else:
            assert path not in args
    pod = {"metadata": {"name": "p"}, "spec": {"containers": []}}
    for context in ({"procMount": "Unmasked"}, {"privileged": True}):
        security = container_security(pod, {"name": "c", "securityContext": context}, 0)
        assert security.unmasked and proc_masks(security) == []
    assert not container_security(pod, {"name": "c"}, 0).unmasked


def test_a_mapped_container_names_no_uid_and_groups_come_from_the_pod(tmp_path: Path) -> None:
    common = {"mounts": [], "hostname": "h", "hosts_path": tmp_path / "hosts", "hostname_path": tmp_path / "hn",
              "bwrap": "/usr/bin/bwrap", "keep_visible": [], "userns": True}
    mapped = build_argv(["true"], security=ROOT, mapped=True, **common)
    single = build_argv(["true"], security=ROOT, **common)
    assert "--unshare-user" in mapped and "--uid" not in mapped and "--gid" not in mapped
    assert single[single.index("--uid"):single.index("--uid") + 4] == ["--uid", "0", "--gid", "0"]
    assert "/proc/sys" in mapped  # masked in both
    pod = {"metadata": {"name": "p"}, "spec": {"securityContext": {"supplementalGroups": [5, 6], "fsGroup": 7}}}
    assert container_security(pod, {"name": "c"}, 0).groups == (5, 6, 7)


def test_sources_an_unprivileged_uid_cannot_reach_are_staged() -> None:
    with tempfile.TemporaryDirectory() as directory:  # under /tmp, which everyone may enter
        check_staging(Path(directory))


def check_staging(tmp_path: Path) -> None:
    private = tmp_path / "private"
    (private / "dir").mkdir(parents=True)
    (private / "file").write_text("x")
    private.chmod(0o700)
    tmp_path.chmod(0o755)
    argv = ["bwrap", "--ro-bind", "/usr", "/usr", "--bind", str(private / "dir"), "/data",
            "--ro-bind-try", str(private / "missing"), "/m", "--ro-bind", str(private / "file"), "/f",
            "--symlink", "--bind", "/x", "--", "cat", "--bind"]
    staged_argv, staged = stage_sources(argv, 123456, [123456])
    assert staged == [(str(private / "dir"), f"{STAGE_DIR}/0", True), (str(private / "file"), f"{STAGE_DIR}/1", False)]
    assert staged_argv == ["bwrap", "--ro-bind", "/usr", "/usr", "--bind", f"{STAGE_DIR}/0", "/data",
                           "--ro-bind", f"{STAGE_DIR}/1", "/f", "--symlink", "--bind", "/x", "--", "cat", "--bind"]
    # Its owner reaches everything: nothing staged.
    assert stage_sources(argv, os.geteuid(), [])[1] == []


@pytest.mark.skipif(os.geteuid() != 0 or not sandbox_available(), reason="maps the pods' range as root")
def test_a_mapped_sandbox_is_the_range_and_cannot_write_the_kernels_settings(tmp_path: Path) -> None:
    from trimaran.runtime.idmap import pods_range

    pods = pods_range()
    idmap = container_idmap(1000, 1000, (), pods)
    private = tmp_path / "data"  # under pytest's root-only directory: staged
    private.mkdir()
    (private / "hello").write_text("hi\n")
    security = ContainerSecurity(1000, 1000, frozenset(), "RuntimeDefault", read_only_root=False, privileged=False)
    argv = build_argv(["sh", "-c", "id -u; id -g; cat /data/hello; cat /proc/self/uid_map; "
                                   "echo 11 > /proc/sys/kernel/printk_ratelimit_burst || echo refused"],
                      mounts=[Mount("/data", private, read_only=True)], hostname="h",
                      hosts_path=Path("/etc/hosts"), hostname_path=Path("/etc/hostname"),
                      keep_visible=[], security=security, mapped=True)
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps({"argv": argv, "idmap": idmap.to_json()}))
    shim = str(Path(sys.modules["trimaran.runtime.shim"].__file__).resolve())
    result = subprocess.run([sys.executable, "-I", "-S", shim, "--run", str(spec)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[:3] == ["1000", "1000", "hi"]
    assert lines[3].split() == ["0", str(pods.uid), "65536"]
    assert lines[4] == "refused"
