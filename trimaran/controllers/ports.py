"""Loopback ports for replicas.

Every replica on this machine shares the host network, and TensorFlow's gRPC server and
PyTorch's TCPStore bind all interfaces, so two replicas (or two jobs) cannot both keep the
operator's default port. Each replica gets its own free port instead; it is recorded on the
job so that a recreated pod, or a restarted control plane, reuses it.
"""

from __future__ import annotations

import socket
import threading

_FIRST, _LAST = 20000, 32000


class PortAllocator:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reserved: set[int] = set()
        self._next = _FIRST

    def reserve(self, ports: list[int]) -> None:
        """Mark ports recorded on existing jobs as taken (after a control-plane restart)."""
        with self._lock:
            self._reserved.update(ports)

    def release(self, ports: list[int]) -> None:
        with self._lock:
            self._reserved.difference_update(ports)

    def allocate(self, count: int) -> list[int]:
        with self._lock:
            out: list[int] = []
            tried = 0
            while len(out) < count:
                if tried > _LAST - _FIRST:
                    raise RuntimeError("no free loopback ports left in the replica range")
                port = self._next
                self._next = _FIRST if self._next >= _LAST else self._next + 1
                tried += 1
                if port in self._reserved or not _bindable(port):
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
