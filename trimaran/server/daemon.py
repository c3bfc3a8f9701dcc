"""Start, find and stop the background control plane (``trimaran server start|stop|status``).

One control plane per home: it holds an exclusive ``flock`` on ``$TRIMARAN_HOME/control-plane.lock``
for its whole life, taken before the store is opened, with its pid written in the file. The lock,
not an HTTP probe, is what says a control plane is alive: a busy one (or one still starting) is
waited for, never replaced by a second on the same store. The kernel drops the lock when the
process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trimaran._home import home_dir

INFO_FILE = "server.json"
LOCK_FILE = "control-plane.lock"
# A checker holds the lock shared for an instant; a starting control plane that meets one retries this long.
_CHECKER_GRACE = 1.0
_BUSY_AFTER = 1.0  # seconds without an answer before the user is told the control plane is busy
_SLOW_START = 10.0  # a start takes about 1.5 s; after this long the user is told it is still going


class HomeLocked(RuntimeError):
    """Another control plane holds the home."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home, self.pid = home, pid
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"a control plane ({holder}) already runs on {home}: one home has one control plane; "
                         f"stop it with `trimaran server stop`, or use another TRIMARAN_HOME")


class ControlPlaneExited(RuntimeError):
    """The control plane waited for let go of the home (it exited, or was killed)."""


class HomeLock:
    """The held lock of a home; released by :meth:`release` or when the process exits."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def private_home(home: Path) -> Path:
    """``home``, created 0700 (it holds the store, tokens and keys); a looser existing one is tightened."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = home.stat().st_mode & 0o777
    if mode & 0o077:
        home.chmod(mode & 0o700)
        import logging  # here: every CLI call imports this module (logging and subprocess cost it ~8 ms)

        logging.getLogger(__name__).warning(
            "%s was mode %o: tightened to %o (it holds the store, tokens and keys)", home, mode, mode & 0o700)
    return home


def lock_home(home: Path) -> HomeLock:
    """Take ``home``'s control-plane lock for this process, or raise :class:`HomeLocked` naming the holder."""
    private_home(home)
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + _CHECKER_GRACE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            pid = _read_pid(fd)
            # A live pid in the file is the holder; otherwise a checker may hold it for an instant.
            if (pid and pid != os.getpid() and pid_alive(pid)) or time.monotonic() > deadline:
                os.close(fd)
                raise HomeLocked(home, pid) from None
            time.sleep(0.01)
    # Written over the old pid in place (padded), so a reader sees one pid or the other, never none.
    os.pwrite(fd, f"{os.getpid():<20}\n".encode(), 0)
    os.ftruncate(fd, 21)
    return HomeLock(fd)


def lock_holder(home: Path | None = None) -> int | None:
    """The pid of the control plane holding ``home``'s lock, or None when none holds it.

    A holder whose pid cannot be read yet is reported as 0.
    """
    from trimaran.server.keeper import lock_holder as holder  # stdlib only, as the keeper runs it

    return holder((home or home_dir()) / LOCK_FILE)


def write_server_info(home: Path, url: str, pid: int, pod_port: int, katib_db_manager: str | None = None) -> None:
    """Where the running control plane listens; its token is in the kubeconfig beside this file."""
    path = home / INFO_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "pid": pid, "podPort": pod_port, "katibDBManager": katib_db_manager}, fh)
    os.replace(tmp, path)


def clear_server_info(home: Path, pid: int) -> None:
    info = read_server_info(home)
    if info and info.get("pid") == pid:
        (home / INFO_FILE).unlink(missing_ok=True)


def read_server_info(home: Path | None = None) -> dict | None:
    path = (home or home_dir()) / INFO_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; an exited child that its parent has not reaped yet does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def healthy(info: dict, timeout: float = 1.0) -> bool:
    return health_problem(info, timeout) is None


def health_problem(info: dict, timeout: float = 1.0) -> str | None:
    """Why the control plane described by ``info`` does not answer its health check; None when it does."""
    import urllib.request  # here: every CLI call imports this module, few check health

    # The health check sends nothing secret, so it need not verify the home's certificate.
    context = ssl._create_unverified_context() if info["url"].startswith("https:") else None
    try:
        with urllib.request.urlopen(info["url"] + "/healthz", timeout=timeout, context=context) as resp:
            return None if resp.status == 200 else f"/healthz answered {resp.status}"
    except OSError as exc:
        return f"/healthz: {exc}"


class _HealthWait:
    """Health checks while a control plane comes up. Each check may take longer than the last (up to
    a few seconds): on a busy machine a check cut short at a fixed half second can fail every time
    although the server answers a moment later."""

    def __init__(self) -> None:
        self.timeout = 0.5
        self.problem = "it has not written where it listens yet"

    def answers(self, info: dict | None, pid: int) -> bool:
        if not info or info.get("pid") != pid:
            return False
        self.problem = health_problem(info, self.timeout) or ""
        if not self.problem:
            return True
        self.timeout = min(self.timeout * 2, 5.0)
        return False


def running_server(home: Path | None = None) -> dict | None:
    """The control plane of ``home`` when one holds the home and answers its health check."""
    home = home or home_dir()
    pid = lock_holder(home)
    info = read_server_info(home)
    if pid and info and info.get("pid") == pid and healthy(info):
        return info
    return None


Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wait_for_server(home: Path, pid: int, timeout: float = 60.0, say: Say = _stderr) -> dict:
    """Wait until the control plane ``pid``, which holds ``home``, answers; say so once when it is slow.

    Raises:
        ControlPlaneExited: it let go of the home (it exited).
        RuntimeError: it did not answer within ``timeout``.
    """
    start = time.monotonic()
    told = False
    health = _HealthWait()
    while True:
        info = read_server_info(home)
        if health.answers(info, pid):
            return info  # type: ignore[return-value]
        holder = lock_holder(home)
        if holder is None:
            raise ControlPlaneExited(f"the control plane (pid {pid}) exited; see {home / 'server.log'}")
        if holder:
            pid = holder
        waited = time.monotonic() - start
        if waited > timeout:
            raise RuntimeError(f"the control plane (pid {pid}) holds {home} but did not answer within "
                               f"{timeout:.0f}s ({health.problem}); see {home / 'server.log'}")
        if not told and waited > _BUSY_AFTER:
            say(f"the control plane (pid {pid}) is busy; waiting...")
            told = True
        time.sleep(0.05)


def _main_thread_stack(pid: int, log: Path, log_start: int) -> str:
    """What the main thread of a control plane that does not answer is doing: it writes its threads'
    stacks to its log on SIGUSR1 (``controlplane.serve``); the main thread's, as a few lines."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return ""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            with open(log, encoding="utf-8", errors="replace") as handle:
                handle.seek(log_start)
                text = handle.read()
        except OSError:
            return ""
        _, found, block = text.rpartition("Current thread ")
        if found and "File " in block:
            lines = [line.strip() for line in block.splitlines()[1:] if line.strip().startswith("File ")]
            return "; its main thread was at:\n  " + "\n  ".join(lines[:25])
        time.sleep(0.1)
    return ""


def start_server(host: str = "127.0.0.1", port: int = 0, home: Path | None = None, timeout: float = 60.0,
                 say: Say = _stderr, pod_security: str | None = None) -> dict:
    """Start the control plane detached from this process and wait until it answers.
    ``pod_security``: the Pod Security level of unlabelled namespaces (None: the server's default).

    When one already holds the home (however slow it is), that one is waited for instead.
    """
    home = home or home_dir()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)  # a looser one is tightened by the control plane
    holder = lock_holder(home)
    if holder is not None:
        try:
            return wait_for_server(home, holder, timeout=max(timeout, 60.0), say=say)
        except ControlPlaneExited:
            pass  # it was dying (killed a moment ago): start the next one
    log_fd = os.open(home / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.fchmod(log_fd, 0o600)  # requests' details end up there
    log_start = os.fstat(log_fd).st_size
    env = dict(os.environ, TRIMARAN_HOME=str(home))
    import subprocess

    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trimaran.server", "--host", host, "--port", str(port),
             *(["--pod-security", pod_security] if pod_security else [])],
            stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, start_new_session=True, env=env,
        )
    finally:
        os.close(log_fd)
    started = time.monotonic()
    told = False
    health = _HealthWait()
    while time.monotonic() < started + timeout:
        info = read_server_info(home)
        if health.answers(info, proc.pid):
            return info  # type: ignore[return-value]
        if proc.poll() is not None:
            holder = lock_holder(home)
            if holder:  # another client started one at the same moment: that one serves
                return wait_for_server(home, holder, timeout=max(timeout, 60.0), say=say)
            raise RuntimeError(_exit_message(home, log_start, proc.returncode))
        if not told and time.monotonic() - started > _SLOW_START:
            say(f"the control plane (pid {proc.pid}) is still starting ({health.problem}); waiting...")
            told = True
        time.sleep(0.02)
    raise RuntimeError(f"the control plane did not answer within {timeout:.0f}s ({health.problem}); "
                       f"see {home / 'server.log'}{_main_thread_stack(proc.pid, home / 'server.log', log_start)}")


def _exit_message(home: Path, log_start: int, code: int) -> str:
    """Why the control plane that logged from ``log_start`` on exited: the last ``trimaran server:`` line it
    wrote (a refusal it explains: a held home, an unreadable store), else where to look."""
    where = f"the control plane exited with code {code}; see {home / 'server.log'}"
    try:
        with open(home / "server.log", "rb") as fh:
            fh.seek(log_start)
            lines = fh.read(1 << 20).decode(errors="replace").splitlines()
    except OSError:
        return where
    said = [line for line in lines if line.startswith("trimaran server: ")]
    return f"{said[-1].removeprefix('trimaran server: ')} ({where})" if said else where


def stop_pods(home: Path | None = None, grace_seconds: float = 5.0) -> int:
    """Stop the processes of every pod of ``home`` (call with the control plane stopped); return how many."""
    from concurrent.futures import ThreadPoolExecutor

    from trimaran.runtime import LocalRuntime
    from trimaran.runtime.network import PodNetwork

    runtime = LocalRuntime(home or home_dir())
    uids = runtime.running_pods()
    # At once rather than one by one: each may take its grace period.
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(uids)))) as pool:
        list(pool.map(lambda uid: runtime.stop_pod(uid, grace_seconds=grace_seconds), uids))
    runtime.release_cgroups()  # finished pods' too: nothing of the home stays in the hierarchy
    # Their network namespaces, addresses and the home's bridge go too: the next start sets up
    # what its pods need again.
    PodNetwork.remove_home(home or home_dir())
    return len(uids)


def stop_server(home: Path | None = None, timeout: float = 15.0) -> bool:
    """Stop the control plane holding ``home`` (SIGTERM, then SIGKILL after ``timeout``), then the
    home's socket keeper, which holds its listening sockets between restarts; False when no
    control plane ran."""
    from trimaran.server.keeper import stop_keeper

    home = home or home_dir()
    pid = lock_holder(home)
    if pid == 0:  # held, its pid not written yet
        info = read_server_info(home)
        pid = int(info["pid"]) if info else None
    running = bool(pid) and pid_alive(pid)
    if running:
        os.kill(pid, signal.SIGTERM)
        # A stopped (SIGSTOP) control plane must be woken to act on SIGTERM.
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.01)
    stop_keeper(home)
    return running
