"""HTTP connections that cannot pin the control plane.

uvicorn waits for a request's headers for as long as the client likes and takes as many header
bytes as it is sent, so a client that opens connections and sends half a request line ("slowloris")
holds each one forever. Here, as kube-apiserver (Go's ``ReadHeaderTimeout`` of 32 s and 1 MiB of
headers), a request's headers must arrive within ``HEADER_TIMEOUT`` seconds of the connection or of
the request's first byte, in at most ``MAX_HEADER_BYTES``; the connection is closed otherwise (431
first when they are too large). Idle kept-alive connections are closed by uvicorn's own timeout, and at
once when the server stops.

A request that asks to upgrade its connection (``kubectl exec``'s WebSocket or SPDY) finds
``scope["extensions"][TAKEOVER]``: the API checks it as any request and, to accept, hands the
connection to a protocol of its own (``server/kube/streaming.py``), which uvicorn has no part in
afterwards (it knows no SPDY, and WebSocket would need a library per protocol).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HEADER_TIMEOUT", "MAX_HEADER_BYTES", "TAKEOVER", "GuardedHttpProtocol", "TakenConnection"]

TAKEOVER = "trimaran.takeover"

HEADER_TIMEOUT = 32.0
MAX_HEADER_BYTES = 1024 * 1024

_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
              b"connection: close\r\ncontent-length: 32\r\n\r\nrequest header fields too large\n")


class TakenConnection(asyncio.Protocol):
    """A protocol that takes a connection over from HTTP; ``released`` is called once it is lost."""

    released: Callable[[], None] | None = None
    transport: asyncio.BaseTransport | None = None

    def shutdown(self) -> None:
        """The server stops: end the connection (a protocol says goodbye in its own words first)."""
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.released is not None:
            self.released()
            self.released = None


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size limit on each request's headers."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._in_headers = True
        self._taken: TakenConnection | None = None
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._disarm()
                if not self.transport.is_closing():
                    self.transport.write(_TOO_LARGE)
                    self.transport.close()
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._header_bytes = 0
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        if self._get_upgrade() is not None:
            self.scope.setdefault("extensions", {})[TAKEOVER] = self._take_over  # type: ignore[index]
        super().on_headers_complete()

    def _unsupported_upgrade_warning(self) -> None:
        """An upgrade is the API's to accept or refuse (see the module's docstring), not a warning."""

    def _take_over(self, response: bytes, protocol: TakenConnection) -> asyncio.Transport:
        """Write ``response`` (a ``101 Switching Protocols``) and hand the connection to ``protocol``;
        the request's ASGI cycle then sends nothing more."""
        cycle = self.cycle
        assert cycle is not None
        cycle.response_started = cycle.response_complete = cycle.disconnected = True
        self._unset_keepalive_if_required()
        self.transport.write(response)
        self.transport.set_protocol(protocol)
        self._taken = protocol
        protocol.released = lambda: self.connections.discard(self)
        protocol.connection_made(self.transport)
        self.flow.resume_reading()
        return self.transport

    def shutdown(self) -> None:
        """A stopping server ends an idle kept-alive connection at once: a TLS close waits for the
        client's close_notify, which an idle client never sends, and the stop would wait with it."""
        if self._taken is not None:
            self._taken.shutdown()
        elif self.cycle is None or self.cycle.response_complete:
            self._disarm()
            self.transport.abort()
        else:
            super().shutdown()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()
