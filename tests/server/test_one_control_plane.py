"""One control plane per home, found by its lock; the home's files kept from other local users."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from tests.conftest import ControlPlaneHandle
from tests.helpers import REPO, poll


def _mode(path: os.PathLike | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_second_control_plane_on_a_held_home_fails_naming_the_holder(plane: ControlPlaneHandle) -> None:
    from trimaran.server.controlplane import build_control_plane
    from trimaran.server.daemon import HomeLocked, lock_holder, read_server_info

    pid = read_server_info(plane.home)["pid"]
    assert lock_holder(plane.home) == pid

    second = subprocess.run([sys.executable, "-m", "trimaran.server"], env=plane.env, cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert second.returncode != 0
    assert f"pid {pid}" in second.stderr and str(plane.home) in second.stderr, second.stderr

    cli = plane.cli("server", "start", check=False)
    assert cli.returncode != 0 and f"pid {pid}" in cli.stderr, cli.stderr

    # Whatever would start controllers on the home refuses it before opening the store.
    with pytest.raises(HomeLocked) as refused:
        build_control_plane(plane.home)
    assert refused.value.pid == pid
    assert lock_holder(plane.home) == pid and plane.cli("get", "configmaps").returncode == 0


def test_a_stopped_control_plane_is_waited_for_not_replaced(plane: ControlPlaneHandle) -> None:
    """A control plane that does not answer (SIGSTOP: as busy as can be) still holds the home: the
    CLI says it is busy and waits, and no second control plane starts."""
    from trimaran.server.daemon import lock_holder, read_server_info

    pid = read_server_info(plane.home)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        cli = subprocess.Popen([sys.executable, "-m", "trimaran.cli", "get", "configmaps"], env=plane.env,
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(cli.stderr), daemon=True)  # type: ignore[arg-type]
        reader.start()
        poll(lambda: any("is busy; waiting" in line for line in said), timeout=60,
             what="the CLI to say the control plane is busy")
        assert f"pid {pid}" in "".join(said)
        assert cli.poll() is None, "the CLI gave up on a busy control plane"
        assert lock_holder(plane.home) == pid
        assert _control_planes(plane) == [pid]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert cli.wait(timeout=60) == 0, "".join(said)
    assert _control_planes(plane) == [pid]


def _control_planes(plane: ControlPlaneHandle) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            if "trimaran.server" in (proc.info["cmdline"] or []) and \
                    (proc.info["environ"] or {}).get("TRIMARAN_HOME") == str(plane.home):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_the_home_and_its_secrets_are_private(tmp_path, plane_with: Callable[..., ControlPlaneHandle]) -> None:
    """$TRIMARAN_HOME 0700 (a looser one is tightened, and the log says so); the store, its WAL,
    tokens, kubeconfig and keys 0600."""
    home = tmp_path / "home0"  # the fixture's first home, made too open beforehand
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    plane = plane_with()
    assert plane.home == home
    assert _mode(home) == 0o700
    assert "tightened" in (home / "server.log").read_text()
    for name in ("trimaran.db", "trimaran.db-wal", "trimaran.db-shm", "tokens.json", "kubeconfig", "server.json",
                 "server.log", "control-plane.lock", "pki/ca.key", "pki/server.key"):
        assert _mode(home / name) == 0o600, name
    assert _mode(home / "pki") == 0o700


def test_a_killed_control_plane_leaves_the_home_to_the_next(plane: ControlPlaneHandle) -> None:
    """The kernel drops the lock with the process: a start right after a SIGKILL gets a new control plane."""
    from trimaran.server.daemon import lock_holder, read_server_info, start_server

    pid = read_server_info(plane.home)["pid"]
    os.kill(pid, signal.SIGKILL)
    again = start_server(home=plane.home)
    assert again["pid"] != pid and lock_holder(plane.home) == again["pid"]
    assert plane.cli("get", "configmaps").returncode == 0


def test_a_control_plane_that_does_not_answer_shows_where_it_is(plane: ControlPlaneHandle) -> None:
    """A start that gives up says what the control plane's main thread was doing: its threads'
    stacks, written to its log on SIGUSR1 (asked here of a running one)."""
    from trimaran.server.daemon import _main_thread_stack, read_server_info

    pid = read_server_info(plane.home)["pid"]
    log = plane.home / "server.log"
    start = log.stat().st_size
    said = _main_thread_stack(pid, log, start)
    assert said.startswith("; its main thread was at:") and "File " in said, said
    assert "Current thread" in log.read_text()[start:]
    assert plane.cli("get", "configmaps").returncode == 0  # the dump did not stop it
