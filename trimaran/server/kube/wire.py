"""The two framings kubectl's streaming verbs travel in, each on a connection taken over from HTTP:

* ``WebSocket`` (RFC 6455), server side: frames in and out, ping answered, close answered;
* ``SpdySession`` (SPDY/3.1 as Kubernetes uses it, through moby/spdystream): streams opened by
  the client (``SYN_STREAM``, answered by ``SYN_REPLY``), data frames with FIN, RST_STREAM, PING
  and GOAWAY. Header blocks are zlib streams with SPDY/3's dictionary, one per direction.
  spdystream has no flow control (it neither sends nor reads WINDOW_UPDATE), so neither has this.
  A session reads bytes from whatever carries it (``feed``) and writes through a callable, so it
  runs as well on the raw connection (SPDY's ``Upgrade: SPDY/3.1``) as inside WebSocket binary
  messages (kubectl 1.31+'s ``SPDY/3.1+portforward.k8s.io`` tunnel).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import zlib
from collections.abc import Callable
from typing import Any

from trimaran.server.connections import TakenConnection

__all__ = ["SpdyConnection", "SpdySession", "SpdyStream", "WebSocket", "websocket_accept"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
_MAX_MESSAGE = 64 * 1024 * 1024  # a message past this is a broken or hostile client


def websocket_accept(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


_numpy: Any = None  # numpy where installed (the serve extra), imported at the first large frame


def _unmask(data: bytes | bytearray | memoryview, mask: bytes) -> bytes | bytearray:
    """A client's frame unmasked. numpy XORs 8 bytes at a time in place at ~9 GB/s; without it one
    big-integer XOR does ~0.6 GB/s (a Python loop over bytes would hold port-forward to a few MB/s)."""
    global _numpy
    n = len(data)
    if n == 0:
        return b""
    if n >= 4096:
        if _numpy is None:
            try:
                import numpy
                _numpy = numpy
            except ImportError:
                _numpy = False
        if _numpy:
            out = bytearray(data)
            whole = n - n % 8
            words = _numpy.frombuffer(out, dtype=_numpy.uint64, count=whole // 8)
            words ^= _numpy.frombuffer(mask * 2, dtype=_numpy.uint64)[0]
            for i in range(whole, n):
                out[i] ^= mask[i % 4]
            return out
    key_bytes = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key_bytes, "little")).to_bytes(n, "little")


def _frame_header(opcode: int, length: int) -> bytes:
    if length < 126:
        return bytes((0x80 | opcode, length))
    if length < 65536:
        return struct.pack("!BBH", 0x80 | opcode, 126, length)
    return struct.pack("!BBQ", 0x80 | opcode, 127, length)


class _Writer(TakenConnection):
    """Writes with back-pressure: ``drain`` waits while the transport's buffer is full."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        if not self._writable.is_set() and not self.closed.is_set():
            waiter = asyncio.ensure_future(self._writable.wait())
            closed = asyncio.ensure_future(self.closed.wait())
            await asyncio.wait((waiter, closed), return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            closed.cancel()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        self._writable.set()
        super().connection_lost(exc)


class WebSocket(_Writer):
    """One WebSocket connection's frames. ``on_message(opcode, payload)`` gets each whole text or
    binary message; ``on_end()`` once, when the peer closes or the connection is lost."""

    def __init__(self, on_message: Callable[[int, bytes], None], on_end: Callable[[], None], *,
                 stream: bool = False) -> None:
        """``stream``: the messages are pieces of one byte stream (a tunnel), so those that arrive
        together are handed on as one (kubectl sends each SPDY frame's header as a message of its own)."""
        super().__init__()
        self.on_message = on_message
        self.on_end = on_end
        self.stream = stream
        self._batch: list[bytes] | None = None
        self._buffer = bytearray()
        self._parts: list[bytes] = []
        self._opcode = 0
        self._sent_close = False
        self._ended = False

    def data_received(self, data: bytes) -> None:
        if self.stream:
            self._batch = []
        try:
            self._parse(data)
        finally:
            batch, self._batch = self._batch, None
            if batch:
                self.on_message(OP_BINARY, batch[0] if len(batch) == 1 else b"".join(batch))

    def _parse(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            length = second & 0x7F
            head = 2
            if length == 126:
                if end - pos < 4:
                    break
                length = int.from_bytes(buf[pos + 2:pos + 4], "big")
                head = 4
            elif length == 127:
                if end - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2:pos + 10], "big")
                head = 10
            masked = second & 0x80
            if length > _MAX_MESSAGE:
                self.close(1009)
                return
            total = head + (4 if masked else 0) + length
            if end - pos < total:
                break
            view = memoryview(buf)[pos + head + (4 if masked else 0):pos + total]
            if masked:
                payload = bytes(_unmask(view, bytes(buf[pos + head:pos + head + 4]))) if len(view) < 4096 \
                    else _unmask(view, bytes(buf[pos + head:pos + head + 4]))
            else:
                payload = bytes(view)
            view.release()
            pos += total
            self._frame(first & 0x80, first & 0x0F, payload)  # type: ignore[arg-type]
            if self.transport is None or self.transport.is_closing():
                break
        del buf[:pos]

    def _frame(self, fin: int, opcode: int, payload: bytes) -> None:
        if opcode == OP_PING:
            self._write(OP_PONG, payload)
        elif opcode == OP_PONG:
            pass
        elif opcode == OP_CLOSE:
            self.close(int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1000)
        else:
            if opcode != OP_CONT:
                self._opcode = opcode
                self._parts = []
            self._parts.append(payload)
            if sum(len(p) for p in self._parts) > _MAX_MESSAGE:
                self.close(1009)
            elif fin:
                message = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
                self._parts = []
                if self._batch is not None and self._opcode == OP_BINARY:
                    self._batch.append(message)
                else:
                    self.on_message(self._opcode, message)

    def _write(self, opcode: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if len(payload) < 4096:
                self.transport.write(_frame_header(opcode, len(payload)) + payload)
            else:
                self.transport.writelines((_frame_header(opcode, len(payload)), payload))

    def send(self, payload: bytes, opcode: int = OP_BINARY) -> None:
        if not self._sent_close:
            self._write(opcode, payload)

    def send_parts(self, head: bytes, payload: bytes) -> None:
        """One binary message of ``head + payload``, without joining them first."""
        if not self._sent_close and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines((_frame_header(OP_BINARY, len(head) + len(payload)), head, payload))

    def close(self, code: int = 1000) -> None:
        """Send a close frame (once) and close the connection once it is written."""
        if not self._sent_close:
            self._sent_close = True
            self._write(OP_CLOSE, struct.pack("!H", code))
        if self.transport is not None:
            self.transport.close()
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self.on_end()

    def shutdown(self) -> None:
        self.close(1001)  # going away

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._end()


# -- SPDY/3.1 ------------------------------------------------------------------------------

# SPDY/3's header dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): header names each with a
# 4-byte length, then a run of common values.
_DICT_NAMES = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges "
    "age allow authorization cache-control connection content-base content-encoding content-language "
    "content-length content-location content-md5 content-range content-type date etag expect expires from "
    "host if-match if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after server te trailer "
    "transfer-encoding upgrade user-agent vary via warning www-authenticate method get status").split() + [
    "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
SPDY_DICTIONARY = b"".join(len(n).to_bytes(4, "big") + n.encode() for n in _DICT_NAMES) + _DICT_TAIL.encode()

_SYN_STREAM, _SYN_REPLY, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _HEADERS, _WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
_FLAG_FIN = 0x01
_MAX_DATA = 1024 * 1024  # bytes per data frame (spdystream reads any up to 16 MiB; reads are 256 KiB)


def spdy_headers(block: bytes) -> dict[str, str]:
    """A decompressed SPDY/3 header block as a dict (names lowercase; repeated values joined by NUL)."""
    count = int.from_bytes(block[:4], "big")
    pos, headers = 4, {}
    for _ in range(count):
        n = int.from_bytes(block[pos:pos + 4], "big")
        name = block[pos + 4:pos + 4 + n].decode("latin-1")
        pos += 4 + n
        n = int.from_bytes(block[pos:pos + 4], "big")
        headers[name.lower()] = block[pos + 4:pos + 4 + n].decode("latin-1")
        pos += 4 + n
    return headers


def _header_block(headers: dict[str, str]) -> bytes:
    out = [len(headers).to_bytes(4, "big")]
    for name, value in headers.items():
        for text in (name.lower(), value):
            raw = text.encode("latin-1")
            out.append(len(raw).to_bytes(4, "big") + raw)
    return b"".join(out)


class SpdyStream:
    """One client-opened stream. ``on_data(bytes)`` gets its data, ``on_data(None)`` once when the
    client finished (FIN) or reset it."""

    def __init__(self, session: SpdySession, stream_id: int, headers: dict[str, str], remote_fin: bool) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self.on_data: Callable[[bytes | None], None] | None = None
        self.pending: list[bytes | None] = [None] if remote_fin else []
        self.finished = False  # our side sent FIN (or the client reset the stream)

    def deliver(self, data: bytes | None) -> None:
        if self.on_data is None:
            self.pending.append(data)
        else:
            self.on_data(data)

    def listen(self, on_data: Callable[[bytes | None], None]) -> None:
        self.on_data = on_data
        pending, self.pending = self.pending, []
        for item in pending:
            on_data(item)

    def write(self, data: bytes, fin: bool = False) -> None:
        if self.finished:
            return
        if len(data) <= _MAX_DATA:
            if data or fin:
                self.session.write_data(self.id, data, fin)
        else:
            view = memoryview(data)
            for start in range(0, len(data), _MAX_DATA):
                last = fin and start + _MAX_DATA >= len(data)
                self.session.write_data(self.id, bytes(view[start:start + _MAX_DATA]), last)
        if fin:
            self.finished = True

    def close(self) -> None:
        """Our half: FIN (the client's reader sees EOF)."""
        self.write(b"", fin=True)


class SpdySession:
    """A SPDY/3.1 server session over bytes: ``feed`` what arrives, ``write`` what it sends.
    ``on_stream(stream)`` is called for each stream the client opens, after it was answered."""

    def __init__(self, write: Callable[[bytes, bytes], None], on_stream: Callable[[SpdyStream], None],
                 on_end: Callable[[], None]) -> None:
        self._write = write  # (frame header, payload): written as one, without joining them here
        self.on_stream = on_stream
        self.on_end = on_end
        self.streams: dict[int, SpdyStream] = {}
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=SPDY_DICTIONARY)
        self._deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=SPDY_DICTIONARY)
        self._ended = False

    def feed(self, data: bytes | bytearray) -> None:
        # Frames that arrive whole are read from ``data`` itself; only a partial one is kept.
        if self._buffer:
            self._buffer += data
            buf: bytes | bytearray = self._buffer
        else:
            buf = data
        pos, end = 0, len(buf)
        while end - pos >= 8 and not self._ended:
            length = int.from_bytes(buf[pos + 5:pos + 8], "big")
            if end - pos < 8 + length:
                break
            flags = buf[pos + 4]
            payload = bytes(buf[pos + 8:pos + 8 + length])
            if buf[pos] & 0x80:
                kind = int.from_bytes(buf[pos + 2:pos + 4], "big")
                self._control(kind, flags, payload)
            else:
                stream_id = int.from_bytes(buf[pos:pos + 4], "big") & 0x7FFFFFFF
                stream = self.streams.get(stream_id)
                if stream is not None:
                    if payload:
                        stream.deliver(payload)
                    if flags & _FLAG_FIN:
                        stream.deliver(None)
            pos += 8 + length
        if buf is self._buffer:
            del self._buffer[:pos]
        else:
            self._buffer = bytearray(buf[pos:])

    def _control(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == _SYN_STREAM:
            stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            headers = spdy_headers(self._inflate.decompress(payload[10:]))
            stream = SpdyStream(self, stream_id, headers, bool(flags & _FLAG_FIN))
            self.streams[stream_id] = stream
            block = self._deflate.compress(_header_block({})) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            self.write_control(_SYN_REPLY, 0, stream_id.to_bytes(4, "big") + block)
            self.on_stream(stream)
        elif kind == _HEADERS:
            self._inflate.decompress(payload[4:])  # keeps the zlib stream in step; nothing to use
        elif kind == _RST_STREAM:
            stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                stream.finished = True
                stream.deliver(None)
        elif kind == _PING:
            self.write_control(_PING, 0, payload[:4])
        elif kind == _GOAWAY:
            self.end()
        # SETTINGS, WINDOW_UPDATE and anything newer: spdystream's peers need no answer.

    def write_control(self, kind: int, flags: int, payload: bytes) -> None:
        if not self._ended:
            self._write(struct.pack("!HHI", 0x8003, kind, (flags << 24) | len(payload)), payload)

    def write_data(self, stream_id: int, data: bytes, fin: bool) -> None:
        if not self._ended:
            self._write(struct.pack("!II", stream_id, ((_FLAG_FIN if fin else 0) << 24) | len(data)), data)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            for stream in list(self.streams.values()):
                stream.deliver(None)
            self.on_end()


class SpdyConnection(_Writer):
    """A SPDY session on a connection of its own (``Upgrade: SPDY/3.1``)."""

    def __init__(self, on_stream: Callable[[SpdyStream], None], on_end: Callable[[], None]) -> None:
        super().__init__()
        self.session = SpdySession(self._send, on_stream, on_end)

    def _send(self, head: bytes, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines((head, payload))

    def data_received(self, data: bytes) -> None:
        self.session.feed(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.session.end()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.session.end()
