"""A container's securityContext as the sandbox enforces it: user, capabilities, seccomp,
read-only root; refusals the kubelet makes at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trimaran.runtime import ConfigError, LocalRuntime, sandbox_available
from trimaran.runtime.sandbox import build_argv, hosts_file
from trimaran.runtime.security import CAPABILITIES, DEFAULT_CAPABILITIES, container_security

from .helpers import make_pod, wait_for

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

# Bit numbers of capability.h, for reading CapEff.
_CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
             "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18, "SYS_ADMIN": 21,
             "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31}

# What a container is and may do, as one JSON line.
PROBE = textwrap.dedent("""
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)

    def errno_of(rc):
        return 0 if rc == 0 else ctypes.get_errno()

    def write(path):
        try:
            with open(path, "w") as handle:
                handle.write("x")
            return 0
        except OSError as exc:
            return exc.errno

    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    print(json.dumps({
        "uid": os.getuid(), "gid": os.getgid(),
        "caps": int(status["CapEff"], 16), "bounding": int(status["CapBnd"], 16),
        "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
        "mount": errno_of(libc.mount(b"none", b"/dev/shm", b"tmpfs", 0, None)),
        "write_root": write("/probe"), "write_tmp": write("/tmp/probe"),
        "write_volume": write("/data/probe-" + os.urandom(4).hex()),  # its own: containers run at once
        "home": os.environ["HOME"],
    }))
""")


def _caps(names: set[str] | frozenset[str]) -> int:
    return sum(1 << _CAP_BITS[name] for name in names)


def _probe(name: str, **security: object) -> dict:
    return {"name": name, "command": [sys.executable, "-c", PROBE], "securityContext": security,
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}


def _results(runtime: LocalRuntime, pod: dict) -> dict[str, dict]:
    uid = pod["metadata"]["uid"]
    names = [c["name"] for c in pod["spec"]["containers"]]
    wait_for(lambda: all(s.state == "terminated" for s in runtime.pod_status(uid).containers.values()), 30,
             "every probe to finish")
    out = {}
    for name in names:
        text = runtime.log_path("default", pod["metadata"]["name"], name).read_text()
        assert runtime.pod_status(uid).containers[name].exit_code == 0, text
        out[name] = json.loads(text.strip().splitlines()[-1])
    return out


def test_security_context_is_enforced_in_the_sandbox(runtime: LocalRuntime) -> None:
    pod = make_pod("contexts", [
        _probe("default"),
        _probe("user", runAsUser=1000, runAsGroup=2000, capabilities={"add": ["NET_BIND_SERVICE"]}),
        _probe("dropped", capabilities={"drop": ["ALL"], "add": ["CAP_KILL"]}),
        _probe("readonly", readOnlyRootFilesystem=True),
        _probe("unconfined", seccompProfile={"type": "Unconfined"}),
        _probe("privileged", privileged=True),
    ], volumes=[{"name": "data", "emptyDir": {}}])
    runtime.start_pod(pod, attempt=0)
    got = _results(runtime, pod)

    default = got["default"]
    assert (default["uid"], default["gid"], default["home"]) == (0, 0, "/root")
    assert default["caps"] == default["bounding"] == _caps(DEFAULT_CAPABILITIES)
    assert (default["no_new_privs"], default["seccomp"]) == ("1", "2")
    assert default["mount"] == 1  # EPERM
    assert default["write_root"] == default["write_tmp"] == default["write_volume"] == 0

    user = got["user"]
    assert (user["uid"], user["gid"]) == (1000, 2000)
    assert user["caps"] == _caps({"NET_BIND_SERVICE"}), "a non-root user gets only what it adds"
    assert got["dropped"]["caps"] == _caps({"KILL"})

    readonly = got["readonly"]
    assert readonly["write_root"] == readonly["write_tmp"] == 30  # EROFS
    assert readonly["write_volume"] == 0, "volumes stay writable"

    assert got["unconfined"]["seccomp"] == "0" and got["unconfined"]["caps"] == _caps(DEFAULT_CAPABILITIES)
    privileged = got["privileged"]
    assert privileged["seccomp"] == "0" and privileged["caps"] == (1 << len(CAPABILITIES)) - 1
    assert privileged["no_new_privs"] == "1", "bubblewrap always sets no_new_privs"


def test_run_as_non_root_with_uid_0_does_not_start(runtime: LocalRuntime) -> None:
    pod = make_pod("rooted", [{"name": "main", "command": ["true"], "securityContext": {"runAsNonRoot": True}}])
    with pytest.raises(ConfigError, match=r'container has runAsNonRoot and image will run as root '
                                          r'\(pod: "default/rooted", container: main\)'):
        runtime.start_pod(pod, attempt=0)
    assert not runtime.is_alive(pod["metadata"]["uid"])
    # The pod's own runAsUser satisfies it.
    assert container_security({"spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10}}},
                              pod["spec"]["containers"][0], 0).uid == 10


@pytest.mark.parametrize(("context", "message"), [
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}},
     r"spec.containers\[0\].securityContext.seccompProfile: Localhost profiles \('p.json'\) are not supported"),
    ({"capabilities": {"add": ["SYS_ADMIN", "FLY"]}},
     r"spec.containers\[0\].securityContext.capabilities.add\[1\]: unknown capability 'FLY'"),
    ({"runAsUser": -1}, r"spec.containers\[0\].securityContext.runAsUser: must be an integer"),
])
def test_unsupported_contexts_are_refused_with_the_field(context: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        container_security({"spec": {}}, {"name": "main", "securityContext": context}, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="the fallback without a user namespace is for a root control plane")
def test_without_a_user_namespace_a_root_control_plane_runs_pods_unprivileged(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text(hosts_file("box", {}))
    (tmp_path / "hostname").write_text("box\n")
    argv = build_argv(["sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"], mounts=[], hostname="box",
                      hosts_path=tmp_path / "hosts", hostname_path=tmp_path / "hostname", userns=False,
                      security=container_security({"spec": {}}, {"name": "main"}, 0))
    assert "--unshare-user" not in argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["65534", "65534", "CapEff:", "0000000000000000"]
