"""The socket keeper: one small process per home that holds the control plane's listening sockets.

Pods share the host's network, so a port is anyone's the moment nothing listens on it: a pod that
loops on ``bind(("127.0.0.1", API_PORT))`` takes the API's port while the control plane restarts,
and every pod started before then keeps ``KUBERNETES_SERVICE_PORT`` (and Katib's
``katib-db-manager.kubeflow:6789``, plaintext gRPC) pointing at it. The keeper closes that gap: it
binds each pod-facing listening socket once, without ``SO_REUSEPORT`` (so no other socket can join
it), never accepts on it, and hands a duplicate to each control-plane incarnation over a Unix socket
in ``$TRIMARAN_HOME`` (``SCM_RIGHTS``). It runs in its own session, like the pods' shims, so a
control plane killed with SIGKILL leaves the sockets held and bound: connections made meanwhile wait
in the backlog for the next incarnation, and no other process can ever listen there. When the
keeper itself is gone (``trimaran server stop`` ends it, or it was killed), the control plane binds
the addresses pods were given again, and stops those pods when another process got there first
(`trimaran.server.controlplane`): pods reach the real control plane or nothing.

Alternatives weighed:

* privileged ports (below 1024) when root: only root may bind them, but the control plane runs as
  ordinary users too, Katib's port 6789 is fixed by its SDK, and pods keep ``NET_BIND_SERVICE``
  (containerd's default capabilities) inside user namespaces that may map to root;
* Landlock's TCP bind rule (kernel 6.7+): an allow list of ports per sandbox, where pods bind
  ports of their own choosing (and port 0); older kernels have none, and the sandbox would have to
  know every control-plane port in advance;
* a network namespace per home (docs/architecture.md, "The pod network is the host's"): the real
  fix, not there yet; the keeper is what that design needs anyway (a per-home process handing
  listening sockets out over ``SCM_RIGHTS``).

The keeper is standard library only and runs as ``python -I -S keeper.py HOME`` (it starts in a
few milliseconds and imports nothing of Trimaran). Only the home's user reaches its socket (the
home is 0700 and the keeper checks ``SO_PEERCRED``); pods never see ``$TRIMARAN_HOME``. It exits on
SIGTERM, on an ``exit`` request, or when its socket file is gone (the home was removed); the kernel
closes what it held, so a crash leaves nothing bound.

Protocol (``SOCK_SEQPACKET``, one JSON request per message, one JSON answer back with its file
descriptors): ``{"op": "held"}`` → ``{"held": [{"name", "host", "port"}, ...]}`` and one socket per
entry; ``{"op": "listen", "name", "host", "port", "backlog"}`` → ``{"host", "port"}`` and the new
socket, which replaces any held under that name, or ``{"error", "errno"}``; ``{"op": "drop",
"name"}``; ``{"op": "exit"}``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "SOCKET_FILE", "KeeperError", "SocketKeeper", "keeper_pid", "lock_holder", "stop_keeper"]

SOCKET_FILE = "keeper.sock"
LOCK_FILE = "keeper.lock"
_MAX_FDS = 16
_MESSAGE = 65536
_CHECK_EVERY = 2.0  # seconds between looks at whether the socket file (the home) is still there


class KeeperError(OSError):
    """The keeper could not be reached or started."""


def _listener(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that name it.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # SO_REUSEADDR only lets a bind pass over TIME_WAIT connections of a previous keeper; it
        # never lets a second socket listen beside this one. No SO_REUSEPORT: that would.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


# -- the keeper process ----------------------------------------------------------------------------


def _serve(home: Path) -> int:
    lock = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 3  # another keeper holds this home
    os.pwrite(lock, f"{os.getpid():<20}\n".encode(), 0)
    os.ftruncate(lock, 21)
    # Relative paths from here: a home's path may be longer than a Unix socket's 107 bytes.
    os.chdir(home)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SOCKET_FILE)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old_umask = os.umask(0o177)
    try:
        server.bind(SOCKET_FILE)
    finally:
        os.umask(old_umask)
    server.listen(8)
    inode = os.stat(SOCKET_FILE).st_ino
    held: dict[str, socket.socket] = {}
    while True:
        ready, _, _ = select.select([server], [], [], _CHECK_EVERY)
        if not ready:
            try:
                if os.stat(SOCKET_FILE).st_ino != inode:
                    return 0  # another keeper took over the home
            except OSError:
                return 0  # the home is gone
            continue
        conn, _ = server.accept()
        with conn:
            pid, uid, gid = _peer(conn)
            if uid != os.getuid():
                print(f"trimaran keeper: refused a connection from pid {pid} (uid {uid})", file=sys.stderr, flush=True)
                continue
            conn.settimeout(10.0)
            if _session(conn, held):
                return 0


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)


def _session(conn: socket.socket, held: dict[str, socket.socket]) -> bool:
    """Answer one client's requests until it hangs up; True when it asked the keeper to exit."""
    while True:
        try:
            data = conn.recv(_MESSAGE)
        except OSError:
            return False
        if not data:
            return False
        try:
            request = json.loads(data)
            op = request["op"]
        except (ValueError, KeyError, TypeError):
            _answer(conn, {"error": "malformed request", "errno": errno.EINVAL})
            continue
        if op == "held":
            names = sorted(held)
            _answer(conn, {"held": [_describe(name, held[name]) for name in names]},
                    [held[name].fileno() for name in names])
        elif op == "listen":
            name = str(request["name"])
            try:
                sock = _listener(str(request["host"]), int(request["port"]), int(request.get("backlog", 2048)))
            except OSError as exc:
                _answer(conn, {"error": exc.strerror or str(exc), "errno": exc.errno or errno.EIO})
                continue
            old = held.pop(name, None)
            if old is not None:
                old.close()
            held[name] = sock
            _answer(conn, _describe(name, sock), [sock.fileno()])
        elif op == "drop":
            old = held.pop(str(request.get("name")), None)
            if old is not None:
                old.close()
            _answer(conn, {})
        elif op == "exit":
            _answer(conn, {})
            return True
        else:
            _answer(conn, {"error": f"unknown op {op!r}", "errno": errno.EINVAL})


def _describe(name: str, sock: socket.socket) -> dict:
    host, port = sock.getsockname()[:2]
    return {"name": name, "host": host, "port": port}


def _answer(conn: socket.socket, body: dict, fds: list[int] | None = None) -> None:
    with contextlib.suppress(OSError):
        socket.send_fds(conn, [json.dumps(body).encode()], fds or [])


# -- the control plane's side ----------------------------------------------------------------------


class SocketKeeper:
    """A connection to ``home``'s keeper (see the module's docstring)."""

    def __init__(self, home: Path, conn: socket.socket) -> None:
        self.home = home
        self._conn = conn

    @classmethod
    def ensure(cls, home: Path, timeout: float = 10.0) -> SocketKeeper:
        """Connect to ``home``'s keeper, starting one (in its own session) when none runs.

        Raises:
            KeeperError: none could be started within ``timeout``.
        """
        conn = _connect(home)
        if conn is not None:
            return cls(home, conn)
        log = os.open(home / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(home)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                    close_fds=True)
        finally:
            os.close(log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = _connect(home)
            if conn is not None:
                return cls(home, conn)
            code = proc.poll()
            if code not in (None, 3):  # 3: another keeper holds the home (it is just starting): wait for it
                raise KeeperError(errno.EIO, f"the socket keeper of {home} exited with code {code}; see server.log")
            time.sleep(0.01)
        raise KeeperError(errno.ETIMEDOUT, f"the socket keeper of {home} did not answer within {timeout:.0f}s")

    def _call(self, request: dict) -> tuple[dict, list[socket.socket]]:
        socket.send_fds(self._conn, [json.dumps(request).encode()], [])
        # CLOEXEC from the start: a shim forked meanwhile must not inherit the API's socket.
        data, fds, _, _ = socket.recv_fds(self._conn, _MESSAGE, _MAX_FDS, socket.MSG_CMSG_CLOEXEC)
        if not data:
            for fd in fds:
                os.close(fd)
            raise KeeperError(errno.ECONNRESET, f"the socket keeper of {self.home} hung up")
        return json.loads(data), [socket.socket(fileno=fd) for fd in fds]

    def held(self) -> dict[str, socket.socket]:
        """Duplicates of every socket the keeper holds, by name."""
        body, sockets = self._call({"op": "held"})
        return {entry["name"]: sock for entry, sock in zip(body["held"], sockets, strict=True)}

    def listen(self, name: str, host: str, port: int, backlog: int = 2048) -> socket.socket:
        """Have the keeper bind and hold a listening socket on ``host:port`` (0: any free port) under
        ``name`` (replacing the one it held under that name); return a duplicate.

        Raises:
            OSError: the address cannot be bound (``errno.EADDRINUSE``: another process has it).
        """
        body, sockets = self._call({"op": "listen", "name": name, "host": host, "port": port, "backlog": backlog})
        if "error" in body:
            raise OSError(body["errno"], f"{body['error']}: {host}:{port}")
        return sockets[0]

    def drop(self, name: str) -> None:
        """Have the keeper close the socket held under ``name`` (if any)."""
        self._call({"op": "drop", "name": name})

    def close(self) -> None:
        self._conn.close()


def _connect(home: Path) -> socket.socket | None:
    path = home / SOCKET_FILE
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    directory = None
    try:
        if len(os.fsencode(path)) > 100:  # sun_path holds 108 bytes: reach it through the home's descriptor
            directory = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            conn.connect(f"/proc/self/fd/{directory}/{SOCKET_FILE}")
        else:
            conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    finally:
        if directory is not None:
            os.close(directory)
    return conn


def keeper_pid(home: Path) -> int | None:
    """The pid of ``home``'s keeper, or None when none runs."""
    return lock_holder(home / LOCK_FILE)


def lock_holder(path: Path) -> int | None:
    """The pid written in the lock file ``path`` by the process holding its lock (0 while it has
    not written it yet), or None when none holds it. The control plane's home lock is read so too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int(os.pread(fd, 32, 0).split()[0])
            except (ValueError, IndexError):
                return 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def stop_keeper(home: Path, timeout: float = 5.0) -> bool:
    """End ``home``'s keeper (call with the control plane stopped: the sockets it held close);
    False when none ran."""
    pid = keeper_pid(home)
    if pid is None:
        return False
    conn = _connect(home)
    if conn is not None:
        with contextlib.closing(SocketKeeper(home, conn)) as keeper, contextlib.suppress(OSError, ValueError):
            keeper._call({"op": "exit"})
    deadline = time.monotonic() + timeout
    while keeper_pid(home) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    if pid and keeper_pid(home) is not None:  # it did not answer: it is stuck, end it
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
        while keeper_pid(home) is not None and time.monotonic() < deadline + timeout:
            time.sleep(0.02)
    return True


if __name__ == "__main__":
    sys.exit(_serve(Path(sys.argv[1])))
