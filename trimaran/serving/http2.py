"""Unary gRPC over HTTP/2 on an asyncio Protocol, run by the worker's own event loop.

grpc.aio drives a completion queue from a poller thread and hands every event to the loop: for a model that
answers in well under a millisecond that machinery costs more than the request itself (380-520 µs of CPU per
empty call). hyper-h2's general connection state machine, tried first, still cost ~250 µs per call (frame
objects, event objects, state-machine transitions and debug logging for every frame). So the framing here is our
own and does only what a gRPC server needs, with HPACK from ``hpack`` (hyper-h2's header codec): the
response's header blocks are constant bytes encoded once (never indexed, so they leave the peer's table alone),
and a call that needs no waiting is answered in the same pass as the frames that carried it (one write for all
the calls a read completed).

HTTP/2 (RFC 9113) as a server: the preface, SETTINGS (ACKed; the peer's initial window and frame size
honoured), PING, flow control both ways (a response larger than the peer's windows waits for its
WINDOW_UPDATEs; the peer gets ours as its data is read), HEADERS with CONTINUATION, padding and priority,
RST_STREAM both ways, GOAWAY (a protocol error closes the connection with the error's code; draining sends
GOAWAY(NO_ERROR) with the last stream it will answer, finishes those, then closes), MAX_CONCURRENT_STREAMS.

gRPC: unary calls (one length-prefixed message each way); ``grpc-timeout`` is the call's deadline
(DEADLINE_EXCEEDED when a pending call passes it); a compressed message is UNIMPLEMENTED (no encoding is ever
advertised); an unknown method is UNIMPLEMENTED; a body that is not exactly one message is INTERNAL; one over
``max_message`` bytes is RESOURCE_EXHAUSTED; a request that is not gRPC (method, content-type) gets HTTP 405/415.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple
from urllib.parse import quote

from hpack import Decoder, Encoder, HPACKError, NeverIndexedHeaderTuple

from trimaran._aio import within

__all__ = ["GrpcError", "GrpcServer", "Method", "STATUS_CODES"]

log = logging.getLogger("trimaran.serving")

# A method answers the request message's bytes with the response's, now or later (an awaitable).
Method = Callable[[bytes], "bytes | Awaitable[bytes]"]

STATUS_CODES = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
                "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
                "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13,
                "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types and flags (RFC 9113 section 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
# Error codes (section 7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, COMPRESSION_ERROR = 0x6, 0x7, 0x9
# Settings identifiers.
HEADER_TABLE_SIZE, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 0x1, 0x4, 0x5

MAX_STREAMS = 1000
MAX_HEADER_LIST = 64 << 10
FRAME_SIZE = 16384  # the largest frame we accept: the protocol's default, which no client needs raised
# Large receive windows: a tensor of a few MiB arrives without waiting for a WINDOW_UPDATE per 64 KiB.
STREAM_WINDOW = 4 << 20
CONNECTION_WINDOW = 16 << 20
_MAX_WINDOW = (1 << 31) - 1

_FRAME_HEADER = struct.Struct(">IBI")  # (length << 8 | type), flags, stream id
_SETTING = struct.Struct(">HI")
_TIMEOUT = re.compile(rb"([0-9]{1,8})([HMSmun])")
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
# grpc-message is percent-encoded: everything outside printable ASCII, and "%" itself.
_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


def _frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return _FRAME_HEADER.pack(len(payload) << 8 | kind, flags, sid) + payload


def _header_block(*headers: tuple[bytes, bytes]) -> bytes:
    """A block that uses no dynamic table (never-indexed literals), so it can be sent any number of times."""
    return Encoder().encode([NeverIndexedHeaderTuple(name, value) for name, value in headers], huffman=False)


_RESPONSE = _header_block((b":status", b"200"), (b"content-type", b"application/grpc"))
_OK_TRAILERS = _header_block((b"grpc-status", b"0"))
# The first word of those two blocks' HEADERS frames (length << 8 | type).
_RESPONSE_HEAD, _TRAILERS_HEAD = len(_RESPONSE) << 8 | HEADERS, len(_OK_TRAILERS) << 8 | HEADERS
_OUR_SETTINGS = _frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value) for key, value in (
    (0x3, MAX_STREAMS), (INITIAL_WINDOW_SIZE, STREAM_WINDOW), (0x6, MAX_HEADER_LIST))))
_SETTINGS_ACK = _frame(SETTINGS, ACK, 0)
# A table size update to 0: what the peer's lowered SETTINGS_HEADER_TABLE_SIZE asks us to signal (we never
# index anything, so 0 always fits).
_TABLE_SIZE_ZERO = b"\x20"


class GrpcError(Exception):
    """A call's error status: ``code`` is a name of :data:`STATUS_CODES`, ``message`` the client's details."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _ProtocolViolation(Exception):
    """The peer broke the protocol: the connection ends with GOAWAY(code)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Summary(NamedTuple):
    """What a request's headers say that the server acts on."""

    path: bytes
    method: bytes | None
    content_type: bytes | None
    timeout: bytes | None
    encoding: bytes | None


def _summary(headers: list[tuple[bytes, bytes]]) -> _Summary:
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        found[name] = value  # a repeated name: its last value, as before
    return _Summary(found.get(b":path", b""), found.get(b":method"), found.get(b"content-type"),
                    found.get(b"grpc-timeout"), found.get(b"grpc-encoding"))


class _Stream:
    __slots__ = ("path", "body", "timeout", "task", "timer", "pending", "window", "unacked", "refused")

    def __init__(self, window: int) -> None:
        self.path = b""
        self.body: bytearray | None = bytearray()
        self.timeout: float | None = None
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.pending: memoryview | None = None  # response bytes waiting for flow-control window
        self.window = window  # what we may still send on it
        self.unacked = 0  # bytes received and not yet given back with a WINDOW_UPDATE
        self.refused: tuple[str, str] | None = None  # a status decided from the headers, sent when the call ends


class _Connection(asyncio.Protocol):
    def __init__(self, server: GrpcServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.preface = False
        self.out: list[bytes] = []
        self.streams: dict[int, _Stream] = {}
        self.last_stream = 0
        self.decoder = Decoder()
        self.decoder.max_header_list_size = MAX_HEADER_LIST
        # Header blocks already decoded, while the dynamic table they were decoded against is unchanged.
        self.decoded: dict[bytes, _Summary] = {}
        self.table_state = self._table_state()
        self.headers_for: int | None = None  # the stream whose header block continues (CONTINUATION)
        self.header_flags = 0
        self.header_block = bytearray()
        self.send_window = 65535
        self.peer_window = 65535  # the peer's SETTINGS_INITIAL_WINDOW_SIZE: each new stream's send window
        self.peer_frame_size = 16384
        self.unacked = 0
        self.table_size_update = False
        self.draining = False
        self.closed = False

    # --- the connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        self.out.append(_OUR_SETTINGS)
        self.out.append(_frame(WINDOW_UPDATE, 0, 0, (CONNECTION_WINDOW - 65535).to_bytes(4, "big")))
        if self.server.draining:
            self.drain()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for stream in self.streams.values():
            _forget(stream)
        self.streams.clear()
        self.server.connection_closed()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        try:
            if not self.preface:
                if len(buffer) < len(PREFACE):
                    if not PREFACE.startswith(bytes(buffer)):
                        raise _ProtocolViolation(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                    return
                if buffer[:len(PREFACE)] != PREFACE:
                    raise _ProtocolViolation(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                del buffer[:len(PREFACE)]
                self.preface = True
            offset, size = 0, len(buffer)
            while size - offset >= 9:
                head, flags, sid = _FRAME_HEADER.unpack_from(buffer, offset)
                length, kind = head >> 8, head & 0xFF
                if length > FRAME_SIZE:
                    raise _ProtocolViolation(FRAME_SIZE_ERROR, f"a frame of {length} bytes (limit {FRAME_SIZE})")
                if size - offset - 9 < length:
                    break
                payload = bytes(buffer[offset + 9:offset + 9 + length])
                offset += 9 + length
                self._on_frame(kind, flags, sid & 0x7FFFFFFF, payload)
                if self.closed:
                    return
            del buffer[:offset]
        except _ProtocolViolation as exc:
            self._close(exc.code, str(exc))
            return
        self._flush()

    def _flush(self) -> None:
        if self.out and not self.closed:
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def _close(self, code: int, message: str) -> None:
        log.debug("gRPC connection closed: %s", message)
        self.out.append(_frame(GOAWAY, 0, 0, self.last_stream.to_bytes(4, "big") + code.to_bytes(4, "big")
                               + message.encode()[:256]))
        self._flush()
        self.closed = True
        self.transport.close()

    def drain(self) -> None:
        """GOAWAY(NO_ERROR) now: the streams opened so far are answered, later ones refused; close when done."""
        if self.draining or self.closed:
            return
        self.draining = True
        self.out.append(_frame(GOAWAY, 0, 0, self.last_stream.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")))
        self._flush()
        if not self.streams:
            self.closed = True
            self.transport.close()

    def _stream_done(self, sid: int) -> None:
        stream = self.streams.pop(sid, None)
        if stream is not None:
            _forget(stream)
        if self.draining and not self.streams and not self.closed:
            self._flush()
            self.closed = True
            self.transport.close()

    # --- frames in

    def _on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if self.headers_for is not None and kind != CONTINUATION:
            raise _ProtocolViolation(PROTOCOL_ERROR, "a header block was interrupted by another frame")
        if kind == DATA:
            self._data(flags, sid, payload)
        elif kind == HEADERS:
            self._headers(flags, sid, payload)
        elif kind == WINDOW_UPDATE:
            self._window_update(sid, payload)
        elif kind == SETTINGS:
            self._settings(flags, sid, payload)
        elif kind == PING:
            if sid or len(payload) != 8:
                raise _ProtocolViolation(PROTOCOL_ERROR if sid else FRAME_SIZE_ERROR, "malformed PING")
            if not flags & ACK:
                self.out.append(_frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if not sid or len(payload) != 4:
                raise _ProtocolViolation(PROTOCOL_ERROR, "malformed RST_STREAM")
            self._stream_done(sid)
        elif kind == CONTINUATION:
            if sid != self.headers_for:
                raise _ProtocolViolation(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
            self.header_block += payload
            if len(self.header_block) > MAX_HEADER_LIST:
                raise _ProtocolViolation(PROTOCOL_ERROR, "the header block is too large")
            if flags & END_HEADERS:
                self.headers_for = None
                self._header_block(sid, self.header_flags, bytes(self.header_block))
        elif kind == GOAWAY:
            if not self.streams:
                self._flush()
                self.closed = True
                self.transport.close()
        elif kind == PUSH_PROMISE:
            raise _ProtocolViolation(PROTOCOL_ERROR, "a client cannot push")
        elif kind == PRIORITY and not sid:
            raise _ProtocolViolation(PROTOCOL_ERROR, "PRIORITY on stream 0")
        # Other types (PRIORITY, extensions) are ignored, as the protocol asks.

    @staticmethod
    def _unpad(flags: int, payload: bytes) -> bytes:
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                raise _ProtocolViolation(PROTOCOL_ERROR, "padding longer than the frame")
            return payload[1:len(payload) - payload[0]]
        return payload

    def _headers(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid or not sid & 1:
            raise _ProtocolViolation(PROTOCOL_ERROR, f"HEADERS on stream {sid}")
        block = self._unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            block = block[5:]
        if flags & END_HEADERS:
            self._header_block(sid, flags, block)
        else:
            self.headers_for, self.header_flags, self.header_block = sid, flags, bytearray(block)

    def _table_state(self) -> tuple[int, object, int]:
        """What changes whenever the decoder's dynamic table does: hpack adds each entry as a new tuple (so the
        newest entry's identity changes even when an equal one replaces the oldest), a size update changes
        the size."""
        table = self.decoder.header_table
        entries = table.dynamic_entries
        return len(entries), id(entries[0]) if entries else 0, table.maxsize

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        # A client sends the same block call after call (HPACK indexes what repeats): decoding it again, in
        # Python, would be a third of the connection's work. A block that refers to an unchanged table and
        # did not change it decodes the same, so it is kept; any change of the table forgets them all.
        summary = self.decoded.get(block)
        if summary is None:
            try:
                summary = _summary(self.decoder.decode(block, raw=True))
            except HPACKError as exc:
                raise _ProtocolViolation(COMPRESSION_ERROR, f"bad header block: {exc}") from None
            state = self._table_state()
            if state != self.table_state:
                self.decoded.clear()
                self.table_state = state
            elif len(self.decoded) < 64:
                self.decoded[block] = summary
        stream = self.streams.get(sid)
        if stream is not None:  # trailers (a unary client sends none, but may): they only end the request
            if not flags & END_STREAM:
                raise _ProtocolViolation(PROTOCOL_ERROR, "trailers without END_STREAM")
            self._ended(sid, stream)
            return
        if sid <= self.last_stream:
            raise _ProtocolViolation(PROTOCOL_ERROR, f"HEADERS on closed stream {sid}")
        self.last_stream = sid
        if self.draining or len(self.streams) >= MAX_STREAMS:
            self.out.append(_frame(RST_STREAM, 0, sid, REFUSED_STREAM.to_bytes(4, "big")))
            return
        self._request(sid, flags, summary)

    def _request(self, sid: int, flags: int, summary: _Summary) -> None:
        stream = _Stream(self.peer_window)
        stream.path, method, content_type, timeout, encoding = summary
        ended = bool(flags & END_STREAM)
        if method != b"POST" or content_type is None or not content_type.startswith(b"application/grpc"):
            # Not a gRPC call: the HTTP answer gRPC's spec asks for (clients map it to a status themselves).
            status = b"405" if method != b"POST" else b"415"
            self.out.append(self._header_frame(sid, _header_block((b":status", status)), True))
            if not ended:
                self.out.append(_frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big")))
            return
        self.streams[sid] = stream
        if timeout is not None:
            match = _TIMEOUT.fullmatch(timeout)
            if match is None:
                stream.refused = ("INVALID_ARGUMENT", f"malformed grpc-timeout {timeout.decode('latin-1')!r}")
            else:
                stream.timeout = int(match.group(1)) * _TIMEOUT_UNITS[match.group(2)]
        if encoding not in (None, b"identity"):
            stream.refused = ("UNIMPLEMENTED", f"grpc-encoding {encoding.decode('latin-1')} is not supported: "
                                               "send messages uncompressed")
        if ended:
            self._ended(sid, stream)

    def _data(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid:
            raise _ProtocolViolation(PROTOCOL_ERROR, "DATA on stream 0")
        if sid > self.last_stream:
            raise _ProtocolViolation(PROTOCOL_ERROR, f"DATA on idle stream {sid}")
        # Flow control counts the whole frame, padding included; the window is given back as data is read,
        # so a message's size is bounded by max_message, not by the window.
        self.unacked += len(payload)
        if self.unacked >= CONNECTION_WINDOW // 2:
            self.out.append(_frame(WINDOW_UPDATE, 0, 0, self.unacked.to_bytes(4, "big")))
            self.unacked = 0
        stream = self.streams.get(sid)
        if stream is None or stream.body is None:
            return  # a stream already answered or reset: its data is dropped
        stream.body += self._unpad(flags, payload)
        if len(stream.body) > self.server.max_message + 5:
            self._trailers_only(sid, "RESOURCE_EXHAUSTED",
                                f"the request is larger than the limit of {self.server.max_message} bytes")
            self.out.append(_frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big")))
            self._stream_done(sid)
            return
        if flags & END_STREAM:
            self._ended(sid, stream)
            return
        stream.unacked += len(payload)
        if stream.unacked >= STREAM_WINDOW // 2:
            self.out.append(_frame(WINDOW_UPDATE, 0, sid, stream.unacked.to_bytes(4, "big")))
            stream.unacked = 0

    def _window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ProtocolViolation(FRAME_SIZE_ERROR, "malformed WINDOW_UPDATE")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not sid:
            if not increment:
                raise _ProtocolViolation(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > _MAX_WINDOW:
                raise _ProtocolViolation(FLOW_CONTROL_ERROR, "the connection window overflowed")
            for waiting, stream in list(self.streams.items()):
                if stream.pending is not None:
                    self._send(waiting, stream)
            return
        stream = self.streams.get(sid)
        if stream is None:
            return
        if not increment or stream.window + increment > _MAX_WINDOW:
            self.out.append(_frame(RST_STREAM, 0, sid, (PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR)
                                   .to_bytes(4, "big")))
            self._stream_done(sid)
            return
        stream.window += increment
        if stream.pending is not None:
            self._send(sid, stream)

    def _settings(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise _ProtocolViolation(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise _ProtocolViolation(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise _ProtocolViolation(FRAME_SIZE_ERROR, "malformed SETTINGS")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise _ProtocolViolation(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE too large")
                delta, self.peer_window = value - self.peer_window, value
                for stream in self.streams.values():
                    stream.window += delta
            elif key == MAX_FRAME_SIZE:
                if not 16384 <= value <= 16777215:
                    raise _ProtocolViolation(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                self.peer_frame_size = value
            elif key == HEADER_TABLE_SIZE:
                self.table_size_update = True
        self.out.append(_SETTINGS_ACK)
        for waiting, stream in list(self.streams.items()):  # a larger initial window may free pending data
            if stream.pending is not None:
                self._send(waiting, stream)

    # --- calls

    def _ended(self, sid: int, stream: _Stream) -> None:
        if stream.task is not None or stream.body is None:
            return
        body = stream.body
        stream.body = None
        method = self.server.methods.get(stream.path)
        if method is None:
            self._fail(sid, "UNIMPLEMENTED", f"Method not found: {stream.path.decode('latin-1')}")
            return
        if stream.refused is not None:
            self._fail(sid, *stream.refused)
            return
        if len(body) >= 5 and body[0] & 1:
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
            self._respond(sid, stream, result)
            return
        loop = asyncio.get_running_loop()
        stream.task = loop.create_task(self._finish(sid, stream, result))  # type: ignore[arg-type]
        if stream.timeout is not None:
            stream.timer = loop.call_later(stream.timeout, self._expire, sid)

    async def _finish(self, sid: int, stream: _Stream, pending: Awaitable[bytes]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            return  # reset by the client, past its deadline, or the connection is gone: nobody to answer
        except Exception as exc:
            stream.task = None  # finishing: closing its stream must not cancel it
            if isinstance(exc, GrpcError):
                self._fail(sid, exc.code, exc.message)
            else:
                log.exception("gRPC method %s failed", stream.path.decode("latin-1"))
                self._fail(sid, "INTERNAL", "the server failed to answer (see its log)")
        else:
            stream.task = None
            self._respond(sid, stream, response)
        self._flush()

    def _expire(self, sid: int) -> None:
        if sid in self.streams:
            self.streams[sid].timer = None
            self._fail(sid, "DEADLINE_EXCEEDED", "Deadline Exceeded")
            self._flush()

    def _header_frame(self, sid: int, block: bytes, end_stream: bool) -> bytes:
        if self.table_size_update:
            self.table_size_update = False
            block = _TABLE_SIZE_ZERO + block
        return _frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block)

    def _respond(self, sid: int, stream: _Stream, message: bytes) -> None:
        if self.streams.get(sid) is not stream:
            return
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None
        size = len(message) + 5
        if (size <= stream.window and size <= self.send_window and size <= self.peer_frame_size
                and not self.table_size_update):
            # The usual case: headers, one DATA frame and the trailers, no copy of the message beyond the join.
            stream.window -= size
            self.send_window -= size
            pack = _FRAME_HEADER.pack
            self.out += (pack(_RESPONSE_HEAD, END_HEADERS, sid), _RESPONSE,
                         pack(size << 8 | DATA, 0, sid), b"\x00", (size - 5).to_bytes(4, "big"), message,
                         pack(_TRAILERS_HEAD, END_HEADERS | END_STREAM, sid), _OK_TRAILERS)
            self._stream_done(sid)
            return
        self.out.append(self._header_frame(sid, _RESPONSE, False))
        stream.pending = memoryview(b"\x00" + len(message).to_bytes(4, "big") + message)
        self._send(sid, stream)

    def _send(self, sid: int, stream: _Stream) -> None:
        """Send as much of the response as the windows allow; the trailers once it is all out."""
        pending = stream.pending
        while pending:
            size = min(stream.window, self.send_window, self.peer_frame_size, len(pending))
            if size <= 0:
                stream.pending = pending
                return  # the rest goes when a WINDOW_UPDATE (or SETTINGS) opens the window
            self.out.append(_frame(DATA, 0, sid, pending[:size].tobytes()))
            stream.window -= size
            self.send_window -= size
            pending = pending[size:]
        stream.pending = None
        self.out.append(self._header_frame(sid, _OK_TRAILERS, True))
        self._stream_done(sid)

    def _fail(self, sid: int, code: str, message: str) -> None:
        ended = self.streams.get(sid)
        self._trailers_only(sid, code, message)
        if ended is not None and ended.body is not None:
            # The answer is final: stop the client sending the rest of a request nobody will read.
            self.out.append(_frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big")))
        self._stream_done(sid)

    def _trailers_only(self, sid: int, code: str, message: str) -> None:
        block = _header_block((b":status", b"200"), (b"content-type", b"application/grpc"),
                              (b"grpc-status", str(STATUS_CODES[code]).encode()),
                              (b"grpc-message", quote(message[:4096], safe=_MESSAGE_SAFE).encode()))
        self.out.append(self._header_frame(sid, block, True))


def _forget(stream: _Stream) -> None:
    if stream.timer is not None:
        stream.timer.cancel()
        stream.timer = None
    if stream.task is not None:
        stream.task.cancel()
        stream.task = None


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
                await within(self._all_closed.wait(), timeout)
            except asyncio.TimeoutError:
                for connection in list(self.connections):
                    connection.transport.abort()
