"""The escape suite: a pod of a real control plane tries what an attacker would, and every attempt
fails while the host stays as it was (checked from outside). Run with the control plane started
by this user and, when this user is root, by an ordinary one (uid 65534): without a subordinate
range (its pods get its own uid alone) and with one given for the test (newuidmap maps every other
id of its pods into it). No pod is the host's uid 0: as root, pods map into the ``trimaran`` range
of /etc/subuid."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.e2e.nobody import nobody_plane
from tests.helpers import poll
from trimaran.runtime import sandbox_available
from trimaran.runtime.idmap import reserve_range
from trimaran.runtime.sandbox import interpreter_paths

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

NAMESPACE = "escape"
# Files of the home a pod must never read (the store holds every namespace's Secrets).
HOME_SECRETS = ("trimaran.db", "tokens.json", "kubeconfig", "server.json", "pki/ca.key", "pki/sa.key")
# Host paths the pod tries to create; none may exist afterwards.
HOST_WRITES = ("/usr/trimaran-escape", "/etc/trimaran-escape", "/opt/trimaran-escape")

# One pod makes every attempt and prints {attempt: errno (0 = it worked) or what it saw}.
PROBE = textwrap.dedent("""
    import ctypes, json, os, socket, ssl, sys, urllib.error, urllib.request
    libc = ctypes.CDLL(None, use_errno=True)
    home, plane_pid = os.environ["TRIMARAN_HOME"], int(sys.argv[1])
    MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096

    def rc(value):
        return 0 if value == 0 else ctypes.get_errno()

    def attempt(action):
        try:
            action()
            return 0
        except OSError as exc:
            return exc.errno or -1

    def write(path):
        with open(path, "w") as handle:
            handle.write("escaped")

    def read(path):
        with open(path, "rb") as handle:
            if handle.read(1):
                return
        raise OSError(0, "empty")

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    sys_admin = 1 << 21
    caps = (CapData * 2)((sys_admin, sys_admin, sys_admin), (0, 0, 0))
    out = {
        "remount / rw": rc(libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None)),
        "remount /usr rw": rc(libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None)),
        "remount read-only volume rw": rc(libc.mount(None, b"/ro", None, MS_REMOUNT | MS_BIND, None)),
        "mount tmpfs": rc(libc.mount(b"none", b"/dev/shm", b"tmpfs", 0, None)),
        "bind mount": rc(libc.mount(b"/usr", b"/tmp", None, MS_BIND, None)),
        "unshare -U": rc(libc.unshare(0x10000000)),
        "unshare -m": rc(libc.unshare(0x00020000)),
        "unshare -n": rc(libc.unshare(0x40000000)),
        "insmod": rc(libc.init_module(None, 0, b"")),
        "rmmod": rc(libc.delete_module(b"loop", 0)),
        "ptrace the control plane": rc(libc.ptrace(16, plane_pid, None, None)),
        "signal the control plane": attempt(lambda: os.kill(plane_pid, 0)),
        "raw socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
        "packet socket": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
        "raise CAP_SYS_ADMIN": rc(libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), caps)),
        "ambient CAP_SYS_ADMIN": rc(libc.prctl(47, 2, 21, 0, 0)),
        "read /etc/shadow": attempt(lambda: read("/etc/shadow")),
        "read /etc/gshadow": attempt(lambda: read("/etc/gshadow")),
        "write read-only volume": attempt(lambda: write("/ro/escaped")),
    }
    for name in json.loads(sys.argv[2]):
        out["read home " + name] = attempt(lambda: read(os.path.join(home, name)))
    for path in json.loads(sys.argv[3]):
        out["write " + path] = attempt(lambda: write(path))
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    url = "https://%s:%s/api/v1/namespaces/default/secrets" % (os.environ["KUBERNETES_SERVICE_HOST"],
                                                               os.environ["KUBERNETES_SERVICE_PORT"])
    context = ssl.create_default_context(cafile=sa + "/ca.crt")
    for label, token in (("no token", None), ("own token, other namespace", open(sa + "/token").read())):
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
        try:
            out["API " + label] = urllib.request.urlopen(request, context=context, timeout=10).status
        except urllib.error.HTTPError as exc:
            out["API " + label] = exc.code
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    sockets = [os.path.join(d, f) for d, _, files in os.walk("/run") for f in files
               if os.path.exists(os.path.join(d, f)) and not os.path.isfile(os.path.join(d, f))
               and not os.path.isdir(os.path.join(d, f))]
    seen = {
        "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
        "bounding": int(status["CapBnd"], 16), "uid_map": open("/proc/self/uid_map").read().split(),
        "root": sorted(os.listdir("/root")) if os.path.isdir("/root") else [],
        "home_dirs": os.path.exists("/home") and sorted(os.listdir("/home")),
        "run_sockets": sockets, "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "writable_volume": attempt(lambda: write("/rw/escaped")),
    }
    print(json.dumps({"refused": out, "seen": seen}))
""")


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _subordinate_range(name: str) -> Iterator[None]:
    """A range of ``name``'s own in /etc/subuid and /etc/subgid while the test runs, as an
    administrator gives a user one (``usermod --add-subuids``); taken out again afterwards.
    A range the user already has is left as it is."""
    files = (Path("/etc/subuid"), Path("/etc/subgid"))
    if all(any(line.startswith(f"{name}:") for line in f.read_text().splitlines()) for f in files if f.exists()) \
            and all(f.exists() for f in files):
        yield
        return
    reserve_range(name)
    try:
        yield
    finally:
        for path in files:
            with open(path, "r+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)  # as reserve_range takes it
                kept = [line for line in handle.read().splitlines(keepends=True) if not line.startswith(f"{name}:")]
                handle.seek(0)
                handle.truncate()
                handle.writelines(kept)


@pytest.fixture(params=["this-user", "nobody", "nobody-subuid"])
def escape_plane(request: pytest.FixtureRequest, plane_with) -> Iterator[ControlPlaneHandle]:
    """A control plane started by this user; when root, by uid 65534 too, with no subordinate range
    (a pod is that uid alone) and with one (newuidmap maps every other id into it)."""
    if request.param == "this-user":
        yield plane_with()
        return
    if os.geteuid() != 0:
        pytest.skip("this user is already an ordinary one: the this-user run covers it")
    if request.param == "nobody-subuid" and not shutil.which("newuidmap"):
        pytest.skip("newuidmap is not installed (Debian's uidmap: scripts/bootstrap.sh installs it)")
    ranged = _subordinate_range("nobody") if request.param == "nobody-subuid" else contextlib.nullcontext()
    with ranged, nobody_plane() as handle:
        yield handle


def test_a_pod_cannot_escape(escape_plane: ControlPlaneHandle, tmp_path: Path) -> None:
    plane = escape_plane
    shared = Path(tempfile.mkdtemp(prefix="trimaran-escape-volumes-"))
    (shared / "rw").mkdir()
    (shared / "ro").mkdir()
    (shared / "ro" / "kept").write_text("as it was\n")
    for path in (shared, shared / "rw", shared / "ro"):
        os.chmod(path, 0o777 if path.name == "rw" else 0o755)
    info = json.loads((plane.home / "server.json").read_text())
    before = {name: _digest(plane.home / name) for name in ("tokens.json", "kubeconfig", "server.json")}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "escape", "namespace": NAMESPACE},
           "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "python",
               "command": ["python3", "-c", PROBE, str(info["pid"]), json.dumps(HOME_SECRETS),
                           json.dumps(HOST_WRITES)],
               "volumeMounts": [{"name": "rw", "mountPath": "/rw"},
                                {"name": "ro", "mountPath": "/ro", "readOnly": True}]}],
               "volumes": [{"name": "rw", "hostPath": {"path": str(shared / "rw")}},
                           {"name": "ro", "hostPath": {"path": str(shared / "ro")}}]}}}}
    for name, manifest in (("namespace", namespace), ("job", job)):
        (tmp_path / f"{name}.json").write_text(json.dumps(manifest))
    try:
        plane.cli("apply", "-f", str(tmp_path / "namespace.json"))
        plane.cli("apply", "-f", str(tmp_path / "job.json"))
        plane.cli("wait", "job/escape", "-n", NAMESPACE, "--for=condition=Complete", "--timeout=120s")
        pod = plane.client().list("Pod", NAMESPACE, "batch.kubernetes.io/job-name=escape")[0]["metadata"]["name"]
        result = json.loads(plane.cli("logs", pod, "-n", NAMESPACE).stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(shared / "ro" / "escaped", ignore_errors=True)
        ro_intact = (shared / "ro" / "kept").read_text() == "as it was\n" and not (shared / "ro" / "escaped").exists()
        wrote = (shared / "rw" / "escaped").exists()
        shutil.rmtree(shared, ignore_errors=True)

    refused, seen = result["refused"], result["seen"]
    worked = {attempt: code for attempt, code in refused.items()
              if code == 0 or (attempt.startswith("API") and code < 400)}
    assert not worked, f"these succeeded inside a pod: {worked}"
    assert refused["API no token"] == 401 and refused["API own token, other namespace"] == 403
    # From outside: nothing the pod tried left a trace on the host or in the home.
    assert not [path for path in HOST_WRITES if os.path.exists(path)]
    assert ro_intact and wrote, "the read-only hostPath stays as it was; the writable one is written"
    assert before == {name: _digest(plane.home / name) for name in before}
    # What it saw: its own user namespace and processes, no host credentials or sockets.
    extents = [seen["uid_map"][i:i + 3] for i in range(0, len(seen["uid_map"]), 3)]
    assert extents == pods_uid_map(plane, 0), "root inside is the pods' root outside, never host root"
    assert (seen["no_new_privs"], seen["seccomp"]) == ("1", "2")
    assert not seen["bounding"] & (1 << 21), "CAP_SYS_ADMIN is not even in the bounding set"
    expected_root = {p.parts[2] for p in map(Path, interpreter_paths()) if p.parts[1:2] == ("root",)}
    assert set(seen["root"]) <= expected_root, "only the interpreter's directory of /root is there"
    assert not seen["home_dirs"] and not seen["run_sockets"]
    assert info["pid"] not in seen["processes"] and len(seen["processes"]) < 10


def pods_uid_map(plane: ControlPlaneHandle, uid: int) -> list[list[str]]:
    """The uid_map extents a container running as ``uid`` must have: the pods' range of /etc/subuid
    where the control plane is root; for an ordinary user with a range of its own there (and
    newuidmap), ``uid`` as the user and every other id subordinate; else the user as ``uid`` alone."""
    owner = plane.home.stat().st_uid
    ranges = {name: int(first) for name, first, _ in (line.split(":") for line in
                                                      Path("/etc/subuid").read_text().split())}
    if owner == 0:
        assert ranges["trimaran"] >= 65536, "the pods' range lies above the host's own users"
        return [["0", str(ranges["trimaran"]), "65536"]]
    base = ranges.get(pwd.getpwuid(owner).pw_name, ranges.get(str(owner)))
    if base is None or not shutil.which("newuidmap"):
        return [[str(uid), str(owner), "1"]]
    extents = [[str(uid), str(owner), "1"]]
    if uid:
        extents.insert(0, ["0", str(base), str(uid)])
    if uid < 65535:
        extents.append([str(uid + 1), str(base + uid), str(65535 - uid)])
    return extents


# A pod of a restricted namespace tries the kernel's settings and what container runtimes mask, then
# waits to be deleted so that its user namespace can be read from outside.
KERNEL_PROBE = textwrap.dedent("""
    import json, os, sys, time

    def attempt(action):
        try:
            return {"worked": action()}
        except OSError as exc:
            return {"errno": exc.errno}

    def write(path, text):
        with open(path, "w") as handle:
            handle.write(text)

    def read(path):
        with open(path, "rb") as handle:
            return handle.read(4096).decode(errors="replace")

    out = {
        "write printk_ratelimit_burst": attempt(lambda: write("/proc/sys/kernel/printk_ratelimit_burst", "11")),
        "open core_pattern for writing": attempt(lambda: open("/proc/sys/kernel/core_pattern", "w").close()),
        "write sysrq-trigger": attempt(lambda: write("/proc/sysrq-trigger", "h")),
    }
    for path in json.loads(sys.argv[1]):
        out["read " + path] = attempt(lambda: os.listdir(path) if os.path.isdir(path) else read(path))
    print(json.dumps(out), flush=True)
    time.sleep(600)
""")
MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware")


def test_a_restricted_pod_cannot_change_the_kernel_and_is_not_host_root(escape_plane: ControlPlaneHandle,
                                                                         tmp_path: Path) -> None:
    plane = escape_plane
    sysctl = Path("/proc/sys/kernel/printk_ratelimit_burst")
    before = sysctl.read_text()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "restricted", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kernel", "namespace": "restricted"},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never",
               "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                                   "seccompProfile": {"type": "RuntimeDefault"}},
               "containers": [{"name": "main", "image": "python",
                               "command": ["python3", "-c", KERNEL_PROBE, json.dumps(MASKED)],
                               "securityContext": {"allowPrivilegeEscalation": False,
                                                   "capabilities": {"drop": ["ALL"]}}}]}}}}
    for name, manifest in (("namespace", namespace), ("job", job)):
        (tmp_path / f"{name}.json").write_text(json.dumps(manifest))
    plane.cli("apply", "-f", str(tmp_path / "namespace.json"))
    plane.cli("apply", "-f", str(tmp_path / "job.json"))
    try:
        def probed() -> dict | None:
            pods = plane.client().list("Pod", "restricted", "batch.kubernetes.io/job-name=kernel")
            if not pods or (pods[0].get("status") or {}).get("phase") != "Running":
                return None
            lines = plane.cli("logs", pods[0]["metadata"]["name"], "-n", "restricted").stdout.strip().splitlines()
            return json.loads(lines[-1]) if lines else None

        out = poll(probed, timeout=120, what="the probe's report")

        def probe_process():
            return next((p for p in plane.pod_processes()
                         if "printk_ratelimit_burst" in " ".join(p.cmdline()) and p.name() != "bwrap"), None)

        uid_map = Path(f"/proc/{poll(probe_process, timeout=30, what='the probe process').pid}/uid_map").read_text()
    finally:
        plane.cli("delete", "job", "kernel", "-n", "restricted")
        after = sysctl.read_text()
        if after != before and os.geteuid() == 0:
            sysctl.write_text(before)  # the host as it was, whatever the pod did
    # From outside: the kernel's setting is as it was, and no extent maps the host's uid 0.
    assert after == before
    extents = [line.split() for line in uid_map.splitlines()]
    assert not [e for e in extents if int(e[1]) <= 0 < int(e[1]) + int(e[2])], uid_map
    assert extents == pods_uid_map(plane, 1000)
    for attempt in ("write printk_ratelimit_burst", "open core_pattern for writing"):
        assert out[attempt].get("errno") in (errno.EACCES, errno.EROFS, errno.EPERM), (attempt, out[attempt])
    assert out["write sysrq-trigger"].get("worked") is None
    for path in MASKED:
        if os.path.exists(path):
            seen = out["read " + path]
            assert "errno" in seen or not seen["worked"], f"{path} is masked: {seen}"


def test_a_shim_killed_from_outside_leaves_an_event(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "victim"},
           "spec": {"backoffLimit": 3, "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{
               "name": "main", "image": "python", "command": ["sleep", "600"]}]}}}}
    manifest = tmp_path / "victim.json"
    manifest.write_text(json.dumps(job))
    plane.cli("apply", "-f", str(manifest))

    def shim():
        return next((p for p in plane.pod_processes() if "runtime/shim.py" in " ".join(p.cmdline())), None)

    victim = poll(shim, timeout=60, what="the pod's shim")
    poll(lambda: plane.client().list("Pod", "default", "batch.kubernetes.io/job-name=victim")[0]
         .get("status", {}).get("phase") == "Running", timeout=60, what="the pod to run")
    victim.kill()

    def shim_lost() -> list[dict]:
        return [e for e in plane.client().list("Event", "default")
                if e.get("reason") == "ShimLost" and f"pid {victim.pid}" in (e.get("message") or "")]

    event = poll(shim_lost, timeout=60, what="a ShimLost event")[0]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Pod"
    assert "killed" in event["message"]
    plane.cli("delete", "job", "victim")
