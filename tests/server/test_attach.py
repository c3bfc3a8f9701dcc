"""``kubectl attach`` and ``kubectl run -i``/``-it`` with the real kubectl: a container's stdin
(``stdin: true``), held by its shim, takes the session's input; ``stdinOnce`` closes it when the
first session ends; a ``tty: true`` container is on a terminal (crun's console, or the shim's pty
under bubblewrap) that the session resizes; a container without a stdin attaches output-only."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import shared_plane
from tests.e2e.test_escape import escape_plane  # noqa: F401 (fixture: root's and ordinary users' planes)
from tests.helpers import poll
from tests.imagekit import registry, test_images  # noqa: F401 (fixtures)
from tests.server.sdk import run_client
from tests.server.test_streaming import (  # noqa: F401 (the kubectl and busybox fixtures, the marks)
    KUBECTL,
    Terminal,
    _apply,
    _env,
    _pod,
    _running,
    busybox,
    kubectl,
    pytestmark,
)
from trimaran.runtime import LocalRuntime
from trimaran.runtime.oci import oci_available

plane = shared_plane("attach")

# Reads lines until its stdin ends, answering each; then says so and exits 3.
ECHO_LINES = 'while read line; do echo "got $line"; done; echo eof; exit 3'


def _stdin_pod(name: str, command: str, **fields: bool) -> dict:
    pod = _pod(name, ["sh", "-c", command])
    pod["spec"]["containers"][0].update(stdin=True, **fields)
    return pod


def _read_until(proc: subprocess.Popen, needle: bytes, timeout: float = 60) -> bytes:
    assert proc.stdout is not None
    out = b""
    deadline = time.monotonic() + timeout
    while needle not in out:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {needle!r}; got {out!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            data = os.read(proc.stdout.fileno(), 4096)
            assert data, f"ended before {needle!r}; got {out!r}"
            out += data
    return out


def _terminated(kubectl, name: str) -> dict:  # noqa: ANN001, F811
    def ended() -> dict | None:
        pod = json.loads(kubectl("get", "pod", name, "-o", "json").stdout)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return statuses[0]["state"].get("terminated") if statuses else None
    return poll(ended, timeout=60, interval=0.1, what=f"pod {name} to end")


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket", "spdy"])
def test_kubectl_run_i_pipes_input_and_returns_the_exit_code(kubectl, websockets) -> None:  # noqa: ANN001, F811
    """``kubectl run -i`` makes the container's stdin (``stdinOnce``): the piped lines reach it, the
    end of the input is its end of file, and kubectl exits with the container's code."""
    name = f"piped-{websockets}"
    done = kubectl("run", name, "-i", "--rm", "--restart=Never", "--image=python", "--command", "--",
                   "sh", "-c", ECHO_LINES, input="one\ntwo\n", check=False,
                   extra_env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets})
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "got one\ngot two\neof\n" in done.stdout, (done.stdout, done.stderr)
    assert f'pod "{name}" deleted' in done.stdout + done.stderr


@pytest.mark.parametrize("once", [True, False], ids=["stdinOnce", "stdin"])
def test_stdin_once_closes_the_stdin_when_the_first_session_ends(kubectl, once) -> None:  # noqa: ANN001, F811
    name = "once" if once else "many"
    _apply(kubectl, _stdin_pod(name, ECHO_LINES, stdinOnce=once))
    _running(kubectl, name)
    first = subprocess.Popen([KUBECTL, "attach", "-i", name], env=kubectl.env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert first.stdin is not None
        first.stdin.write(b"one\n")
        first.stdin.flush()
        _read_until(first, b"got one")
    finally:
        first.kill()  # the session ends without its input ending
        first.wait()
    if once:
        assert _terminated(kubectl, name)["exitCode"] == 3
        assert kubectl("logs", name).stdout == "got one\neof\n"
    else:
        second = subprocess.Popen([KUBECTL, "attach", "-i", name], env=kubectl.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert second.stdin is not None
            second.stdin.write(b"two\n")
            second.stdin.close()  # without stdinOnce the container's stdin stays open
            _read_until(second, b"got two")
        finally:
            second.kill()
            second.wait()
        assert _running(kubectl, name)
        assert kubectl("logs", name).stdout == "got one\ngot two\n"
    kubectl("delete", "pod", name, "--wait=false")


def _ask(term: Terminal, line: bytes, answer: bytes, timeout: float = 30) -> None:
    """Type ``line`` until the container's output has ``answer``: the session may not have begun
    (a line typed before it is echoed by the local terminal only), and a size travels on a channel
    of its own, unordered with the typing."""
    deadline = time.monotonic() + timeout
    while answer not in term.out:
        assert time.monotonic() < deadline, term.out
        term.type(line)
        try:
            term.read_until(answer, timeout=1)
        except AssertionError:
            pass


def _ask_size(term: Terminal, size: bytes) -> None:
    _ask(term, b"size\r", size)


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket", "spdy"])
def test_attach_it_to_a_tty_container_that_resizes(kubectl, websockets) -> None:  # noqa: ANN001, F811
    name = f"term-{websockets}"
    _apply(kubectl, _stdin_pod(name, 'while read line; do [ "$line" = quit ] && exit 7; tty; stty size; done',
                               tty=True))
    _running(kubectl, name)
    env = dict(kubectl.env, KUBECTL_REMOTE_COMMAND_WEBSOCKETS=websockets)
    term = Terminal([KUBECTL, "attach", "-it", name], env)
    try:
        _ask_size(term, b"24 80")  # the session's size, from its start
        assert b"/dev/pts/" in term.out or b"/dev/console" in term.out, term.out  # on a terminal
        term.resize(40, 120)
        _ask_size(term, b"40 120")
        term.type(b"quit\r")
    finally:
        code = term.wait()
    assert code == 0, term.out  # as the kubelet's attach: the exit code is the pod's status
    assert _terminated(kubectl, name)["exitCode"] == 7
    assert "40 120" in kubectl("logs", name).stdout  # the log records the terminal's output
    kubectl("delete", "pod", name, "--wait=false")


def _shell(term: Terminal, name: str) -> bytes:
    """Talk to the shell ``kubectl run -it --rm`` started: it answers, is on a terminal, and its exit
    code is kubectl's; the pod is deleted. What the terminal showed after the first answer."""
    _ask(term, b"echo answer $((6*7))\r", b"answer 42", timeout=60)  # its prompt came before the session
    seen = len(term.out)
    term.type(b"tty\r")
    term.read_until(b"/dev/", timeout=30)
    term.type(b"exit 5\r")
    code = term.wait()
    assert f'pod "{name}" deleted'.encode() in term.out, term.out
    assert code == 5, term.out
    return term.out[seen:]


def test_kubectl_run_it_takes_a_typed_command(kubectl) -> None:  # noqa: ANN001, F811
    """``kubectl run -it --rm``: a shell on a terminal answers what is typed, exits, and the pod goes."""
    _shell(Terminal([KUBECTL, "run", "shell", "-it", "--rm", "--restart=Never", "--image=python", "--command",
                     "--", "sh"], kubectl.env), "shell")


def test_kubectl_run_it_in_an_image(kubectl, busybox) -> None:  # noqa: ANN001, F811
    """The same with busybox's own image: crun makes the terminal inside the container."""
    out = _shell(Terminal([KUBECTL, "run", "box-shell", "-it", "--rm", "--restart=Never", f"--image={busybox}",
                           "--annotations=trimaran.io/image-policy=image", "--", "sh"], kubectl.env), "box-shell")
    if oci_available():
        assert b"/dev/pts/0" in out, out  # the container's own devpts


PYTHON_CLIENT = r'''
import json, sys, time
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config()
api = client.CoreV1Api()
ws = stream(api.connect_get_namespaced_pod_attach, sys.argv[1], "default", stdin=True, stdout=True, stderr=True,
            tty=False, _preload_content=False)
ws.write_stdin("abc\n")
out, deadline = "", time.monotonic() + 60
while "got abc" not in out and time.monotonic() < deadline:
    ws.update(timeout=1)
    out += ws.read_stdout(timeout=0) if ws.peek_stdout() else ""
protocol = ws.subprotocol
ws.close()  # the session ends: a stdinOnce stdin is closed
print(json.dumps({"stdout": out, "protocol": protocol}))
'''


def test_the_python_client_attaches(plane, kubectl, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """The ``kubernetes`` client's ``stream()`` of ``connect_get_namespaced_pod_attach`` (WebSocket)."""
    _apply(kubectl, _stdin_pod("client", ECHO_LINES, stdinOnce=True))
    _running(kubectl, "client")
    out = run_client(sys.executable, plane, PYTHON_CLIENT, tmp_path, "client")
    assert out["stdout"] == "got abc\n" and out["protocol"].endswith("channel.k8s.io"), out
    assert _terminated(kubectl, "client")["exitCode"] == 3
    assert kubectl("logs", "client").stdout == "got abc\neof\n"
    kubectl("delete", "pod", "client", "--wait=false")


def test_kubectl_run_it_on_every_kind_of_control_plane(escape_plane, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """Root's, and an ordinary user's (uid 65534, with and without a subordinate id range), whose
    containers bubblewrap runs on a terminal of the shim's."""
    _shell(Terminal([KUBECTL, "run", "anyone", "-it", "--rm", "--restart=Never", "--image=python", "--command",
                     "--", "sh"], _env(escape_plane, tmp_path)), "anyone")


def test_a_tty_container_without_stdin_is_on_a_terminal(kubectl) -> None:  # noqa: ANN001, F811
    """``tty`` without ``stdin`` (allowed, as by kube-apiserver): its stdio is a terminal, its log the output."""
    pod = _pod("ttyonly", ["sh", "-c", "tty && test -t 1 && echo on a terminal"])
    pod["spec"]["containers"][0]["tty"] = True
    _apply(kubectl, pod)
    assert _terminated(kubectl, "ttyonly")["exitCode"] == 0, kubectl("logs", "ttyonly").stdout
    logs = kubectl("logs", "ttyonly").stdout
    assert logs.startswith("/dev/") and logs.endswith("\non a terminal\n"), logs
    kubectl("delete", "pod", "ttyonly", "--wait=false")


def test_a_container_without_stdin_attaches_output_only(kubectl) -> None:  # noqa: ANN001, F811
    """``kubectl attach -i`` to a container without ``stdin: true``: its output, its input dropped
    (its stdin is /dev/null, read as empty)."""
    _apply(kubectl, _pod("nostdin", ["sh", "-c", "cat; echo read-nothing; sleep 0.5; "
                                                "while [ ! -e /tmp/stop ]; do echo tick; sleep 0.1; done"]))
    _running(kubectl, "nostdin")
    attach = subprocess.Popen([KUBECTL, "attach", "-i", "nostdin"], env=kubectl.env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert attach.stdin is not None
        attach.stdin.write(b"ignored\n")
        attach.stdin.flush()
        _read_until(attach, b"tick")
        kubectl("exec", "nostdin", "--", "touch", "/tmp/stop")
        out, _ = attach.communicate(timeout=60)
    finally:
        attach.kill()
        attach.wait()
    assert attach.returncode == 0
    assert "ignored" not in kubectl("logs", "nostdin").stdout
    kubectl("delete", "pod", "nostdin", "--wait=false")


# -- the node's side: both runtimes -----------------------------------------------------------------

@pytest.fixture(params=["crun", "bwrap"])
def node(request, tmp_path: Path, monkeypatch):  # noqa: ANN001, ANN201
    if request.param == "crun" and not oci_available():
        pytest.skip("crun runs containers only for root's node")
    if request.param == "bwrap":
        monkeypatch.setenv("TRIMARAN_RUNTIME", "bwrap")
    runtime = LocalRuntime(tmp_path / "home")
    yield runtime
    for uid in runtime.known_pods():
        runtime.stop_pod(uid, grace_seconds=0)


def test_the_shim_lends_the_stdin_and_the_terminal(node: LocalRuntime) -> None:
    """The shim holds a ``tty`` container's terminal and lends it: what a session writes is read by
    the container, the session's size is the terminal's, and its output goes to the log."""
    uid = str(uuid.uuid4())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "namespace": "default", "uid": uid},
           "spec": {"containers": [{"name": "main", "command": ["sh", "-c", "read line; stty size; echo $line; exit 4"],
                                    "stdin": True, "tty": True}]}}
    node.start_pod(pod, attempt=0, lookup=lambda *a: None)
    poll(lambda: node.container_pid(uid, "main"), timeout=20, interval=0.02, what="the container to run")
    restarted = LocalRuntime(node.home)  # the stdin is the shim's: a restarted control plane's node lends it too
    try:
        held = restarted.attach(uid, "main")
    finally:
        restarted.close()
    assert held is not None and held.tty and held.fd is not None
    held.resize(99, 33)
    os.write(held.fd, b"typed\n")
    held.release()
    poll(lambda: node.container_pid(uid, "main") is None, timeout=20, interval=0.02, what="the container to end")
    assert node.pod_status(uid).containers["main"].exit_code == 4
    log = node.log_path("default", "t", "main").read_bytes()
    assert b"33 99\r\ntyped\r\n" in log, log  # the terminal's output: its echo, its \r\n
    assert node.attach(uid, "main") is None
    assert not [*node.home.rglob("*.attach"), *node.home.rglob("*.console")]  # the shim's sockets went with it
