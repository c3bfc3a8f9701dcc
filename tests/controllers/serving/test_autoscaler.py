"""The KPA and HPA rules (serving.md §4.1, §4.2) as tables of inputs and decisions."""

from __future__ import annotations

import pytest

from trimaran.serving.autoscaler import HPA, KPA, HPAConfig, KPAConfig


def feed(kpa: KPA, start: int, end: int, value: float) -> None:
    """One sample per second in [start, end)."""
    for t in range(start, end):
        kpa.record(float(t), value)


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "target"), [
    (KPAConfig(), 70.0),  # 100 x 0.7
    (KPAConfig(container_concurrency=10), 7.0),  # containerConcurrency is the total
    (KPAConfig(container_concurrency=10, target=50), 7.0),  # a target is capped at containerConcurrency
    (KPAConfig(target=5), 3.5),
    (KPAConfig(metric="rps"), 140.0),  # 200 x 0.7
    (KPAConfig(target=1, target_utilization=1.0), 1.0),
    (KPAConfig(target=0.001), 0.01),  # never below 0.01
])
def test_per_pod_target(config: KPAConfig, target: float) -> None:
    assert config.per_pod_target == pytest.approx(target)


def test_defaults_match_knative() -> None:
    cfg = KPAConfig()
    assert (cfg.stable_window, cfg.panic_window, cfg.panic_threshold_percentage, cfg.tick) == (60, 6, 200, 2)
    assert (cfg.max_scale_up_rate, cfg.max_scale_down_rate, cfg.scale_to_zero_grace, cfg.initial()) == (1000, 2, 30, 1)


def test_annotations_override_fields() -> None:
    cfg = KPAConfig.from_annotations(
        {"autoscaling.knative.dev/window": "6s", "autoscaling.knative.dev/panic-window-percentage": "20",
         "autoscaling.knative.dev/panic-threshold-percentage": "150", "autoscaling.knative.dev/target": "4",
         "autoscaling.knative.dev/target-utilization-percentage": "50", "autoscaling.knative.dev/max-scale": "9",
         "autoscaling.knative.dev/metric": "rps", "autoscaling.knative.dev/initial-scale": "2",
         "autoscaling.knative.dev/scale-to-zero-grace-period": "1s", "unrelated/key": "x"},
        min_replicas=0, max_replicas=3, scale_target=10, scale_metric="concurrency", container_concurrency=0)
    assert (cfg.stable_window, cfg.panic_window, cfg.panic_threshold_percentage) == (6, 1.2, 150)
    assert (cfg.metric, cfg.per_pod_target, cfg.max_scale, cfg.min_scale) == ("rps", 2.0, 9, 0)
    assert (cfg.initial(), cfg.scale_to_zero_grace) == (2, 1.0)
    fields = KPAConfig.from_annotations({}, min_replicas=2, max_replicas=5, scale_target=10, scale_metric="rps")
    assert (fields.metric, fields.target, fields.min_scale, fields.max_scale, fields.initial()) == ("rps", 10, 2, 5, 2)


# --- KPA decisions --------------------------------------------------------------------------------

# (samples per second over the last 60 s as (from, to, value), ready pods, expected desired, expected mode)
# Target 10 per pod (target 10, utilisation 100 %), stable window 60 s, panic window 6 s.
KPA_TABLE = [
    ([(0, 60, 10.0)], 1, 1, "stable"),  # exactly at target
    ([(0, 60, 25.0)], 3, 3, "stable"),  # 2.5 pods' worth on 3: stay (ceil)
    ([(0, 60, 15.0)], 1, 2, "panic"),  # 2 pods wanted on 1 ready: the 200 % threshold is reached
    ([(0, 60, 25.0)], 2, 3, "stable"),  # 3 wanted on 2 ready: 150 %, below the threshold
    ([(0, 54, 10.0), (54, 60, 40.0)], 1, 4, "panic"),  # 6 s burst to 4x: panic wants 4
    ([(0, 60, 40.0)], 1, 4, "panic"),
    ([(0, 60, 5.0)], 4, 2, "stable"),  # halving is the most a tick may do (max scale-down rate 2)
    ([(0, 60, 1.0)], 8, 4, "stable"),
    ([(0, 60, 10000.0)], 1, 1000, "panic"),  # max scale-up rate 1000 x ready
    ([(0, 60, 30.0)], 0, 3, "panic"),  # from zero ready pods: counted as one
]


@pytest.mark.parametrize(("samples", "ready", "desired", "mode"), KPA_TABLE)
def test_kpa_decision_table(samples: list[tuple[int, int, float]], ready: int, desired: int, mode: str) -> None:
    kpa = KPA(KPAConfig(target=10, target_utilization=1.0), now=0.0)
    for start, end, value in samples:
        feed(kpa, start, end, value)
    decision = kpa.scale(now=59.0, ready_pods=ready)
    assert (decision.desired, decision.mode) == (desired, mode)


def test_panic_mode_never_scales_down_and_ends_a_stable_window_after_the_burst() -> None:
    kpa = KPA(KPAConfig(target=10, target_utilization=1.0, stable_window=60), now=0.0)
    feed(kpa, 0, 10, 40.0)
    assert (kpa.scale(9.0, 1).desired, kpa.scale(9.0, 1).mode) == (4, "panic")
    feed(kpa, 10, 30, 10.0)  # load falls to one pod's worth
    held = kpa.scale(29.0, 4)
    assert (held.desired, held.mode) == (4, "panic")  # no scale-down while panicking
    feed(kpa, 30, 70, 10.0)
    # 60 s after the last over-threshold tick (t=9): back to stable; the 70 s average is ~1.3 pods.
    after = kpa.scale(69.0, 4)
    assert after.mode == "stable" and after.desired == 2  # and at most halving per tick


def test_restarted_autoscaler_with_several_pods_starts_in_panic() -> None:
    kpa = KPA(KPAConfig(target=10, target_utilization=1.0), now=100.0, ready_pods_at_start=5)
    feed(kpa, 100, 103, 0.0)
    decision = kpa.scale(102.0, 5)
    assert (decision.desired, decision.mode) == (5, "panic")


@pytest.mark.parametrize(("min_scale", "max_scale", "load", "desired"), [
    (2, 0, 0.0, 2), (0, 3, 100.0, 3), (1, 5, 25.0, 3), (4, 6, 10.0, 4)])
def test_min_and_max_scale_bound_the_decision(min_scale: int, max_scale: int, load: float, desired: int) -> None:
    kpa = KPA(KPAConfig(target=10, target_utilization=1.0, min_scale=min_scale, max_scale=max_scale), now=0.0)
    feed(kpa, 0, 60, load)
    assert kpa.scale(59.0, 3).desired == desired


def test_scale_to_zero_after_the_stable_window_and_the_grace_period() -> None:
    cfg = KPAConfig(target=10, target_utilization=1.0, stable_window=6, scale_to_zero_grace=30)
    kpa = KPA(cfg, now=0.0)
    feed(kpa, 0, 3, 5.0)
    assert kpa.scale(2.0, 1).desired == 1
    feed(kpa, 3, 9, 0.0)
    assert kpa.scale(8.0, 1).desired == 1  # a stable window of idleness: inactive, grace starts
    feed(kpa, 9, 38, 0.0)
    assert kpa.scale(37.0, 1).desired == 1  # 29 s into the grace period
    decision = kpa.scale(38.0, 1)
    assert decision.desired == 0 and "grace period" in decision.reason
    feed(kpa, 38, 40, 0.0)
    kpa.record(40.0, 1.0)  # a request arrives at zero (the activator's poke)
    assert kpa.scale(40.0, 0).desired == 1


def test_min_scale_one_never_goes_to_zero() -> None:
    kpa = KPA(KPAConfig(min_scale=1, stable_window=6, scale_to_zero_grace=0), now=0.0)
    feed(kpa, 0, 100, 0.0)
    assert kpa.scale(99.0, 1).desired == 1


def test_scale_down_delay_holds_the_highest_recent_decision() -> None:
    kpa = KPA(KPAConfig(target=10, target_utilization=1.0, stable_window=6, scale_down_delay=10), now=0.0)
    feed(kpa, 0, 6, 30.0)
    assert kpa.scale(5.0, 3).desired == 3
    feed(kpa, 6, 12, 10.0)
    assert kpa.scale(11.0, 3).desired == 3  # would be 1 or 2; held by the delay window
    feed(kpa, 12, 30, 10.0)
    assert kpa.scale(29.0, 3).desired == 1  # delay over: floor(3 / 2) is the most a tick may remove


def test_rps_metric_uses_request_counts() -> None:
    kpa = KPA(KPAConfig(metric="rps", target=100, target_utilization=1.0), now=0.0)
    feed(kpa, 0, 60, 350.0)
    assert kpa.scale(59.0, 4).desired == 4


def test_decision_reason_names_mode_observation_and_target() -> None:
    kpa = KPA(KPAConfig(container_concurrency=10), now=0.0)
    feed(kpa, 0, 10, 31.5)
    decision = kpa.scale(9.0, 1)
    assert decision.reason.startswith("panic mode, observed concurrency 31.5, target 7")


# --- HPA ------------------------------------------------------------------------------------------

# (current replicas, utilisation %, desired) at the first sync; target 80 %, tolerance 0.1.
HPA_TABLE = [
    (2, 80.0, 2),  # on target
    (2, 87.0, 2),  # within tolerance (ratio 1.0875)
    (2, 89.0, 3),  # just outside: ceil(2 x 1.1125)
    (4, 160.0, 8),  # 2x
    (1, 800.0, 5),  # 10x wanted, limited to max(2 x 1, 1 + 4) = 5 per period
    (10, 800.0, 20),  # limited to max(2 x 10, 14) = 20
    (4, 40.0, 2),  # the first recommendation: nothing older holds it up
]


@pytest.mark.parametrize(("current", "utilization", "desired"), HPA_TABLE)
def test_hpa_decision_table(current: int, utilization: float, desired: int) -> None:
    hpa = HPA(HPAConfig(), now=0.0)
    decision = hpa.recommend(15.0, current, utilization)
    assert decision is not None and decision.desired == desired


def test_hpa_decides_once_per_sync_period() -> None:
    hpa = HPA(HPAConfig(), now=0.0)
    assert hpa.recommend(14.9, 2, 200.0) is None
    assert hpa.recommend(15.0, 2, 200.0) is not None
    assert hpa.recommend(20.0, 5, 200.0) is None


def test_hpa_scale_down_uses_the_highest_recommendation_of_300s() -> None:
    hpa = HPA(HPAConfig(), now=0.0)
    assert hpa.recommend(15.0, 4, 160.0).desired == 8
    assert hpa.recommend(30.0, 8, 20.0).desired == 8  # wants 2; 8 was recommended 15 s ago
    assert hpa.recommend(300.0, 8, 20.0).desired == 8  # t=15 still within 300 s
    assert hpa.recommend(315.0, 8, 20.0).desired == 2  # the 8 has aged out; 2 is the highest left


def test_hpa_bounds() -> None:
    hpa = HPA(HPAConfig(min_replicas=2, max_replicas=3), now=0.0)
    assert hpa.recommend(15.0, 2, 400.0).desired == 3
    hpa = HPA(HPAConfig(min_replicas=2), now=0.0)
    assert hpa.recommend(15.0, 2, 0.0).desired == 2
