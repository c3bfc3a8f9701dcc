"""Adaptive batching gives every caller its own rows; a full queue answers 503 + Retry-After; timeouts 504."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import joblib

from tests.helpers import poll
from tests.serving.conftest import ModelServer
from tests.serving.models import EchoRows


def echo_dir(tmp_path: Path) -> Path:
    base = tmp_path / "echo"
    (base / "1").mkdir(parents=True)
    joblib.dump(EchoRows(), base / "1" / "model.joblib")
    return base


def rows_body(values: list[float], sleep: float = 0.0) -> dict:
    data = [x for v in values for x in (v, sleep)]
    return {"inputs": [{"name": "input-0", "shape": [len(values), 2], "datatype": "FP32", "data": data}]}


def metric(server: ModelServer, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(server.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_each_caller_gets_its_own_rows(start_server, tmp_path: Path) -> None:
    server = start_server(echo_dir(tmp_path), name="echo", grpc=False, max_batch_size=16,
                          max_batch_latency_ms=30).wait_ready()

    client = httpx.Client(base_url=server.url, timeout=10, limits=httpx.Limits(max_connections=24))

    def call(i: int) -> tuple[list[float], list[float]]:
        values = [float(i * 10 + k) for k in range(1 + i % 3)]  # 1 to 3 rows, distinct per caller
        r = client.post("/v2/models/echo/infer", json=rows_body(values))
        assert r.status_code == 200, r.text
        return values, r.json()["outputs"][0]["data"]

    with client, ThreadPoolExecutor(24) as pool:
        for values, got in pool.map(call, range(96)):
            assert got == [2 * v for v in values]
    batches = metric(server, "trimaran_batch_size_count", model_name="echo")
    assert metric(server, "trimaran_batch_size_sum", model_name="echo") == 96
    assert batches < 96  # requests were merged
    assert metric(server, "request_predict_seconds_count", model_name="echo") == batches


def test_full_queue_answers_503_with_retry_after_and_timeouts_504(start_server, tmp_path: Path) -> None:
    # The first request runs 2.5 s: time enough, on a busy machine, to see it running and the
    # second queued before a third is sent; the timeout (3 s) is above it and below the slow one's.
    server = start_server(echo_dir(tmp_path), name="echo", grpc=False, max_queue=1,
                          request_timeout=3.0).wait_ready()
    url = f"{server.url}/v2/models/echo/infer"
    answers: dict[str, httpx.Response] = {}

    def send(key: str, sleep: float) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.__setitem__(key, httpx.post(
            url, json=rows_body([1.0], sleep), timeout=10)))
        thread.start()
        return thread

    running = send("running", 2.5)
    poll(lambda: metric(server, "trimaran_inflight_requests") == 1, what="first request running")
    queued = send("queued", 0.0)
    poll(lambda: metric(server, "trimaran_queue_depth") == 1, what="second request queued")
    refused = httpx.post(url, json=rows_body([1.0]), timeout=10)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert "queue is full" in refused.json()["error"]
    running.join()
    queued.join()
    assert answers["running"].status_code == 200 and answers["queued"].status_code == 200
    slow = httpx.post(url, json=rows_body([1.0], 4.0), timeout=10)
    assert slow.status_code == 504
    assert "timeout" in slow.json()["error"]
    assert metric(server, "trimaran_requests_total", code="504") == 1
    assert metric(server, "trimaran_requests_total", code="503") == 1
