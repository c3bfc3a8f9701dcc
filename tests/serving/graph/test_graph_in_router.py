"""An InferenceGraph runs inside the InferenceService router: its steps reach the model services the router
serves in-process, so the graph's own replicas are not on the request path."""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path

import pytest

from tests.controllers.serving.test_router import ADMIN_TOKEN, RouterHarness, _free_port
from tests.helpers import poll
from tests.serving.seldon.test_ingress_path import Predictor


@pytest.fixture
def harness(tmp_path: Path):
    h = RouterHarness(tmp_path)
    yield h
    h.close()


def test_a_graph_route_runs_its_steps_in_the_router(harness: RouterHarness) -> None:
    model = Predictor("model")
    model_port, graph_port = _free_port(), _free_port()
    graph = {"name": "g", "timeout": 10, "nodes": {"root": {"routerType": "Sequence", "steps": [
        {"name": "first", "url": f"http://127.0.0.1:{model_port}/v1/models/m:predict"},
        {"name": "second", "url": f"http://127.0.0.1:{model_port}/v1/models/m:predict", "data": "$response"}]}}}
    services = {
        "default/m": {"port": model_port, "hosts": ["m.default.example.com"],
                      "traffic": [{"revisionName": "m-1", "percent": 100}],
                      "revisions": {"m-1": {"endpoints": [model.address], "probePath": "/health/ping"}}},
        # The graph's own revision has no replica at all: only the router can answer its POSTs.
        "default/g-graph": {"port": graph_port, "hosts": ["g-graph.default.example.com"],
                            "traffic": [{"revisionName": "g-1", "percent": 100}],
                            "revisions": {"g-1": {"endpoints": [], "probePath": "/"}}, "graph": graph}}
    config = {"ingressPort": harness.ingress, "adminPort": harness.admin, "adminToken": ADMIN_TOKEN,
              "services": services}
    harness.path.write_text(json.dumps(config))
    harness.task = asyncio.run_coroutine_threadsafe(harness.router.run(), harness.loop)
    poll(lambda: harness.ready_endpoints("m-1"), what="the model replica ready")

    conn = http.client.HTTPConnection("127.0.0.1", graph_port, timeout=30)
    conn.request("POST", "/", body=b'{"instances": [[1, 2]]}', headers={"content-type": "application/json"})
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (200, {"strData": "model"})
    assert model.paths == {"/v1/models/m:predict": 2}  # both steps, in order, at the model
    assert response.getheader("x-trimaran-revision") is None  # answered by the graph, not proxied to a replica
