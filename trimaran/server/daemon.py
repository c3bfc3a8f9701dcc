"""Start, find and stop the background control plane (``trimaran server start|stop|status``)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

INFO_FILE = "server.json"


def home_dir() -> Path:
    return Path(os.environ.get("TRIMARAN_HOME", Path.home() / ".trimaran")).expanduser()


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
    # The health check sends nothing secret, so it need not verify the home's certificate.
    context = ssl._create_unverified_context() if info["url"].startswith("https:") else None
    try:
        with urllib.request.urlopen(info["url"] + "/healthz", timeout=timeout, context=context) as resp:
            return resp.status == 200
    except OSError:
        return False


def running_server(home: Path | None = None) -> dict | None:
    info = read_server_info(home)
    if info and pid_alive(int(info["pid"])) and healthy(info):
        return info
    return None


def start_server(host: str = "127.0.0.1", port: int = 0, home: Path | None = None, timeout: float = 30.0) -> dict:
    """Start the control plane detached from this process and wait until it answers."""
    home = home or home_dir()
    home.mkdir(parents=True, exist_ok=True)
    existing = running_server(home)
    if existing:
        return existing
    log = open(home / "server.log", "ab")
    env = dict(os.environ, TRIMARAN_HOME=str(home))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trimaran.server", "--host", host, "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_server_info(home)
        if info and info.get("pid") == proc.pid and healthy(info, timeout=0.5):
            return info
        if proc.poll() is not None:
            raise RuntimeError(f"the control plane exited with code {proc.returncode}; see {home / 'server.log'}")
        time.sleep(0.02)
    raise RuntimeError(f"the control plane did not answer within {timeout:.0f}s; see {home / 'server.log'}")


def stop_pods(home: Path | None = None, grace_seconds: float = 5.0) -> int:
    """Stop the processes of every pod of ``home`` (call with the control plane stopped); return how many."""
    from concurrent.futures import ThreadPoolExecutor

    from trimaran.runtime import LocalRuntime

    runtime = LocalRuntime(home or home_dir())
    uids = runtime.running_pods()
    # At once rather than one by one: each may take its grace period.
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(uids)))) as pool:
        list(pool.map(lambda uid: runtime.stop_pod(uid, grace_seconds=grace_seconds), uids))
    return len(uids)


def stop_server(home: Path | None = None, timeout: float = 15.0) -> bool:
    info = read_server_info(home)
    if not info or not pid_alive(int(info["pid"])):
        return False
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    return True
