"""The streaming verbs through the API: ``kubectl exec`` round trip and ``kubectl port-forward`` throughput.

    .venv/bin/python bench/bench_streaming.py [--runs 20] [--mib 256] [--rounds 3]

1. ``kubectl exec POD -- true``: median wall time of the whole kubectl process (target < 150 ms),
   beside ``kubectl get pod POD`` (the same kubectl start, config, TLS and one request: the floor
   an exec adds its upgrade, nsenter and the command to), interleaved run by run; kubectl's
   default protocol (WebSocket v5) and its SPDY fallback (``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``).
2. ``kubectl port-forward pod/P 0:PORT``: ``--mib`` MiB from the pod to the client (download) and
   from the client to the pod (upload), through kubectl's default (SPDY tunnelled in WebSocket,
   kubectl 1.31+) and plain SPDY (``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``), median MB/s of
   ``--rounds`` (target ≥ 200 MB/s); beside the same transfer straight to the pod's address (the
   floor of the pod's server and loopback), with the API server's own CPU time per transfer (on
   this shared 2-core machine the rate follows the load; the CPU time says what the API costs).

The control plane runs in a fresh temporary ``TRIMARAN_HOME`` (stopped, its pods stopped and the
home removed at the end); the code measured is the checkout this script sits in.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KUBECTL = shutil.which("kubectl")

# The pod's server: "d" + 8-byte length -> that many bytes back; "u" + 8-byte length -> reads
# that many, answers "k".
SERVER = r"""
import socket, sys, threading
def serve(conn):
    with conn:
        head = b""
        while len(head) < 9:
            head += conn.recv(9 - len(head))
        n = int.from_bytes(head[1:], "big")
        if head[:1] == b"d":
            block = memoryview(b"x" * (1 << 20))
            while n:
                k = min(n, len(block)); conn.sendall(block[:k]); n -= k
        else:
            while n:
                got = len(conn.recv(1 << 20))
                if not got:
                    break
                n -= got
            conn.sendall(b"k")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def transfer(port: int, mode: str, size: int, host: str = "127.0.0.1") -> float:
    """Seconds to move ``size`` bytes through ``host:port`` (``d``: from the pod; ``u``: to it)."""
    with socket.create_connection((host, port), timeout=120) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        conn.sendall(mode.encode() + size.to_bytes(8, "big"))
        if mode == "d":
            left = size
            while left:
                got = conn.recv(1 << 20)
                if not got:
                    raise RuntimeError(f"the download ended {left} bytes short")
                left -= len(got)
        else:
            block = memoryview(b"y" * (1 << 20))
            left = size
            while left:
                k = min(left, len(block))
                conn.sendall(block[:k])
                left -= k
            if conn.recv(1) != b"k":
                raise RuntimeError("the upload was not acknowledged")
        return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate, timeout: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


class Forward:
    def __init__(self, env: dict[str, str], target: str, remote: int) -> None:
        self.proc = subprocess.Popen([KUBECTL, "port-forward", target, f"0:{remote}", "--address", "127.0.0.1"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                line = self.proc.stdout.readline()  # type: ignore[union-attr]
                found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                    return
        raise SystemExit(f"port-forward did not start: {self.proc.stderr.read()}")  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if KUBECTL is None:
        raise SystemExit("kubectl is not on PATH")
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    home = Path(tempfile.mkdtemp(prefix="bench-streaming-")) / "home"
    os.environ["TRIMARAN_HOME"] = str(home)
    start_server(home=home)
    env = dict(os.environ, KUBECONFIG=str(home / "kubeconfig"), KUBECACHEDIR=str(home.parent / "kcache"))
    port = free_port()
    try:
        for obj in ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
                     "spec": {"containers": [{"name": "main", "image": "python", "command": ["sleep", "3600"]}]}},
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "data"},
                     "spec": {"containers": [{"name": "main", "image": "python",
                                              "command": ["python", "-c", SERVER, str(port)]}]}}):
            subprocess.run([KUBECTL, "apply", "-f", "-"], input=json.dumps(obj), env=env, check=True,
                           capture_output=True, text=True)

        def running(name: str) -> bool:
            out = subprocess.run([KUBECTL, "get", "pod", name, "-o", "jsonpath={.status.phase}"], env=env,
                                 capture_output=True, text=True).stdout
            return out == "Running"
        for name in ("sleeper", "data"):
            wait_for(lambda n=name: running(n), 60, f"pod {name}")
        pod_ip = subprocess.run([KUBECTL, "get", "pod", "data", "-o", "jsonpath={.status.podIP}"], env=env,
                                capture_output=True, text=True).stdout or "127.0.0.1"
        wait_for(lambda: subprocess.run([KUBECTL, "exec", "sleeper", "--", "true"], env=env).returncode == 0, 30,
                 "the first exec")

        def timed(argv: list[str], extra: dict[str, str] | None = None) -> float:
            started = time.perf_counter()
            subprocess.run(argv, env=dict(env, **(extra or {})), check=True, capture_output=True)
            return time.perf_counter() - started

        spdy = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
        times: dict[str, list[float]] = {"exec": [], "exec-spdy": [], "get": []}
        for _ in range(args.runs):
            times["exec"].append(timed([KUBECTL, "exec", "sleeper", "--", "true"]))
            times["exec-spdy"].append(timed([KUBECTL, "exec", "sleeper", "--", "true"], spdy))
            times["get"].append(timed([KUBECTL, "get", "pod", "sleeper"]))
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"kubectl exec POD -- true (WebSocket v5): median {med['exec']:.1f} ms over {args.runs} "
              f"(min {min(times['exec']) * 1000:.1f}); SPDY: {med['exec-spdy']:.1f} ms; "
              f"kubectl get pod POD: {med['get']:.1f} ms; exec/get {med['exec'] / med['get']:.2f}x; target < 150 ms")

        size = args.mib * 1024 * 1024
        mb = size / 1e6
        wait_for(lambda: _connects(pod_ip, port), 30, "the pod's server")
        direct = {m: [mb / transfer(port, m, size, pod_ip) for _ in range(args.rounds)] for m in "du"}
        results = {}
        server_pid = json.loads((home / "server.json").read_text())["pid"]
        cpu: dict[str, dict[str, list[float]]] = {}
        for label, extra in (("websocket tunnel", {}), ("spdy", {"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"})):
            forward = Forward(dict(env, **extra), "pod/data", port)
            try:
                transfer(forward.port, "d", 1 << 20)  # the forward's first connection, warmed
                results[label], cpu[label] = {}, {}
                for m in "du":
                    rates, spent = [], []
                    for _ in range(args.rounds):
                        before = cpu_seconds(server_pid)
                        rates.append(mb / transfer(forward.port, m, size))
                        spent.append(cpu_seconds(server_pid) - before)
                    results[label][m], cpu[label][m] = rates, spent
            finally:
                forward.close()
        for label, rates in results.items():
            for m, name in (("d", "pod → client"), ("u", "client → pod")):
                r = statistics.median(rates[m])
                floor = statistics.median(direct[m])
                # The API server's own CPU per transfer: its ceiling on a machine with a core to spare.
                spent = statistics.median(cpu[label][m])
                print(f"port-forward ({label}), {name}, {args.mib} MiB: median {r:.0f} MB/s "
                      f"({', '.join(f'{x:.0f}' for x in rates[m])}); straight to the pod: {floor:.0f} MB/s; "
                      f"ratio {r / floor:.2f}; API server CPU {spent:.2f} s ({mb / max(spent, 1e-3):.0f} MB per "
                      f"CPU-second); target >= 200 MB/s")
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        shutil.rmtree(home.parent, ignore_errors=True)


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
