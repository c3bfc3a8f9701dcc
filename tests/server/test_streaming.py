"""The streaming verbs through the API with the real kubectl and the real ``kubernetes`` client:
exec (WebSocket v5 and SPDY, exit codes, stdin, a TTY that resizes), attach, cp both ways,
port-forward to a pod and to a Service (kubectl's SPDY-over-WebSocket tunnel and plain SPDY),
the Python client's ``stream()`` and ``portforward()``, authorisation and the errors kubectl prints."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import shared_plane
from tests.e2e.test_escape import escape_plane  # noqa: F401 (fixture: root's and ordinary users' planes)
from tests.helpers import poll
from tests.imagekit import registry, test_images  # noqa: F401 (fixtures)
from tests.server.sdk import run_client
from trimaran.runtime import sandbox_available
from trimaran.runtime.oci import oci_available

KUBECTL = shutil.which("kubectl")
pytestmark = [pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run"),
              pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed"),
              pytest.mark.skipif(shutil.which("nsenter") is None, reason="nsenter (util-linux) is not installed")]

plane = shared_plane("streaming")

# A small HTTP server that also answers with as many bytes as asked (/bytes/N), for throughput.
WEB_SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/bytes/"):
            n = int(self.path.split("/")[2])
            self.send_response(200); self.send_header("Content-Length", str(n)); self.end_headers()
            chunk = b"x" * 65536
            while n:
                k = min(n, len(chunk)); self.wfile.write(chunk[:k]); n -= k
        else:
            body = b"hello from " + self.path.encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
"""


def _env(plane, tmp_path: Path, **extra: str) -> dict[str, str]:  # noqa: ANN001
    return dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
                HOME=str(tmp_path), **extra)


@pytest.fixture
def kubectl(plane, tmp_path):  # noqa: ANN001, ANN201
    env = _env(plane, tmp_path)

    def run(*args: str, input: str | bytes | None = None, check: bool = True, timeout: float = 120,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=dict(env, **(extra_env or {})), input=input,
                              capture_output=True, text=not isinstance(input, bytes), timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    run.env = env  # type: ignore[attr-defined]
    return run


def _apply(kubectl, obj: dict) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=json.dumps(obj))


def _running(kubectl, name: str, timeout: float = 90) -> dict:  # noqa: ANN001
    def ready() -> dict | None:
        pod = json.loads(kubectl("get", "pod", name, "-o", "json").stdout)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return pod if statuses and all(s.get("state", {}).get("running") for s in statuses) else None
    return poll(ready, timeout=timeout, interval=0.1, what=f"pod {name} running")


def _pod(name: str, command: list[str], *, image: str = "python", labels: dict | None = None,
         port: int | None = None, restart: str = "Never", extra: list[dict] | None = None) -> dict:
    container: dict = {"name": "main", "image": image, "command": command}
    if port:
        container["ports"] = [{"containerPort": port}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": restart, "containers": [container, *(extra or [])]}}


@pytest.fixture(scope="module")
def sleeper(plane) -> Iterator[str]:  # noqa: ANN001
    """A running host-process pod to exec into."""
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"))
    body = json.dumps(_pod("sleeper", ["sleep", "3600"]))
    subprocess.run([KUBECTL, "apply", "-f", "-"], input=body, env=env, check=True, capture_output=True, text=True)
    yield "sleeper"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


WEB_PORT = _free_port()  # pods may share the host's network (no pod network): a port no one else holds


@pytest.fixture(scope="module")
def web(plane) -> Iterator[str]:  # noqa: ANN001
    """A pod serving HTTP on WEB_PORT, behind the Service ``web`` (port 80)."""
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"))
    objects = [_pod("web", ["python", "-c", WEB_SERVER, str(WEB_PORT)], labels={"app": "web"}, port=WEB_PORT),
               {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": WEB_PORT}]}}]
    for obj in objects:
        subprocess.run([KUBECTL, "apply", "-f", "-"], input=json.dumps(obj), env=env, check=True,
                       capture_output=True, text=True)
    yield "web"


class PortForward:
    """``kubectl port-forward TARGET :PORT`` in the background; ``port`` is the local one it chose."""

    def __init__(self, kubectl, target: str, remote: int, extra_env: dict[str, str] | None = None) -> None:  # noqa: ANN001
        self.proc = subprocess.Popen([KUBECTL, "port-forward", target, f"0:{remote}", "--address", "127.0.0.1"],
                                     env=dict(kubectl.env, **(extra_env or {})), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                line = self.proc.stdout.readline()
                found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                    return
                if not line:
                    break
        self.proc.kill()
        raise AssertionError(f"kubectl port-forward did not start: {line}{self.proc.stderr.read()}")  # type: ignore[union-attr]

    def get(self, path: str, timeout: float = 30) -> bytes:
        """An HTTP GET through the forward, retried while the pod's server is not listening yet."""
        def fetch() -> bytes | None:
            try:
                return _http_get(self.port, path)
            except (OSError, ValueError):
                return None
        return poll(fetch, timeout=timeout, interval=0.2, what=f"GET {path} through the port-forward")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def _http_get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        chunks = []
        while data := conn.recv(1 << 20):
            chunks.append(data)
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.0 200"):
        raise ValueError(f"not a 200 answer: {raw[:100]!r}")
    return body


# -- exec ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket", "spdy"])
def test_exec_returns_the_exit_code_and_both_streams(kubectl, sleeper, websockets) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    done = kubectl("exec", sleeper, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False, extra_env=env)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "out\n"
    assert "err\n" in done.stderr and "command terminated with exit code 3" in done.stderr
    assert kubectl("exec", sleeper, "--", "true", extra_env=env).returncode == 0
    # stdin piped, ended by the client's close (v5's close channel, SPDY's FIN)
    piped = kubectl("exec", "-i", sleeper, "--", "sh", "-c", "wc -c; cat -", input="abc\n" * 1000, extra_env=env)
    assert piped.stdout.split("\n", 1)[0].strip() == "4000"


def test_exec_runs_in_the_container_as_its_user_with_its_env(kubectl, sleeper) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    out = kubectl("exec", sleeper, "--", "sh", "-c", "hostname; echo $TRIMARAN_POD_UID; id -u; pwd; "
                                                      "readlink /proc/1/exe").stdout.split("\n")
    pod = json.loads(kubectl("get", "pod", sleeper, "-o", "json").stdout)
    # uid 0: the container's root, a mapped id on the host
    assert out[:4] == [sleeper, pod["metadata"]["uid"], "0", "/"], out
    # As the kubelet's exec: the container's capability bounding set (the host's setpriv is there).
    script = ('grep CapBnd /proc/self/status; for p in /proc/[0-9]*; do '
              '[ "$(tr "\\0" " " < $p/cmdline)" = "sleep 3600 " ] && grep CapBnd $p/status; done; true')
    lines = kubectl("exec", sleeper, "--", "sh", "-c", script).stdout.split("\n")
    assert lines[0].startswith("CapBnd:") and lines[0] == lines[1], lines


def test_exec_joins_the_containers_cgroups(kubectl) -> None:  # noqa: ANN001
    pod = _pod("limited", ["sleep", "3600"])
    pod["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    _apply(kubectl, pod)
    _running(kubectl, "limited")
    # The container's first process (pid 1 in its namespace) is in the container's cgroups from
    # its start; what exec runs must count against the same limits.
    done = kubectl("exec", "limited", "--", "sh", "-c", "cat /proc/self/cgroup; echo --; cat /proc/1/cgroup",
                   check=False)
    assert done.returncode == 0, (done.stderr, kubectl("get", "pod", "limited", "-o", "json").stdout)
    out = done.stdout
    mine, first = out.split("--\n")
    assert mine == first
    kubectl("delete", "pod", "limited", "--wait=false")


class Terminal:
    """A program on a terminal of its own (24x80 at first), as a user at a keyboard runs it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(argv[0], argv, env)
        self.resize(24, 80)
        self.out = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.kill(self.pid, signal.SIGWINCH)

    def read_until(self, needle: bytes | None, timeout: float = 30) -> bool:
        """Read until the output holds ``needle`` (True) or the program ends (False)."""
        deadline = time.monotonic() + timeout
        while needle is None or needle not in self.out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {needle!r}; got {self.out!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                data = b""
            if not data:
                return False
            self.out += data
        return True

    def type(self, text: bytes) -> None:
        os.write(self.fd, text)

    def wait(self) -> int:
        try:
            self.read_until(None)
        except AssertionError:
            os.kill(self.pid, signal.SIGKILL)  # it did not end: the test has failed already
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket", "spdy"])
def test_exec_with_a_tty_that_resizes(kubectl, sleeper, websockets) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    env = dict(kubectl.env, KUBECTL_REMOTE_COMMAND_WEBSOCKETS=websockets)
    # The shell prints its terminal's size, then again after each line it reads.
    command = 'stty size; while read line; do [ "$line" = quit ] && exit 5; stty size; done'
    term = Terminal([KUBECTL, "exec", "-it", sleeper, "--", "sh", "-c", command], env)
    try:
        assert term.read_until(b"24 80")
        term.resize(40, 120)
        # The new size travels on its own channel, unordered with the typing: ask until it arrived.
        deadline = time.monotonic() + 30
        while b"40 120" not in term.out:
            assert time.monotonic() < deadline, term.out
            term.type(b"size\r")
            term.read_until(b"size", timeout=10)
            term.out = term.out.replace(b"size", b"", 1)
            term.read_until(b"\n", timeout=10)
        term.type(b"quit\r")
    finally:
        code = term.wait()
    assert code == 5, term.out


def test_exec_into_a_finished_container_or_an_unknown_one(kubectl) -> None:  # noqa: ANN001
    _apply(kubectl, _pod("two", ["sleep", "3600"], extra=[{"name": "quick", "image": "python", "command": ["true"]}]))

    _running(kubectl, "two")
    # "quick" ends at once (the pod's status may say so later than the node knows it).
    done = poll(lambda: (d := kubectl("exec", "two", "-c", "quick", "--", "true", check=False)).returncode and d,
                timeout=60, interval=0.2, what="exec into the ended container to fail")
    assert done.returncode == 1
    assert 'unable to upgrade connection: container not found ("quick")' in done.stderr
    done = kubectl("exec", "two", "-c", "nope", "--", "true", check=False)
    assert done.returncode == 1 and "container nope is not valid for pod two" in done.stderr
    kubectl("delete", "pod", "two", "--wait=false")


def test_a_view_token_may_not_exec_or_forward(plane, kubectl, sleeper, web) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    token = plane.cli("token", "create", "--namespace", "default", "--role", "view").stdout.strip().splitlines()[-1]
    done = kubectl("--token", token, "exec", sleeper, "--", "true", check=False)
    assert done.returncode == 1
    assert ('pods "sleeper" is forbidden: User "token:' in done.stderr
            and 'cannot create resource "pods/exec" in API group "" in the namespace "default"' in done.stderr)
    done = kubectl("--token", token, "port-forward", "pod/web", f"0:{WEB_PORT}", check=False, timeout=60)
    assert done.returncode == 1 and 'cannot create resource "pods/portforward"' in done.stderr
    assert kubectl("--token", token, "get", "pod", sleeper).returncode == 0  # it still reads


def test_attach_follows_the_output_until_the_container_ends(kubectl) -> None:  # noqa: ANN001
    _apply(kubectl, _pod("ticker", ["sh", "-c", "i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); echo tick $i; "
                                                "sleep 0.1; done; echo last; exit 2"]))
    _running(kubectl, "ticker")
    attach = subprocess.Popen([KUBECTL, "attach", "ticker"], env=kubectl.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert attach.stdout is not None
        ready, _, _ = select.select([attach.stdout], [], [], 60)
        assert ready and os.read(attach.stdout.fileno(), 4096).startswith(b"tick"), attach.stderr
        kubectl("exec", "ticker", "--", "touch", "/tmp/stop")
        out, err = attach.communicate(timeout=60)
    finally:
        attach.kill()
    assert attach.returncode == 0, err  # as the kubelet's attach: the exit code is the pod's status
    assert out.endswith(b"last\n"), out
    status = json.loads(kubectl("get", "pod", "ticker", "-o", "json").stdout)["status"]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2


def test_kubectl_run_it_shows_the_output_of_a_pod_just_started(kubectl) -> None:  # noqa: ANN001
    """``kubectl run -it`` attaches as soon as its pod is Running, which may be before the
    container runs: the attach waits for it rather than answering "container not found"."""
    term = Terminal([KUBECTL, "run", "quick-run", "-it", "--rm", "--restart=Never", "--image=python", "--command",
                     "--", "sh", "-c", "sleep 1; echo from the run; exit 3"], kubectl.env)
    code = term.wait()
    assert b"from the run" in term.out and b"couldn't attach" not in term.out, term.out
    assert b'pod "quick-run" deleted' in term.out
    assert code == 3, term.out  # kubectl exits with the container's code, read from the pod's status


# -- cp --------------------------------------------------------------------------------------------

def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cp_a_tree_to_the_pod_and_back(kubectl, sleeper, tmp_path) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_text("hello\n")
    (src / "sub" / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (src / "sub" / "deeper" / "empty").write_bytes(b"")
    kubectl("cp", str(src), f"{sleeper}:/tmp/copied")
    assert kubectl("exec", sleeper, "--", "cat", "/tmp/copied/a.txt").stdout == "hello\n"
    back = tmp_path / "back"
    kubectl("cp", f"{sleeper}:/tmp/copied", str(back))
    assert _tree(back) == _tree(src)


@pytest.fixture(scope="module")
def busybox(registry, test_images) -> str:  # noqa: F811 (fixtures)
    return registry.push(test_images, "busybox", "test/busybox:1.0")


def test_exec_and_cp_in_an_image_pod(kubectl, busybox, tmp_path) -> None:  # noqa: ANN001
    pod = _pod("boxed", ["sleep", "3600"], image=busybox)
    pod["metadata"]["annotations"] = {"trimaran.io/image-policy": "image"}  # its own image, not the host's
    _apply(kubectl, pod)
    _running(kubectl, "boxed", timeout=120)
    assert "BusyBox" in kubectl("exec", "boxed", "--", "sh", "-c", "busybox 2>&1 | head -1").stdout
    assert kubectl("exec", "boxed", "--", "test", "-e", "/usr/lib/python3", check=False).returncode == 1
    (tmp_path / "f.txt").write_text("into the image\n")
    kubectl("cp", str(tmp_path / "f.txt"), "boxed:/tmp/f.txt")
    kubectl("cp", "boxed:/tmp/f.txt", str(tmp_path / "g.txt"))
    assert (tmp_path / "g.txt").read_text() == "into the image\n"
    kubectl("delete", "pod", "boxed", "--wait=false")


# -- port-forward ----------------------------------------------------------------------------------

@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket-tunnel", "spdy"])
def test_port_forward_to_a_pod_and_a_service(kubectl, web, websockets) -> None:  # noqa: ANN001
    _running(kubectl, web)
    env = {"KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets}
    for target, remote in (("pod/web", WEB_PORT), ("svc/web", 80)):
        forward = PortForward(kubectl, target, remote, env)
        try:
            assert forward.get("/x") == b"hello from /x"
            assert forward.get("/bytes/5000000") == b"x" * 5_000_000
            assert forward.get("/again") == b"hello from /again"  # a new connection on the same forward
        finally:
            forward.stop()


def test_port_forward_to_a_port_nobody_listens_on(kubectl, web) -> None:  # noqa: ANN001
    _running(kubectl, web)
    forward = PortForward(kubectl, "pod/web", 9999)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", forward.port), timeout=30) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        if not conn.recv(100):
            raise ConnectionResetError("closed")
    err = forward.stop()
    assert "error forwarding port 9999 to pod web_default, uid : failed to connect to" in err
    assert "connection refused" in err


# -- the kubernetes Python client ---------------------------------------------------------------

PYTHON_CLIENT = r'''
import json, sys
from kubernetes import client, config
from kubernetes.stream import portforward, stream
config.load_kube_config()
api = client.CoreV1Api()
pod, port = sys.argv[1], int(sys.argv[2])
whole = stream(api.connect_get_namespaced_pod_exec, pod, "default", command=["sh", "-c", "echo out; echo err >&2"],
               stderr=True, stdin=False, stdout=True, tty=False)
ws = stream(api.connect_get_namespaced_pod_exec, pod, "default", command=["sh", "-c", "cat; exit 7"],
            stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
ws.write_stdin("abc\n")
ws.close_channel(0)  # v5's close: EOF for cat
ws.run_forever(timeout=60)
result = {"whole": whole, "stdout": ws.read_stdout(), "code": ws.returncode, "protocol": ws.subprotocol}
pf = portforward(api.connect_get_namespaced_pod_portforward, "web", "default", ports=str(port))
s = pf.socket(port)
s.setblocking(True)
s.sendall(b"GET /from-python HTTP/1.0\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
s.close()
result["forwarded"] = data.split(b"\r\n\r\n", 1)[1].decode()
result["error"] = pf.error(port)
refused = portforward(api.connect_get_namespaced_pod_portforward, "web", "default", ports=sys.argv[3])
s = refused.socket(int(sys.argv[3]))
s.setblocking(True)
result["refused_read"] = s.recv(100).decode()
result["refused"] = refused.error(int(sys.argv[3]))
print(json.dumps(result))
'''


def test_the_python_client_stream_and_portforward(plane, kubectl, sleeper, web, tmp_path) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    _running(kubectl, web)
    PortForward(kubectl, "pod/web", WEB_PORT).get("/ready")  # the server listens
    out = run_client(sys.executable, plane, PYTHON_CLIENT, tmp_path, sleeper, str(WEB_PORT), str(_free_port()))
    assert out["whole"] == "out\nerr\n"
    assert out["stdout"] == "abc\n" and out["code"] == 7
    assert out["forwarded"] == "hello from /from-python" and out["error"] is None
    assert out["refused_read"] == "" and "connection refused" in out["refused"], out


def test_exec_without_an_upgrade_is_refused(plane, sleeper) -> None:  # noqa: ANN001
    server, token, context = plane.endpoint()
    request = urllib.request.Request(f"{server}/api/v1/namespaces/default/pods/{sleeper}/exec?command=true&stdout=1",
                                     headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, context=context, timeout=30)
    assert raised.value.code == 400
    assert json.loads(raised.value.read())["message"] == "Upgrade request required"


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "base64.v4.channel.k8s.io", "channel.k8s.io"])
def test_older_websocket_protocols(plane, kubectl, sleeper, protocol) -> None:  # noqa: ANN001
    """What older clients ask for: v4 (the Python client before v36) ends with a Status carrying
    the exit code; base64 sends text frames both ways; v1 says only that the command failed."""
    import base64

    import websocket

    _running(kubectl, sleeper)
    server, token, context = plane.endpoint()
    command = ("sh", "-c", "read line%3B echo got %24line%3B exit 4")
    query = "&".join(f"command={c.replace(' ', '%20')}" for c in command) + "&stdin=true&stdout=true&stderr=true"
    url = server.replace("https://", "wss://") + f"/api/v1/namespaces/default/pods/{sleeper}/exec?{query}"
    ws = websocket.create_connection(url, header=[f"Authorization: Bearer {token}"], subprotocols=[protocol],
                                     sslopt={"context": context}, timeout=60)
    text = protocol.startswith("base64.")
    channels: dict[int, bytes] = {}
    try:
        assert ws.subprotocol == protocol
        if text:
            ws.send("0" + base64.b64encode(b"hello\n").decode())
        else:
            ws.send_binary(b"\0hello\n")
        while True:
            try:
                frame = ws.recv()
            except websocket.WebSocketConnectionClosedException:
                break
            if not frame:
                break
            if text:
                assert isinstance(frame, str)
                channel, data = int(frame[0]), base64.b64decode(frame[1:])
            else:
                assert isinstance(frame, bytes)
                channel, data = frame[0], frame[1:]
            channels[channel] = channels.get(channel, b"") + data
    finally:
        ws.close()
    assert channels.get(1) == b"got hello\n"
    if protocol == "channel.k8s.io":
        assert channels.get(3) == b"command terminated with non-zero exit code: exit status 4"
    else:
        status = json.loads(channels[3])
        assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]


def _processes_running(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes() == wanted:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_client_that_goes_away_leaves_no_command_behind(kubectl, sleeper) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    marker = ["sleep", f"{os.getpid()}.25"]  # a duration no other test runs
    client = subprocess.Popen([KUBECTL, "exec", sleeper, "--", *marker], env=kubectl.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll(lambda: _processes_running(marker), timeout=30, interval=0.1, what="the exec'd command to run")
    finally:
        client.kill()
        client.wait()
    poll(lambda: not _processes_running(marker), timeout=30, interval=0.1, what="the command to end with its client")


def test_open_sessions_are_counted_as_long_running_requests(plane, kubectl, sleeper) -> None:  # noqa: ANN001
    _running(kubectl, sleeper)
    server, token, context = plane.endpoint()

    def gauge() -> float:
        request = urllib.request.Request(f"{server}/metrics", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            text = answer.read().decode()
        found = re.search(r'apiserver_longrunning_requests\{subresource="exec",verb="CONNECT"\} (\S+)', text)
        assert found, text
        return float(found.group(1))

    before = gauge()
    marker = ["sleep", f"{os.getpid()}.5"]
    client = subprocess.Popen([KUBECTL, "exec", sleeper, "--", *marker], env=kubectl.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll(lambda: _processes_running(marker), timeout=30, interval=0.1, what="the exec'd command to run")
        assert gauge() == before + 1
    finally:
        client.kill()
        client.wait()
    poll(lambda: gauge() == before, timeout=30, interval=0.1, what="the session to be released")


def test_exec_on_every_kind_of_control_plane(escape_plane, tmp_path) -> None:  # noqa: ANN001, F811
    """Root's, and an ordinary user's (uid 65534) with and without a subordinate id range: exec
    enters the container (as that user, nsenter enters only the user namespace it owns) and cp works."""
    env = _env(escape_plane, tmp_path)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=120)
        assert not check or done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    subprocess.run([KUBECTL, "apply", "-f", "-"], input=json.dumps(_pod("anyone", ["sleep", "3600"])), env=env,
                   check=True, capture_output=True, text=True)
    _running(lambda *a, **k: run(*a), "anyone")
    done = run("exec", "anyone", "--", "sh", "-c", "hostname; id -u; exit 6", check=False)
    assert done.returncode == 6 and done.stdout.split("\n")[:2] == ["anyone", "0"], (done.stdout, done.stderr)
    (tmp_path / "f.txt").write_text("both ways\n")
    run("cp", str(tmp_path / "f.txt"), "anyone:/tmp/f.txt")
    run("cp", "anyone:/tmp/f.txt", str(tmp_path / "g.txt"))
    assert (tmp_path / "g.txt").read_text() == "both ways\n"


def _status_fields(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


@pytest.mark.skipif(os.geteuid() != 0 or not oci_available(),
                    reason="crun runs containers where the control plane is root")
def test_exec_gets_the_containers_seccomp_filter_and_no_new_privs(kubectl) -> None:  # noqa: ANN001
    """As ``runc exec`` under containerd: the command runs under the container's own seccomp
    filter (RuntimeDefault here) and its no_new_privs, not merely in its namespaces."""
    pod = _pod("confined", ["sleep", "3600"], image="busybox")
    pod["spec"]["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    pod["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False}
    _apply(kubectl, pod)
    _running(kubectl, "confined")
    inside = _status_fields(kubectl("exec", "confined", "--", "cat", "/proc/self/status").stdout)
    container = _status_fields(kubectl("exec", "confined", "--", "cat", "/proc/1/status").stdout)
    assert inside["Seccomp"] == container["Seccomp"] == "2", (inside, container)
    assert inside["NoNewPrivs"] == "1"
    assert inside["CapBnd"] == container["CapBnd"]
    # The filter holds: RuntimeDefault refuses unshare(CLONE_NEWUSER) where the container's root could.
    refused = kubectl("exec", "confined", "--", "unshare", "-U", "true", check=False)
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr, (refused.stdout, refused.stderr)
