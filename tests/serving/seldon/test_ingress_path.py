"""The router's Seldon ingress path: ``/seldon/NS/NAME/...`` split between predictors by their traffic,
with a copy of every request to the shadow predictor, whose answers nobody waits for."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.controllers.serving.test_router import ADMIN_TOKEN, Client, RouterHarness, _free_port
from tests.helpers import poll

PATH = "/seldon/default/sdep/api/v1.0/predictions"


class Predictor:
    """A stub executor: counts the requests it gets (and their paths), answers with its name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.paths: Counter[str] = Counter()
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                with stub.lock:
                    stub.paths[self.path] += 1
                self._send({"strData": stub.name})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self) -> int:
        with self.lock:
            return sum(self.paths.values())


@pytest.fixture
def harness(tmp_path: Path):
    h = RouterHarness(tmp_path)
    yield h
    h.close()


def _configure(harness: RouterHarness, predictors: dict[str, tuple[Predictor, float, bool]]) -> None:
    """One service per predictor, as the InferenceServices of a SeldonDeployment's predictors are routed."""
    services = {
        f"default/sdep-{name}": {
            "port": _free_port(), "hosts": [f"sdep-{name}.default.example.com"],
            "traffic": [{"revisionName": f"sdep-{name}-1", "percent": 100}],
            "revisions": {f"sdep-{name}-1": {"endpoints": [stub.address], "probePath": "/health/ping"}},
            "path": {"prefix": "/seldon/default/sdep/", "weight": weight, "shadow": shadow}}
        for name, (stub, weight, shadow) in predictors.items()}
    config = {"ingressPort": harness.ingress, "adminPort": harness.admin, "adminToken": ADMIN_TOKEN,
              "services": services}
    tmp = harness.path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config))
    tmp.replace(harness.path)
    harness.task = asyncio.run_coroutine_threadsafe(harness.router.run(), harness.loop)


def test_traffic_split_and_shadow_copies_on_the_ingress_path(harness: RouterHarness) -> None:
    a, b, mirror = Predictor("a"), Predictor("b"), Predictor("mirror")
    _configure(harness, {"a": (a, 75, False), "b": (b, 25, False), "mirror": (mirror, 0, True)})
    poll(lambda: all(harness.ready_endpoints(f"sdep-{n}-1") for n in ("a", "b", "mirror")), what="predictors ready")

    def send(_: int) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", harness.ingress, timeout=30)
        conn.request("POST", PATH, body=b'{"strData": "x"}', headers={"content-type": "application/json"})
        response = conn.getresponse()
        body = json.loads(response.read())
        conn.close()
        return response.status, body.get("strData")

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, range(400)))
    assert all(code == 200 for code, _ in results)
    counts = Counter(name for _, name in results)
    assert counts["mirror"] == 0  # a shadow's answers are dropped
    # Binomial(400, 0.25): mean 100, sd 8.7; 5 sd either side.
    assert 57 <= counts["b"] <= 143 and counts["a"] + counts["b"] == 400, counts
    poll(lambda: mirror.count() == 400, timeout=30, what=f"the shadow's copies ({mirror.count()} of 400)")
    assert set(mirror.paths) == set(a.paths) == {PATH}  # the whole path, which the executor strips
    assert Client(harness.ingress, "unknown.default.example.com").predict()[0] == 404


def test_an_ingress_path_of_another_namespace_is_not_routed() -> None:
    from trimaran.controllers.serving.reconciler import _ingress_path

    def isvc(namespace: str, path: str) -> dict:
        return {"metadata": {"namespace": namespace, "annotations": {"serving.trimaran.io/ingress-path": path}}}

    assert _ingress_path(isvc("team-a", "/seldon/team-b/model/")) == {}
    assert _ingress_path(isvc("team-b", "/seldon/team-b/model/"))["path"]["prefix"] == "/seldon/team-b/model/"
