"""The supervisor: reserves the ports, starts the worker processes, restarts a crashed one, and drains them all
on SIGTERM.

Workers share the HTTP and gRPC ports with SO_REUSEPORT: the kernel spreads connections over them, and each
worker answers from its own model copy on its own event loop (no IPC on the data path). The supervisor holds
a bound, non-listening SO_REUSEPORT socket on each port while it runs: that makes a port already in use fail
at once, lets ``--http-port 0`` pick a free port for every worker, and receives no connections.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from trimaran.serving.config import ServerConfig
from trimaran.serving.worker import CONFIG_ENV, PARENT_ENV, setup_logging

log = logging.getLogger("trimaran.serving")
PR_SET_PDEATHSIG = 1
RESTART_WINDOW = 10.0  # seconds: a worker that dies sooner than this after starting counts as a crash loop
MAX_QUICK_CRASHES = 5


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies, so that no worker is orphaned."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the worker's parent-pid check and the supervisor's own cleanup remain
    os.setpgid(0, 0)  # Ctrl-C reaches the supervisor alone, which then drains the workers in order


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound (not listening) SO_REUSEPORT socket on ``host:port``; port 0 picks a free port."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        # SO_REUSEPORT lets another server of the same user bind this port too: traffic would be split between
        # two servers. Something that accepts connections there means the port is taken.
        if port and _accepts(host, port):
            raise OSError(errno.EADDRINUSE, f"port {port} is already served by another process")
    except OSError:
        sock.close()
        raise
    return sock


def _accepts(host: str, port: int) -> bool:
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    with socket.socket(socket.AF_INET6 if ":" in target else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((target, port)) == 0


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen
    started: float


class Supervisor:
    """Runs ``config.workers`` worker processes until stopped; see the module docstring."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.workers: dict[int, _Worker] = {}
        self._stop = False
        self._wake = threading.Event()
        self._sockets: list[socket.socket] = []
        self._metrics_dir = ""
        self._quick_crashes = 0

    def urls(self) -> dict[str, str]:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        urls = {"http": f"http://{shown}:{self.config.http_port}"}
        if self.config.grpc_port:
            urls["grpc"] = f"{shown}:{self.config.grpc_port}"
        return urls

    def start(self) -> None:
        """Reserve ports and start the workers; OSError when a port is taken."""
        config = self.config
        http = reserve_port(config.host, config.http_port)
        self._sockets.append(http)
        config.http_port = http.getsockname()[1]
        if config.grpc_port:
            grpc_sock = reserve_port(config.host, config.grpc_port)
            self._sockets.append(grpc_sock)
            config.grpc_port = grpc_sock.getsockname()[1]
        self._metrics_dir = tempfile.mkdtemp(prefix="trimaran-serve-metrics-")
        for index in range(config.workers):
            self._spawn(index)

    def _spawn(self, index: int) -> None:
        env = dict(os.environ)
        env[CONFIG_ENV] = json.dumps(self.config.to_dict())
        env[PARENT_ENV] = str(os.getpid())
        env["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir
        process = subprocess.Popen([sys.executable, "-m", "trimaran.serving.worker", str(index)], env=env,
                                   preexec_fn=_die_with_parent)
        self.workers[index] = _Worker(index, process, time.monotonic())

    def request_stop(self, *_: object) -> None:
        self._stop = True
        self._wake.set()

    def _child_exited(self, *_: object) -> None:
        self._wake.set()

    def run(self) -> int:
        """Supervise until SIGTERM/SIGINT (then drain) or a crash loop; the exit status."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGCHLD, self._child_exited)
        status = 0
        try:
            while not self._stop:
                # Signals wake the wait at once (a worker's exit, SIGTERM); the timeout is a safety net.
                self._wake.wait(1.0)
                self._wake.clear()
                if not self._stop and not self._check_workers():
                    status = 1
                    break
        finally:
            self._shutdown()
        return status

    def _check_workers(self) -> bool:
        for index, worker in list(self.workers.items()):
            code = worker.process.poll()
            if code is None or self._stop:
                continue
            self._worker_gone(worker.process.pid)
            lived = time.monotonic() - worker.started
            log.error("worker %d (pid %d) exited with status %s after %.1f s", index, worker.process.pid, code, lived)
            self._quick_crashes = self._quick_crashes + 1 if lived < RESTART_WINDOW else 0
            if self._quick_crashes >= MAX_QUICK_CRASHES:
                log.error("workers keep crashing at start; giving up")
                return False
            time.sleep(min(2.0, 0.1 * 2 ** self._quick_crashes))
            log.info("restarting worker %d", index)
            self._spawn(index)
        return True

    def _worker_gone(self, pid: int) -> None:
        # The dead worker's live gauges (in-flight, queue depth) must not be summed any more.
        if self._metrics_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self._metrics_dir)

    def _shutdown(self) -> None:
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.drain_timeout + 2.0
        for worker in self.workers.values():
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop in time; killing it", worker.index)
                worker.process.kill()
                worker.process.wait()
        for sock in self._sockets:
            sock.close()
        if self._metrics_dir:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
        log.info("server stopped")


def serve(config: ServerConfig, *, on_started: Callable[[Supervisor], None] | None = None) -> int:
    """Run the model server in the foreground; returns the exit status (0 after a SIGTERM drain).

    ``on_started`` is called once the workers are started (the CLI prints its panel there).
    """
    setup_logging("supervisor")
    supervisor = Supervisor(config)
    try:
        supervisor.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", config.host, exc)
        return 2
    urls = supervisor.urls()
    log.info("serving model %s from %s: %s (V1 and V2 REST)%s; %d worker(s), version policy %s",
             config.model_name, config.model_dir, urls["http"],
             f", grpc://{urls['grpc']} (V2 gRPC)" if "grpc" in urls else "", config.workers, config.version_policy)
    if on_started is not None:
        on_started(supervisor)
    return supervisor.run()
