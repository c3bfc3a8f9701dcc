"""The HorizontalPodAutoscaler's arithmetic against upstream's replica calculator and behavior rules, and its
reconciler on a real store for what needs no measured pod."""

from __future__ import annotations

from pathlib import Path

from trimaran.controllers.base import Key
from trimaran.controllers.workloads.hpa import (
    HorizontalPodAutoscalerReconciler,
    ScalingHistory,
    normalize,
    replicas_for_usage,
)
from trimaran.store import Store, open_store

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


# The reconciler on a real store, without a node (no pod can be measured): the paths that need no sample.
def _store(tmp_path: Path) -> Store:
    store = open_store(tmp_path / "trimaran.db")
    store.ensure_namespace("default")
    return store


def _deployment(store: Store, replicas: int) -> None:
    store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
                  "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": {
                      "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}},
                  "status": {"selector": "app=web", "replicas": replicas}})


def _hpa(store: Store, metrics: list[dict]) -> Key:
    store.create({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "web", "namespace": "default"},
                  "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                           "minReplicas": 1, "maxReplicas": 3, "metrics": metrics}})
    return Key("HorizontalPodAutoscaler", "default", "web")


def test_replicas_above_max_are_brought_down_without_a_metric(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _deployment(store, 5)
    key = _hpa(store, [])
    HorizontalPodAutoscalerReconciler(store, runtime=None, sync_period=15).reconcile(key)
    assert store.get("Deployment", "default", "web")["spec"]["replicas"] == 3
    status = store.get("HorizontalPodAutoscaler", "default", "web")["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (5, 3)
    assert [e["message"] for e in store.list_events()
            if e["reason"] == "SuccessfulRescale"] == ["New size: 3; reason: Current number of replicas above "
                                                       "Spec.MaxReplicas"]


def test_metrics_with_no_metrics_api_here_are_reported(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _deployment(store, 1)
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "default",
                                                                  "labels": {"app": "web"}},
                  "spec": {"containers": [{"name": "c"}]}})
    key = _hpa(store, [{"type": "External", "external": {"metric": {"name": "queue"},
                                                         "target": {"type": "Value", "value": "10"}}}])
    HorizontalPodAutoscalerReconciler(store, runtime=None, sync_period=15).reconcile(key)
    conditions = {c["type"]: c for c in store.get("HorizontalPodAutoscaler", "default", "web")["status"]["conditions"]}
    assert conditions["ScalingActive"]["status"] == "False"
    assert conditions["ScalingActive"]["reason"] == "FailedGetExternalMetric"
    assert "no metrics API serves External metrics on this machine" in conditions["ScalingActive"]["message"]
    assert store.get("Deployment", "default", "web")["spec"]["replicas"] == 1
