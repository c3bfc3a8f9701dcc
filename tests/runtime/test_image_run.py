"""Containers that run their image: the image's root filesystem as ``/`` under a writable overlay
of each container's own, the kubelet's rules for command, env, workingDir and user.

The images here are root filesystems made by hand (busybox-static and an /etc/passwd), which is
all the runtime sees of an image; pulling is tested with the registry elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.runtime.helpers import make_pod, wait_for
from trimaran.runtime import LocalRuntime
from trimaran.runtime.env import ConfigError, expand_command
from trimaran.runtime.idmap import pods_range
from trimaran.runtime.local import ImageRun, image_user
from trimaran.runtime.sandbox import path_in_root, sandbox_available
from trimaran.runtime.shim import overlay_mounts_under

BUSYBOX = shutil.which("busybox")
pytestmark = pytest.mark.skipif(not (sandbox_available() and BUSYBOX and shutil.which("fuse-overlayfs")),
                                reason="needs bubblewrap, busybox and fuse-overlayfs")


def busybox_rootfs(root: Path) -> Path:
    """A root filesystem with busybox-static, a user `app` (1000:1000) and Debian's /var/run link."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "id", "ls", "pwd", "touch", "env", "sleep", "test", "mount"):
        (root / "bin" / tool).symlink_to("busybox")
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\napp:x:1000:\nstaff:x:50:\n")
    (root / "run").mkdir()
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")
    (root / "srv" / "app").mkdir(parents=True)
    (root / "srv" / "app" / "data.txt").write_text("from the image\n")
    pods = pods_range()
    if pods is not None and pods.owner is None:
        # As an unpack under the pods' id mapping leaves an image: root's files are the pods' root's.
        for path in [root, *root.rglob("*")]:
            os.lchown(path, pods.uid, pods.gid)
    return root


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return busybox_rootfs(tmp_path_factory.mktemp("image") / "rootfs")


def image(rootfs: Path, **config: object) -> ImageRun:
    return ImageRun(reference="registry.test/busybox:1", image_id="registry.test/busybox@sha256:" + "0" * 64,
                    rootfs=rootfs, **config)  # type: ignore[arg-type]


def overlay_daemons(directory: Path) -> list[int]:
    needle = str(directory.resolve()).encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"fuse-overlayfs") and any(needle in a for a in argv[1:]):
            found.append(int(pid))
    return found


def nothing_left(home: Path) -> bool:
    return not overlay_mounts_under(str(home)) and not overlay_daemons(home)


def run_to_end(runtime: LocalRuntime, pod: dict, images: dict[str, ImageRun], name: str = "main") -> str:
    runtime.start_pod(pod, attempt=0, images=images)
    uid = pod["metadata"]["uid"]
    status = wait_for(lambda: (s := runtime.pod_status(uid).containers.get(name)) and s.state == "terminated" and s,
                      timeout=30, what=f"{name} to finish")
    log = runtime.log_path("default", pod["metadata"]["name"], name).read_text()
    assert status.exit_code == 0, (status, log)
    return log


@pytest.mark.parametrize(("container", "entrypoint", "cmd", "argv"), [
    ({}, ["/bin/echo", "ep"], ["cmd"], ["/bin/echo", "ep", "cmd"]),
    ({"command": ["run"]}, ["ep"], ["cmd"], ["run"]),
    ({"command": ["run"], "args": ["a"]}, ["ep"], ["cmd"], ["run", "a"]),
    ({"args": ["a", "$(X)"]}, ["ep"], ["cmd"], ["ep", "a", "1"]),
    ({}, [], ["sh", "-c", "x"], ["sh", "-c", "x"]),
    ({"command": ["$(X)"]}, None, None, ["1"]),
])
def test_command_follows_the_kubelets_rules(container: dict, entrypoint: list | None, cmd: list | None,
                                            argv: list[str]) -> None:
    assert expand_command({"name": "c", **container}, {"X": "1"}, entrypoint, cmd) == argv


def test_an_image_with_nothing_to_run_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no command specified"):
        expand_command({"name": "c"}, {}, [], [])


def test_image_users_resolve_from_the_images_own_files(rootfs: Path) -> None:
    assert image_user(rootfs, "app") == (1000, 1000)
    assert image_user(rootfs, "app:staff") == (1000, 50)
    assert image_user(rootfs, "4242") == (4242, 0)
    assert image_user(rootfs, "1000:7") == (1000, 7)
    with pytest.raises(ConfigError, match="unable to find user nobody"):
        image_user(rootfs, "nobody")


def test_mount_points_follow_the_images_links_without_leaving_it(rootfs: Path) -> None:
    assert path_in_root(rootfs, "/var/run/secrets/token") == "/run/secrets/token"
    (rootfs / "escape").symlink_to("../../../../etc")
    try:
        assert path_in_root(rootfs, "/escape/hosts") == "/etc/hosts"
    finally:
        (rootfs / "escape").unlink()


@pytest.fixture(params=["kernel", "fuse"])
def overlay(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Either overlay (the shim inherits the choice): the kernel's as root, fuse-overlayfs otherwise."""
    if request.param == "kernel" and os.geteuid() != 0:
        pytest.skip("the kernel's overlayfs needs root")
    monkeypatch.setenv("TRIMARAN_OVERLAY", request.param)
    return request.param


def test_entrypoint_cmd_env_workdir_and_user_from_the_image(runtime: LocalRuntime, rootfs: Path, overlay: str) -> None:
    script = "pwd; id -u; id -g; echo $GREETING $OVERRIDDEN $HOME; cat data.txt; ls /usr 2>&1 | head -1"
    pod = make_pod("img", [{"name": "main", "env": [{"name": "OVERRIDDEN", "value": "by-pod"}]}])
    log = run_to_end(runtime, pod, {"main": image(rootfs, entrypoint=("/bin/sh", "-c"), cmd=(script,),
                                                  env=("GREETING=hi", "OVERRIDDEN=by-image", "PATH=/bin"),
                                                  working_dir="/srv/app", user="app")})
    lines = log.splitlines()
    assert lines[:5] == ["/srv/app", "1000", "1000", "hi by-pod /home/app", "from the image"]
    assert "No such file" in lines[5], "nothing of the host's /usr is visible"
    assert wait_for(lambda: nothing_left(runtime.home), timeout=60, what="the overlay to go")


def test_run_as_user_overrides_the_image_user_and_run_as_non_root_checks_it(
        runtime: LocalRuntime, rootfs: Path) -> None:
    pod = make_pod("uid", [{"name": "main", "command": ["id", "-u"],
                            "securityContext": {"runAsUser": 4321, "runAsNonRoot": True}}])
    assert run_to_end(runtime, pod, {"main": image(rootfs, user="app")}).split() == ["4321"]
    root_pod = make_pod("root", [{"name": "main", "command": ["id", "-u"],
                                  "securityContext": {"runAsNonRoot": True}}])
    with pytest.raises(ConfigError, match="runAsNonRoot"):
        runtime.start_pod(root_pod, attempt=0, images={"main": image(rootfs)})
    non_root = make_pod("nonroot", [{"name": "main", "command": ["id", "-u"],
                                     "securityContext": {"runAsNonRoot": True}}])
    assert run_to_end(runtime, non_root, {"main": image(rootfs, user="app")}).split() == ["1000"]


def test_writes_stay_in_each_containers_own_layer(runtime: LocalRuntime, rootfs: Path, overlay: str) -> None:
    write = "echo mine > /srv/app/data.txt; touch /new; cat /srv/app/data.txt"
    look = "cat /srv/app/data.txt; test -e /new && echo leaked || echo clean"
    writer = make_pod("writer", [{"name": "main", "command": ["sh", "-c", write]}])
    assert run_to_end(runtime, writer, {"main": image(rootfs)}).split() == ["mine"]
    # The writer's pod still exists (its layer too) while another container of the image runs.
    reader = make_pod("reader", [{"name": "main", "command": ["sh", "-c", look]}])
    assert run_to_end(runtime, reader, {"main": image(rootfs)}).split() == ["from", "the", "image", "clean"]
    assert (rootfs / "srv" / "app" / "data.txt").read_text() == "from the image\n"
    assert not (rootfs / "new").exists()


def test_read_only_root_filesystem(runtime: LocalRuntime, rootfs: Path, overlay: str) -> None:
    script = "touch /x 2>/dev/null && echo root-writable; touch /data/ok && echo volume-writable; " \
             "echo msg > /dev/termination-log && echo log-writable"
    pod = make_pod("ro", [{"name": "main", "command": ["sh", "-c", script],
                           "securityContext": {"readOnlyRootFilesystem": True},
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                   volumes=[{"name": "data", "emptyDir": {}}])
    assert run_to_end(runtime, pod, {"main": image(rootfs)}).split() == ["volume-writable", "log-writable"]


def test_service_account_token_lands_through_the_images_var_run_link(runtime: LocalRuntime, rootfs: Path) -> None:
    pod = make_pod("vol", [{"name": "main", "command": ["cat", "/var/run/cfg/a"],
                            "volumeMounts": [{"name": "cfg", "mountPath": "/var/run/cfg"}]}],
                   volumes=[{"name": "cfg", "emptyDir": {}}])
    runtime.start_pod(pod, attempt=0, images={"main": image(rootfs)})
    status = wait_for(lambda: (s := runtime.pod_status(pod["metadata"]["uid"]).containers["main"]).state
                      == "terminated" and s, timeout=30, what="exit")
    assert status.exit_code == 1, "the volume is mounted (empty) where the link leads"


def test_stopping_and_removing_leave_no_mount_or_fuse_process(runtime: LocalRuntime, rootfs: Path,
                                                              overlay: str) -> None:
    pod = make_pod("stop", [{"name": "main", "command": ["sleep", "60"]}])
    uid = pod["metadata"]["uid"]
    runtime.start_pod(pod, attempt=0, images={"main": image(rootfs)})
    wait_for(lambda: runtime.pod_status(uid).containers["main"].state == "running", timeout=30, what="start")
    assert overlay_mounts_under(str(runtime.home)), "the container's root is an overlay"
    runtime.stop_pod(uid, grace_seconds=1)
    # The mount is gone when the stop returns; fuse-overlayfs notices its unmount and exits a moment
    # after (on a busy machine, later than that).
    assert not overlay_mounts_under(str(runtime.home))
    assert wait_for(lambda: nothing_left(runtime.home), timeout=60, what="fuse-overlayfs to go")
    runtime.remove_pod(uid)
    assert nothing_left(runtime.home)


def test_a_killed_shim_leaves_nothing_once_the_pod_is_removed(runtime: LocalRuntime, rootfs: Path,
                                                              overlay: str) -> None:
    pod = make_pod("lost", [{"name": "main", "command": ["sleep", "60"]}])
    uid = pod["metadata"]["uid"]
    runtime.start_pod(pod, attempt=0, images={"main": image(rootfs)})
    wait_for(lambda: runtime.pod_status(uid).containers["main"].state == "running", timeout=30, what="start")
    shim = runtime.home / "pods" / uid / "runs" / "0" / "shim.pid"
    os.kill(__import__("json").loads(shim.read_text())["pid"], signal.SIGKILL)
    # A fresh runtime on the same home, as after a control-plane restart.
    LocalRuntime(runtime.home).remove_pod(uid)
    assert wait_for(lambda: nothing_left(runtime.home), timeout=60, what="mounts and fuse-overlayfs to go")
