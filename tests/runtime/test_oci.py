"""Containers run by crun from an OCI bundle: the config built from the sandbox's layout, and
what a pod's containers share."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime
from trimaran.runtime.idmap import IdMap, pods_range
from trimaran.runtime.oci import INIT_PATH, bundle, oci_available
from trimaran.runtime.sandbox import MASKED_PATHS, READ_ONLY_PATHS, build_argv, build_image_argv
from trimaran.runtime.security import DEFAULT_CAPABILITIES, ContainerSecurity
from trimaran.runtime.shim import overlay_mounts_under
from trimaran.runtime.volumes import Mount

from .helpers import make_pod, wait_for

needs_crun = pytest.mark.skipif(not oci_available(), reason="crun runs pods only for a root control plane with crun "
                                                           "and tini-static installed")
IDMAP = IdMap(((0, 100000, 65536),), ((0, 100000, 65536),), (101000, 101000, ()), helper=False)


def _security(uid: int = 0, caps: frozenset[str] = DEFAULT_CAPABILITIES, **extra: object) -> ContainerSecurity:
    return ContainerSecurity(uid, uid, caps, "RuntimeDefault", read_only_root=False, privileged=False, **extra)


def _host_argv(tmp_path: Path, security: ContainerSecurity, mounts: list[Mount] = ()) -> list[str]:
    for name in ("hosts", "hostname", "term"):
        (tmp_path / name).write_text("")
    (tmp_path / "home").mkdir(exist_ok=True)
    return build_argv(["python3", "-c", "pass"], mounts=list(mounts), hostname="box", hosts_path=tmp_path / "hosts",
                      hostname_path=tmp_path / "hostname", termination_log=(tmp_path / "term", "/dev/termination-log"),
                      working_dir="/work/dir", security=security, userns=True, mapped=True, bwrap="/usr/bin/bwrap",
                      keep_visible=[str(tmp_path)], hidden=[str(tmp_path / "home")])


def test_a_host_process_container_as_a_bundle(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    argv = _host_argv(tmp_path, _security(groups=(5,)), [Mount("/data", volume), Mount("/etc/config", volume, True)])
    config, skeleton, fresh_root = bundle(argv, env={"A": "1"}, security=_security(groups=(5,)), idmap=IDMAP)
    assert fresh_root and config["root"] == {"path": "rootfs", "readonly": False}
    process = config["process"]
    assert process["args"] == [INIT_PATH, "-p", "SIGKILL", "--", "python3", "-c", "pass"]
    assert (process["env"], process["cwd"], process["noNewPrivileges"]) == (["A=1"], "/work/dir", True)
    assert process["user"] == {"uid": 0, "gid": 0, "additionalGids": [5]}
    caps = sorted(f"CAP_{c}" for c in DEFAULT_CAPABILITIES)
    assert process["capabilities"] == {"bounding": caps, "effective": caps, "permitted": caps}
    linux = config["linux"]
    assert [ns["type"] for ns in linux["namespaces"]] == ["user", "pid", "ipc", "uts", "mount"]
    assert linux["uidMappings"] == [{"containerID": 0, "hostID": 100000, "size": 65536}]
    present = [p for p in MASKED_PATHS if os.path.exists(p)]
    assert sorted(linux["maskedPaths"]) == sorted(present)
    assert sorted(linux["readonlyPaths"]) == sorted(p for p in READ_ONLY_PATHS if os.path.exists(p))
    assert linux["seccomp"]["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {n for rule in linux["seccomp"]["syscalls"] if "args" not in rule for n in rule["names"]}
    assert {"mount", "setns", "keyctl", "clone3"} <= denied
    by_target = {m["destination"]: m for m in config["mounts"]}
    assert by_target["/usr"]["options"][:2] == ["rbind", "rro"]
    assert by_target["/data"] == {"destination": "/data", "type": "bind", "source": str(volume),
                                  "options": ["rbind", "rw", "nosuid"]}
    assert by_target["/proc"]["type"] == "proc" and by_target["/dev/pts"]["type"] == "devpts"
    home = by_target[str(tmp_path / "home")]
    assert home["type"] == "tmpfs" and "ro" in home["options"], "the home stays hidden"
    # /etc is rebuilt (a mount point is made in it): a directory of the skeleton, its entries bound.
    assert ["dir", "/etc", 0o755] in skeleton and "/etc" not in by_target
    assert by_target["/etc/hostname"]["source"] == str(tmp_path / "hostname")
    assert ["symlink", "../run", "/var/run"] in skeleton
    assert by_target["/etc/config"]["options"][:2] == ["rbind", "rro"]


def test_a_non_root_user_keeps_its_added_capabilities_and_a_pod_netns_is_joined(tmp_path: Path) -> None:
    security = _security(uid=1000, caps=frozenset({"NET_BIND_SERVICE"}))
    config, _, _ = bundle(_host_argv(tmp_path, security), env={}, security=security, idmap=IDMAP,
                          netns="/run/netns/pod")
    assert config["process"]["capabilities"]["ambient"] == ["CAP_NET_BIND_SERVICE"]
    assert {"type": "network", "path": "/run/netns/pod"} in config["linux"]["namespaces"]


def test_an_image_container_has_its_overlay_as_root(tmp_path: Path) -> None:
    image, merged = tmp_path / "image", tmp_path / "merged"
    (image / "etc").mkdir(parents=True)
    merged.mkdir()
    for name in ("hosts", "hostname"):
        (tmp_path / name).write_text("")
    security = ContainerSecurity(0, 0, DEFAULT_CAPABILITIES, None, read_only_root=True, privileged=False)
    argv = build_image_argv(["/bin/app"], image_root=image, root=merged, mounts=[], hostname="box",
                            hosts_path=tmp_path / "hosts", hostname_path=tmp_path / "hostname",
                            security=security,
                            userns=True, mapped=True, bwrap="/usr/bin/bwrap")
    config, skeleton, fresh_root = bundle(argv, env={}, security=security, idmap=IDMAP)
    assert not fresh_root and not skeleton
    assert config["root"] == {"path": str(merged), "readonly": True}
    assert "/" not in {m["destination"] for m in config["mounts"]}
    assert "seccomp" not in config["linux"], "Unconfined: no filter"


@needs_crun
def test_containers_of_a_pod_share_its_user_ipc_and_uts_namespaces(runtime: LocalRuntime) -> None:
    probe = ("cat /proc/1/comm; hostname; for n in user ipc uts pid; do readlink /proc/self/ns/$n; done; "
             "cat /proc/self/uid_map")
    pod = make_pod("sharing", [{"name": name, "command": ["sh", "-c", probe + "; sleep 0.5"]} for name in ("a", "b")],
                   hostname="shared-host")
    runtime.start_pod(pod, attempt=0)
    uid = pod["metadata"]["uid"]
    wait_for(lambda: all(s.state == "terminated" for s in runtime.pod_status(uid).containers.values()), 30,
             "both containers to finish")
    seen = {}
    for name in ("a", "b"):
        assert runtime.pod_status(uid).containers[name].exit_code == 0
        seen[name] = runtime.log_path("default", "sharing", name).read_text().split("\n")
    init, hostname, user, ipc, uts, pid, uid_map = (seen["a"][i] for i in range(7))
    assert (init, hostname) == ("init", "shared-host"), "tini is the container's init"
    assert seen["b"][1:5] == [hostname, user, ipc, uts]
    assert seen["b"][5] != pid, "each container has a pid namespace of its own"
    pods = pods_range()
    assert pods is not None and uid_map.split()[:2] == ["0", str(pods.uid)]
    # The pod's pins go with its last shim, and crun keeps no state of a finished container.
    wait_for(lambda: not overlay_mounts_under(str(runtime.home / "pods" / uid)), 10, "the namespaces' pins to go")
    wait_for(lambda: not any((runtime.home / "crun").iterdir()), 10, "crun's state to go")



@needs_crun
def test_a_killed_shim_leaves_nothing_once_the_pod_is_removed(runtime: LocalRuntime) -> None:
    pod = make_pod("killed", [{"name": "main", "command": ["sh", "-c", "echo up; exec sleep 1000"]}])
    runtime.start_pod(pod, attempt=0)
    uid = pod["metadata"]["uid"]
    log = runtime.log_path("default", "killed", "main")
    wait_for(lambda: log.exists() and log.read_text().startswith("up"), 20, "the start")
    shim_pid = int(json.loads((runtime.home / "pods" / uid / "runs" / "0" / "shim.pid").read_text())["pid"])
    os.kill(shim_pid, signal.SIGKILL)
    status = wait_for(lambda: (s := runtime.pod_status(uid).containers["main"]).state == "terminated" and s, 20,
                      "the container to be found lost")
    assert status.reason == "ShimLost"
    runtime.remove_pod(uid)
    assert not overlay_mounts_under(str(runtime.home)), "the pod's namespaces are unpinned"
    assert not list((runtime.home / "crun").glob(f"{uid}-*")), "crun's state of the container is gone"


@needs_crun
def test_crun_and_bubblewrap_show_a_container_the_same(runtime: LocalRuntime) -> None:
    """The securityContext probe of test_security, run under each runtime: the same answers."""
    from .test_security import _probe, _results

    seen = {}
    before = os.environ.get("TRIMARAN_RUNTIME")
    try:
        for name in ("bwrap", "crun"):
            os.environ["TRIMARAN_RUNTIME"] = name
            oci_available.cache_clear()
            pod = make_pod(f"same-{name}", [
                _probe("default"),
                _probe("user", runAsUser=1000, runAsGroup=2000, capabilities={"add": ["NET_BIND_SERVICE"]}),
                _probe("readonly", readOnlyRootFilesystem=True),
                _probe("privileged", privileged=True),
            ], volumes=[{"name": "data", "emptyDir": {}}])
            runtime.start_pod(pod, attempt=0)
            seen[name] = _results(runtime, pod)
            spec = (runtime.home / "pods" / pod["metadata"]["uid"] / "runs" / "0" / "spec.json").read_text()
            assert ('"oci"' in spec) == (name == "crun")
    finally:
        if before is None:
            os.environ.pop("TRIMARAN_RUNTIME", None)
        else:
            os.environ["TRIMARAN_RUNTIME"] = before
        oci_available.cache_clear()
    assert seen["crun"] == seen["bwrap"]
