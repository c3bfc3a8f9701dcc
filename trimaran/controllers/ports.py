"""Loopback ports for replicas, model servers and the router, unique on this machine.

With the pod network on (trimaran.runtime.network), every training replica has its own network
namespace and keeps its operator's default port (:meth:`PortAllocator.for_replicas`); what follows is
the compatibility path where pods share the host's network, and the serving data plane's ports
(model servers and the router stay on the host's network).

Every pod on this machine shares the host network, and TensorFlow's gRPC server and PyTorch's
TCPStore bind all interfaces, so two replicas (or two jobs) cannot both keep the operator's default
port. Each replica gets its own free port instead; it is recorded on the job (or the routes file,
or the replica pod) so that a recreated pod, or a restarted control plane, reuses it.

Two control planes (each with its own ``TRIMARAN_HOME``) may run on one machine, and a bind probe
alone does not keep them apart: a port is handed out seconds before its pod binds it, and the model
server binds with SO_REUSEPORT, so two homes' replicas on one port would even share it silently.
So each port handed out is also reserved machine-wide, in one registry file shared by every home
and user (`REGISTRY`, world-writable): the reservation of port N is an exclusive ``fcntl`` lock on
byte N of that file, taken without blocking. A port is handed out only when it is neither reserved
nor bound. The locks belong to the control plane's process: a home releases a port when it frees
it, and the kernel releases all of them when that process ends, however it ends, so a crashed
control plane leaks nothing and there is no registry to clean. While a control plane is down its
pods keep their ports bound, which the bind probe sees; on restart it reserves again what its
objects record (`PortAllocator.reserve` says which ports another home took meanwhile).

``fcntl`` locks are per process (a process never conflicts with itself, and closing any descriptor
of the file would drop them all), so one registry per process opens the file once and counts, for
every allocator in the process, which ports they hold.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

__all__ = ["REGISTRY", "PortAllocator"]

log = logging.getLogger(__name__)

_FIRST, _LAST = 20000, 32000
#: The machine-wide registry: a fixed path, not $TMPDIR, which differs between users and sessions.
REGISTRY = Path("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()) / "trimaran-ports.lock"


class _Registry:
    """This process's machine-wide port reservations (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._fd: int | None = None
        self._opened = False
        self._holders: dict[int, int] = {}  # port -> how many allocators of this process hold it

    def _file(self) -> int | None:
        if not self._opened:
            self._opened = True
            self._fd = _open_shared(self.path)
        return self._fd

    def held_here(self, port: int) -> bool:
        return port in self._holders

    def claim(self, port: int) -> bool:
        """Reserve a port no allocator of this process holds; False when another process has it."""
        fd = self._file()
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError:
                return False
        self._holders[port] = 1
        return True

    def adopt(self, port: int) -> bool:
        """Hold a port this home recorded; False when another process reserves it."""
        if port in self._holders:
            self._holders[port] += 1
            return True
        if self.claim(port):
            return True
        self._holders[port] = 1  # still this home's to free; the reservation is the other's
        return False

    def free(self, port: int) -> None:
        count = self._holders.get(port, 0) - 1
        if count > 0:
            self._holders[port] = count
            return
        self._holders.pop(port, None)
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, port)


def _open_shared(path: Path) -> int | None:
    """The registry file, read-write, created world-writable when missing. An existing file is opened
    without O_CREAT: in a sticky /tmp the kernel refuses O_CREAT on another user's file
    (fs.protected_regular), even one that exists."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        for _ in range(3):
            try:
                return os.open(path, flags)
            except FileNotFoundError:
                pass
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue  # another process created it in between
            os.fchmod(fd, 0o666)  # the umask narrowed it; every user's control planes share it
            return fd
        raise OSError(f"{path} keeps disappearing")
    except OSError as exc:
        log.warning("cannot use the port registry %s (%s): only a bind probe keeps ports apart from other "
                    "control planes on this machine", path, exc)
        return None


_registry = _Registry(REGISTRY)


class PortAllocator:
    """Hands out ports in [20000, 32000] that are neither bound nor reserved by any control plane."""

    #: How many ports there are to hand out at all: no job needing more can ever run here.
    capacity = _LAST - _FIRST + 1

    def __init__(self, pod_network: bool = False) -> None:
        """``pod_network``: pods have network namespaces of their own (trimaran.runtime.network),
        so replicas keep their operators' default ports (:meth:`for_replicas`)."""
        self._reserved: set[int] = set()
        # Each control plane walks the range from a start of its own: from 20000 all of them would
        # hand out the port another home freed a moment ago (its ingress's, while it restarts).
        self._next = random.SystemRandom().randint(_FIRST, _LAST)
        self.pod_network = pod_network

    def for_replicas(self, default: int, count: int) -> list[int]:
        """Ports for ``count`` replicas that each listen at their own pod's address: the operator's
        ``default`` for every one on the pod network (nothing to reserve, as on a cluster); else,
        with every pod on the host's network, loopback ports of their own (:meth:`allocate`)."""
        return [default] * count if self.pod_network else self.allocate(count)

    def reserve(self, ports: list[int]) -> list[int]:
        """Mark ports recorded on existing objects as this home's (after a control-plane restart).
        Returns those another process reserved meanwhile: whatever uses them may find them taken."""
        lost = []
        with _registry.lock:
            for port in ports:
                if port in self._reserved:
                    continue
                self._reserved.add(port)
                if not _registry.adopt(port):
                    lost.append(port)
        if lost:
            log.warning("ports %s recorded here are reserved by another control plane on this machine", lost)
        return lost

    def release(self, ports: list[int]) -> None:
        with _registry.lock:
            for port in ports:
                if port in self._reserved:
                    self._reserved.discard(port)
                    _registry.free(port)

    def allocate(self, count: int) -> list[int]:
        with _registry.lock:
            out: list[int] = []
            tried = 0
            while len(out) < count:
                if tried > _LAST - _FIRST:
                    self.release(out)
                    raise RuntimeError("no free loopback ports left in the replica range")
                port = self._next
                self._next = _FIRST if self._next >= _LAST else self._next + 1
                tried += 1
                if _registry.held_here(port) or not _bindable(port) or not _registry.claim(port):
                    continue
                out.append(port)
                self._reserved.add(port)
            return out


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True
