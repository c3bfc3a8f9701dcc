"""The controller's side of autoscaling: router buckets into the KPA, ticks, wake-ups, CPU for the HPA."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from trimaran.controllers.serving.autoscaling import ResourceSampler, RevisionScaler

WINDOW = {"autoscaling.knative.dev/window": "6s", "autoscaling.knative.dev/target": "2",
          "autoscaling.knative.dev/target-utilization-percentage": "100"}


def stats(buckets: list[tuple[int, float, int]], inflight: int = 0) -> dict:
    return {"buckets": [list(b) for b in buckets], "inflight": inflight, "ready": [], "notReady": []}


def test_kpa_reads_router_buckets_and_decides_once_per_tick() -> None:
    scaler = RevisionScaler({"minReplicas": 1, "maxReplicas": 5}, WINDOW, now=100.0, ready_pods=1)
    busy = stats([(s, 8.0, 80) for s in range(95, 100)], inflight=8)
    first = scaler.decide(100.0, busy, ready=1, current=1, utilization=lambda metric: None)
    assert first is not None and first.desired == 4 and first.mode == "panic"
    assert scaler.decide(101.0, busy, ready=1, current=4, utilization=lambda metric: None) is None  # within the tick
    assert scaler.decide(102.0, busy, ready=4, current=4, utilization=lambda metric: None).desired == 4


def test_no_router_stats_means_no_decision() -> None:
    scaler = RevisionScaler({"minReplicas": 0}, WINDOW, now=0.0, ready_pods=1)
    assert scaler.decide(10.0, None, ready=1, current=1, utilization=lambda metric: None) is None


def test_a_held_request_wakes_a_revision_at_zero_at_once() -> None:
    scaler = RevisionScaler({"minReplicas": 0}, {**WINDOW, "autoscaling.knative.dev/scale-to-zero-grace-period": "0s"},
                            now=0.0, ready_pods=1)
    idle = stats([(s, 0.0, 0) for s in range(0, 20)])
    assert scaler.decide(20.0, idle, ready=1, current=1, utilization=lambda metric: None).desired == 0
    woken = scaler.decide(20.5, stats([(s, 0.0, 0) for s in range(0, 20)], inflight=1), ready=0, current=0,
                          utilization=lambda metric: None)
    assert woken is not None and woken.desired == 1


def test_rps_metric_reads_request_counts() -> None:
    scaler = RevisionScaler({"scaleMetric": "rps", "scaleTarget": 10, "minReplicas": 1},
                            {"autoscaling.knative.dev/target-utilization-percentage": "100"}, now=0.0, ready_pods=1)
    decision = scaler.decide(59.0, stats([(s, 0.5, 25) for s in range(0, 60)]), ready=3, current=3,
                             utilization=lambda metric: None)
    assert decision is not None and decision.desired == 3


def test_cpu_metric_uses_the_hpa() -> None:
    scaler = RevisionScaler({"scaleMetric": "cpu", "scaleTarget": 50, "minReplicas": 1, "maxReplicas": 10},
                            {}, now=0.0, ready_pods=1)
    assert scaler.hpa is not None and scaler.kpa is None
    assert scaler.decide(5.0, stats([]), ready=2, current=2, utilization=lambda metric: 100.0) is None  # not a sync yet
    decision = scaler.decide(15.0, stats([]), ready=2, current=2, utilization=lambda metric: 100.0)
    assert decision is not None and decision.desired == 4 and decision.mode == "hpa"


@dataclass
class _Container:
    pid: int


@dataclass
class _State:
    containers: dict = field(default_factory=dict)


class _Runtime:
    def pod_status(self, uid: str) -> _State:
        return _State({"main": _Container(os.getpid())})


def test_memory_metric_measures_resident_memory() -> None:
    scaler = RevisionScaler({"scaleMetric": "memory", "scaleTarget": 50, "minReplicas": 1}, {}, now=0.0,
                            ready_pods=1)
    seen = []
    scaler.decide(15.0, stats([]), ready=1, current=1, utilization=lambda metric: seen.append(metric) or 100.0)
    assert seen == ["memory"]
    sampler = ResourceSampler(_Runtime())
    spec = {"model": {"resources": {"requests": {"memory": "64Gi"}}}}
    value = sampler.utilization([{"metadata": {"uid": "u1"}}], spec, "memory")
    assert value is not None and 0 < value < 100  # this test process: resident, and well under 64Gi


def test_cpu_sampler_reports_percent_of_the_request() -> None:
    sampler = ResourceSampler(_Runtime())
    pods = [{"metadata": {"uid": "u1"}}]
    spec = {"model": {"resources": {"requests": {"cpu": "500m"}}}}
    assert sampler.utilization(pods, spec) is None  # one sample is no rate
    start = time.process_time()
    while time.process_time() - start < 0.1:  # burn CPU in this "replica" (whatever the machine's load)
        sum(i * i for i in range(10_000))
    value = sampler.utilization(pods, spec)
    assert value is not None and value > 0


def test_kserve_autoscaler_class_annotation_chooses_the_hpa() -> None:
    scaler = RevisionScaler({"minReplicas": 1}, {"serving.kserve.io/autoscalerClass": "hpa"}, now=0.0, ready_pods=1)
    assert scaler.hpa is not None and scaler.hpa.config.metric == "cpu" and scaler.hpa.config.target_utilization == 80
