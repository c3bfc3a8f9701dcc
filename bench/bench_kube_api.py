"""The Kubernetes API of the control plane, through kubectl and raw watch clients, in one run.

    .venv/bin/python bench/bench_kube_api.py [--only get|watch|start|scale] [--runs 15] [--writes 300]

1. ``kubectl get pytorchjobs`` with 500 PyTorchJobs stored (created through the API, suspended
   with ``spec.runPolicy.suspend: true`` so no pod starts): median wall time of the whole kubectl
   process, with a private ``KUBECACHEDIR`` warmed once so discovery is cached as for a user
   (target < 0.3 s), beside ``trimaran get pytorchjobs`` (target: no slower than 0.17 s, the CLI
   before the API change), the two interleaved run by run. Then the same kubectl command with
   1,000 idle watches open (a child process holding ``?watch=true`` connections at the current
   resourceVersion, spread over pods, configmaps, jobs, tfjobs and pytorchjobs) against without,
   in alternating blocks: the ratio should be about 1.
2. Watch latency: a client watches one PyTorchJob from a fresh resourceVersion; another client
   PUTs its ``/status`` (a new ``lastReconcileTime``, which the training controller leaves alone)
   ``--writes`` times, one at a time with a pause between, on its own kept-alive connection.
   Latency: from just before the write is sent to the watch event carrying the write's
   resourceVersion arriving at the watching client (target p99 < 20 ms); peer: the same write's
   own round trip, so the ratio says what the watch adds. In four alternating blocks: two with no
   other watch open, two with ``--watches`` idle ones (none of them sees these writes).
3. ``kubectl apply -f -`` of a PyTorchJob (1 master + 3 workers running
   ``python -c "import time; time.sleep(30)"``) until all 4 pods report phase Running, seen on a
   pod watch opened before kubectl starts (target < 0.5 s); beside ``trimaran apply -f -`` of the
   same manifest, interleaved, and the floor of starting the same 4 commands with Popen.
4. Scale (``--sizes 1000,5000,20000``): ConfigMaps in one namespace, grown to each size in turn;
   ``kubectl get configmaps`` (kubectl pages at 500; target < 1 s at 20,000) beside one unpaged
   GET, and a raw walk in pages of 500 (linear in N: the same cost an object at every size); then
   the control plane's RSS and store file before, at the largest size, and after a DELETE of the
   collection (target: RSS within 20 MB of before).

``--server-nodelay`` is a diagnostic: it starts the control plane with TCP_NODELAY on its sockets
(see NODELAY_SITECUSTOMIZE), to show what the ~40 ms delayed-ACK wait per response costs.

Every control plane runs in a fresh temporary ``TRIMARAN_HOME`` (stopped, its pods stopped and the
home removed at the end); everything talks to it on loopback over HTTPS with the kubeconfig's
token. The code measured is the checkout this script sits in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
KUBECTL = shutil.which("kubectl")
JOBS = 500
IDLE_NS = "bench-idle"
PT = "/apis/kubeflow.org/v1"


# A minimal HTTP/1.1 client on asyncio SSL streams (kept-alive requests and chunked watch streams)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    token: str
    ca_pem: bytes

    @classmethod
    def of(cls, kubeconfig: Path) -> Endpoint:
        from trimaran.server.kubeconfig import read_endpoint

        ep = read_endpoint(kubeconfig)
        url = urllib.parse.urlsplit(ep.server)
        assert ep.token and ep.ca_pem and url.hostname in ("127.0.0.1", "localhost"), ep.server
        return cls(url.hostname, url.port or 443, ep.token, ep.ca_pem)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())


class Conn:
    def __init__(self, ep: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.ep, self.reader, self.writer = ep, reader, writer

    @classmethod
    async def open(cls, ep: Endpoint, context: ssl.SSLContext | None = None) -> Conn:
        reader, writer = await asyncio.open_connection(ep.host, ep.port, ssl=context or ep.ssl_context(),
                                                       limit=2**22)
        return cls(ep, reader, writer)

    def close(self) -> None:
        self.writer.close()

    def _send(self, method: str, path: str, body: bytes | None, content_type: str) -> None:
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.ep.host}:{self.ep.port}",
                f"Authorization: Bearer {self.ep.token}", "Accept: application/json", "User-Agent: bench"]
        if body is not None:
            head += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))

    async def _head(self) -> tuple[int, dict[str, str]]:
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                return status, headers
            key, _, value = line.decode().partition(":")
            headers[key.strip().lower()] = value.strip()

    async def request(self, method: str, path: str, body: object | None = None,
                      content_type: str = "application/json") -> tuple[int, dict]:
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        self._send(method, path, data, content_type)
        status, headers = await self._head()
        if "content-length" in headers:
            raw = await self.reader.readexactly(int(headers["content-length"]))
        else:
            raw = b"".join([chunk async for chunk in self._chunks()])
        return status, orjson.loads(raw) if raw else {}

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                return
            data = await self.reader.readexactly(size + 2)
            yield data[:-2]

    async def watch(self, path: str) -> AsyncIterator[tuple[float, dict]]:
        """Open a watch; yield (arrival time, event) per event. The caller stops iterating to end it."""
        self._send("GET", path, None, "")
        status, headers = await self._head()
        if status != 200:
            raise RuntimeError(f"watch {path}: HTTP {status}")
        buffer = b""
        async for chunk in self._chunks():
            now = time.perf_counter()
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield now, orjson.loads(line)


def revision_of(ep_conn_result: tuple[int, dict]) -> str:
    status, body = ep_conn_result
    assert status == 200, body
    return body["metadata"]["resourceVersion"]


# Control planes --------------------------------------------------------------------------------


# --server-nodelay: a diagnostic, not the code as committed. The control plane's listening sockets
# are made with proto 0, so asyncio does not set TCP_NODELAY on the connections it accepts, and a
# response written in two pieces waits for the client's delayed ACK. This starts the server with
# TCP_NODELAY set on its listening sockets (accepted sockets inherit it on Linux).
NODELAY_SITECUSTOMIZE = """import socket
_listen = socket.socket.listen


def listen(self, *args):
    if self.family in (socket.AF_INET, socket.AF_INET6) and self.type == socket.SOCK_STREAM:
        self.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _listen(self, *args)


socket.socket.listen = listen
"""


class Plane:
    """A control plane in a fresh temporary home, with kubectl's and trimaran's environments."""

    def __init__(self, nodelay: bool = False) -> None:
        from trimaran.server.daemon import read_server_info, start_server

        self.root = Path(tempfile.mkdtemp(prefix="trimaran-kubeapi-"))
        self.home = self.root / "home"
        os.environ["TRIMARAN_HOME"] = str(self.home)
        saved = os.environ.get("PYTHONPATH")
        if nodelay:
            (self.root / "site").mkdir()
            (self.root / "site" / "sitecustomize.py").write_text(NODELAY_SITECUSTOMIZE)
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root / "site"), saved]))
        try:
            start_server(home=self.home)
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        self.pid = int(read_server_info(self.home)["pid"])
        self.kubeconfig = self.home / "kubeconfig"
        self.ep = Endpoint.of(self.kubeconfig)
        # PYTHONDONTWRITEBYTECODE (set in some sandboxes) would leave the CLI compiling every changed module
        # on every call, which no user's install does: the warm-up call writes the bytecode.
        base = {k: v for k, v in os.environ.items()
                if k not in ("KUBECONFIG", "KUBECACHEDIR", "PYTHONDONTWRITEBYTECODE")}
        (self.root / "khome").mkdir()
        self.kubectl_env = dict(base, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.root / "kcache"),
                                HOME=str(self.root / "khome"))
        self.trimaran_env = dict(base, TRIMARAN_HOME=str(self.home))

    def close(self) -> None:
        from trimaran.server.daemon import stop_pods, stop_server

        try:
            stop_server(self.home)
            stop_pods(self.home, grace_seconds=1.0)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def server_cpu(self) -> float:
        import psutil

        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status") as fh:
            return int(fh.read().split("VmRSS:")[1].split()[0]) / 1024

    def established(self) -> int:
        """TCP connections the control plane holds open to its clients."""
        import psutil

        return sum(1 for c in psutil.Process(self.pid).net_connections(kind="tcp")
                   if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.ep.port)


@contextlib.contextmanager
def plane(nodelay: bool = False) -> Iterator[Plane]:
    p = Plane(nodelay)
    try:
        yield p
    finally:
        p.close()


def kubectl(p: Plane, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([KUBECTL, *args], env=p.kubectl_env, input=input, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def trimaran(p: Plane, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([PY, "-m", "trimaran.cli", *args], env=p.trimaran_env, input=input, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode:
        raise SystemExit(f"trimaran {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def timed(fn, *args: str) -> tuple[float, str]:  # noqa: ANN001
    t0 = time.perf_counter()
    out = fn(*args).stdout
    return time.perf_counter() - t0, out


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def suspended_job(name: str, namespace: str = "default") -> dict:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "python", "command": ["true"],
                                         "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)]}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "kube-api"}},
            "spec": {"runPolicy": {"suspend": True},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 2, "template": template}}}}


async def create_jobs(ep: Endpoint, count: int, connections: int = 4) -> None:
    names = iter(range(count))
    context = ep.ssl_context()

    async def worker() -> None:
        conn = await Conn.open(ep, context)
        for i in names:
            status, body = await conn.request("POST", f"{PT}/namespaces/default/pytorchjobs",
                                              suspended_job(f"job-{i:03d}"))
            assert status == 201, body
        conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))


async def settle(ep: Endpoint, quiet: float = 1.5, limit: float = 120.0) -> None:
    """Wait until the store's revision has not moved for ``quiet`` seconds (controllers done)."""
    conn = await Conn.open(ep)
    last, since = None, time.monotonic()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        rv = revision_of(await conn.request("GET", f"{PT}/pytorchjobs?limit=1"))
        if rv != last:
            last, since = rv, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        await asyncio.sleep(0.25)
    conn.close()


# 1,000 idle watches, held by a child process -----------------------------------------------------

WATCH_PATHS = [
    f"/api/v1/namespaces/{IDLE_NS}/pods",
    f"/api/v1/namespaces/{IDLE_NS}/configmaps",
    "/apis/batch/v1/jobs",
    f"{PT}/tfjobs",
    f"{PT}/namespaces/{IDLE_NS}/pytorchjobs",
]


async def hold_streams(ep: Endpoint, paths: list[str], seconds: float | None = None, head_timeout: float = 30
                       ) -> None:
    """Open a streaming GET of each path (16 at a time), print ``ready OK FAILED``, read them idly
    until stdin closes (or ``seconds``), then close them."""
    context = ep.ssl_context()
    gate = asyncio.Semaphore(16)
    conns: list[Conn] = []
    failed = 0
    drains: list[asyncio.Task] = []

    async def drain(conn: Conn) -> None:
        with contextlib.suppress(Exception):
            while await conn.reader.read(65536):
                pass

    async def open_one(path: str) -> None:
        nonlocal failed
        async with gate:
            try:
                conn = await Conn.open(ep, context)
                conn._send("GET", path, None, "")
                status, _ = await asyncio.wait_for(conn._head(), head_timeout)
            except (OSError, asyncio.TimeoutError, ssl.SSLError, ConnectionError):
                failed += 1
                return
        if status != 200:
            failed += 1
            conn.close()
            return
        conns.append(conn)
        drains.append(asyncio.create_task(drain(conn)))

    await asyncio.gather(*(open_one(p) for p in paths))
    print(f"ready {len(conns)} {failed}", flush=True)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.read), seconds)
    for conn in conns:
        conn.close()
    for task in drains:
        task.cancel()


async def hold_watches(kubeconfig: Path, count: int, seconds: float) -> None:
    """Open ``count`` watches, print ``ready OK FAILED``, hold them until stdin closes (or ``seconds``)."""
    ep = Endpoint.of(kubeconfig)
    probe = await Conn.open(ep, ep.ssl_context())
    rv = revision_of(await probe.request("GET", f"{PT}/pytorchjobs?limit=1"))
    probe.close()
    paths = [f"{WATCH_PATHS[i % len(WATCH_PATHS)]}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true"
             f"&timeoutSeconds={int(seconds)}" for i in range(count)]
    await hold_streams(ep, paths, seconds)


class IdleWatches:
    def __init__(self, p: Plane, count: int) -> None:
        self.proc = subprocess.Popen([PY, __file__, "--hold-watches", str(count), "--kubeconfig", str(p.kubeconfig)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()  # type: ignore[union-attr]
        if not line or line[0] != "ready":
            self.close()
            raise SystemExit("the watch holder did not start")
        self.opened, self.failed = int(line[1]), int(line[2])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# 1. get -----------------------------------------------------------------------------------------


def bench_get(p: Plane, runs: int, blocks: int, per_block: int, watches: int) -> dict:
    t0 = time.perf_counter()
    asyncio.run(create_jobs(p.ep, JOBS))
    created = time.perf_counter() - t0
    asyncio.run(settle(p.ep))
    print(f"[get] {JOBS} suspended PyTorchJobs created through the API in {created:.1f} s; load {load()}")
    for fn in (kubectl, trimaran):  # warm: kubectl's discovery cache, trimaran's, the page cache
        out = fn(p, "get", "pytorchjobs").stdout
        assert out.count("job-") == JOBS, out[:300]
    ours, cli = [], []
    cpu = {kubectl: 0.0, trimaran: 0.0}
    for i in range(runs):
        pair = [(kubectl, ours), (trimaran, cli)]
        for fn, into in (pair if i % 2 == 0 else pair[::-1]):
            cpu0 = p.server_cpu()
            seconds, out = timed(fn, p, "get", "pytorchjobs")
            cpu[fn] += p.server_cpu() - cpu0
            assert out.count("job-") == JOBS
            into.append(seconds)
    k, t = statistics.median(ours), statistics.median(cli)
    floor = [timed(kubectl, p, "version", "--client")[0] for _ in range(5)]
    print(f"[get] kubectl get pytorchjobs ({JOBS} jobs): median {k:.3f} s (min {min(ours):.3f}, max "
          f"{max(ours):.3f}, {runs} runs) target < 0.3 s {'MET' if k < 0.3 else 'NOT MET'}")
    print(f"[get] trimaran get pytorchjobs: median {t:.3f} s (min {min(cli):.3f}, max {max(cli):.3f}) "
          f"target <= 0.17 s {'MET' if t <= 0.17 else 'NOT MET'}")
    print(f"[get] ratio kubectl / trimaran {k / t:.2f}x; control plane CPU per get: both ask for a Table: kubectl's "
          f"{cpu[kubectl] / runs * 1000:.0f} ms, trimaran's {cpu[trimaran] / runs * 1000:.0f} ms; "
          f"`kubectl version --client` (no request) median {statistics.median(floor):.3f} s; load {load()}")

    without, with_ = [], []
    opened = []
    rss = [p.rss_mb()]
    for _ in range(blocks):
        without += [timed(kubectl, p, "get", "pytorchjobs")[0] for _ in range(per_block)]
        holder = IdleWatches(p, watches)
        try:
            time.sleep(1.0)  # let the handshakes' work finish
            opened.append((holder.opened, holder.failed, p.established()))
            rss.append(p.rss_mb())
            with_ += [timed(kubectl, p, "get", "pytorchjobs")[0] for _ in range(per_block)]
        finally:
            holder.close()
        time.sleep(1.0)
    a, b = statistics.median(without), statistics.median(with_)
    print(f"[get] watches opened per block (ok, failed, server-side established): {opened}; control plane "
          f"VmRSS {rss[0]:.0f} MB before the first block, {rss[1]:.0f} MB with the watches open, "
          f"{p.rss_mb():.0f} MB after")
    print(f"[get] kubectl get pytorchjobs with {watches} idle watches: median {b:.3f} s; without {a:.3f} s "
          f"({blocks} alternating blocks of {per_block}); ratio {b / a:.2f}x (target ~1); load {load()}")
    return {"kubectl": k, "trimaran": t, "with_watches": b, "without_watches": a}


# 2. watch latency -------------------------------------------------------------------------------


async def watch_latency(ep: Endpoint, writes: int, warmup: int = 20) -> tuple[list[float], list[float]]:
    """(event latencies, write round trips) of ``writes`` status writes to the PyTorchJob "watched"."""
    writer = await Conn.open(ep)
    watcher = await Conn.open(ep)
    path = f"{PT}/namespaces/default/pytorchjobs/watched"
    status, job = await writer.request("GET", path)
    if status == 404:
        status, created = await writer.request("POST", f"{PT}/namespaces/default/pytorchjobs",
                                               suspended_job("watched"))
        assert status == 201, created
        await settle(ep, quiet=1.0)
        status, job = await writer.request("GET", path)
    rv = revision_of(await writer.request("GET", f"{PT}/pytorchjobs?limit=1"))
    seen: dict[str, float] = {}
    arrived = asyncio.Event()

    async def read() -> None:
        async for t, event in watcher.watch(f"{PT}/namespaces/default/pytorchjobs?watch=true&resourceVersion={rv}"
                                            "&fieldSelector=metadata.name%3Dwatched&timeoutSeconds=600"):
            seen[event["object"]["metadata"]["resourceVersion"]] = t
            arrived.set()

    reader = asyncio.create_task(read())
    latency, round_trip = [], []
    status_body = job.get("status") or {}
    for i in range(warmup + writes):
        stamp = f"2026-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "watched"},
                "status": {**status_body, "lastReconcileTime": stamp}}
        t0 = time.perf_counter()
        status, stored = await writer.request("PUT", path + "/status", body)
        t1 = time.perf_counter()
        assert status == 200, stored
        new_rv = stored["metadata"]["resourceVersion"]
        deadline = time.monotonic() + 10
        while new_rv not in seen:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), max(0.001, deadline - time.monotonic()))
        if i >= warmup:
            latency.append(seen[new_rv] - t0)
            round_trip.append(t1 - t0)
        await asyncio.sleep(0.015 + random.random() * 0.01)  # apart, so writes never share a wake-up
    reader.cancel()
    writer.close()
    watcher.close()
    return latency, round_trip


def bench_watch(p: Plane, writes: int, watches: int) -> dict:
    """Half the writes with no other watch open, half with ``watches`` idle ones, in alternating blocks."""
    cpu0 = p.server_cpu()
    arms: dict[str, tuple[list[float], list[float]]] = {"alone": ([], []), "idle": ([], [])}
    half = max(1, writes // 4)
    for arm in ("alone", "idle", "alone", "idle") if watches else ("alone",) * 4:
        holder = IdleWatches(p, watches) if arm == "idle" else None
        try:
            if holder is not None:
                time.sleep(1.0)
            latency, rtt = asyncio.run(watch_latency(p.ep, half if watches else writes // 4))
        finally:
            if holder is not None:
                holder.close()
        arms[arm][0].extend(x * 1000 for x in latency)
        arms[arm][1].extend(x * 1000 for x in rtt)
    out = {}
    for arm, (ms, rms) in arms.items():
        if not ms:
            continue
        p50, p99, r50, r99 = pct(ms, 0.5), pct(ms, 0.99), pct(rms, 0.5), pct(rms, 0.99)
        label = "no other watch open" if arm == "alone" else f"{watches} idle watches open"
        print(f"[watch] {len(ms)} PUT /status, {label}: watch event latency p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
              f"max {max(ms):.2f} ms; target p99 < 20 ms {'MET' if p99 < 20 else 'NOT MET'}")
        print(f"[watch]   peer, the write's own round trip: p50 {r50:.2f} ms, p99 {r99:.2f} ms; ratio event/write "
              f"p50 {p50 / r50:.2f}x, p99 {p99 / r99:.2f}x; the event came before the write's answer in "
              f"{sum(a < b for a, b in zip(ms, rms, strict=True))}/{len(ms)}")
        out[arm] = {"p50": p50, "p99": p99, "rtt50": r50, "rtt99": r99}
    print(f"[watch] server CPU during the test {p.server_cpu() - cpu0:.1f} s; load {load()}")
    return out


# 3. apply -> 4 replicas Running ---------------------------------------------------------------

MANIFEST = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: {name}}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - {{name: pytorch, image: python, command: [python, -c, "import time; time.sleep(30)"]}}
    Worker:
      replicas: 3
      restartPolicy: Never
      template:
        spec:
          containers:
          - {{name: pytorch, image: python, command: [python, -c, "import time; time.sleep(30)"]}}
"""


async def apply_until_running(p: Plane, argv: list[str], env: dict, name: str) -> tuple[float, float]:
    """(seconds until all 4 pods are Running, seconds the apply command itself took), from its start."""
    conn = await Conn.open(p.ep)
    rv = revision_of(await conn.request("GET", "/api/v1/namespaces/default/pods?limit=1"))
    selector = urllib.parse.quote(f"training.kubeflow.org/job-name={name}")
    events = conn.watch(f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}"
                        f"&labelSelector={selector}&timeoutSeconds=120")
    first = asyncio.ensure_future(events.__anext__())  # sends the request and reads the headers
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)

    async def run_apply() -> float:
        out, err = await proc.communicate(MANIFEST.format(name=name).encode())
        if proc.returncode:
            raise SystemExit(f"{argv} failed: {out.decode()}{err.decode()}")
        return time.perf_counter() - t0

    applying = asyncio.create_task(run_apply())
    phases: dict[str, str] = {}
    t, event = await asyncio.wait_for(first, 30)
    while True:
        obj = event["object"]
        if event["type"] == "DELETED":
            phases.pop(obj["metadata"]["name"], None)
        else:
            phases[obj["metadata"]["name"]] = (obj.get("status") or {}).get("phase", "")
        if len(phases) == 4 and all(v == "Running" for v in phases.values()):
            running = t - t0
            break
        t, event = await asyncio.wait_for(events.__anext__(), 30)
    applied = await applying
    conn.close()
    return running, applied


async def pods_gone(p: Plane, name: str, limit: float = 60) -> None:
    conn = await Conn.open(p.ep)
    selector = urllib.parse.quote(f"training.kubeflow.org/job-name={name}")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        status, body = await conn.request("GET", f"/api/v1/namespaces/default/pods?labelSelector={selector}")
        if not body["items"]:
            break
        await asyncio.sleep(0.1)
    conn.close()


def popen_floor() -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([PY, "-c", "import time; time.sleep(30)"]) for _ in range(4)]
    took = time.perf_counter() - t0
    for proc in procs:
        proc.kill()
        proc.wait()
    return took


def bench_start(p: Plane, rounds: int) -> dict:
    kubectl(p, "get", "pytorchjobs")  # warm kubectl's discovery cache
    trimaran(p, "get", "pytorchjobs")
    arms = {"kubectl apply": ([KUBECTL, "apply", "-f", "-"], p.kubectl_env),
            "trimaran apply": ([PY, "-m", "trimaran.cli", "apply", "-f", "-"], p.trimaran_env)}
    running: dict[str, list[float]] = {a: [] for a in arms}
    applied: dict[str, list[float]] = {a: [] for a in arms}
    floor = []
    first: dict[str, float] = {}
    order = list(arms)
    for i in range(rounds + 1):  # the first round warms up and is not counted
        for arm in (order if i % 2 == 0 else order[::-1]):
            argv, env = arms[arm]
            name = f"start-{i}-{arm.split()[0]}"
            r, a = asyncio.run(apply_until_running(p, argv, env, name))
            if i:
                running[arm].append(r)
                applied[arm].append(a)
            else:
                first[arm] = r
            kubectl(p, "delete", "pytorchjob", name)
            asyncio.run(pods_gone(p, name))
            time.sleep(0.5)
        floor.append(popen_floor())
    out = {}
    for arm in arms:
        med = statistics.median(running[arm])
        out[arm] = med
        print(f"[start] {arm} -> 4 pods Running: median {med:.3f} s (min {min(running[arm]):.3f}, max "
              f"{max(running[arm]):.3f}, {rounds} runs); the {arm.split()[0]} process itself "
              f"{statistics.median(applied[arm]):.3f} s; target < 0.5 s {'MET' if med < 0.5 else 'NOT MET'}")
    print(f"[start] not counted, the first run on this control plane: kubectl apply {first['kubectl apply']:.3f} s "
          "(its first GET /openapi/v3, which the server builds on first use), then trimaran apply "
          f"{first['trimaran apply']:.3f} s")
    f = statistics.median(floor)
    print(f"[start] ratio kubectl / trimaran {out['kubectl apply'] / out['trimaran apply']:.2f}x; peer "
          f"Popen x4 of the same command {f * 1000:.1f} ms (kubectl {out['kubectl apply'] / f:.0f}x); load {load()}")
    return out


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "scale"}},
            "data": {f"key{i}": "v" * 40 for i in range(5)}}


async def create_configmaps(ep: Endpoint, namespace: str, names: range, connections: int = 4) -> None:
    pending = iter(names)
    context = ep.ssl_context()

    async def worker() -> None:
        conn = await Conn.open(ep, context)
        for i in pending:
            status, body = await conn.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                                              configmap(f"cm-{i:05d}"))
            assert status == 201, body
        conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))


async def one_request(ep: Endpoint, method: str, path: str, body: object | None = None) -> tuple[int, dict]:
    conn = await Conn.open(ep)
    try:
        return await conn.request(method, path, body)
    finally:
        conn.close()


async def paged_walk(ep: Endpoint, path: str, limit: int) -> tuple[float, int, int]:
    """Seconds to walk ``path`` in pages of ``limit`` on one connection, the items seen, the pages."""
    conn = await Conn.open(ep)
    try:
        t0, seen, pages, token = time.perf_counter(), 0, 0, ""
        while True:
            query = f"?limit={limit}" + (f"&continue={token}" if token else "")
            status, body = await conn.request("GET", path + query)
            assert status == 200, body
            seen += len(body["items"])
            pages += 1
            token = body["metadata"].get("continue") or ""
            if not token:
                return time.perf_counter() - t0, seen, pages
    finally:
        conn.close()


def store_mb(p: Plane) -> float:
    return sum(f.stat().st_size for f in p.home.glob("trimaran.db*")) / 2**20


def bench_scale(p: Plane, sizes: list[int], runs: int) -> dict:
    """ConfigMaps stored in one namespace, grown to each size in turn: ``kubectl get`` (which pages
    at 500) against one unpaged request, a raw walk in pages of 500, and the control plane's RSS
    and store file before the objects, at the largest size and after deleting them all."""
    ns, path = "bench-scale", "/api/v1/namespaces/bench-scale/configmaps"
    asyncio.run(one_request(p.ep, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}}))
    asyncio.run(settle(p.ep))
    before = (p.rss_mb(), store_mb(p))
    out: dict = {}
    made = 0
    for size in sizes:
        asyncio.run(create_configmaps(p.ep, ns, range(made, size)))
        made = size
        kubectl(p, "get", "configmap", "-n", ns, "cm-00000")  # discovery cached, as for a user
        got, whole, unpaged, walks = [], [], [], []
        for _ in range(runs):
            seconds, text = timed(kubectl, p, "get", "configmaps", "-n", ns)
            assert text.count("\n") == size + 1, text[:200]
            got.append(seconds)
            seconds, text = timed(kubectl, p, "get", "configmaps", "-n", ns, "--chunk-size=0")
            assert text.count("\n") == size + 1, text[:200]
            whole.append(seconds)
            t0 = time.perf_counter()
            status, body = asyncio.run(one_request(p.ep, "GET", path))
            unpaged.append(time.perf_counter() - t0)
            assert status == 200 and len(body["items"]) == size
            walk, seen, pages = asyncio.run(paged_walk(p.ep, path, 500))
            assert seen == size
            walks.append(walk)
        row = {"kubectl get": statistics.median(got), "unpaged": statistics.median(unpaged),
               "walk": statistics.median(walks), "pages": pages, "whole": statistics.median(whole)}
        out[size] = row
        # client-go's limiter (5 requests a second after a burst of 10) paces kubectl's pages
        # whatever the server: against kube-apiserver too.
        floor = max(0, pages - 10) / 5
        print(f"[scale] {size:>6} ConfigMaps: kubectl get {row['kubectl get']:.3f} s (its own rate limiter's "
              f"floor for {pages} pages {floor:.1f} s), --chunk-size=0 {row['whole']:.3f} s "
              f"(target at 20,000 < 1 s); "
              f"walk in pages of 500 {row['walk']:.3f} s ({pages} pages, {row['walk'] / pages * 1000:.1f} ms a page); "
              f"peer: one unpaged GET {row['unpaged']:.3f} s (kubectl {row['kubectl get'] / row['unpaged']:.1f}x); "
              f"medians of {runs}; load {load()}")
    peak = (p.rss_mb(), store_mb(p))
    status, body = asyncio.run(one_request(p.ep, "DELETE", path))
    assert status == 200, body
    asyncio.run(settle(p.ep))
    deleted = p.rss_mb()
    time.sleep(35)  # the control plane trims its allocator every 30 s after a burst of writes
    after = (p.rss_mb(), store_mb(p))
    out["rss"] = {"before": before, "peak": peak, "after": after}
    print(f"[scale] control plane RSS {before[0]:.0f} MB before, {peak[0]:.0f} MB with {made} ConfigMaps, "
          f"{deleted:.0f} MB just after deleting them, {after[0]:.0f} MB 35 s later (target within 20 MB of before: "
          f"{'MET' if after[0] - before[0] <= 20 else 'NOT MET'}); store file {before[1]:.1f} → {peak[1]:.1f} → "
          f"{after[1]:.1f} MB")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        per = [out[n]["walk"] / n * 1e6 for n in (first, last)]
        print(f"[scale] a walk costs {per[0]:.1f} µs an object at {first} and {per[1]:.1f} at {last} "
              f"(linear: about equal)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["get", "watch", "start", "scale"], default=None)
    parser.add_argument("--sizes", default="1000,5000,20000", help="ConfigMaps for the scale part, grown in turn")
    parser.add_argument("--runs", type=int, default=15, help="interleaved kubectl/trimaran get runs")
    parser.add_argument("--blocks", type=int, default=3, help="alternating blocks with and without idle watches")
    parser.add_argument("--per-block", type=int, default=5)
    parser.add_argument("--watches", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7, help="apply -> Running runs per arm")
    parser.add_argument("--server-nodelay", action="store_true",
                        help="diagnostic: start the control plane with TCP_NODELAY on its sockets (see the code)")
    parser.add_argument("--hold-watches", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    if args.hold_watches is not None:
        asyncio.run(hold_watches(Path(args.kubeconfig), args.hold_watches, 900))
        return
    if KUBECTL is None:
        raise SystemExit("kubectl is not on PATH")
    os.environ["PYTHONPATH"] = str(REPO)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the planes' cleanup runs
    version = kubectl_version()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, kubectl {version}, load {load()}"
          + ("; server with TCP_NODELAY (--server-nodelay)" if args.server_nodelay else ""))
    if args.only in (None, "get", "watch"):
        with plane(args.server_nodelay) as p:
            if args.only in (None, "get"):
                bench_get(p, args.runs, args.blocks, args.per_block, args.watches)
            if args.only in (None, "watch"):
                bench_watch(p, args.writes, args.watches)
    if args.only in (None, "start"):
        with plane(args.server_nodelay) as p:
            bench_start(p, args.rounds)
    if args.only in (None, "scale"):
        with plane(args.server_nodelay) as p:
            bench_scale(p, [int(n) for n in args.sizes.split(",")], 3)


def kubectl_version() -> str:
    out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
    try:
        return orjson.loads(out)["clientVersion"]["gitVersion"]
    except (ValueError, KeyError):
        return "?"


if __name__ == "__main__":
    main()
