"""HTTP connections that cannot pin the control plane.

uvicorn waits for a request's headers for as long as the client likes and takes as many header
bytes as it is sent, so a client that opens connections and sends half a request line ("slowloris")
holds each one forever. Here, as kube-apiserver (Go's ``ReadHeaderTimeout`` of 32 s and 1 MiB of
headers), a request's headers must arrive within ``HEADER_TIMEOUT`` seconds of the connection or of
the request's first byte, in at most ``MAX_HEADER_BYTES``; the connection is closed otherwise (431
first when they are too large). Idle kept-alive connections are closed by uvicorn's own timeout, and at
once when the server stops.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HEADER_TIMEOUT", "MAX_HEADER_BYTES", "GuardedHttpProtocol"]

HEADER_TIMEOUT = 32.0
MAX_HEADER_BYTES = 1024 * 1024

_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
              b"connection: close\r\ncontent-length: 32\r\n\r\nrequest header fields too large\n")


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size limit on each request's headers."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._in_headers = True
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
        super().on_headers_complete()

    def shutdown(self) -> None:
        """A stopping server ends an idle kept-alive connection at once: a TLS close waits for the
        client's close_notify, which an idle client never sends, and the stop would wait with it."""
        if self.cycle is None or self.cycle.response_complete:
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
