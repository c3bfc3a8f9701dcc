"""Prometheus metrics of the model server, summed over its worker processes.

Workers write to prometheus-client's multiprocess files in a directory private to the server
(``PROMETHEUS_MULTIPROC_DIR``, set by the supervisor before a worker imports prometheus_client, and removed
when the server exits); ``GET /metrics`` on any worker reads all of them.

A request changes five to nine values (in flight up and down, a counter, histogram sums and buckets), and each
write through prometheus-client (a lock, a file write) cost 7-10 % of a small model's throughput. So on the
event loop's thread the increments are added up in a dict and written once, at the end of the loop's current
pass (``call_soon``): under load one pass answers several requests, in-flight ups and downs that cancel are
never written, and a reader of ``/metrics`` sees every answered request, since the write happens before the
loop reads anything more. Other threads (a model's predict thread) write at once.

Series:
    ``trimaran_requests_total{model_name, model_version, protocol, code}``: requests answered (protocol is
        ``v1``, ``v2`` or ``grpc-v2``; code the HTTP status, or the gRPC code's name).
    ``request_predict_seconds{model_name}``: time in the model (KServe's name), per batch.
    ``trimaran_request_duration_seconds{model_name, protocol}``: whole request, from parsed to answered.
    ``trimaran_batch_size{model_name}``: requests per executed batch.
    ``trimaran_queue_depth{model_name}``: requests waiting for the model.
    ``trimaran_inflight_requests{model_name}``: requests being served (the autoscaler's concurrency).
    ``trimaran_payload_log_events_total{outcome}``: payload-logger events ``sent``, ``dropped`` (queue full)
        or ``failed`` (the sink refused, failed or timed out).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


_pinned_pid: int | None = None


def _pin_process_id() -> None:
    """prometheus-client asks the process id at every write, to notice a fork; a worker is started with exec
    and never forks, and each ask is a system call (glibc no longer caches it): nine per request. Once per
    process, before its first metric, so every metric shares one set of files."""
    global _pinned_pid
    if _pinned_pid is None:
        _pinned_pid = pid = os.getpid()
        values.ValueClass = values.MultiProcessValue(process_identifier=lambda: pid)


class ServerMetrics:
    """The server's metrics; one instance per worker process."""

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        if self.multiprocess:
            _pin_process_id()
        self.registry = CollectorRegistry()
        kw: dict[str, Any] = {"registry": self.registry}
        self.requests = Counter("trimaran_requests", "Requests answered.",
                                ["model_name", "model_version", "protocol", "code"], **kw)
        self.predict = Histogram("request_predict_seconds", "Time in the model's predict, per batch.",
                                 ["model_name"], buckets=LATENCY_BUCKETS, **kw)
        self.duration = Histogram("trimaran_request_duration_seconds", "Whole request, parsed to answered.",
                                  ["model_name", "protocol"], buckets=LATENCY_BUCKETS, **kw)
        self.batch = Histogram("trimaran_batch_size", "Requests per executed batch.", ["model_name"],
                               buckets=BATCH_BUCKETS, **kw)
        gauge_kw = {**kw, "multiprocess_mode": "livesum"}
        self.queue = Gauge("trimaran_queue_depth", "Requests waiting for the model.", ["model_name"], **gauge_kw)
        self.inflight = Gauge("trimaran_inflight_requests", "Requests being served.", ["model_name"], **gauge_kw)
        self.log_events = Counter("trimaran_payload_log_events", "Payload-logger events by outcome.", ["outcome"],
                                  **kw)
        self._children: dict[tuple, Any] = {}
        self._pending: dict[Any, float] = {}  # a prometheus value -> what is yet to be added to it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def _value(self, metric: Any, *labels: str) -> Any:
        """The value object of a counter's or gauge's child (prometheus-client's ``_value``)."""
        key = (id(metric), *labels)
        value = self._children.get(key)
        if value is None:
            value = self._children[key] = metric.labels(*labels)._value
        return value

    def _histogram(self, metric: Any, *labels: str) -> tuple[Any, list, list[float]]:
        """A histogram child's sum, buckets and their upper bounds, as its ``observe`` uses them."""
        key = (id(metric), *labels)
        parts = self._children.get(key)
        if parts is None:
            child = metric.labels(*labels)
            parts = self._children[key] = (child._sum, child._buckets, child._upper_bounds)
        return parts

    def _add(self, value: Any, amount: float) -> None:
        if threading.get_ident() == self._loop_thread:
            pending = self._pending
            if not pending:
                self._loop.call_soon(self._flush)
            pending[value] = pending.get(value, 0.0) + amount
            return
        if self._loop_thread is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                value.inc(amount)
                return
            self._loop_thread = threading.get_ident()
            self._add(value, amount)
            return
        value.inc(amount)

    def _observe(self, parts: tuple[Any, list, list[float]], amount: float) -> None:
        total, buckets, bounds = parts
        self._add(total, amount)
        index = bisect_left(bounds, amount)  # the first bucket whose bound is at least the amount
        if index < len(buckets):
            self._add(buckets[index], 1)

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for value, amount in pending.items():
            if amount:
                value.inc(amount)

    def request_started(self, model: str) -> None:
        self._add(self._value(self.inflight, model), 1)

    def request_finished(self, model: str, version: str, protocol: str, code: str, started: float) -> None:
        """Count an answered request; ``started`` is its ``time.perf_counter()`` when parsed."""
        self._add(self._value(self.requests, model, version, protocol, code), 1)
        self._observe(self._histogram(self.duration, model, protocol), time.perf_counter() - started)

    def request_done(self, model: str) -> None:
        self._add(self._value(self.inflight, model), -1)

    def predicted(self, model: str, seconds: float, batch_size: int) -> None:
        self._observe(self._histogram(self.predict, model), seconds)
        self._observe(self._histogram(self.batch, model), batch_size)

    def log_event(self, outcome: str) -> None:
        self._add(self._value(self.log_events, outcome), 1)

    def queue_depth(self, model: str, delta: int) -> None:
        self._add(self._value(self.queue, model), delta)

    def exposition(self) -> bytes:
        """The text format of every worker's metrics (this process's alone outside multiprocess mode)."""
        if threading.get_ident() == self._loop_thread:
            self._flush()
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)
