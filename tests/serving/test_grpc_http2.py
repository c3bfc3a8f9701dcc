"""The gRPC-over-HTTP/2 server (trimaran/serving/http2.py) in-process on its own loop, with grpcio clients, and a
raw HTTP/2 client (hpack and frames by hand) for what grpcio never sends: a server-side deadline it does not also
enforce itself, compressed or malformed messages, broken frames, a connection dropped mid-request."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from hpack import Decoder, Encoder

from tests.helpers import poll
from trimaran.serving import http2
from trimaran.serving.http2 import DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PREFACE, SETTINGS, GrpcServer

ECHO, SLOW = "/test.Echo/Echo", "/test.Echo/Slow"
_HEADER = struct.Struct(">IBI")


class Harness:
    def __init__(self) -> None:
        self.started: list[bytes] = []  # the Slow calls begun
        self.cancelled: list[bytes] = []  # the Slow calls whose coroutine was cancelled
        self.loop = asyncio.new_event_loop()
        self.server = GrpcServer({ECHO: lambda data: data, SLOW: self.slow}, max_message=8 << 20)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def slow(self, data: bytes) -> object:
        """Answers its request after sleeping as many seconds as it says."""
        async def later() -> bytes:
            self.started.append(data)
            try:
                await asyncio.sleep(float(data))
            except asyncio.CancelledError:
                self.cancelled.append(data)
                raise
            return data
        return later()

    def run(self, coroutine: object, timeout: float = 30) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    harness = Harness()
    harness.thread.start()
    harness.run(harness.server.start("127.0.0.1", 0, reuse_port=False))
    harness.address = f"127.0.0.1:{harness.server.port}"
    yield harness
    harness.run(harness.server.shutdown(2))
    harness.loop.call_soon_threadsafe(harness.loop.stop)
    harness.thread.join(10)
    harness.loop.close()


@pytest.fixture
def channel(harness: Harness) -> Iterator[grpc.Channel]:
    options = [("grpc.max_receive_message_length", 16 << 20), ("grpc.max_send_message_length", 16 << 20)]
    with grpc.insecure_channel(harness.address, options=options) as channel:
        yield channel


class RawClient:
    """HTTP/2 by hand: frames in and out, headers through hpack."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # HEADERS and DATA go at once
        self.encoder, self.decoder = Encoder(), Decoder()
        self.buffer = b""
        self.sock.sendall(PREFACE + _HEADER.pack(0 << 8 | SETTINGS, 0, 0))

    def send(self, kind: int, flags: int, sid: int, payload: bytes = b"") -> None:
        self.sock.sendall(_HEADER.pack(len(payload) << 8 | kind, flags, sid) + payload)

    def start(self, sid: int, path: str, timeout: str | None = None, end: bool = False,
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "test"),
                   ("content-type", "application/grpc"), ("te", "trailers"), *extra]
        if timeout:
            headers.append(("grpc-timeout", timeout))
        self.send(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, self.encoder.encode(headers))

    def call(self, sid: int, path: str, body: bytes, timeout: str | None = None,
             extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
        self.start(sid, path, timeout, extra=extra)
        self.send(DATA, END_STREAM, sid, body)
        return self.answer(sid)

    def frame(self) -> tuple[int, int, int, bytes] | None:
        while len(self.buffer) < 9 or len(self.buffer) < 9 + (_HEADER.unpack_from(self.buffer)[0] >> 8):
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        head, flags, sid = _HEADER.unpack_from(self.buffer)
        payload, self.buffer = self.buffer[9:9 + (head >> 8)], self.buffer[9 + (head >> 8):]
        return head & 0xFF, flags, sid, payload

    def answer(self, sid: int) -> dict[str, str]:
        """The headers and trailers of stream ``sid`` once it ends (other streams' frames are skipped)."""
        found: dict[str, str] = {}
        while (frame := self.frame()) is not None:
            kind, flags, stream, payload = frame
            if kind == HEADERS and stream == sid:
                found.update((k.decode(), v.decode()) for k, v in self.decoder.decode(payload, raw=True))
            if stream == sid and flags & END_STREAM:
                return found
        raise AssertionError(f"the connection closed before stream {sid} ended: {found}")

    def close(self) -> None:
        self.sock.close()


def framed(message: bytes, compressed: bool = False) -> bytes:
    return bytes([1 if compressed else 0]) + len(message).to_bytes(4, "big") + message


def test_messages_larger_than_the_windows_cross_in_many_frames(harness: Harness) -> None:
    """The client keeps HTTP/2's default 64 KiB window and 16 KiB frames (no BDP probing): a 5 MiB answer goes in
    ~320 DATA frames, waiting for the client's WINDOW_UPDATEs; the request passes our 4 MiB stream window."""
    options = [("grpc.max_receive_message_length", 16 << 20), ("grpc.max_send_message_length", 16 << 20),
               ("grpc.http2.bdp_probe", 0), ("grpc.http2.max_frame_size", 16384)]
    message = bytes(range(256)) * (5 * 4096 + 7)
    with grpc.insecure_channel(harness.address, options=options) as channel:
        assert channel.unary_unary(ECHO)(message, timeout=30) == message
        assert channel.unary_unary(ECHO)(b"", timeout=30) == b""


def test_many_concurrent_streams_on_one_connection(harness: Harness, channel: grpc.Channel) -> None:
    slow, echo = channel.unary_unary(SLOW), channel.unary_unary(ECHO)
    started = time.monotonic()
    waits = [slow.future(b"0.5", timeout=30) for _ in range(100)]
    echoes = [echo.future(str(i).encode(), timeout=30) for i in range(300)]
    assert [f.result(timeout=30) for f in echoes] == [str(i).encode() for i in range(300)]
    assert all(f.result(timeout=30) == b"0.5" for f in waits)
    assert time.monotonic() - started < 10, "the calls ran one after another, not side by side"


def test_grpc_timeout_is_the_servers_deadline(harness: Harness, channel: grpc.Channel) -> None:
    client = RawClient(harness.server.port)
    try:
        started = time.monotonic()
        trailers = client.call(1, SLOW, framed(b"30"), timeout="300m")
        assert trailers["grpc-status"] == "4" and "Deadline" in trailers["grpc-message"]
        assert time.monotonic() - started < 10
        poll(lambda: b"30" in harness.cancelled, what="the call past its deadline cancelled")
        assert client.call(3, SLOW, framed(b"0"), timeout="0n")["grpc-status"] == "4"
        assert client.call(5, SLOW, framed(b"0"), timeout="soon")["grpc-status"] == "3"
    finally:
        client.close()
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(SLOW)(b"20", timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_unknown_methods_and_malformed_messages_are_refused(harness: Harness, channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/test.Echo/Nope")(b"x", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED and "/test.Echo/Nope" in info.value.details()
    client = RawClient(harness.server.port)
    try:
        answer = client.call(1, ECHO, framed(b"zipped", compressed=True))
        assert answer["grpc-status"] == "12" and "compressed" in answer["grpc-message"]
        answer = client.call(3, ECHO, framed(b"abc")[:-1])
        assert answer["grpc-status"] == "13" and "length-prefixed" in answer["grpc-message"]
        client.send(HEADERS, END_HEADERS | END_STREAM, 5, client.encoder.encode(
            [(":method", "GET"), (":scheme", "http"), (":path", ECHO), (":authority", "test")]))
        assert client.answer(5) == {":status": "405"}
        client.send(SETTINGS, 0, 0, b"\x00\x04\x00")  # a SETTINGS entry is 6 bytes
        frames = iter(client.frame, None)
        goaway = next(f for f in frames if f[0] == GOAWAY)
        assert int.from_bytes(goaway[3][4:8], "big") == http2.FRAME_SIZE_ERROR
        assert client.frame() is None  # and the connection is closed
    finally:
        client.close()
    assert channel.unary_unary(ECHO)(b"still here", timeout=10) == b"still here"


def test_a_client_leaving_mid_call_leaves_the_server_serving(harness: Harness, channel: grpc.Channel) -> None:
    client = RawClient(harness.server.port)
    client.start(1, ECHO)
    client.send(DATA, 0, 1, framed(b"never finished")[:8])
    client.start(3, SLOW)
    client.send(DATA, END_STREAM, 3, framed(b"25"))
    poll(lambda: b"25" in harness.started, what="the slow call running")
    client.close()
    poll(lambda: b"25" in harness.cancelled, what="the call of the closed connection cancelled")
    assert channel.unary_unary(ECHO)(b"next", timeout=10) == b"next"


def test_shutdown_answers_calls_in_flight_then_closes(harness: Harness) -> None:
    """A server of its own on the harness's loop: shutdown sends GOAWAY, finishes the call it had, stops listening."""
    server = GrpcServer({SLOW: harness.slow}, max_message=1 << 20)
    harness.run(server.start("127.0.0.1", 0, reuse_port=False))
    port = server.port
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(SLOW).future(b"0.45", timeout=30)
        poll(lambda: harness.started.count(b"0.45") >= 1, what="the call running")
        stopping = asyncio.run_coroutine_threadsafe(server.shutdown(10), harness.loop)
        assert call.result(timeout=30) == b"0.45"
        stopping.result(timeout=30)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_repeated_header_blocks_follow_the_changing_hpack_table(harness: Harness) -> None:
    """The server reuses the headers of a block it has seen while the HPACK table is unchanged: the client's
    encoder here indexes a new header every few calls and evicts old ones (the table holds 4 KiB), so the same
    bytes can mean another path later; each call must still reach the method it names."""
    client = RawClient(harness.server.port)
    try:
        for i in range(200):
            path = ECHO if i % 3 else "/test.Echo/Nope"
            extra = (("x-pad", f"{i // 4:04d}" + "p" * 200),)
            answer = client.call(2 * i + 1, path, framed(str(i).encode()), extra=extra)
            assert answer["grpc-status"] == ("0" if path == ECHO else "12"), (i, answer)
    finally:
        client.close()
