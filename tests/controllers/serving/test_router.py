"""The router against stub replicas: traffic split statistics, Host routing, retries on a dead replica,
holding requests until a replica is ready, containerConcurrency and the per-second metrics."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.serving.router import Router


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """A stub model server: answers predict with its name, ready when ``ready`` is set."""

    def __init__(self, name: str, delay: float = 0.0) -> None:
        self.name = name
        self.ready = True
        self.delay = delay
        self.inflight = 0
        self.max_inflight = 0
        self.post_connections: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200 if replica.ready else 503, {"ready": replica.ready})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                replica.post_connections.add(self.client_address)
                with replica.lock:
                    replica.inflight += 1
                    replica.max_inflight = max(replica.max_inflight, replica.inflight)
                time.sleep(replica.delay)
                with replica.lock:
                    replica.inflight -= 1
                self._send(200, {"predictions": [replica.name], "host": self.headers.get("host")})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


ADMIN_TOKEN = "the-routes-files-admin-token"


class RouterHarness:
    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "routes.json"
        self.ingress, self.admin, self.port, self.grpc_port = _free_port(), _free_port(), _free_port(), _free_port()
        self.loop = asyncio.new_event_loop()
        self.router = Router(self.path)
        self.task: asyncio.Future | None = None
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def configure(self, traffic: list[tuple[str, int]], revisions: dict[str, list[str]],
                  container_concurrency: int = 0, activation_timeout: float = 10, timeout: float = 30,
                  grpc_endpoints: dict[str, str] | None = None) -> None:
        """Route default/iris; with ``grpc_endpoints`` (HTTP address -> gRPC address) on ``grpc_port`` too."""
        service = {
            "port": self.port, "hosts": ["iris.default.example.com"], "timeout": timeout,
            "activationTimeout": activation_timeout,
            "traffic": [{"revisionName": r, "percent": p} for r, p in traffic],
            "revisions": {r: {"endpoints": eps, "containerConcurrency": container_concurrency,
                              "probePath": "/v2/health/ready",
                              "grpcEndpoints": {a: g for a, g in (grpc_endpoints or {}).items() if a in eps}}
                          for r, eps in revisions.items()}}
        if grpc_endpoints is not None:
            service["grpcPort"] = self.grpc_port
        config = {"ingressPort": self.ingress, "adminPort": self.admin, "adminToken": ADMIN_TOKEN,
                  "services": {"default/iris": service}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(self.path)
        if self.task is None:
            self.task = asyncio.run_coroutine_threadsafe(self.router.run(), self.loop)

    def ready_endpoints(self, revision: str) -> list[str]:
        try:
            return self.stats()["revisions"][revision]["ready"]
        except (OSError, KeyError):
            return []

    def stats(self, token: str | None = ADMIN_TOKEN) -> dict:
        poll(self._listening, what="the router's admin port")
        conn = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=5)
        conn.request("GET", "/stats", headers={"Authorization": f"Bearer {token}"} if token else {})
        return json.loads(conn.getresponse().read())

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.admin), timeout=1).close()
        except OSError:
            return False
        return True

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # A deadline, not a pace: on a loaded machine gRPC's tasks took over 5 s to unwind.
        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def harness(tmp_path: Path):
    h = RouterHarness(tmp_path)
    yield h
    h.close()


class Client:
    """A keep-alive client, one per thread."""

    def __init__(self, port: int, host: str | None = None) -> None:
        self.port, self.host = port, host
        self.local = threading.local()

    def predict(self) -> tuple[int, str]:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"content-type": "application/json"}
        if self.host:
            headers["host"] = self.host
        conn.request("POST", "/v1/models/iris:predict", body=b'{"instances": [[1, 2]]}', headers=headers)
        resp = conn.getresponse()
        body = json.loads(resp.read())
        return resp.status, (body.get("predictions") or [body.get("error")])[0]


def test_traffic_split_follows_percentages(harness: RouterHarness) -> None:
    old, new = Replica("old"), Replica("new")
    harness.configure([("rev-1", 90), ("rev-2", 10)], {"rev-1": [old.address], "rev-2": [new.address]})
    poll(lambda: harness.ready_endpoints("rev-1") and harness.ready_endpoints("rev-2"), what="replicas ready")
    client = Client(harness.port)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: client.predict(), range(2000)))
    assert all(code == 200 for code, _ in results)
    counts = Counter(name for _, name in results)
    # Binomial(2000, 0.1): mean 200, sd 13.4; 5 sd either side.
    assert 133 <= counts["new"] <= 267, counts


def test_stats_answer_only_the_admin_token(harness: RouterHarness) -> None:
    # Any pod reaches the admin port; /stats names every namespace's revisions and their load.
    harness.configure([("rev-1", 100)], {"rev-1": [Replica("only").address]})
    poll(lambda: "rev-1" in harness.stats().get("revisions", {}), what="the routes to load")
    for token in (None, "a-guess", ADMIN_TOKEN[:-1]):
        assert harness.stats(token) == {"error": "the routes file's admin token is required"}


def test_host_header_routing_on_the_ingress_port(harness: RouterHarness) -> None:
    replica = Replica("only")
    harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    assert Client(harness.ingress, "iris.default.example.com:80").predict() == (200, "only")
    assert Client(harness.ingress, "nope.default.example.com").predict()[0] == 404


def test_unready_revision_gets_no_traffic_and_requests_wait_for_a_ready_replica(harness: RouterHarness) -> None:
    replica = Replica("late")
    replica.ready = False
    # An activation timeout far beyond the test's steps: on a busy machine they alone took 10 s.
    harness.configure([("rev-1", 100)], {"rev-1": [replica.address]}, activation_timeout=60)
    poll(lambda: "rev-1" in harness.stats()["revisions"], what="config loaded")
    client = Client(harness.port)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.predict)
        # Held (the activator), not failed: counted in flight on its revision while no replica is ready.
        poll(lambda: harness.stats()["revisions"]["rev-1"]["inflight"] == 1, what="the request held")
        assert not pending.done()
        replica.ready = True
        assert pending.result(timeout=60) == (200, "late")


def test_held_request_times_out_with_503(harness: RouterHarness) -> None:
    harness.configure([("rev-1", 100)], {"rev-1": []}, activation_timeout=0.5)
    poll(lambda: "rev-1" in harness.stats()["revisions"], what="config loaded")
    code, message = Client(harness.port).predict()
    assert code == 503 and "no ready replica" in message


def test_a_request_before_any_traffic_is_held_until_the_routes_name_a_revision(harness: RouterHarness) -> None:
    # A new InferenceService: its service is routed before its first revision is ready and given traffic.
    replica = Replica("first")
    harness.configure([], {"rev-1": [replica.address]})
    poll(lambda: harness.ready_endpoints("rev-1"), what="the replica probed ready")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(Client(harness.port).predict)
        poll(lambda: harness.stats().get("awaitingTraffic") == {"default/iris": 1}, what="the request held")
        harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
        assert pending.result(timeout=30) == (200, "first")
    assert harness.stats()["awaitingTraffic"] == {}


def test_a_request_held_for_traffic_that_never_comes_gets_503(harness: RouterHarness) -> None:
    harness.configure([], {"rev-1": []}, activation_timeout=0.5)
    poll(lambda: "rev-1" in harness.stats()["revisions"], what="config loaded")
    code, message = Client(harness.port).predict()
    assert code == 503 and message == "default/iris has no ready revision yet"


def test_a_dead_replica_causes_no_failed_request(harness: RouterHarness) -> None:
    a, b = Replica("a"), Replica("b")
    harness.configure([("rev-1", 100)], {"rev-1": [a.address, b.address]})
    poll(lambda: len(harness.ready_endpoints("rev-1")) == 2, what="replicas ready")
    client = Client(harness.port)
    stop = threading.Event()
    results: list[tuple[int, str]] = []

    def load() -> None:
        while not stop.is_set():
            results.append(client.predict())

    with ThreadPoolExecutor(4) as pool:
        for _ in range(4):
            pool.submit(load)
        poll(lambda: len(results) >= 50, what="load on both replicas")
        a.stop()
        after = len(results)
        poll(lambda: len(results) >= after + 200, what="load after one replica stopped")
        stop.set()
    assert results and all(code == 200 for code, _ in results), Counter(results)
    assert Counter(name for _, name in results)["b"] > 0


def test_container_concurrency_is_a_hard_limit(harness: RouterHarness) -> None:
    replica = Replica("slow", delay=0.05)
    harness.configure([("rev-1", 100)], {"rev-1": [replica.address]}, container_concurrency=2)
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    client = Client(harness.port)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: client.predict(), range(40)))
    assert all(code == 200 for code, _ in results)
    assert replica.max_inflight <= 2


def test_concurrency_and_request_buckets(harness: RouterHarness) -> None:
    replica = Replica("slow", delay=0.1)
    harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    client = Client(harness.port)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            client.predict()

    with ThreadPoolExecutor(4) as pool:
        for _ in range(4):
            pool.submit(load)
        buckets = poll(lambda: [b for b in harness.stats()["revisions"]["rev-1"]["buckets"] if b[1] > 3][:1],
                       timeout=5, what="a busy second")
        stop.set()
    _, concurrency, requests = buckets[0]
    assert 3.0 <= concurrency <= 4.5
    # Little's law: 4 in flight at >= 0.1 s each is at most 40 per second (the stub shares our GIL).
    assert 4 <= requests <= 45


def test_a_slow_replica_times_out_with_504_and_is_not_retried(harness: RouterHarness) -> None:
    slow = Replica("slow", delay=1.5)
    harness.configure([("rev-1", 100)], {"rev-1": [slow.address]}, timeout=0.5)
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    code, message = Client(harness.port).predict()
    assert code == 504 and "timed out" in message
    # A retry would have been sent while the first request still ran there (it answers after 1.5 s).
    poll(lambda: slow.inflight == 0, what="the slow replica to finish the request")
    assert slow.max_inflight == 1


def test_revision_out_of_the_routes_reports_its_in_flight_requests_as_draining(harness: RouterHarness) -> None:
    old, new = Replica("old", delay=1.0), Replica("new")
    harness.configure([("rev-1", 100)], {"rev-1": [old.address]})
    poll(lambda: harness.ready_endpoints("rev-1"), what="old replica ready")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(Client(harness.port).predict)
        poll(lambda: old.inflight == 1, what="the request on the old replica")
        harness.configure([("rev-2", 100)], {"rev-2": [new.address]})
        poll(lambda: harness.stats()["revisions"].get("rev-1", {}).get("draining") == [old.address],
             what="the old replica draining")
        poll(lambda: harness.ready_endpoints("rev-2"), what="new replica ready")
        assert Client(harness.port).predict() == (200, "new")
        assert pending.result(timeout=10) == (200, "old")
    assert harness.stats()["revisions"].get("rev-1", {}).get("draining", []) == []


def test_a_taken_service_port_is_reported_and_the_rest_is_served(harness: RouterHarness) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", harness.port))
    squatter.listen()
    try:
        replica = Replica("r")
        harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
        errors = poll(lambda: harness.stats().get("bindErrors"), what="the bind error")
        assert list(errors) == ["default/iris"] and str(harness.port) in errors["default/iris"]
        poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
        assert Client(harness.ingress, "iris.default.example.com").predict() == (200, "r")
    finally:
        squatter.close()


def test_upstream_connections_are_kept_alive(harness: RouterHarness) -> None:
    replica = Replica("r")
    harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    client = Client(harness.port)
    for _ in range(50):
        assert client.predict() == (200, "r")
    assert len(replica.post_connections) == 1
