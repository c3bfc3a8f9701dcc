"""The model server's metrics: increments added up during a pass of the event loop are written at its end,
with the values prometheus-client's own calls would give; other threads write at once."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import CollectorRegistry, Histogram

from trimaran.serving.metrics import LATENCY_BUCKETS, ServerMetrics


def _sample(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_pass_of_the_loop_is_written_at_its_end_and_before_an_exposition() -> None:
    async def scenario() -> None:
        metrics = ServerMetrics()
        for _ in range(3):
            metrics.request_started("m")
            metrics.request_finished("m", "1", "v2", "200", 0.0)
            metrics.request_done("m")
        metrics.request_started("m")  # one still in flight
        assert _sample(metrics, "trimaran_requests_total", model_name="m", model_version="1", protocol="v2",
                       code="200") == 0, "nothing is written during the pass"
        assert b'trimaran_requests_total{code="200",model_name="m",model_version="1",protocol="v2"} 3.0' in \
            metrics.exposition()
        metrics.request_finished("m", "1", "v2", "200", 0.0)
        await asyncio.sleep(0)  # the pass ends
        assert _sample(metrics, "trimaran_requests_total", model_name="m", model_version="1", protocol="v2",
                       code="200") == 4
        assert _sample(metrics, "trimaran_inflight_requests", model_name="m") == 1
        assert _sample(metrics, "trimaran_request_duration_seconds_count", model_name="m", protocol="v2") == 4

    asyncio.run(scenario())


def _expected_bucket(histogram: Histogram, le: str) -> float:
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket") and sample.labels["le"] == le:
                return sample.value
    raise AssertionError(f"no bucket le={le}")


def test_histograms_get_the_buckets_observe_gives() -> None:
    amounts = [0.0, 0.0004, 0.0005, 0.0007, 0.001, 0.003, 0.05, 0.5, 29.0, 30.0, 31.0, 120.0]
    expected = Histogram("expected", "", buckets=LATENCY_BUCKETS, registry=CollectorRegistry())
    for amount in amounts:
        expected.observe(amount)

    async def scenario() -> ServerMetrics:
        metrics = ServerMetrics()
        for amount in amounts:
            metrics.predicted("m", amount, 1)
        await asyncio.sleep(0)
        return metrics

    metrics = asyncio.run(scenario())
    for bound in [*LATENCY_BUCKETS, float("inf")]:
        le = "+Inf" if bound == float("inf") else repr(bound)
        want = _expected_bucket(expected, le)
        assert _sample(metrics, "request_predict_seconds_bucket", model_name="m", le=le) == want, le
    assert _sample(metrics, "request_predict_seconds_sum", model_name="m") == sum(amounts)


def test_another_thread_writes_at_once() -> None:
    async def scenario() -> list:
        metrics = ServerMetrics()
        metrics.request_started("m")  # the loop's thread is the one whose increments wait for the pass's end
        seen: list = []

        def predict_thread() -> None:
            metrics.predicted("m", 0.002, 4)
            seen.append(_sample(metrics, "trimaran_batch_size_sum", model_name="m"))

        thread = threading.Thread(target=predict_thread)
        thread.start()
        thread.join(10)  # the loop does not run meanwhile: only the thread's own write can show
        return seen

    assert asyncio.run(scenario()) == [4]
