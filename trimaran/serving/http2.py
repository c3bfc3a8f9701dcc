"""Unary gRPC over HTTP/2 on an asyncio Protocol (hyper-h2), run by the worker's own event loop.

grpc.aio drives a completion queue from a poller thread and hands every event to the loop: for a model that
answers in well under a millisecond that machinery costs several times the request itself. Here the loop reads
the frames, h2 keeps the HTTP/2 state (SETTINGS, HPACK, flow control, PING, RST_STREAM, GOAWAY) and a method is
a plain function of the request's bytes, so a call that needs no waiting is answered in the same pass as the
frames that carried it (one write for all the calls a read completed).

What a gRPC client may send and what it gets: unary calls only (one length-prefixed message each way);
``grpc-timeout`` is the call's deadline (DEADLINE_EXCEEDED when a pending call passes it); a compressed message
is UNIMPLEMENTED (none is ever advertised in ``grpc-accept-encoding``); an unknown method is UNIMPLEMENTED; a body
that is not exactly one message is INTERNAL; one over ``max_message`` bytes is RESOURCE_EXHAUSTED. While
draining, new streams are refused with RST_STREAM(REFUSED_STREAM) (clients retry those elsewhere) and each
connection gets its GOAWAY once its last call has been answered.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import quote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded, StreamReset, WindowUpdated
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes, Settings

__all__ = ["GrpcError", "GrpcServer", "Method", "STATUS_CODES"]

log = logging.getLogger("trimaran.serving")

# A method answers the request message's bytes with the response's, now or later (an awaitable).
Method = Callable[[bytes], "bytes | Awaitable[bytes]"]

STATUS_CODES = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
                "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
                "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13,
                "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}

# Headers are parsed by h2 and come from gRPC clients: skipping h2's per-header validation and normalisation
# saves a fifth of the per-call cost; the few headers read here are checked where they are used.
_CONFIG = H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=False,
                          normalize_inbound_headers=False, validate_outbound_headers=False,
                          normalize_outbound_headers=False)
# Large windows: a tensor of a few MiB arrives without waiting for a WINDOW_UPDATE per 64 KiB.
_STREAM_WINDOW = 4 << 20
_CONNECTION_WINDOW = 16 << 20
_MAX_STREAMS = 1000
_MAX_HEADER_LIST = 64 << 10
_RESPONSE_HEADERS = ((b":status", b"200"), (b"content-type", b"application/grpc"))
_OK_TRAILERS = ((b"grpc-status", b"0"),)
_TIMEOUT = re.compile(rb"([0-9]{1,8})([HMSmun])")
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
# grpc-message is percent-encoded: everything outside printable ASCII, and "%" itself.
_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


class GrpcError(Exception):
    """A call's error status: ``code`` is a name of :data:`STATUS_CODES`, ``message`` the client's details."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Stream:
    __slots__ = ("path", "body", "timeout", "task", "timer", "pending")

    def __init__(self, path: bytes, timeout: float | None) -> None:
        self.path = path
        self.body = bytearray()
        self.timeout = timeout
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.pending: memoryview | None = None  # response bytes waiting for flow-control window


class _Connection(asyncio.Protocol):
    def __init__(self, server: GrpcServer) -> None:
        self.server = server
        self.h2 = H2Connection(_CONFIG)
        self.h2.local_settings = Settings(client=False, initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: _MAX_STREAMS, SettingCodes.INITIAL_WINDOW_SIZE: _STREAM_WINDOW,
            SettingCodes.MAX_HEADER_LIST_SIZE: _MAX_HEADER_LIST})
        self.streams: dict[int, _Stream] = {}
        self.transport: asyncio.Transport | None = None
        self.draining = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(_CONNECTION_WINDOW - 65535)
        if self.server.draining:
            self.drain()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        for stream in self.streams.values():
            self._forget(stream)
        self.streams.clear()
        self.server.connection_closed()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except ProtocolError as exc:
            # h2 has queued the GOAWAY naming the error; nothing more can be read from this peer.
            log.debug("gRPC connection closed on a protocol error: %s", exc)
            self._flush()
            self.transport.close()
            return
        for event in events:
            kind = type(event)
            if kind is DataReceived:
                self._data(event)
            elif kind is StreamEnded:
                self._ended(event.stream_id)
            elif kind is RequestReceived:
                self._request(event)
            elif kind is WindowUpdated:
                self._window(event.stream_id)
            elif kind is StreamReset:
                stream = self.streams.pop(event.stream_id, None)
                if stream is not None:
                    self._forget(stream)
                    self._closed_stream()
            elif kind is ConnectionTerminated:
                self._flush()
                self.transport.close()
                return
        self._flush()

    def _flush(self) -> None:
        out = self.h2.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)

    def _request(self, event: RequestReceived) -> None:
        sid = event.stream_id
        if self.draining:
            self.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        path = method = content_type = timeout = encoding = None
        for name, value in event.headers:
            if name == b":path":
                path = value
            elif name == b":method":
                method = value
            elif name == b"content-type":
                content_type = value
            elif name == b"grpc-timeout":
                timeout = value
            elif name == b"grpc-encoding":
                encoding = value
        if method != b"POST" or content_type is None or not content_type.startswith(b"application/grpc"):
            # Not a gRPC call: the HTTP answer gRPC's spec asks for (clients map it to a status themselves).
            status = b"405" if method != b"POST" else b"415"
            self.h2.send_headers(sid, ((b":status", status),), end_stream=True)
            if not event.stream_ended:
                self.h2.reset_stream(sid, ErrorCodes.NO_ERROR)
            return
        seconds = None
        if timeout is not None:
            match = _TIMEOUT.fullmatch(timeout)
            if match is None:
                self._trailers_only(sid, "INVALID_ARGUMENT", f"malformed grpc-timeout {timeout!r}", event.stream_ended)
                return
            seconds = int(match.group(1)) * _TIMEOUT_UNITS[match.group(2)]
        stream = _Stream(path or b"", seconds)
        self.streams[sid] = stream
        if encoding not in (None, b"identity"):
            stream.body = None  # type: ignore[assignment]  # its messages are refused when the call is complete

    def _data(self, event: DataReceived) -> None:
        sid = event.stream_id
        # The window is given back as data arrives: a message's size is bounded by max_message, not the window.
        if event.flow_controlled_length:
            self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
        stream = self.streams.get(sid)
        if stream is None or stream.body is None:
            return
        stream.body += event.data
        if len(stream.body) > self.server.max_message + 5:
            del self.streams[sid]
            self._trailers_only(sid, "RESOURCE_EXHAUSTED",
                                f"the request is larger than the limit of {self.server.max_message} bytes", False)
            self._closed_stream()

    def _ended(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None:
            return
        method = self.server.methods.get(stream.path)
        body = stream.body
        if method is None:
            self._fail(sid, "UNIMPLEMENTED", f"Method not found: {stream.path.decode('latin-1')}")
            return
        if body is None or (len(body) >= 5 and body[0] & 1):
            self._fail(sid, "UNIMPLEMENTED", "compressed messages are not supported: send them uncompressed")
            return
        if len(body) < 5 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            self._fail(sid, "INTERNAL", f"the request body ({len(body)} bytes) is not one length-prefixed message")
            return
        if stream.timeout is not None and stream.timeout <= 0:
            self._fail(sid, "DEADLINE_EXCEEDED", "Deadline Exceeded")
            return
        try:
            result = method(bytes(body[5:]))
        except GrpcError as exc:
            self._fail(sid, exc.code, exc.message)
            return
        except Exception:
            log.exception("gRPC method %s failed", stream.path.decode("latin-1"))
            self._fail(sid, "INTERNAL", "the server failed to answer (see its log)")
            return
        if type(result) is bytes:
            self._respond(sid, result)
            return
        stream.body = None  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        stream.task = loop.create_task(self._finish(sid, result))  # type: ignore[arg-type]
        if stream.timeout is not None:
            stream.timer = loop.call_later(stream.timeout, self._expire, sid)

    async def _finish(self, sid: int, pending: Awaitable[bytes]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            return  # reset by the client, past its deadline, or the connection is gone: nobody to answer
        except GrpcError as exc:
            self._fail(sid, exc.code, exc.message)
        except Exception:
            log.exception("gRPC method %s failed", self.streams[sid].path.decode("latin-1"))
            self._fail(sid, "INTERNAL", "the server failed to answer (see its log)")
        else:
            self._respond(sid, response)
        self._flush()

    def _expire(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is None:
            return
        stream.timer = None
        self._fail(sid, "DEADLINE_EXCEEDED", "Deadline Exceeded")
        self._flush()

    def _respond(self, sid: int, message: bytes) -> None:
        stream = self.streams.get(sid)
        if stream is None:
            return
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None
        self.h2.send_headers(sid, _RESPONSE_HEADERS)
        stream.pending = memoryview(b"\x00" + len(message).to_bytes(4, "big") + message)
        self._send(sid, stream)

    def _send(self, sid: int, stream: _Stream) -> None:
        """Send as much of the response as the windows allow; the trailers once it is all out."""
        h2 = self.h2
        pending = stream.pending
        while pending:
            size = min(h2.local_flow_control_window(sid), h2.max_outbound_frame_size, len(pending))
            if size <= 0:
                stream.pending = pending
                return  # the rest goes when a WINDOW_UPDATE opens the window (_window)
            h2.send_data(sid, pending[:size].tobytes())
            pending = pending[size:]
        stream.pending = None
        h2.send_headers(sid, _OK_TRAILERS, end_stream=True)
        del self.streams[sid]
        self._closed_stream()

    def _window(self, sid: int) -> None:
        if sid:
            stream = self.streams.get(sid)
            if stream is not None and stream.pending is not None:
                self._send(sid, stream)
            return
        for waiting, stream in list(self.streams.items()):
            if stream.pending is not None:
                self._send(waiting, stream)

    def _fail(self, sid: int, code: str, message: str) -> None:
        stream = self.streams.pop(sid, None)
        if stream is not None:
            self._forget(stream)
        self._trailers_only(sid, code, message, True)
        self._closed_stream()

    def _trailers_only(self, sid: int, code: str, message: str, request_ended: bool) -> None:
        self.h2.send_headers(sid, (*_RESPONSE_HEADERS, (b"grpc-status", str(STATUS_CODES[code]).encode()),
                                   (b"grpc-message", quote(message, safe=_MESSAGE_SAFE).encode())),
                             end_stream=True)
        if not request_ended:
            # The answer is final: stop the client sending the rest of a request nobody will read.
            self.h2.reset_stream(sid, ErrorCodes.NO_ERROR)

    @staticmethod
    def _forget(stream: _Stream) -> None:
        if stream.timer is not None:
            stream.timer.cancel()
        if stream.task is not None:
            stream.task.cancel()

    def _closed_stream(self) -> None:
        if self.draining and not self.streams:
            self._goaway()

    def drain(self) -> None:
        self.draining = True
        if not self.streams:
            self._goaway()

    def _goaway(self) -> None:
        self.h2.close_connection()
        self._flush()
        self.transport.close()


class GrpcServer:
    """Serves unary ``methods`` (by path, ``/package.Service/Method``) on one listening socket."""

    def __init__(self, methods: Mapping[str, Method], max_message: int) -> None:
        self.methods = {path.encode(): method for path, method in methods.items()}
        self.max_message = max_message
        self.connections: set[_Connection] = set()
        self.draining = False
        self._server: asyncio.Server | None = None
        self._all_closed: asyncio.Event | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = True) -> None:
        """Listen; with ``reuse_port`` every worker binds the same port (SO_REUSEPORT)."""
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self._server = await asyncio.get_running_loop().create_server(lambda: _Connection(self), sock=sock,
                                                                      backlog=2048)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    def connection_closed(self) -> None:
        if self._all_closed is not None and not self.connections:
            self._all_closed.set()

    async def shutdown(self, timeout: float) -> None:
        """Stop accepting, answer the calls in flight (up to ``timeout`` seconds), then close every connection."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        self._all_closed = asyncio.Event()
        for connection in list(self.connections):
            connection.drain()
        if self.connections:
            try:
                await asyncio.wait_for(self._all_closed.wait(), timeout)
            except asyncio.TimeoutError:
                for connection in list(self.connections):
                    connection.transport.abort()
