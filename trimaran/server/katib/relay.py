"""Forward the connections of a listening socket to a local gRPC server, remembering who made each.

gRPC's Python server binds its own addresses; the DBManager's public address must instead be a
socket the control plane was handed (`trimaran.server.keeper`). The relay accepts there, opens a
connection to the gRPC server's own port for each, and records ``origins[(host, port)]`` = the
caller's address for the relay's end of that connection, so that :mod:`.callers` asks the kernel
about the caller, not about the relay. Katib's traffic is a few small messages per trial, so the
extra hop costs nothing that matters; it runs on an event loop of its own, in one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading

__all__ = ["Relay"]

log = logging.getLogger(__name__)

_CHUNK = 65536


class Relay:
    """Relays ``listener``'s connections to ``target`` until :meth:`stop`."""

    def __init__(self, listener: socket.socket, target: tuple[str, int]) -> None:
        self.listener = listener
        self.target = target
        # The relay's end of each forwarded connection → the caller's address. Written on the
        # relay's loop before any byte is forwarded, read by gRPC's threads.
        self.origins: dict[tuple[str, int], tuple[str, int]] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="katib-relay", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._forward, sock=self.listener, backlog=128))
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def stop(self) -> None:
        """Stop accepting (the listening socket is closed here; a keeper's copy stays) and drop
        the connections in flight."""
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(close(), self._loop)
        self._thread.join(timeout=5)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        caller = writer.get_extra_info("peername")[:2]
        try:
            inner_reader, inner_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            log.warning("Katib DBManager: cannot reach its gRPC server at %s:%s: %s", *self.target, exc)
            writer.close()
            self._tasks.discard(task)
            return
        relay_end = inner_writer.get_extra_info("sockname")[:2]
        self.origins[relay_end] = caller
        try:
            # Either side going away (a reset) ends its pump; both ends are closed below.
            await asyncio.gather(_pump(reader, inner_writer), _pump(inner_reader, writer), return_exceptions=True)
        finally:
            self.origins.pop(relay_end, None)
            for end in (writer, inner_writer):
                end.close()
            self._tasks.discard(task)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    # The sender finished: pass its end on, and keep the other direction open (HTTP/2 may still answer).
    with contextlib.suppress(OSError):
        if writer.can_write_eof():
            writer.write_eof()
