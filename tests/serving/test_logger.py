"""Payload logging (KServe's and Seldon's ``logger``) against a real HTTP sink started by the test."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.helpers import REPO, poll
from tests.serving.conftest import ModelServer, free_port

KSERVE_EXTENSIONS = ("--log-extension", "inferenceservicename=digits", "--log-extension", "namespace=team-a",
                     "--log-extension", "component=predictor", "--log-extension", "endpoint=default")


class Sink:
    """An aiohttp server on a free port that records every POST (or, with ``hang``, never answers)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/events"
        self.events: list[tuple[dict[str, str], bytes]] = []
        self.hanging = 0  # requests held unanswered
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._started.wait(10), "the sink did not start"

    async def _handle(self, request: web.Request) -> web.Response:
        if self.hang:
            self.hanging += 1
            await asyncio.Event().wait()
        self.events.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        return web.Response(status=202)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/events", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._started.set()
        self._loop.run_forever()

    def stop(self) -> None:
        async def cleanup() -> None:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    sink = Sink()
    yield sink
    sink.stop()


@pytest.fixture(scope="module")
def servers(sink: Sink, digits_dir: Path, module_tmp: Path) -> Iterator[tuple[ModelServer, ModelServer]]:
    """A server without a logger (the baseline) and one logging to ``sink``; both start at once."""
    plain = ModelServer(digits_dir, module_tmp, grpc=False)
    logged = ModelServer(digits_dir, module_tmp, grpc=False, log_url=sink.url, log_queue=50,
                         extra_args=KSERVE_EXTENSIONS)
    try:
        yield plain.wait_ready(), logged.wait_ready()
    finally:
        plain.stop()
        logged.stop()


def v1_body(digits: tuple, row: int) -> bytes:
    return json.dumps({"instances": digits[0][row:row + 1].tolist()}).encode()


def v2_body(digits: tuple, row: int) -> dict:
    return {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP64",
                        "data": digits[0][row].tolist()}]}


def test_kserve_logger_sends_request_and_response_cloudevents(sink: Sink, servers: tuple[ModelServer, ModelServer],
                                                              digits: tuple) -> None:
    server = servers[1]
    body = v1_body(digits, 0)
    answer = server.client.post("/v1/models/digits:predict", content=body,
                                headers={"content-type": "application/json", "x-request-id": "req-1"})
    assert answer.status_code == 200
    poll(lambda: sum(h["ce-id"] == "req-1" for h, _ in sink.events) >= 2, timeout=10, what="two events at the sink")
    by_type = {h["ce-type"]: (h, payload) for h, payload in sink.events if h["ce-id"] == "req-1"}
    request_headers, request_payload = by_type["org.kubeflow.serving.inference.request"]
    response_headers, response_payload = by_type["org.kubeflow.serving.inference.response"]
    assert request_payload == body and response_payload == answer.content
    for headers in (request_headers, response_headers):
        assert headers["ce-specversion"] == "1.0" and headers["ce-source"] == f"{server.url}/"
        assert (headers["ce-inferenceservicename"], headers["ce-namespace"], headers["ce-component"],
                headers["ce-endpoint"]) == ("digits", "team-a", "predictor", "default")
        assert headers["content-type"] == "application/json"
    before = len(sink.events)
    server.client.get("/v2/health/ready")  # not an inference: not logged
    assert server.client.post("/v2/models/digits/infer", json=v2_body(digits, 2)).status_code == 200
    poll(lambda: len(sink.events) >= before + 2, timeout=10, what="the V2 request's events")
    assert len(sink.events) == before + 2
    # The sink has an event before the server has read its 202: the count follows a moment later.
    poll(lambda: re.search(r'trimaran_payload_log_events_total\{outcome="sent"\} [4-9]',
                           server.client.get("/metrics").text), timeout=10, what="4 events counted as sent")


def test_a_hanging_sink_does_not_slow_predictions_and_drops_are_counted(
        sink: Sink, servers: tuple[ModelServer, ModelServer], digits: tuple) -> None:
    sink.hang = True
    try:
        body = v1_body(digits, 1)
        headers = {"content-type": "application/json"}
        latencies: dict[str, list[float]] = {"plain": [], "logged": []}
        # 100 requests make 200 events: more than the queue (50) holds while both senders wait on the sink.
        for _ in range(100):
            for label, server in zip(("plain", "logged"), servers, strict=True):
                started = time.perf_counter()
                status = server.client.post("/v1/models/digits:predict", content=body, headers=headers).status_code
                latencies[label].append(time.perf_counter() - started)
                assert status == 200
        plain_p50 = statistics.median(latencies["plain"])
        logged_p50 = statistics.median(latencies["logged"])
        assert logged_p50 < 2 * plain_p50 + 0.002, (plain_p50, logged_p50)
        assert sink.hanging >= 1  # the events did go out, and the sink holds them unanswered
        metrics = servers[1].client.get("/metrics").text
        dropped = re.search(r'trimaran_payload_log_events_total\{outcome="dropped"\} (\S+)', metrics)
        # 200 - 50 queued - 2 held = 148, less a few taken by senders whose 5 s timeout ran out on a slow machine.
        assert dropped and float(dropped.group(1)) >= 100, metrics
    finally:
        sink.hang = False


def test_seldon_unit_logger_sends_the_units_request(sink: Sink, tmp_path: Path) -> None:
    config = {"name": "sdep", "namespace": "team-a", "predictor": "main", "protocol": "seldon",
              "graph": {"name": "clf", "implementation": "SIMPLE_MODEL", "type": "MODEL",
                        "logger": {"url": sink.url, "mode": "request"}}, "sources": {}}
    port = free_port()
    with (tmp_path / "executor.log").open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "trimaran.serving.seldon", "--config", json.dumps(config),
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            def ready() -> bool:
                assert process.poll() is None, (tmp_path / "executor.log").read_text()
                try:
                    return client.get("/ready").status_code == 200
                except httpx.TransportError:
                    return False

            poll(ready, timeout=30, what="the executor ready")
            answer = client.post("/api/v1.0/predictions",
                                 json={"data": {"ndarray": [[1.0, 2.0]]}, "meta": {"puid": "p-1"}})
            assert answer.status_code == 200
            poll(lambda: len(seldon_events(sink)) >= 1, timeout=10, what="the unit's request at the sink")
            headers, payload = seldon_events(sink)[0]
            assert headers["ce-type"] == "io.seldon.serving.inference.request" and headers["ce-id"] == "p-1"
            assert (headers["ce-modelid"], headers["ce-inferenceservicename"], headers["ce-namespace"],
                    headers["ce-endpoint"], headers["ce-requestid"]) == ("clf", "sdep", "team-a", "main", "p-1")
            assert json.loads(payload) == {"data": {"names": [], "ndarray": [[1.0, 2.0]]}, "meta": {"puid": "p-1"}}
            client.post("/api/v1.0/predictions", json={"data": {"ndarray": [[3.0]]}})
            poll(lambda: len(seldon_events(sink)) >= 2, timeout=10, what="the second request at the sink")
            assert all(h["ce-type"].endswith(".request") for h, _ in seldon_events(sink))  # mode request
    finally:
        process.terminate()
        process.wait(15)


def seldon_events(sink: Sink) -> list[tuple[dict[str, str], bytes]]:
    return [(h, payload) for h, payload in sink.events if h["ce-type"].startswith("io.seldon.")]


def test_the_controllers_logger_arguments_configure_the_model_server() -> None:
    from trimaran.controllers.serving.pods import replica_pod
    from trimaran.serving.config import config_from_args

    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "iris", "namespace": "models", "uid": "u-1"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://out/m"}}}}
    revision = {"name": "iris-predictor-00001", "spec": {"logger": {"url": "http://sink:8000/", "mode": "response"}},
                "model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://out/m"}}
    pod = replica_pod(isvc, "predictor", revision, 0, [20100], None, None)
    config = config_from_args(pod["spec"]["containers"][0]["args"])
    assert (config.log_url, config.log_mode) == ("http://sink:8000/", "response")
    assert config.log_extensions == {"inferenceservicename": "iris", "namespace": "models", "component": "predictor",
                                     "endpoint": "default"}


def test_a_logger_without_a_reachable_sink_is_refused_at_apply_with_its_path() -> None:
    from trimaran.api import validate
    from trimaran.api.errors import ManifestError

    def isvc(logger: dict) -> dict:
        return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "iris"},
                "spec": {"predictor": {"logger": logger, "model": {"modelFormat": {"name": "sklearn"},
                                                                   "storageUri": "pvc://models/iris"}}}}

    accepted = validate(isvc({"url": "http://sink.team-a:8080/events", "mode": "request"})).object
    assert accepted["spec"]["predictor"]["logger"] == {"url": "http://sink.team-a:8080/events", "mode": "request"}
    for logger, expected in (({"mode": "all"}, "spec.predictor.logger.url: Required value"),
                             ({"url": "https://sink"}, "spec.predictor.logger.url: Invalid value"),
                             ({"url": "http://sink", "mode": "some"}, "spec.predictor.logger.mode")):
        with pytest.raises(ManifestError) as info:
            validate(isvc(logger))
        assert any(expected in problem for problem in info.value.problems), info.value.problems
