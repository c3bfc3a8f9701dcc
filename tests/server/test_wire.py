"""The streaming verbs' framings on their own (server/kube/wire.py): WebSocket frames split anywhere,
fragmented and masked, control frames answered; a SPDY/3.1 session's streams, header blocks, data
and pings, byte by byte as a peer sends them. kubectl and the ``kubernetes`` client drive the same
code end to end in test_streaming.py."""

from __future__ import annotations

import os
import struct
import zlib

from trimaran.server.kube import wire


class _Transport:
    def __init__(self) -> None:
        self.out = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: list[bytes]) -> None:
        self.out += b"".join(parts)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_the_accept_key_is_rfc_6455s() -> None:
    assert wire.websocket_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_websocket_messages_fragmented_masked_and_split_anywhere() -> None:
    got: list[tuple[int, bytes]] = []
    ended: list[bool] = []
    ws = wire.WebSocket(lambda op, data: got.append((op, bytes(data))), lambda: ended.append(True))
    transport = _Transport()
    ws.connection_made(transport)  # type: ignore[arg-type]
    big = os.urandom(70_000)
    stream = (_client_frame(wire.OP_BINARY, b"\x00hel", fin=False) + _client_frame(wire.OP_PING, b"hi")
              + _client_frame(wire.OP_CONT, b"lo") + _client_frame(wire.OP_BINARY, big)
              + _client_frame(wire.OP_TEXT, b"1aGk="))
    for i in range(0, len(stream), 7):  # seven bytes at a time
        ws.data_received(stream[i:i + 7])
    assert got == [(wire.OP_BINARY, b"\x00hello"), (wire.OP_BINARY, big), (wire.OP_TEXT, b"1aGk=")]
    assert transport.out == bytes([0x80 | wire.OP_PONG, 2]) + b"hi"  # the ping answered, unmasked
    ws.send(b"\x01out")
    assert transport.out.endswith(bytes([0x82, 4]) + b"\x01out")
    ws.data_received(_client_frame(wire.OP_CLOSE, struct.pack("!H", 1000)))
    assert transport.out.endswith(bytes([0x88, 2]) + struct.pack("!H", 1000)) and transport.closed
    assert ended == [True]


def test_a_tunnel_hands_on_the_messages_of_one_read_as_one() -> None:
    got: list[bytes] = []
    ws = wire.WebSocket(lambda op, data: got.append(bytes(data)), lambda: None, stream=True)
    ws.connection_made(_Transport())  # type: ignore[arg-type]
    ws.data_received(_client_frame(wire.OP_BINARY, b"abc") + _client_frame(wire.OP_BINARY, b"def"))
    assert got == [b"abcdef"]


def _syn_stream(deflate: zlib._Compress, stream_id: int, headers: dict[str, str], fin: bool = False) -> bytes:
    block = len(headers).to_bytes(4, "big")
    for name, value in headers.items():
        for text in (name, value):
            block += len(text).to_bytes(4, "big") + text.encode()
    compressed = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    payload = struct.pack("!IIH", stream_id, 0, 0) + compressed
    return struct.pack("!HHI", 0x8003, 1, ((1 if fin else 0) << 24) | len(payload)) + payload


def test_a_spdy_session_answers_streams_and_pings_and_carries_data() -> None:
    written: list[bytes] = []
    streams: list[wire.SpdyStream] = []
    data: list[bytes | None] = []
    session = wire.SpdySession(lambda head, payload: written.append(bytes(head) + bytes(payload)),
                               lambda s: (streams.append(s), s.listen(data.append)), lambda: None)
    deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=wire.SPDY_DICTIONARY)
    frames = (_syn_stream(deflate, 1, {"streamtype": "error", "port": "80", "requestid": "0"})
              + _syn_stream(deflate, 3, {"streamtype": "data", "port": "80", "requestid": "0"})
              + struct.pack("!II", 3, 5) + b"hello" + struct.pack("!II", 3, 1 << 24)
              + struct.pack("!HHI", 0x8003, 6, 4) + b"\x00\x00\x00\x07")
    for i in range(0, len(frames), 5):
        session.feed(frames[i:i + 5])
    assert [s.headers["streamtype"] for s in streams] == ["error", "data"]
    assert streams[1].headers == {"streamtype": "data", "port": "80", "requestid": "0"}
    assert data == [b"hello", None]  # the data stream's bytes, then its FIN
    inflate = zlib.decompressobj(zdict=wire.SPDY_DICTIONARY)
    replies = [w for w in written if w[:4] == b"\x80\x03\x00\x02"]
    assert [int.from_bytes(r[8:12], "big") for r in replies] == [1, 3]
    assert inflate.decompress(replies[0][12:]) == b"\x00\x00\x00\x00"  # SYN_REPLY, no headers
    assert written[-1] == struct.pack("!HHI", 0x8003, 6, 4) + b"\x00\x00\x00\x07"  # the ping echoed
    streams[1].write(b"x" * 10, fin=True)
    assert written[-1] == struct.pack("!II", 3, (1 << 24) | 10) + b"x" * 10
