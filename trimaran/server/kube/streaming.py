"""``pods/exec``, ``pods/attach`` and ``pods/portforward``: the kubelet's streaming verbs, served by
the API as kube-apiserver proxies them to a kubelet.

A request must ask to upgrade its connection, and is authorised as a write (``create`` on
``pods/exec``, as kube-apiserver 1.35 checks WebSocket upgrades). It is then answered ``101``
and its connection taken over (``server/connections.py``) in one of these protocols:

* WebSocket ``v5.channel.k8s.io`` (what kubectl 1.30+ asks first), ``v4.channel.k8s.io`` (the
  ``kubernetes`` Python client's ``stream()``), ``v3``/``v2``/``channel.k8s.io`` and their
  ``base64.`` forms: each message is a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error,
  4 resize, 255 close) and its payload; v4+ end with a ``Status`` on channel 3 whose
  ``NonZeroExitCode`` cause carries the exit code kubectl exits with.
* SPDY/3.1 (``Upgrade: SPDY/3.1``, a POST: older kubectl, and every kubectl's fallback when its
  WebSocket upgrade is refused): one SPDY stream per ``streamType``.
* Port-forward: SPDY ``portforward.k8s.io`` (an ``error`` and a ``data`` stream per connection,
  with ``port`` and ``requestID`` headers), the same SPDY session tunnelled in WebSocket binary
  messages (``SPDY/3.1+portforward.k8s.io``, kubectl 1.31+), and the WebSocket protocol of the
  Python client's ``portforward()`` (``v4.channel.k8s.io``: channels ``2i``/``2i+1`` for the
  i-th port of ``?ports=``, each first carrying the port, little-endian).

Errors before the upgrade are worded as the kubelet words them (``container not found ("x")``,
plain text, which kubectl prints after ``unable to upgrade connection:``); a port nobody listens
on is the kubelet's ``error forwarding port P to pod NAME_NS, uid : ...`` on that connection's
error stream. Exec runs through the node (``NodeAPI.exec``: crun exec, or nsenter under bubblewrap);
port-forward connects to the pod's ``status.podIP``.

Attach follows the container's output (its log file, which the shim writes: a terminal's output too)
until it ends, then answers Success as the kubelet's attach does (the container's exit code is in the
pod's status). A container with ``stdin: true`` has a stdin its shim holds (a pipe, or the terminal's
master with ``tty: true``) and lends to each attach session (``NodeAPI.attach``: a unix socket of the
shim's, so sessions outlive a control-plane restart), which also says when the log grew: the
session's stdin channel is written to it, its resize channel sets the terminal's size
(``TIOCSWINSZ``), and with ``stdinOnce`` the shim closes the container's stdin when the first session
ends or its input does (not a terminal's, as containerd). Input to a container without ``stdin:
true`` is dropped (its stdin is /dev/null): it attaches output-only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from trimaran.runtime.nodeapi import AttachedStdin, ContainerNotFound, ExecProcess
from trimaran.server.connections import TAKEOVER
from trimaran.server.kube.errors import StatusError
from trimaran.server.kube.wire import (
    OP_BINARY,
    OP_TEXT,
    SpdyConnection,
    SpdySession,
    SpdyStream,
    WebSocket,
    websocket_accept,
)

if TYPE_CHECKING:
    from trimaran.runtime import NodeAPI

__all__ = ["STREAMING", "serve"]

STREAMING = frozenset({"exec", "attach", "portforward"})

_V5, _V4, _V3, _V2, _V1 = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io",
                           "channel.k8s.io")
_EXEC_WS = (_V5, _V4, _V3, _V2, _V1) + tuple("base64." + p for p in (_V5, _V4, _V3, _V2, _V1))
_EXEC_SPDY = (_V4, _V3, _V2, _V1)  # v5 only adds the WebSocket close channel; SPDY closes streams
_PF_TUNNEL = "SPDY/3.1+portforward.k8s.io"
_PF_SPDY = "portforward.k8s.io"
_PF_WS = (_V4, "base64." + _V4, _V1, "base64." + _V1)
_STDIN, _STDOUT, _STDERR, _ERROR, _RESIZE, _CLOSE = 0, 1, 2, 3, 4, 255
_STREAM_CREATION_TIMEOUT = 30.0  # the kubelet's streamCreationTimeout
_QUEUED_LIMIT = 4 * 1024 * 1024  # client bytes held for a slow reader before the connection pauses
_READ = 256 * 1024
_FIRST_SIZE_WAIT = 1.0  # how long a terminal's command waits for the client to say its size
_START_WAIT = 10.0  # how long a request waits for a container that is about to start
_FOLLOW_MIN, _FOLLOW_MAX = 0.01, 0.1  # attach's reads of a growing log: right after output, when idle


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "t")


def _plain(code: int, text: str) -> Response:
    return Response(text, status_code=code, media_type="text/plain; charset=utf-8")


def _containers(pod: dict) -> list[str]:
    return [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]


def _container(pod: dict, wanted: str | None) -> str:
    """The container a request names, checked as kube-apiserver checks it."""
    spec = pod.get("spec") or {}
    names = _containers(pod)
    inits = [c["name"] for c in spec.get("initContainers") or []]
    name = pod["metadata"]["name"]
    if not wanted:
        if len(names) == 1:
            return names[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise StatusError.bad_request(message)
    if wanted not in names and wanted not in inits:
        raise StatusError.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _offered(request: Request, header: str) -> list[str]:
    return [p.strip() for value in request.headers.getlist(header) for p in value.split(",") if p.strip()]


def _pick(offered: list[str], supported: tuple[str, ...]) -> str | None:
    return next((p for p in offered if p in supported), None)


async def serve(request: Request, pod: dict, sub: str, node: NodeAPI) -> Response:
    """Answer a streaming request for ``pod`` (already read and authorised)."""
    upgrade = request.headers.get("upgrade", "").lower()
    takeover = (request.scope.get("extensions") or {}).get(TAKEOVER)
    if upgrade not in ("websocket", "spdy/3.1") or takeover is None:
        raise StatusError.bad_request("Upgrade request required")
    websocket = upgrade == "websocket"
    params = request.query_params
    if sub == "portforward":
        return await _portforward(request, pod, takeover, websocket)
    container = _container(pod, params.get("container"))
    tty = _flag(params.get("tty"))
    stdin, stdout = _flag(params.get("stdin")), _flag(params.get("stdout"))
    stderr = _flag(params.get("stderr")) and not tty
    if not (stdin or stdout or _flag(params.get("stderr"))):
        raise StatusError.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    argv = params.getlist("command")
    if sub == "exec" and not argv:
        raise StatusError.bad_request("you must specify at least one command for the container")
    offered = _offered(request, "sec-websocket-protocol" if websocket else "x-stream-protocol-version")
    protocol = _pick(offered, _EXEC_WS if websocket else _EXEC_SPDY)
    if protocol is None:
        return _plain(403, f"unable to upgrade: unable to negotiate protocol: client supports {offered}, server "
                           f"supports {list(_EXEC_WS if websocket else _EXEC_SPDY)}")
    uid = pod["metadata"]["uid"]
    await _started(node, uid, container)
    if sub == "attach":
        if node.container_pid(uid, container) is None:
            return _plain(404, str(ContainerNotFound(container)))
        # Input goes to the container's stdin where it has one (``stdin: true``); else it is dropped.
        held = await asyncio.to_thread(node.attach, uid, container) if stdin else None
        source: Any = _Attach(node, pod, container, held)
    elif tty:
        # A terminal's command starts once the client has said its size (or a moment passed), so
        # it starts at that size rather than 0x0: the process comes after the upgrade.
        if node.container_pid(uid, container) is None:
            return _plain(404, str(ContainerNotFound(container)))
        source = functools.partial(node.exec, uid, container, argv, tty=True, stdin=stdin, stdout=stdout,
                                   stderr=False)
    else:
        try:
            source = await asyncio.to_thread(node.exec, uid, container, argv, tty=tty, stdin=stdin, stdout=stdout,
                                             stderr=stderr)
        except ContainerNotFound as exc:
            return _plain(404, str(exc))
        except OSError as exc:
            return _plain(500, f"failed to exec in container: {exc}")
    session = _ExecSession(source, protocol, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)
    if websocket:
        ws = WebSocket(session.from_websocket, session.client_gone)
        takeover(_ws_response(request, protocol), ws)
        session.use_websocket(ws)
    else:
        conn = SpdyConnection(session.on_spdy_stream, session.client_gone)
        takeover(_spdy_response(protocol), conn)
        session.use_spdy(conn)
    await session.run()
    return Response(status_code=101)  # never sent: the connection was taken over


async def _started(node: NodeAPI, uid: str, container: str) -> None:
    """Wait (a while) for a container that is about to start: ``kubectl run -it`` attaches as soon as
    its pod is Running, which may be a moment before its container runs."""
    deadline = asyncio.get_running_loop().time() + _START_WAIT
    while asyncio.get_running_loop().time() < deadline and await asyncio.to_thread(node.container_starting, uid,
                                                                                   container):
        await asyncio.sleep(0.05)


def _ws_response(request: Request, protocol: str) -> bytes:
    accept = websocket_accept(request.headers.get("sec-websocket-key", ""))
    return (f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n").encode()


def _spdy_response(protocol: str) -> bytes:
    return (f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            f"X-Stream-Protocol-Version: {protocol}\r\n\r\n").encode()


def _channel_frame(opcode: int, message: bytes, base64_protocol: bool) -> tuple[int, bytes]:
    """A channel protocol's message as (channel, payload): the first byte names the channel, as
    an ASCII digit (and the rest base64) in the ``base64.`` protocols' text frames."""
    if base64_protocol and opcode == OP_TEXT:
        return message[0] - ord("0"), base64.b64decode(message[1:])
    return message[0], message[1:]


async def _ready(fd: int, writing: bool = False) -> None:
    """Until ``fd`` can be read (or, ``writing``, written) without blocking."""
    loop = asyncio.get_running_loop()
    add, remove = (loop.add_writer, loop.remove_writer) if writing else (loop.add_reader, loop.remove_reader)
    ready = loop.create_future()
    add(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        remove(fd)


async def _read(fd: int) -> bytes:
    """Some bytes from a non-blocking pipe or terminal; ``b""`` at its end (a terminal whose
    last holder went away reads EIO)."""
    while True:
        try:
            return os.read(fd, _READ)
        except BlockingIOError:
            await _ready(fd)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await _ready(fd, writing=True)


def _status(code: int) -> dict:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class _Attach:
    """What attach streams: the container's output, read from its log as it grows, and its end;
    ``stdin``, the container's stdin lent by its shim, where it has one."""

    def __init__(self, node: NodeAPI, pod: dict, container: str, stdin: AttachedStdin | None) -> None:
        self.node, self.pod, self.container, self.stdin = node, pod, container, stdin
        meta = pod["metadata"]
        self.path = node.log_path(meta["namespace"], meta["name"], container)
        self.handle: Any = None
        self.told = stdin is not None  # the shim says when the log grew (until it closes the session)

    async def open(self) -> None:
        """From the log's end: the output of what comes next (before any input goes in)."""
        self.handle = await asyncio.to_thread(open, self.path, "rb")
        self.handle.seek(0, os.SEEK_END)

    async def follow(self, out: Callable[[bytes], Any]) -> int:
        """Send what the log gains (after :meth:`open`) until the container ends."""
        uid = self.pod["metadata"]["uid"]
        handle = self.handle
        idle = _FOLLOW_MIN
        while True:
            data = handle.read(_READ)
            if data:
                await out(data)
                idle = _FOLLOW_MIN
                continue
            if self.node.container_pid(uid, self.container) is None:
                data = handle.read()
                if data:
                    await out(data)
                break
            await self._grown(idle)
            idle = min(idle * 2, _FOLLOW_MAX)
        return 0  # as the kubelet's attach: the streams end, the exit code is the pod's status to say

    def close(self) -> None:
        """The session's end: the log closed, the stdin given back (the shim closes a stdinOnce one)."""
        if self.handle is not None:
            self.handle.close()
        if self.stdin is not None:
            self.stdin.release()

    async def _grown(self, idle: float) -> None:
        """Until the log may have grown: the shim's word (a session holding the container's stdin),
        or a while: a log grows on its own time (the kubelet's follow polls too), so it is read soon
        after output, as a terminal's echo is, less often while the container is quiet."""
        if not self.told or self.stdin is None:
            await asyncio.sleep(idle)
            return
        try:
            said = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.stdin.conn, 4096), _FOLLOW_MAX)
        except asyncio.TimeoutError:
            return
        except OSError:
            said = b""
        if not said:
            self.told = False  # the shim closed the session: the container is ending


class _ExecSession:
    """One exec or attach: the process's ends on one side, a WebSocket or SPDY session on the other."""

    def __init__(self, source: ExecProcess | _Attach | Callable[..., ExecProcess], protocol: str, *,
                 stdin: bool, stdout: bool, stderr: bool, tty: bool) -> None:
        self.source = source  # a callable: starts the command (with the terminal's first size)
        self.first_size = asyncio.Event()
        self.size: tuple[int, int] | None = None
        self.base64 = protocol.startswith("base64.")
        self.version = protocol.removeprefix("base64.")
        self.wants = {"error"} | {name for name, on in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr),
                                                        ("resize", tty)) if on}
        self.ws: WebSocket | None = None
        self.spdy: SpdyConnection | None = None
        self.streams: dict[str, SpdyStream] = {}
        self.ready = asyncio.Event()  # every stream the client must open is open (SPDY)
        self.gone = asyncio.Event()
        self.stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.queued = 0
        self.resize_buffer = ""

    # -- the client's side ------------------------------------------------------------------

    def use_websocket(self, ws: WebSocket) -> None:
        self.ws = ws
        self.ready.set()

    def use_spdy(self, conn: SpdyConnection) -> None:
        self.spdy = conn

    def client_gone(self) -> None:
        self.gone.set()
        self.stdin.put_nowait(None)

    def from_websocket(self, opcode: int, message: bytes) -> None:
        if not message:
            return
        channel, payload = _channel_frame(opcode, message, self.base64)
        if channel == _STDIN:
            self._stdin(payload)
        elif channel == _RESIZE:
            self._resize(payload)
        elif channel == _CLOSE and self.version == _V5 and payload[:1] == bytes([_STDIN]):
            self._stdin(None)

    def on_spdy_stream(self, stream: SpdyStream) -> None:
        kind = stream.headers.get("streamtype", "")
        self.streams[kind] = stream
        if kind == "stdin":
            stream.listen(self._stdin)
        elif kind == "resize":
            stream.listen(lambda data: data is not None and self._resize(data))
        else:
            stream.listen(lambda data: None)
        if self.wants <= set(self.streams):
            self.ready.set()

    def _stdin(self, data: bytes | None) -> None:
        if data is not None:
            self.queued += len(data)
            if self.queued > _QUEUED_LIMIT:
                self._transport_reading(False)
        self.stdin.put_nowait(data)

    def _transport_reading(self, on: bool) -> None:
        conn = self.ws or self.spdy
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            (conn.transport.resume_reading if on else conn.transport.pause_reading)()

    def _resize(self, data: bytes) -> None:
        # A sequence of JSON objects ({"Width": W, "Height": H}), split anywhere on SPDY.
        self.resize_buffer += data.decode("utf-8", "replace")
        decoder = json.JSONDecoder()
        while self.resize_buffer.strip():
            try:
                size, end = decoder.raw_decode(self.resize_buffer.lstrip())
            except ValueError:
                return
            self.resize_buffer = self.resize_buffer.lstrip()[end:]
            if isinstance(size, dict):
                with contextlib.suppress(OSError, TypeError, ValueError):
                    self.size = (int(size.get("Width") or 0), int(size.get("Height") or 0))
                    self.first_size.set()
                    if isinstance(self.source, ExecProcess):
                        self.source.resize(*self.size)
                    elif isinstance(self.source, _Attach) and self.source.stdin is not None:
                        self.source.stdin.resize(*self.size)

    async def _out(self, channel: int, data: bytes) -> None:
        if self.ws is not None:
            if self.base64:
                self.ws.send(str(channel).encode() + base64.b64encode(data), OP_TEXT)
            else:
                self.ws.send(bytes([channel]) + data, OP_BINARY)
            await self.ws.drain()
        elif self.spdy is not None:
            stream = self.streams.get({_STDOUT: "stdout", _STDERR: "stderr", _ERROR: "error"}[channel])
            if stream is not None:
                stream.write(data)
                await self.spdy.drain()

    # -- the process's side ----------------------------------------------------------------

    async def run(self) -> None:
        try:
            try:
                await asyncio.wait_for(self._until(self.ready), _STREAM_CREATION_TIMEOUT)
            except asyncio.TimeoutError:
                return
            if self.gone.is_set():
                return
            if callable(self.source) and not isinstance(self.source, _Attach):
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._until(self.first_size), _FIRST_SIZE_WAIT)
                try:
                    self.source = await asyncio.to_thread(self.source, size=self.size)
                except (ContainerNotFound, OSError) as exc:
                    await self._failed(str(exc))
                    return
            code = await self._run_attach() if isinstance(self.source, _Attach) else await self._run_exec()
            if code is None:
                return
            await self._finish(code)
        finally:
            if isinstance(self.source, ExecProcess):
                if self.source.proc.poll() is None:
                    await asyncio.to_thread(self.source.kill)  # it may wait for crun's pid file
                    await asyncio.to_thread(self.source.proc.wait)
                self.source.release()
            elif isinstance(self.source, _Attach):
                self.source.close()
            self._close()

    async def _until(self, event: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.gone.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _run_attach(self) -> int | None:
        attach = self.source
        assert isinstance(attach, _Attach)
        await attach.open()
        follow = asyncio.ensure_future(attach.follow(lambda data: self._out(_STDOUT, data)))
        feeder = asyncio.ensure_future(self._feed(attach.stdin)) if attach.stdin is not None else None
        await self._until_done(follow)
        tasks = [t for t in (follow, feeder) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # ended before the log and stdin are closed
        return follow.result() if not follow.cancelled() else None

    async def _until_done(self, task: asyncio.Future) -> None:
        gone = asyncio.ensure_future(self.gone.wait())
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not task.done():
            task.cancel()

    async def _run_exec(self) -> int | None:
        proc = self.source
        assert isinstance(proc, ExecProcess)
        pumps = [asyncio.ensure_future(self._pump(fd, ch)) for fd, ch in ((proc.stdout, _STDOUT),
                                                                          (proc.stderr, _STDERR)) if fd is not None]
        feeder = asyncio.ensure_future(self._feed(proc))
        exited = asyncio.ensure_future(self._exit(proc))
        await self._until_done(exited)
        if not exited.done():
            feeder.cancel()
            for pump in pumps:
                pump.cancel()
            return None
        # Output the command wrote before it ended is still in the pipes: send it all, unless
        # something it started holds them open (then what came within a moment is enough).
        if pumps:
            await asyncio.wait(pumps, timeout=1.0)
        for task in (*pumps, feeder):
            task.cancel()
        return exited.result()

    async def _pump(self, fd: int, channel: int) -> None:
        while True:
            data = await _read(fd)
            if not data:
                return
            await self._out(channel, data)

    async def _feed(self, proc: ExecProcess | AttachedStdin) -> None:
        """The client's input into the command's stdin (exec) or the container's (attach)."""
        target = proc.stdin if isinstance(proc, ExecProcess) else proc.fd
        while True:
            data = await self.stdin.get()
            if data is None:
                if isinstance(proc, ExecProcess):
                    proc.close_stdin()
                else:
                    proc.end_input()
                return
            self.queued -= len(data)
            if self.queued <= _QUEUED_LIMIT // 2:
                self._transport_reading(True)
            if target is None:
                continue
            try:
                await _write_all(target, data)
            except OSError:  # the stdin was closed: what else comes is dropped
                target = None
                if isinstance(proc, ExecProcess):
                    proc.stdin = None

    @staticmethod
    async def _exit(proc: ExecProcess) -> int:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            return await asyncio.to_thread(proc.proc.wait)
        try:
            while proc.proc.poll() is None:
                await _ready(pidfd)
        finally:
            os.close(pidfd)
        code = proc.proc.returncode
        return 128 - code if code < 0 else code

    async def _failed(self, message: str) -> None:
        """The command could not start after the upgrade: a Failure Status (v4+) or the message."""
        if self.version in (_V5, _V4):
            status = {"metadata": {}, "status": "Failure", "reason": "InternalError", "message": message}
            await self._out(_ERROR, json.dumps(status).encode())
        else:
            await self._out(_ERROR, message.encode())

    async def _finish(self, code: int) -> None:
        if self.version in (_V5, _V4):
            await self._out(_ERROR, json.dumps(_status(code)).encode())
        elif code:
            await self._out(_ERROR, f"command terminated with non-zero exit code: exit status {code}".encode())

    def _close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.spdy is not None:
            for stream in self.streams.values():
                stream.close()
            self.spdy.close()


# -- port-forward ---------------------------------------------------------------------------------

def _pod_ip(pod: dict) -> str:
    return (pod.get("status") or {}).get("podIP") or "127.0.0.1"


def _full_name(pod: dict) -> str:
    return f"{pod['metadata']['name']}_{pod['metadata']['namespace']}"


def _forward_error(pod: dict, port: int, exc: OSError) -> str:
    host = _pod_ip(pod)
    why = os.strerror(exc.errno).lower() if exc.errno else str(exc)  # asyncio's own words name no errno
    return (f"error forwarding port {port} to pod {_full_name(pod)}, uid : failed to connect to {host}:{port} "
            f"inside the pod's network: dial tcp4 {host}:{port}: connect: {why}")


class _PodSide(asyncio.Protocol):
    """The connection to the pod's port; what it reads goes to ``send``, its end to ``ended``; while
    the pod does not take what the client sends, ``full(True)`` (the client's reads pause)."""

    def __init__(self, send: Callable[[bytes], None], ended: Callable[[], None], full: Callable[[bool], None]) -> None:
        self.send, self.ended, self.full = send, ended, full
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def pause_writing(self) -> None:
        self.paused = True
        self.full(True)

    def resume_writing(self) -> None:
        self.paused = False
        self.full(False)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.send(data)

    def eof_received(self) -> bool:
        self.ended()
        return True  # the client may still be sending: keep our half open

    def connection_lost(self, exc: Exception | None) -> None:
        if self.paused:
            self.resume_writing()
        self.ended()


class _Forward:
    """One forwarded connection: the pod's port on one side, a pair of client channels on the other.
    The outer connection's back-pressure pauses the pod's reads (``paused``)."""

    def __init__(self, pod: dict, port: int, send: Callable[[bytes], None], fail: Callable[[str], None],
                 ended: Callable[[], None], flow: _Flow) -> None:
        self.pod, self.port = pod, port
        self.send, self.fail, self.ended, self.flow = send, fail, ended, flow
        self.side: _PodSide | None = None
        self.pending: list[bytes | None] = []
        self.done = False

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, side = await loop.create_connection(lambda: _PodSide(self.send, self._end, self.flow.pod_full),
                                                   _pod_ip(self.pod), self.port)
        except OSError as exc:
            self.fail(_forward_error(self.pod, self.port, exc))
            self._end()
            return
        self.side = side  # type: ignore[assignment]
        pending, self.pending = self.pending, []
        for item in pending:
            self.from_client(item)

    def from_client(self, data: bytes | None) -> None:
        if self.done:
            return
        if self.side is None:
            self.pending.append(data)
            return
        transport = self.side.transport
        if transport is None or transport.is_closing():
            return
        if data is None:
            if transport.can_write_eof():
                transport.write_eof()
        else:
            transport.write(data)

    def pause(self, paused: bool) -> None:
        if self.side is not None and self.side.transport is not None and not self.side.transport.is_closing():
            (self.side.transport.pause_reading if paused else self.side.transport.resume_reading)()

    def close(self) -> None:
        if self.side is not None and self.side.transport is not None:
            self.side.transport.close()
        self._end()

    def _end(self) -> None:
        if not self.done:
            self.done = True
            self.ended()


class _Flow:
    """Pauses every forward's pod reads while the client's connection cannot take more."""

    def __init__(self) -> None:
        self.forwards: set[_Forward] = set()
        self.conn: Any = None
        self.full_pods = 0

    def pod_full(self, full: bool) -> None:
        """A pod's connection cannot take more (or can again): the client's reads wait for it."""
        self.full_pods += 1 if full else -1
        transport = self.conn.transport if self.conn is not None else None
        if transport is not None and not transport.is_closing():
            (transport.pause_reading if self.full_pods > 0 else transport.resume_reading)()

    def hook(self, conn: Any) -> None:
        self.conn = conn
        pause, resume = conn.pause_writing, conn.resume_writing

        def paused() -> None:
            pause()
            for f in list(self.forwards):
                f.pause(True)

        def resumed() -> None:
            resume()
            for f in list(self.forwards):
                f.pause(False)

        conn.pause_writing, conn.resume_writing = paused, resumed


async def _portforward(request: Request, pod: dict, takeover: Callable, websocket: bool) -> Response:
    offered = _offered(request, "sec-websocket-protocol" if websocket else "x-stream-protocol-version")
    if websocket and _PF_TUNNEL in offered:
        protocol = _PF_TUNNEL
    elif websocket:
        protocol = _pick(offered, _PF_WS) or ""
    else:
        protocol = _PF_SPDY if _PF_SPDY in offered else ""
    if not protocol:
        return _plain(403, f"unable to upgrade: unable to negotiate protocol: client supports {offered}, server "
                           f"supports {[_PF_TUNNEL, *_PF_WS] if websocket else [_PF_SPDY]}")
    ended = asyncio.Event()
    flow = _Flow()
    if protocol in (_PF_TUNNEL, _PF_SPDY):
        spdy = _SpdyForwards(pod, flow, ended.set)
        if protocol == _PF_TUNNEL:
            ws = WebSocket(lambda op, data: spdy.session.feed(data), spdy.end, stream=True)
            spdy.session = SpdySession(ws.send_parts, spdy.on_stream, spdy.end)
            flow.hook(ws)
            takeover(_ws_response(request, protocol), ws)
            closer: Callable[[], None] = ws.close
        else:
            conn = SpdyConnection(spdy.on_stream, spdy.end)
            spdy.session = conn.session
            flow.hook(conn)
            takeover(_spdy_response(protocol), conn)
            closer = conn.close
        await ended.wait()
        spdy.close_all()
        closer()
        return Response(status_code=101)
    ports = _ws_ports(request)
    if not ports:
        raise StatusError.bad_request("query parameter \"ports\" is required")
    native = _NativeForwards(pod, ports, protocol, flow, ended.set)
    ws = WebSocket(native.from_client, ended.set)
    native.ws = ws
    flow.hook(ws)
    takeover(_ws_response(request, protocol), ws)
    await native.start()
    await ended.wait()
    native.close_all()
    ws.close()
    return Response(status_code=101)


def _ws_ports(request: Request) -> list[int]:
    ports: list[int] = []
    for value in request.query_params.getlist("ports"):
        for part in value.split(","):
            try:
                port = int(part)
            except ValueError:
                raise StatusError.bad_request(f"invalid port: {part!r}") from None
            if not 0 < port < 65536:
                raise StatusError.bad_request(f"port {port} must be within 1-65535")
            ports.append(port)
    return ports


class _SpdyForwards:
    """Port-forward over SPDY: pairs each connection's ``error`` and ``data`` streams by ``requestID``."""

    def __init__(self, pod: dict, flow: _Flow, end: Callable[[], None]) -> None:
        self.pod, self.flow, self.end = pod, flow, end
        self.session: SpdySession
        self.pairs: dict[str, dict[str, SpdyStream]] = {}
        self.forwards: list[_Forward] = []

    def on_stream(self, stream: SpdyStream) -> None:
        headers = stream.headers
        kind, request_id = headers.get("streamtype", ""), headers.get("requestid", "")
        pair = self.pairs.setdefault(request_id, {})
        pair[kind] = stream
        if kind == "error":
            stream.listen(lambda data: None)
        if "error" in pair and "data" in pair:
            del self.pairs[request_id]
            self._start(pair["error"], pair["data"])

    def _start(self, error: SpdyStream, data: SpdyStream) -> None:
        try:
            port = int(data.headers.get("port", ""))
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            error.write(f"invalid port: {data.headers.get('port', '')!r}".encode(), fin=True)
            data.close()
            return

        def ended() -> None:
            self.flow.forwards.discard(forward)
            data.close()
            error.close()

        def fail(message: str) -> None:
            error.write(message.encode())

        forward = _Forward(self.pod, port, data.write, fail, ended, self.flow)
        self.flow.forwards.add(forward)
        self.forwards.append(forward)
        data.listen(forward.from_client)
        asyncio.ensure_future(forward.open())

    def close_all(self) -> None:
        for forward in self.forwards:
            forward.close()


class _NativeForwards:
    """The Python client's WebSocket port-forward: one connection per port named in the URL."""

    def __init__(self, pod: dict, ports: list[int], protocol: str, flow: _Flow, end: Callable[[], None]) -> None:
        self.pod, self.ports, self.flow, self.end = pod, ports, flow, end
        self.base64 = protocol.startswith("base64.")
        self.ws: WebSocket
        self.forwards: list[_Forward] = []
        self.left = len(ports)

    def _send(self, channel: int, data: bytes) -> None:
        if self.base64:
            self.ws.send(str(channel).encode() + base64.b64encode(data), OP_TEXT)
        else:
            self.ws.send(bytes([channel]) + data, OP_BINARY)

    async def start(self) -> None:
        for i, port in enumerate(self.ports):
            prefix = port.to_bytes(2, "little")
            self._send(2 * i, prefix)
            self._send(2 * i + 1, prefix)

            def ended() -> None:
                self.left -= 1
                if self.left == 0:
                    self.end()

            forward = _Forward(self.pod, port, lambda data, ch=2 * i: self._send(ch, data),
                               lambda message, ch=2 * i + 1: self._send(ch, message.encode()), ended, self.flow)
            self.flow.forwards.add(forward)
            self.forwards.append(forward)
        await asyncio.gather(*(f.open() for f in self.forwards))

    def from_client(self, opcode: int, message: bytes) -> None:
        if not message:
            return
        channel, payload = _channel_frame(opcode, message, self.base64)
        if channel % 2 == 0 and channel // 2 < len(self.forwards) and payload:
            self.forwards[channel // 2].from_client(payload)

    def close_all(self) -> None:
        for forward in self.forwards:
            forward.close()
