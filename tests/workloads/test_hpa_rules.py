"""The HorizontalPodAutoscaler's arithmetic against upstream's replica calculator and behavior rules."""

from __future__ import annotations

from trimaran.controllers.workloads.hpa import ScalingHistory, normalize, replicas_for_usage

REQUESTS = {"a": 0.1, "b": 0.1}  # cores


def test_ratio_with_tolerance() -> None:
    assert replicas_for_usage(2, {"a": 0.052, "b": 0.05}, REQUESTS, 50, [], [], True) == (2, 51.0)  # within 10 %
    assert replicas_for_usage(2, {"a": 0.1, "b": 0.1}, REQUESTS, 50, [], [], True)[0] == 4
    assert replicas_for_usage(2, {"a": 0.01, "b": 0.01}, REQUESTS, 50, [], [], True)[0] == 1
    assert replicas_for_usage(2, {"a": 300.0, "b": 100.0}, {}, 100, [], [], False)[0] == 4  # AverageValue


def test_pod_without_a_sample_counts_at_its_request_going_down() -> None:
    # Alone, pod a asks for 1 replica (20 %); b counted at 100 % brings the mean to 55 %: no change.
    assert replicas_for_usage(2, {"a": 0.02}, REQUESTS, 50, [], ["b"], True)[0] == 2


def test_pods_not_ready_count_as_idle_going_up() -> None:
    # a at 200 % alone would ask for 4 of 1 measured pod; with b starting at 0 %, the mean is 100 %: 2 × 2 = 4.
    assert replicas_for_usage(2, {"a": 0.2}, REQUESTS, 50, ["b"], [], True)[0] == 4
    assert replicas_for_usage(2, {"a": 0.06}, REQUESTS, 50, ["b"], [], True)[0] == 2  # 120 % → 60 %: within


def test_scale_down_waits_for_the_window() -> None:
    history = ScalingHistory(recommendations=[(0.0, 5)])
    held = normalize(history, 10.0, 5, 1, 1, 10, {"scaleDown": {"stabilizationWindowSeconds": 60, "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15}]}})
    assert held.desired == 5
    later = normalize(history, 100.0, 5, 1, 1, 10, {"scaleDown": {"stabilizationWindowSeconds": 60, "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15}]}})
    assert later.desired == 1


def test_rate_policies_and_select_policy() -> None:
    up = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 60}, {"type": "Percent", "value": 50, "periodSeconds": 60}]}}
    limited = normalize(ScalingHistory(), 0.0, 4, 10, 1, 20, up)
    assert (limited.desired, limited.condition) == (6, "ScaleUpLimit")  # 50 % of 4 beats 1 pod
    up["scaleUp"]["selectPolicy"] = "Min"
    assert normalize(ScalingHistory(), 0.0, 4, 10, 1, 20, up).desired == 5
    # A scale-up made earlier in the period counts against it.
    assert normalize(ScalingHistory(events=[(-30.0, 1)]), 0.0, 5, 10, 1, 20, up).desired == 5
    up["scaleUp"]["selectPolicy"] = "Disabled"
    assert normalize(ScalingHistory(), 0.0, 4, 10, 1, 20, up).desired == 4
    bounded = normalize(ScalingHistory(), 0.0, 2, 10, 1, 3, None)
    assert (bounded.desired, bounded.condition) == (3, "TooManyReplicas")
