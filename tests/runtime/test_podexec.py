"""podexec: the exec server a pod runs and the rsh agent that reaches it (real processes)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import poll
from trimaran.runtime import podexec

PODEXEC = [sys.executable, "-I", "-S", podexec.__file__]


TOKEN = "the-jobs-exec-token"


def _ended(process: psutil.Process) -> bool:
    """Gone or a zombie; it may go between two looks, which is an answer too."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def key() -> str:
    return str(uuid.uuid4())


def _serve(key: str, pod: str, tmp_path: Path, *command: str, **popen: object) -> subprocess.Popen:
    env = dict(os.environ, POD_ONLY="from-the-pod", **{podexec.TOKEN_ENV: TOKEN})
    argv = [*PODEXEC, "serve", key, pod, *(["--", *command] if command else [])]
    return subprocess.Popen(argv, cwd=tmp_path, env=env, **popen)


def _agent(key: str, *args: str, token: str | None = TOKEN, timeout: float = 20) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != podexec.TOKEN_ENV}
    if token is not None:
        env[podexec.TOKEN_ENV] = token
    return subprocess.run([*PODEXEC, "connect", key, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_runs_the_command_in_the_servers_environment_and_returns_its_status(key, tmp_path):
    server = _serve(key, "pi-worker-0", tmp_path)
    try:
        # ssh's options, with and without values, come before the host; the words are joined as ssh does.
        out = _agent(key, "-x", "-o", "ConnectionAttempts=10", "-p22", "pi-worker-0.pi.default.svc",
                     "echo", "$POD_ONLY", "in", "$(pwd);", "exit", "3")
        assert out.returncode == 3, out.stderr
        assert out.stdout == f"from-the-pod in {tmp_path}\n"
    finally:
        assert podexec.request_exit(key, "pi-worker-0", TOKEN)
        assert server.wait(10) == 0  # an idle server asked to exit ends cleanly


def test_unknown_pod_fails_like_ssh(key):
    out = _agent(key, "-o", "ConnectionAttempts=1", "nobody", "true")
    assert out.returncode == 255 and "connect to pod nobody" in out.stderr
    assert not podexec.request_exit(key, "nobody", TOKEN)


def test_a_dropped_caller_ends_its_command(key, tmp_path):
    server = _serve(key, "w", tmp_path)
    try:
        agent = subprocess.Popen([*PODEXEC, "connect", key, "w", "sleep", "300"],
                                 env=dict(os.environ, **{podexec.TOKEN_ENV: TOKEN}))
        sleeper = poll(lambda: [p for p in psutil.Process(server.pid).children(recursive=True)
                                if "sleep" in p.name()], timeout=10, what="the remote sleep")[0]
        agent.kill()
        agent.wait()
        poll(lambda: _ended(sleeper), timeout=10,
             what="the command of a dropped caller to end")
    finally:
        podexec.request_exit(key, "w", TOKEN)
        server.wait(10)


def test_a_worker_with_its_own_command_exits_with_its_status(key, tmp_path):
    server = _serve(key, "w", tmp_path, sys.executable, "-c",
                    "import time, sys; time.sleep(0.5); sys.exit(7)")
    out = _agent(key, "w", "echo", "reachable")
    assert out.stdout == "reachable\n"
    assert podexec.request_exit(key, "w", TOKEN)  # answered, but the pod's own command decides
    assert server.wait(20) == 7


def test_a_caller_without_the_jobs_token_is_refused_and_logged(key, tmp_path):
    # Another pod sees the socket's name in /proc/net/unix and runs as the same uid: only the token counts.
    server = _serve(key, "w", tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        marker = tmp_path / "ran"
        for token in (None, "a-guess", TOKEN[:-1]):
            out = _agent(key, "w", "touch", str(marker), token=token)
            assert out.returncode == 255, out
            if token is None:
                assert f"no exec token: ${podexec.TOKEN_ENV}" in out.stderr
            else:
                assert "refused: this pod's exec server needs its job's token" in out.stderr
        assert not podexec.request_exit(key, "w", "a-guess")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:  # no token at all
            raw.connect(podexec.socket_name(key, "w"))
            raw.sendall(json.dumps({"op": "exec", "command": f"touch {marker}"}).encode() + b"\n")
            assert "refused" in json.loads(raw.makefile().readline())["error"]
        assert server.poll() is None and not marker.exists()
        assert _agent(key, "w", "true").returncode == 0  # the token still opens it
    finally:
        assert podexec.request_exit(key, "w", TOKEN)
        _, err = server.communicate(timeout=10)
    assert err.count("podexec: refused a request with a wrong exec token") == 3
    assert err.count("podexec: refused a request without the exec token") == 1


def test_a_server_without_a_token_does_not_start(key, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != podexec.TOKEN_ENV}
    out = subprocess.run([*PODEXEC, "serve", key, "w"], env=env, capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "no exec token" in out.stderr


def test_a_caller_that_sends_no_request_is_dropped(key, tmp_path):
    # Any pod can connect; one that sends nothing, or a byte at a time, must not hold the server's threads.
    env = dict(os.environ, **{podexec.TOKEN_ENV: TOKEN})
    code = f"import sys; sys.path.insert(0, {str(Path(podexec.__file__).parent)!r}); import podexec; " \
           f"sys.exit(podexec.serve({key!r}, 'w', [], {TOKEN!r}, header_timeout=0.5))"
    server = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: _agent(key, "w", "true").returncode == 0, timeout=10, what="the server to answer")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as trickle:
            silent.connect(podexec.socket_name(key, "w"))
            trickle.connect(podexec.socket_name(key, "w"))
            trickle.sendall(b"{")
            # A byte every 0.2 s, until the server closes it (readable at EOF), for at most 5 s.
            for _ in range(25):
                if select.select([trickle], [], [], 0.2)[0]:
                    assert trickle.recv(1) == b""
                    break
                trickle.sendall(b" ")
            else:
                raise AssertionError("a connection sending a byte at a time was kept past the deadline")
            silent.settimeout(10)
            assert silent.recv(1) == b""  # closed by the server
        assert _agent(key, "w", "true").returncode == 0
    finally:
        assert podexec.request_exit(key, "w", TOKEN)
        _, err = server.communicate(timeout=10)
    assert err.count("dropped a connection that sent no request in 0.5 s") == 2


def test_descriptors_without_a_whole_request_are_not_kept(key, tmp_path):
    # A process that holds another's socket can be taken for its owner (Katib's DB manager asks the
    # kernel who holds a connection), so a stranger's descriptors are closed at once.
    server = _serve(key, "w", tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: _agent(key, "w", "true").returncode == 0, timeout=10, what="the server to answer")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stranger, socket.socket() as lent:
            stranger.connect(podexec.socket_name(key, "w"))
            socket.send_fds(stranger, [b'{"op": "exec", "tok'], [lent.fileno()])
            stranger.settimeout(5)  # the header deadline is 10 s: an answer before it is the refusal
            assert stranger.recv(1) == b""
            held = {os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")}
            assert f"socket:[{os.fstat(lent.fileno()).st_ino}]" not in held
    finally:
        assert podexec.request_exit(key, "w", TOKEN)
        _, err = server.communicate(timeout=10)
    assert "podexec: refused descriptors sent without a whole request" in err
