"""The Services' data path: one asyncio loop (its own thread) accepting on each Service's
``clusterIP:port`` and piping each connection to the next ready endpoint, round-robin.

A backend that refuses the connection is skipped for the next one, so a pod that just stopped
costs no failed request while another is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence

__all__ = ["ServiceProxy"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
Address = tuple[str, int]


class _Listener:
    def __init__(self, server: asyncio.base_events.Server, backends: list[Address]) -> None:
        self.server = server
        self.backends = backends
        self.next = 0

    def order(self) -> list[Address]:
        """Every backend once, starting with the next in turn."""
        if not self.backends:
            return []
        start = self.next % len(self.backends)
        self.next += 1
        return self.backends[start:] + self.backends[:start]


class ServiceProxy:
    """Listeners by (ip, port); ``set`` and ``drop`` are called from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._listeners: dict[Address, _Listener] = {}
        # The loop holds tasks weakly: a connection's pipe must live until both directions end.
        self._pipes: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="service-proxy", daemon=True)
        self._thread.start()

    def set(self, address: Address, backends: Sequence[Address]) -> None:
        """Listen on ``address`` (if not yet) and forward to ``backends``. Raises OSError when the
        address cannot be bound."""
        asyncio.run_coroutine_threadsafe(self._set(address, list(backends)), self._loop).result(timeout=10)

    def drop(self, address: Address) -> None:
        asyncio.run_coroutine_threadsafe(self._drop(address), self._loop).result(timeout=10)

    def addresses(self) -> list[Address]:
        return list(self._listeners)

    def close(self) -> None:
        for address in list(self._listeners):
            self.drop(address)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _set(self, address: Address, backends: list[Address]) -> None:
        listener = self._listeners.get(address)
        if listener is not None:
            listener.backends = backends
            return
        holder: list[_Listener] = []
        server = await asyncio.start_server(lambda r, w: self._accept(holder[0], r, w), address[0], address[1],
                                            reuse_address=True)
        holder.append(_Listener(server, backends))
        self._listeners[address] = holder[0]

    async def _drop(self, address: Address) -> None:
        listener = self._listeners.pop(address, None)
        if listener is not None:
            listener.server.close()
            await listener.server.wait_closed()

    def _accept(self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self._loop.create_task(self._pipe(listener, reader, writer))
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)

    async def _pipe(self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = None
        for host, port in listener.order():
            try:
                upstream = await asyncio.open_connection(host, port)
                break
            except OSError:
                continue
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                with contextlib.suppress(Exception):
                    end.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()  # a reset on one side ends the other's copy too
