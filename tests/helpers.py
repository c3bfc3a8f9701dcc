"""Helpers the whole suite shares."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tests.conftest import ControlPlaneHandle

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def poll(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> T:
    """Wait for ``predicate`` to return something truthy, failing after ``timeout`` seconds.

    Between calls it waits ``interval``, or what the last call took when that is longer: a costly
    predicate (a process scan, a log read) then takes at most half a core from the processes under
    test instead of all of one."""
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(max(interval, now - started))


def pod_processes_of(plane: ControlPlaneHandle, namespace: str, prefix: str, extra: Iterable = ()) -> list:
    """The processes of ``plane``'s pods (and of ``extra``, processes a pod started outside its
    sandbox) in ``namespace`` whose pods' names start with ``prefix``: one test's own, on a control
    plane its module shares. A process whose pod's record is already gone counts as the test's,
    since nothing says it is not."""
    import json

    import psutil

    found = []
    for proc in [*plane.pod_processes(), *extra]:
        try:
            uid = proc.environ().get("TRIMARAN_POD_UID") or _shim_pod_uid([*proc.cmdline(), proc.cwd()])
        except psutil.Error:  # it ended meanwhile
            continue
        try:
            record = json.loads((plane.home / "pods" / str(uid) / "pod.json").read_text())
        except (OSError, ValueError):
            found.append(proc)
            continue
        if record["namespace"] == namespace and record["name"].startswith(prefix):
            found.append(proc)
    return found


def _shim_pod_uid(cmdline: list[str]) -> str | None:
    """A shim's pod uid, from its run directory ``…/pods/<uid>/runs/<attempt>`` on its command line
    (with its working directory: a shim started ahead works in its run's)."""
    for arg in cmdline:
        parts = Path(arg).parts
        if len(parts) >= 4 and parts[-2] == "runs" and parts[-4] == "pods":
            return parts[-3]
    return None


@contextlib.contextmanager
def small_tmpfs(mount: Path, size: str, mode: str = "0755") -> Iterator[Path]:
    """A tmpfs of ``size`` (``64m``) mounted at ``mount`` (made here) while the block runs: a small
    disk to fill. Needs root: the caller skips otherwise. Unmounted lazily if still busy."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip(f"mounting a {size} tmpfs needs root")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def pod_network_on(home: Path) -> bool:
    """Whether the control plane of ``home`` gives pods networks of their own (trimaran.runtime.network)."""
    return (Path(home) / "network" / "trimaran.conflist").exists()


def host_ip() -> str:
    """An address of this machine that its pods reach whatever their network: the source address of
    its default route (asked of the routing table; nothing is sent), else loopback. A server a test
    starts for pods (a file server, a package index) binds it: on the pod network the host's
    loopback is not the pod's."""
    out = subprocess.run(["ip", "-j", "route", "get", "192.0.2.255"], capture_output=True, text=True, check=False)
    try:
        return str(json.loads(out.stdout)[0]["prefsrc"])
    except (ValueError, LookupError, TypeError):
        return "127.0.0.1"
