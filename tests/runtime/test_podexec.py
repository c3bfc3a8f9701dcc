"""podexec: the exec server a pod runs and the rsh agent that reaches it (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import poll
from trimaran.runtime import podexec

PODEXEC = [sys.executable, "-I", "-S", podexec.__file__]


@pytest.fixture
def key() -> str:
    return str(uuid.uuid4())


def _serve(key: str, pod: str, tmp_path: Path, *command: str) -> subprocess.Popen:
    env = dict(os.environ, POD_ONLY="from-the-pod")
    argv = [*PODEXEC, "serve", key, pod, *(["--", *command] if command else [])]
    return subprocess.Popen(argv, cwd=tmp_path, env=env)


def _agent(key: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([*PODEXEC, "connect", key, *args], capture_output=True, text=True, timeout=timeout)


def test_runs_the_command_in_the_servers_environment_and_returns_its_status(key, tmp_path):
    server = _serve(key, "pi-worker-0", tmp_path)
    try:
        # ssh's options, with and without values, come before the host; the words are joined as ssh does.
        out = _agent(key, "-x", "-o", "ConnectionAttempts=10", "-p22", "pi-worker-0.pi.default.svc",
                     "echo", "$POD_ONLY", "in", "$(pwd);", "exit", "3")
        assert out.returncode == 3, out.stderr
        assert out.stdout == f"from-the-pod in {tmp_path}\n"
    finally:
        assert podexec.request_exit(key, "pi-worker-0")
        assert server.wait(10) == 0  # an idle server asked to exit ends cleanly


def test_unknown_pod_fails_like_ssh(key):
    out = _agent(key, "-o", "ConnectionAttempts=1", "nobody", "true")
    assert out.returncode == 255 and "connect to pod nobody" in out.stderr
    assert not podexec.request_exit(key, "nobody")


def test_a_dropped_caller_ends_its_command(key, tmp_path):
    server = _serve(key, "w", tmp_path)
    try:
        agent = subprocess.Popen([*PODEXEC, "connect", key, "w", "sleep", "300"])
        sleeper = poll(lambda: [p for p in psutil.Process(server.pid).children(recursive=True)
                                if "sleep" in p.name()], timeout=10, what="the remote sleep")[0]
        agent.kill()
        agent.wait()
        poll(lambda: not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE, timeout=10,
             what="the command of a dropped caller to end")
    finally:
        podexec.request_exit(key, "w")
        server.wait(10)


def test_a_worker_with_its_own_command_exits_with_its_status(key, tmp_path):
    server = _serve(key, "w", tmp_path, sys.executable, "-c",
                    "import time, sys; time.sleep(0.5); sys.exit(7)")
    out = _agent(key, "w", "echo", "reachable")
    assert out.stdout == "reachable\n"
    assert podexec.request_exit(key, "w")  # answered, but the pod's own command decides
    assert server.wait(20) == 7
