"""A small HTTP/1.1 server on asyncio Protocols and httptools, built for many small requests.

What it does: keep-alive; pipelining (responses leave in request order: one request of a connection is
handled at a time, later ones wait parsed); Content-Length and chunked bodies, both limited to
``max_body`` (a Content-Length over it gets 413 before the body is read; ``Expect: 100-continue`` is
answered only when the body is acceptable); idle connections closed after ``keepalive_timeout``; graceful
shutdown (stop accepting, close idle connections, let busy ones finish their response, then close).

The application is a callable ``handle(request) -> Response | Awaitable[Response]``: synchronous answers (health,
metadata, an inline prediction) are written without creating a task.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import time
from collections.abc import Awaitable, Callable

import httptools
import orjson

log = logging.getLogger("trimaran.serving")

_REASONS = {200: "OK", 100: "Continue", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
            500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}
_STATUS_LINES = {code: f"HTTP/1.1 {code} {reason}\r\n".encode() for code, reason in _REASONS.items()}
LINGER_SECONDS = 2.0  # how long a refused request's body is read and discarded before closing
MAX_PIPELINED = 64  # parsed requests a connection may have waiting before reading pauses


class Request:
    """A parsed request. ``headers`` has lower-case names; ``started`` is ``time.perf_counter()`` when parsed."""

    __slots__ = ("method", "path", "query", "headers", "body", "keep_alive", "started")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        self.started = time.perf_counter()


class Response:
    """A response to write: status, body, content type and extra headers."""

    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int, body: bytes, content_type: str = "application/json",
                 headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers

    def encode(self, close: bool) -> bytes:
        line = _STATUS_LINES.get(self.status) or f"HTTP/1.1 {self.status} Status\r\n".encode()
        head = [line, b"content-type: ", self.content_type.encode(), b"\r\ncontent-length: ",
                str(len(self.body)).encode(), b"\r\n"]
        for name, value in self.headers:
            head.append(f"{name}: {value}\r\n".encode())
        if close:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        head.append(self.body)
        return b"".join(head)


Handler = Callable[[Request], "Response | Awaitable[Response]"]


def error_response(status: int, message: str) -> Response:
    """``{"error": message}`` with ``status``: the V1/V2 error body, for errors found before routing."""
    return Response(status, orjson.dumps({"error": message}))


class HttpServer:
    """Listens on one address and runs :class:`HttpProtocol` connections for ``handler``."""

    def __init__(self, handler: Handler, *, max_body: int, keepalive_timeout: float = 65.0,
                 on_crash: Callable[[Request, BaseException], Response] | None = None) -> None:
        self.handler = handler
        self.max_body = max_body
        self.keepalive_timeout = keepalive_timeout
        self.on_crash = on_crash or (lambda _req, _exc: error_response(500, "internal server error"))
        self.connections: set[HttpProtocol] = set()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = True) -> None:
        """Listen; with ``reuse_port`` several processes may bind the same port (SO_REUSEPORT)."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        self._server = await loop.create_server(lambda: HttpProtocol(self), sock=sock, backlog=2048)
        self._sweeper = loop.create_task(self._sweep_idle())

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.keepalive_timeout / 2))
            cutoff = time.monotonic() - self.keepalive_timeout
            for conn in list(self.connections):
                # Quiet for the whole timeout and not being answered: idle keep-alive, or a request that stopped
                # arriving halfway (which would otherwise hold the connection forever).
                if not conn.handling and conn.last_active < cutoff:
                    conn.close()

    async def shutdown(self, timeout: float) -> None:
        """Stop accepting, finish the requests in flight (up to ``timeout`` seconds), close every connection."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            if conn.idle:
                conn.close()
        deadline = time.monotonic() + timeout
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.last_active = time.monotonic()
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._rejected: Response | None = None
        self._waiting: collections.deque[Request | Response] = collections.deque()
        self._busy = False
        self._paused = False
        self._parsing = False

    @property
    def handling(self) -> bool:
        """A request is being answered or waits its turn."""
        return self._busy or bool(self._waiting)

    @property
    def idle(self) -> bool:
        """No request being handled, waiting or half-received."""
        return not self.handling and not self._parsing

    # -- asyncio.Protocol -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self._rejected is not None:
            return  # the rest of a refused body: discarded until the 413 is written and the connection closes
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(error_response(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            if self._rejected is None:
                self._reject(error_response(400, f"malformed HTTP request: {exc}"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- httptools callbacks ----------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._parsing = True
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        if length is not None:
            try:
                too_big = int(length) > self.server.max_body
            except ValueError:
                too_big = False  # httptools has already refused a malformed length
            if too_big:
                self._reject(error_response(413, f"request body of {length} bytes exceeds the limit of "
                                                 f"{self.server.max_body} bytes"))
                return
        if self._headers.get("expect", "").lower() == "100-continue" and not self._waiting and not self._busy:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._rejected is not None:
            return
        self._size += len(body)
        if self._size > self.server.max_body:
            self._reject(error_response(413, f"request body exceeds the limit of {self.server.max_body} bytes"))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._rejected is not None:
            return
        self._parsing = False
        parser = self.parser
        url = self._url.decode("latin-1")
        path, _, query = url.partition("?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(parser.get_method().decode("ascii"), path, query, self._headers, body,
                          parser.should_keep_alive())
        if self._busy:
            self._waiting.append(request)
            if len(self._waiting) >= MAX_PIPELINED and not self._paused:
                self._paused = True
                self.transport.pause_reading()
        else:
            self._start(request)

    # -- handling ---------------------------------------------------------------------------------------------
    def _reject(self, response: Response) -> None:
        """Answer with ``response`` (after the requests before it) and close: the rest of the stream is unread."""
        self._rejected = response
        self._parsing = False
        if self._busy:
            self._waiting.append(response)
        else:
            self._write(response, close=True)

    def _start(self, request: Request) -> None:
        self._busy = True
        try:
            result = self.server.handler(request)
        except Exception as exc:
            result = self.server.on_crash(request, exc)
        if isinstance(result, Response):
            self._finish(request, result)
        else:
            task = asyncio.ensure_future(result)
            task.add_done_callback(lambda t: self._task_done(request, t))

    def _task_done(self, request: Request, task: asyncio.Future) -> None:
        if task.cancelled():
            self.close()
            return
        exc = task.exception()
        self._finish(request, task.result() if exc is None else self.server.on_crash(request, exc))

    def _finish(self, request: Request, response: Response) -> None:
        close = not request.keep_alive or (self.server.closing and not self._waiting)
        self._write(response, close)
        self._busy = False
        self.last_active = time.monotonic()
        if close:
            return
        if self._waiting:
            nxt = self._waiting.popleft()
            if self._paused and len(self._waiting) < MAX_PIPELINED // 2:
                self._paused = False
                self.transport.resume_reading()
            if isinstance(nxt, Response):
                self._write(nxt, close=True)
            else:
                self._start(nxt)
        elif self.server.closing and not self._parsing:
            self.close()

    def _write(self, response: Response, close: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(response.encode(close))
        if not close:
            return
        if self._rejected is None:
            self.transport.close()
            return
        # Lingering close: closing with the client's body still arriving would send a reset that can destroy
        # the response before the client reads it. Half-close instead, discard what still comes, and close
        # when the client does (or after a grace period).
        if self.transport.can_write_eof():
            self.transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, self.close)
