"""Minimal HTTP/1.1 pieces for the router: request parsing, responses, and keep-alive upstream connections.

httptools (llhttp) parses both directions; bodies are buffered whole (inference requests and
responses are bounded JSON documents), which is what lets a request be retried on another replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import httptools

from trimaran._aio import within

__all__ = ["HOP_BY_HOP", "Request", "RequestReader", "Response", "UpstreamError", "UpstreamPool", "render_response"]

# Headers that describe one connection, not the message (RFC 9110 §7.6.1); never forwarded.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade", b"proxy-authenticate", b"proxy-authorization", b"content-length"})
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 413: b"Payload Too Large",
            500: b"Internal Server Error", 502: b"Bad Gateway", 503: b"Service Unavailable", 504: b"Gateway Timeout"}
MAX_BODY = 256 * 1024 * 1024


@dataclass
class Request:
    """One parsed request: method, target, headers (lower-case names) and the whole body."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass
class Response:
    """An upstream's response, buffered."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool = True


class RequestReader:
    """Feeds bytes from a client connection to httptools and yields complete requests (pipelining-safe)."""

    def __init__(self) -> None:
        self._done: list[Request] = []
        self._reset()
        self._parser = httptools.HttpRequestParser(self)

    def _reset(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY:
            raise ValueError("request body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._done.append(Request(self._parser.get_method(), self._url, self._headers, b"".join(self._body),
                                  self._parser.should_keep_alive()))
        self._reset()

    def feed(self, data: bytes) -> list[Request]:
        """Parse ``data``; raises httptools.HttpParserError (or ValueError) on a malformed request."""
        self._parser.feed_data(data)
        done, self._done = self._done, []
        return done


def render_response(status: int, headers: list[tuple[bytes, bytes]], body: bytes, keep_alive: bool) -> bytes:
    """Serialize a response with an exact Content-Length."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status) or _reason(status))]
    for name, value in headers:
        if name.lower() not in HOP_BY_HOP:
            parts.append(name + b": " + value + b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)


def _reason(status: int) -> bytes:
    """The standard reason phrase of any other status (an Ingress forwards whatever its backend says)."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Status"


class UpstreamError(Exception):
    """The request may not have reached the replica, or the replica died before answering: safe to
    send again elsewhere (model inference has no side effects)."""


class _ResponseParser:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        # Asked here: once the callback returns, llhttp has reset its state and says False.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True


async def _read_response(reader: asyncio.StreamReader, parsed: _ResponseParser) -> None:
    while not parsed.complete:
        data = await reader.read(65536)
        if not data:
            raise ConnectionResetError("connection closed before a complete response")
        parsed.parser.feed_data(data)


@dataclass
class UpstreamPool:
    """Idle keep-alive connections to one replica (``host:port``)."""

    address: str
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)
    max_idle: int = 64

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, _, port = self.address.rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def send(self, request: Request, host: bytes, timeout: float,
                   on_sent: Callable[[], None] | None = None) -> Response:
        """Send ``request`` and read the whole response. Raises UpstreamError when the connection failed
        before a response started (refused, reset, closed), asyncio.TimeoutError when it took too long."""
        head = [request.method + b" " + request.target + b" HTTP/1.1\r\nhost: " + host + b"\r\n"]
        for name, value in request.headers:
            if name not in HOP_BY_HOP and name != b"host":
                head.append(name + b": " + value + b"\r\n")
        head.append(b"content-length: %d\r\n\r\n" % len(request.body))
        payload = b"".join(head) + request.body
        # A pooled connection may have been closed by the replica meanwhile: one fresh retry for that.
        for attempt in range(2):
            fresh = not self.idle
            try:
                reader, writer = self.idle.pop() if self.idle else await self._connect()
            except OSError as exc:
                raise UpstreamError(f"connect {self.address}: {exc}") from None
            try:
                writer.write(payload)
                if on_sent is not None:
                    on_sent()
                parsed = _ResponseParser()
                await within(_read_response(reader, parsed), timeout)
            except asyncio.TimeoutError:
                # Before OSError, of which it is a subclass: a slow replica is not a dead one, and the
                # request must not be sent again elsewhere.
                writer.close()
                raise
            except (OSError, httptools.HttpParserError) as exc:
                writer.close()
                if attempt == 0 and not fresh:
                    continue
                raise UpstreamError(f"{self.address}: {exc}") from None
            except BaseException:
                writer.close()
                raise
            if parsed.keep_alive and len(self.idle) < self.max_idle:
                self.idle.append((reader, writer))
            else:
                writer.close()
            return Response(parsed.parser.get_status_code(), parsed.headers, b"".join(parsed.body))
        raise UpstreamError(f"{self.address}: unreachable")  # not reached: the loop returns or raises

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()
