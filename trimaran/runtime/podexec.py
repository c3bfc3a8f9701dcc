"""Run a command inside another pod's sandbox: the local stand-in for ``kubectl exec`` and sshd.

Standard library only and importing nothing else of trimaran (like the shim): it runs inside
sandboxes as ``python -I -S podexec.py ...``.

``serve KEY [-- COMMAND...]`` runs in the target pod, as its container's process. It listens
on an abstract Unix socket named after ``KEY`` and, for each connection, runs the requested
shell command as its own child: with the pod's environment, working directory, namespaces
and mounts, which is what ``kubectl exec`` gives. The caller's stdin, stdout and stderr are
passed over the socket (``SCM_RIGHTS``), so the command writes straight into them; the server
sends back the exit status, and kills the command when the caller goes away (as sshd does when
a connection drops). With a COMMAND it also runs that and exits with its status; without, it
idles (the MPI operator's ``sshd -De`` / ``sleep 365d``) until asked to exit.

``connect PREFIX [ssh options] HOST COMMAND...`` is what an rsh agent runs (OpenMPI's
``plm_rsh_agent``): ssh's options are skipped, the pod is the first DNS label of HOST, and the
words of COMMAND are joined with spaces and run by ``/bin/sh -c``, as ssh does.

Abstract sockets belong to the network namespace, which every sandbox shares with the host, so
no file needs to be visible on both sides; but every process on the machine sees their names
(``/proc/net/unix``) and every pod runs as the same host uid, so neither the name nor the caller's
uid says who calls. Each request carries the job's exec token (``$TRIMARAN_PODEXEC_TOKEN``, from
a Secret that only the job's pods and the control plane read, as the MPI operator's ssh key); the
server compares it in constant time and refuses, and logs, any other.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

__all__ = ["TOKEN_ENV", "socket_name", "request_exit", "serve", "connect", "main"]

TOKEN_ENV = "TRIMARAN_PODEXEC_TOKEN"

_HEADER_MAX = 1 << 20
# ssh's options that take a value (from ssh(1)); the others are flags.
_SSH_VALUE_OPTIONS = set("BbcDEeFIiJLlmOoPpQRSWw")
_CONNECT_ATTEMPTS = 10  # ssh's ConnectionAttempts, one a second; a worker may still be starting
_KILL_GRACE_S = 2.0
_HEADER_TIMEOUT_S = 10.0  # a caller sends its request as soon as it connects


def socket_name(key: str, pod: str) -> str:
    """The abstract socket a pod's server listens on. ``key`` scopes it (the owning job's uid):
    two control planes on one machine may run pods of the same name."""
    digest = hashlib.sha256(f"{key}/{pod}".encode()).hexdigest()[:40]
    return f"\0trimaran-exec-{digest}"


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > _HEADER_MAX:
            raise ValueError("header too long")
    return data


def _dial(name: str, attempts: int) -> socket.socket:
    deadline = time.monotonic() + max(1, attempts)
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(name)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def request_exit(key: str, pod: str, token: str, timeout: float = 2.0) -> bool:
    """Ask an idle server to exit (the job it served has finished). False when nothing listens
    or the server refused ``token``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(socket_name(key, pod))
        _send(sock, {"op": "exit", "token": token})
        reply = _read_line(sock)
        return bool(reply) and "error" not in json.loads(reply)
    except OSError:
        return False
    finally:
        sock.close()


# -- the server, inside the target pod ---------------------------------------------------------


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _Server:
    def __init__(self, name: str, command: list[str], token: str, header_timeout: float) -> None:
        self.token = token.encode()
        self.header_timeout = header_timeout
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(name)
        self.listener.listen(64)
        self.command = command
        self.main: subprocess.Popen | None = None
        self.sessions: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.status = 0

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if self.command:
            self.main = subprocess.Popen(self.command)
            threading.Thread(target=self._wait_main, daemon=True).start()
        threading.Thread(target=self._accept, daemon=True).start()
        while not self.done.wait(0.5):
            pass
        with self.lock:
            sessions = list(self.sessions)
        for proc in sessions:
            _kill_group(proc)
        return self.status

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.main is not None:
            self.main.send_signal(signum)  # its exit ends the server, with its status
        else:
            self.status = 128 + signum
            self.done.set()

    def _wait_main(self) -> None:
        assert self.main is not None
        code = self.main.wait()
        self.status = 128 - code if code < 0 else code
        self.done.set()

    def _accept(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        with conn:
            fds: list[int] = []
            try:
                # A caller that never sends its request must not hold a thread (any pod may connect).
                deadline = time.monotonic() + self.header_timeout
                conn.settimeout(self.header_timeout)
                data, fds, _, _ = socket.recv_fds(conn, _HEADER_MAX, 3)
                if fds and not data.endswith(b"\n"):
                    # Our agent sends its descriptors with the whole request. A stranger's are not
                    # kept while it dawdles: a process holding another's socket can be taken for it.
                    for fd in fds:
                        os.close(fd)
                    print("podexec: refused descriptors sent without a whole request", file=sys.stderr, flush=True)
                    return
                while data and not data.endswith(b"\n") and len(data) <= _HEADER_MAX:
                    conn.settimeout(max(deadline - time.monotonic(), 0.001))
                    more = conn.recv(4096)
                    if not more:
                        break
                    data += more
                conn.settimeout(None)
                request = json.loads(data or b"{}")
            except TimeoutError:
                print(f"podexec: dropped a connection that sent no request in {self.header_timeout:g} s",
                      file=sys.stderr, flush=True)
                request = None
            except (OSError, ValueError):
                request = None
            try:
                if request is None or not self._admits(conn, request):
                    return
                if request.get("op") == "exit":
                    _send(conn, {"ok": self.main is None})
                    if self.main is None:  # a pod running its own command ends on its own
                        self.done.set()
                    return
                self._exec(conn, request, fds)
            finally:
                for fd in fds:
                    os.close(fd)

    def _admits(self, conn: socket.socket, request: object) -> bool:
        given = request.get("token") if isinstance(request, dict) else None
        if isinstance(given, str) and hmac.compare_digest(given.encode(), self.token):
            return True
        # The peer's pid is 0 when it lives in another pid namespace (any other pod).
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
        print(f"podexec: refused a request {'with a wrong' if given else 'without the'} exec token "
              f"(peer pid {pid}, uid {uid})", file=sys.stderr, flush=True)
        try:
            _send(conn, {"error": "refused: this pod's exec server needs its job's token "
                                  f"(${TOKEN_ENV})", "exitCode": 255})
        except OSError:
            pass
        return False

    def _exec(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        stdin, stdout, stderr = (fds + [subprocess.DEVNULL] * 3)[:3]
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", str(request.get("command") or "")],
                                    stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True)
        except OSError as exc:
            _send(conn, {"exitCode": 127, "error": str(exc)})
            return
        with self.lock:
            self.sessions.add(proc)
        # The caller's end closing (mpirun killed the agent) ends the command, as a dropped ssh does.
        watcher = threading.Thread(target=self._hang_up_on_eof, args=(conn, proc), daemon=True)
        watcher.start()
        code = proc.wait()
        with self.lock:
            self.sessions.discard(proc)
        try:
            _send(conn, {"exitCode": 128 - code if code < 0 else code})
        except OSError:
            pass

    @staticmethod
    def _hang_up_on_eof(conn: socket.socket, proc: subprocess.Popen) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        if proc.poll() is None:
            _kill_group(proc)


def serve(key: str, pod: str, command: list[str], token: str, header_timeout: float = _HEADER_TIMEOUT_S) -> int:
    """Serve exec requests for ``pod`` that carry ``token`` (and run ``command``, if any); returns
    the exit status. A connection that sends no request within ``header_timeout`` is dropped."""
    if not token:
        raise ValueError(f"no exec token: ${TOKEN_ENV} is empty or unset")
    return _Server(socket_name(key, pod), command, token, header_timeout).run()


# -- the client: an rsh agent ------------------------------------------------------------------


def _parse_ssh(argv: list[str]) -> tuple[str, list[str], int]:
    """(host, command words, connection attempts) from an ssh-style command line."""
    attempts = _CONNECT_ATTEMPTS
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        flags = argv[i][1:]
        for j, letter in enumerate(flags):
            if letter in _SSH_VALUE_OPTIONS:
                value = flags[j + 1:]
                if not value:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                key, _, setting = value.partition("=")
                if letter == "o" and key.lower() == "connectionattempts" and setting.isdigit():
                    attempts = int(setting)
                break
        i += 1
    if i < len(argv) and argv[i] == "--":
        i += 1
    if i >= len(argv):
        raise ValueError("no host given")
    host = argv[i]
    return host.rpartition("@")[2], argv[i + 1:], attempts


def connect(key: str, argv: list[str], token: str) -> int:
    """Run an ssh-style command line against the named pod's server with the job's ``token``;
    returns the command's status."""
    host, words, attempts = _parse_ssh(argv)
    pod = host.split(".", 1)[0]
    if not token:
        raise ValueError(f"no exec token: ${TOKEN_ENV} is empty or unset")
    try:
        sock = _dial(socket_name(key, pod), attempts)
    except OSError as exc:
        print(f"podexec: connect to pod {pod}: {exc.strerror or exc}", file=sys.stderr)
        return 255  # ssh's status for a connection that failed
    with sock:
        header = json.dumps({"op": "exec", "command": " ".join(words), "token": token}).encode() + b"\n"
        socket.send_fds(sock, [header], [0, 1, 2])
        reply = _read_line(sock)
    if not reply:
        print(f"podexec: pod {pod} closed the connection", file=sys.stderr)
        return 255
    answer = json.loads(reply)
    if "error" in answer:
        print(f"podexec: pod {pod}: {answer['error']}", file=sys.stderr)
    return int(answer.get("exitCode", 255))


def main(argv: list[str]) -> int:
    usage = ("usage: podexec.py serve KEY POD [-- COMMAND...]\n"
             "       podexec.py connect KEY [ssh options] HOST COMMAND...\n"
             f"both read the job's exec token from ${TOKEN_ENV}")
    token = os.environ.get(TOKEN_ENV, "")
    if len(argv) >= 3 and argv[0] == "serve":
        rest = argv[3:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        try:
            return serve(argv[1], argv[2], rest, token)
        except ValueError as exc:
            print(f"podexec: {exc}", file=sys.stderr)
            return 2
    if len(argv) >= 3 and argv[0] == "connect":
        try:
            return connect(argv[1], argv[2:], token)
        except ValueError as exc:
            print(f"podexec: {exc}\n{usage}", file=sys.stderr)
            return 255
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
