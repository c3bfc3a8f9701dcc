"""autoscaling/v2 HorizontalPodAutoscaler: upstream's controller for any kind with a scale subresource.

Each sync (15 s, as kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period``;
``TRIMARAN_HPA_SYNC_SECONDS`` changes it) reads the target through its scale subresource facts
(`KindInfo.scale`: spec replicas, status selector), measures the selected pods' CPU or memory through
the runtime (`ResourceSampler`, the same sampler KServe's HPA class and elastic PyTorchJobs use) against
their containers' requests, and computes the desired count as upstream's replica calculator does: the
usage ratio with a 10 % tolerance, pods not ready yet counted as idle when scaling up, pods without a
sample counted as at their request going down and idle going up (never flipping the direction); then
``behavior``'s stabilisation windows and rate policies, minReplicas and maxReplicas. The count is
written to the target as ``kubectl scale`` writes it (the kind's validation first), with upstream's
status (currentReplicas, desiredReplicas, currentMetrics, lastScaleTime, conditions AbleToScale,
ScalingActive, ScalingLimited with its reasons) and ``SuccessfulRescale`` events.

A ``behavior`` left out is upstream's default rules (scale-up by the larger of 4 pods or 100 % per 15 s,
scale-down after a 300 s window); upstream's behavior-less path differs only in capping scale-up at
max(2×, 4). Metrics other than ``Resource`` cpu/memory (Pods, Object, External, ContainerResource) have
no metrics API here: the HPA says so in ``ScalingActive`` and scales on the others.
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from trimaran.api import ManifestError, validate
from trimaran.api.autoscaling import API_VERSION_V1, default_rules, metrics_of, scale_target_info
from trimaran.api.kinds import read_path
from trimaran.api.quantity import format_cpu, format_memory, parse_cpu, parse_memory
from trimaran.controllers.base import Key, Reconciler
from trimaran.controllers.conditions import get_condition, now_rfc3339, set_condition
from trimaran.controllers.pods import is_terminating, phase
from trimaran.controllers.serving.autoscaling import ResourceSampler
from trimaran.runtime import NodeAPI
from trimaran.store import Conflict, NotFound, Store

__all__ = ["HorizontalPodAutoscalerReconciler", "Recommendation", "ScalingHistory", "replicas_for_usage"]

TOLERANCE = 0.1
_FIRST_SAMPLE_RETRY = 1.0  # CPU is a rate: the second sample of a new pod comes this soon, not a sync later


@dataclass
class ScalingHistory:
    """What upstream keeps per HPA between syncs: raw recommendations (for the stabilisation windows)
    and the replica changes made (for the rate policies' periods)."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    events: list[tuple[float, int]] = field(default_factory=list)  # (when, replicas added; negative: removed)


@dataclass(frozen=True)
class Recommendation:
    desired: int
    condition: str  # ScalingLimited's reason
    message: str


def replicas_for_usage(current: int, usage: dict[str, float], requests: dict[str, float], target: float,
                       unready: list[str], missing: list[str], utilization: bool) -> tuple[int, float]:
    """Upstream's ``GetResourceReplicas`` (``utilization``: ``target`` is a percentage of ``requests``) or
    ``GetRawResourceReplicas`` (``target`` is an average per pod): the replica count for the pods' ``usage``
    (by uid) and the measured value (utilization % or average). Pods in ``missing`` have no sample; pods in
    ``unready`` are not ready yet."""

    def ratio_of(samples: dict[str, float]) -> tuple[float, float]:
        if utilization:
            requested = sum(requests[uid] for uid in samples)
            measured = sum(samples.values()) * 100.0 / requested if requested else 0.0
        else:
            measured = sum(samples.values()) / len(samples)
        return measured / target, measured

    ratio, measured = ratio_of(usage)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        return (current if abs(ratio - 1.0) <= TOLERANCE else math.ceil(ratio * len(usage))), measured
    filled = dict(usage)
    for uid in missing:
        if ratio < 1.0:  # going down, a pod without a sample counts as busy (at its request, or the target)
            filled[uid] = requests[uid] * max(100.0, target) / 100.0 if utilization else target
        elif ratio > 1.0:  # going up, as idle
            filled[uid] = 0.0
    if scale_up_with_unready:  # pods still starting count as idle, so a scale-up is not overdone
        filled.update(dict.fromkeys(unready, 0.0))
    new_ratio, _ = ratio_of(filled)
    if abs(new_ratio - 1.0) <= TOLERANCE or ratio < 1.0 < new_ratio or ratio > 1.0 > new_ratio:
        return current, measured
    desired = math.ceil(new_ratio * len(filled))
    if new_ratio < 1.0 and desired > current or new_ratio > 1.0 and desired < current:
        return current, measured
    return desired, measured


def _rules(behavior: dict[str, Any] | None, direction: str) -> dict[str, Any]:
    return (behavior or {}).get(direction) or default_rules(direction)


def _stabilized(history: ScalingHistory, now: float, current: int, desired: int, behavior: dict | None) -> int:
    """``stabilizeRecommendationWithBehaviors``: the lowest recommendation of the scale-up window and the
    highest of the scale-down window bound the move from ``current``."""
    up_window = _rules(behavior, "scaleUp").get("stabilizationWindowSeconds") or 0
    down_window = _rules(behavior, "scaleDown").get("stabilizationWindowSeconds")
    down_window = 300 if down_window is None else down_window
    up, down = desired, desired
    for when, recommended in history.recommendations:
        if when > now - up_window:
            up = min(up, recommended)
        if when > now - down_window:
            down = max(down, recommended)
    keep = max(up_window, down_window)
    history.recommendations = [(t, r) for t, r in history.recommendations if t > now - keep]
    history.recommendations.append((now, desired))
    return min(max(current, up), down)


def _rate_limit(history: ScalingHistory, now: float, current: int, rules: dict[str, Any], up: bool) -> int:
    """``calculateScaleUpLimitWithScalingRules`` / ``...ScaleDownLimit...``: each policy's bound from the
    count at the start of its period; selectPolicy Max takes the bound allowing the most change."""
    select = rules.get("selectPolicy") or "Max"
    if select == "Disabled":
        return current
    bounds = []
    for policy in rules.get("policies") or []:
        period = float(policy["periodSeconds"])
        changed = sum(delta for when, delta in history.events if when > now - period and (delta > 0) == up)
        start = current - changed
        if policy["type"] == "Pods":
            bounds.append(start + policy["value"] if up else start - policy["value"])
        elif up:
            bounds.append(math.ceil(start * (1 + policy["value"] / 100.0)))
        else:
            bounds.append(math.floor(start * (1 - policy["value"] / 100.0)))
    if not bounds:
        return current
    most_change = max(bounds) if up else min(bounds)
    least_change = min(bounds) if up else max(bounds)
    return most_change if select == "Max" else least_change


def normalize(history: ScalingHistory, now: float, current: int, desired: int, min_replicas: int,
              max_replicas: int, behavior: dict[str, Any] | None) -> Recommendation:
    """``normalizeDesiredReplicasWithBehaviors``: stabilise, then limit the rate, then bound."""
    stabilized = _stabilized(history, now, current, desired, behavior)
    if stabilized > current:
        limit = max(_rate_limit(history, now, current, _rules(behavior, "scaleUp"), up=True), current)
        allowed = min(max_replicas, limit)
        if stabilized > allowed:
            if limit < max_replicas:
                return Recommendation(allowed, "ScaleUpLimit",
                                      "the desired replica count is increasing faster than the maximum scale rate")
            return Recommendation(allowed, "TooManyReplicas",
                                  "the desired replica count is more than the maximum replica count")
    elif stabilized < current:
        limit = min(_rate_limit(history, now, current, _rules(behavior, "scaleDown"), up=False), current)
        allowed = max(min_replicas, limit)
        if stabilized < allowed:
            if limit > min_replicas:
                return Recommendation(allowed, "ScaleDownLimit",
                                      "the desired replica count is decreasing faster than the maximum scale rate")
            return Recommendation(allowed, "TooFewReplicas",
                                  "the desired replica count is less than the minimum replica count")
    if stabilized > max_replicas:
        return Recommendation(max_replicas, "TooManyReplicas",
                              "the desired replica count is more than the maximum replica count")
    if stabilized < min_replicas:
        return Recommendation(min_replicas, "TooFewReplicas",
                              "the desired replica count is less than the minimum replica count")
    return Recommendation(stabilized, "DesiredWithinRange", "the desired count is within the acceptable range")


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """A scale subresource's selector string (``a=b,c=d``, the form the kinds here write)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.lstrip("=").strip():
            return False
    return True


def _pod_request(pod: dict, resource: str) -> tuple[float | None, str]:
    """The pod's request (cores or bytes): its containers' requests (limits standing in, as the API
    defaults them), or None and the container that has none."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
        if amount is None:
            return None, container.get("name", "")
        total += parse_cpu(amount) if resource == "cpu" else float(parse_memory(amount))
    return total, ""


def _is_ready(pod: dict) -> bool:
    ready = get_condition(pod.get("status") or {}, "Ready")
    return phase(pod) == "Running" and bool(ready) and ready.get("status") == "True"


def _v1_status(status: dict[str, Any]) -> dict[str, Any]:
    """autoscaling/v1's status fields of a v2 status (v1 has no conditions; the events say as much)."""
    out = {k: status[k] for k in ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas")
           if k in status}
    for metric in status.get("currentMetrics") or []:
        current = (metric.get("resource") or {}).get("current") or {}
        if (metric.get("resource") or {}).get("name") == "cpu" and "averageUtilization" in current:
            out["currentCPUUtilizationPercentage"] = current["averageUtilization"]
    return out


class _MetricProblem(Exception):
    """A metric that could not be computed: ScalingActive's reason and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class HorizontalPodAutoscalerReconciler(Reconciler):
    name = "horizontalpodautoscaler"
    kinds = ("HorizontalPodAutoscaler",)

    def __init__(self, store: Store, runtime: NodeAPI | None, sync_period: float | None = None) -> None:
        super().__init__(store)
        self.sampler = ResourceSampler(runtime)
        self.sync_period = sync_period if sync_period is not None else float(
            os.environ.get("TRIMARAN_HPA_SYNC_SECONDS", "15"))
        self._history: dict[str, ScalingHistory] = {}

    def reconcile(self, key: Key) -> float | None:
        try:
            hpa = self.store.get("HorizontalPodAutoscaler", key.namespace, key.name)
        except NotFound:
            self._history = {uid: h for uid, h in self._history.items() if self._exists(uid)}
            return None
        if hpa["metadata"].get("deletionTimestamp"):
            return None
        history = self._history.setdefault(hpa["metadata"]["uid"], ScalingHistory())
        status: dict[str, Any] = copy.deepcopy(hpa.get("status") or {})
        retry = self._sync(hpa, status, history)
        if hpa["metadata"].get("generation") is not None:
            status["observedGeneration"] = hpa["metadata"]["generation"]
        if hpa["apiVersion"] == API_VERSION_V1:
            status = _v1_status(status)
        if status != (hpa.get("status") or {}):
            hpa["status"] = status
            try:
                self.write_status(hpa)
            except (Conflict, NotFound):
                return 0.1
        return retry if retry is not None else self.sync_period

    def _exists(self, uid: str) -> bool:
        return any(o["metadata"]["uid"] == uid for o in self.store.list("HorizontalPodAutoscaler", shared=True))

    def _sync(self, hpa: dict, status: dict, history: ScalingHistory) -> float | None:
        spec = hpa["spec"]
        ref = spec["scaleTargetRef"]
        ns = hpa["metadata"]["namespace"]
        try:
            info = scale_target_info(ref)
            target = self.store.get(info.kind, ns, ref["name"])
        except (LookupError, NotFound):
            message = (f"the HPA controller was unable to get the target's current scale: "
                       f'{ref.get("kind")} "{ref.get("name")}" not found')
            if set_condition(status, "AbleToScale", "False", "FailedGetScale", message):
                self.store.record_event(hpa, "Warning", "FailedGetScale", message.split(": ", 1)[1])
            return None
        scale = info.scale
        assert scale is not None  # the API refuses a target without one
        spec_replicas = read_path(target, scale.spec_replicas_path)
        if spec_replicas is None:
            spec_replicas = read_path(target, scale.status_replicas_path)
        current = int(spec_replicas or 0)
        set_condition(status, "AbleToScale", "True", "SucceededGetScale",
                      "the HPA controller was able to get the target's current scale")
        status["currentReplicas"] = current
        min_replicas, max_replicas = int(spec.get("minReplicas") or 1), int(spec["maxReplicas"])
        if current == 0:
            status["desiredReplicas"] = 0
            set_condition(status, "ScalingActive", "False", "ScalingDisabled",
                          "scaling is disabled since the replica count of the target is zero")
            return None
        rescale_reason = ""
        retry: float | None = None
        if current > max_replicas:
            desired, rescale_reason = max_replicas, "Current number of replicas above Spec.MaxReplicas"
        elif current < min_replicas:
            desired, rescale_reason = min_replicas, "Current number of replicas below Spec.MinReplicas"
        else:
            selector = scale.selector(target)
            try:
                proposed, metric_reason, retry = self._compute(hpa, status, ns, selector, current)
            except _MetricProblem as problem:
                set_condition(status, "ScalingActive", "False", problem.reason,
                              f"the HPA was unable to compute the replica count: {problem}")
                self.store.record_event(hpa, "Warning", problem.reason, str(problem))
                return None
            if proposed is None:
                return retry
            limited = normalize(history, time.time(), current, proposed, min_replicas, max_replicas,
                                spec.get("behavior"))
            set_condition(status, "ScalingLimited", "True" if limited.condition != "DesiredWithinRange" else "False",
                          limited.condition, limited.message)
            desired = limited.desired
            rescale_reason = metric_reason if desired > current else "All metrics below target"
        status["desiredReplicas"] = desired
        if desired == current:
            set_condition(status, "AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
            return retry
        if not self._write_scale(hpa, target, info, desired, status):
            return 0.5
        history.events = [(t, d) for t, d in history.events if t > time.time() - 1800] + [
            (time.time(), desired - current)]
        status["currentReplicas"], status["lastScaleTime"] = current, now_rfc3339()
        set_condition(status, "AbleToScale", "True", "SucceededRescale",
                      f"the HPA controller was able to update the target scale to {desired}")
        self.store.record_event(hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {rescale_reason}")
        return retry

    def _write_scale(self, hpa: dict, target: dict, info: Any, desired: int, status: dict) -> bool:
        """Set the target's replicas as the scale subresource does: the kind's validation, then the store."""
        scale = info.scale
        parent_path, _, leaf = scale.spec_replicas_path.strip(".").rpartition(".")
        parent = read_path(target, parent_path) if parent_path else target
        problem = ""
        if not isinstance(parent, dict):
            problem = f"{info.kind} {target['metadata']['name']} has no {scale.spec_replicas_path} to scale"
        else:
            parent[leaf] = desired
            try:
                validate(target)
                self.store.update(target)
            except ManifestError as exc:
                problem = "; ".join(exc.problems)
            except (Conflict, NotFound):
                return False  # changed meanwhile: decided again from what is stored
        if problem:
            message = f"the HPA controller was unable to update the target scale: {problem}"
            set_condition(status, "AbleToScale", "False", "FailedUpdateScale", message)
            self.store.record_event(hpa, "Warning", "FailedRescale",
                                    f"New size: {desired}; error: {problem}")
            return False
        return True

    def _compute(self, hpa: dict, status: dict, ns: str, selector: str | None,
                 current: int) -> tuple[int | None, str, float | None]:
        """The largest proposal over the metrics (upstream's rule), the reason of that metric, and when to
        look again sooner than a sync (a new pod's first CPU sample)."""
        if not selector:
            raise _MetricProblem("InvalidSelector", "the HPA target's scale is missing a selector")
        pods = [p for p in self.store.list("Pod", ns, shared=True)
                if _selector_matches(selector, (p["metadata"].get("labels") or {}))
                and not is_terminating(p) and phase(p) not in ("Failed", "Succeeded")]
        if not pods:
            raise _MetricProblem("FailedGetResourceMetric",
                                 "failed to get cpu utilization: no pods returned by selector while calculating "
                                 "replica count")
        best: tuple[int, str] | None = None
        current_metrics: list[dict[str, Any]] = []
        unsupported: list[str] = []
        waiting = False
        for metric in metrics_of(hpa):
            if metric.get("type") != "Resource" or (metric.get("resource") or {}).get("name") not in ("cpu", "memory"):
                unsupported.append(metric.get("type") if metric.get("type") != "Resource"
                                   else f"Resource {(metric.get('resource') or {}).get('name')}")
                continue
            result = self._resource_metric(metric["resource"], pods, current)
            if result is None:
                waiting = True
                continue
            proposed, current_metric, reason = result
            current_metrics.append(current_metric)
            if best is None or proposed > best[0]:
                best = (proposed, reason)
        status["currentMetrics"] = current_metrics or None
        if status["currentMetrics"] is None:
            del status["currentMetrics"]
        if best is None:
            if waiting:
                return None, "", _FIRST_SAMPLE_RETRY
            raise _MetricProblem("FailedGetExternalMetric" if "External" in unsupported else "FailedGetPodsMetric",
                                 f"no metrics API serves {', '.join(unsupported)} metrics on this machine; only "
                                 f"Resource cpu and memory are measured")
        names = ", ".join(f"{(m['resource'])['name']} resource" + (
            " utilization (percentage of request)" if "averageUtilization" in m["resource"]["current"] else "")
            for m in current_metrics)
        message = f"the HPA was able to successfully calculate a replica count from {names}"
        if unsupported:
            message += f"; not measured on this machine: {', '.join(unsupported)} metrics"
        set_condition(status, "ScalingActive", "True", "ValidMetricFound", message)
        return best[0], best[1], _FIRST_SAMPLE_RETRY if waiting else None

    def _resource_metric(self, source: dict, pods: list[dict],
                         current: int) -> tuple[int, dict[str, Any], str] | None:
        """One Resource metric: the proposal, its currentMetrics entry and its rescale reason; None while
        no pod has a sample yet."""
        resource = source["name"]
        target = source.get("target") or {}
        utilization = target.get("averageUtilization") is not None
        usage: dict[str, float] = {}
        requests: dict[str, float] = {}
        missing: list[str] = []
        unready: list[str] = []
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if utilization:
                request, container = _pod_request(pod, resource)
                if request is None:
                    raise _MetricProblem("FailedGetResourceMetric",
                                         f"failed to get {resource} utilization: missing request for {resource} in "
                                         f"container {container} of Pod {pod['metadata']['name']}")
                requests[uid] = request
            used = self.sampler.pod_usage(pod, resource)
            if resource == "cpu" and not _is_ready(pod):
                unready.append(uid)  # upstream ignores a CPU sample of a pod not ready yet (its start-up burst)
            elif used is None:
                missing.append(uid)
            else:
                usage[uid] = used
        if not usage:
            return None
        if utilization:
            wanted = float(target["averageUtilization"])
        else:
            wanted = parse_cpu(target["averageValue"]) if resource == "cpu" else float(parse_memory(
                target["averageValue"]))
        proposed, measured = replicas_for_usage(current, usage, requests, wanted, unready, missing, utilization)
        average = sum(usage.values()) / len(usage)
        average_text = format_cpu(average) if resource == "cpu" else format_memory(int(average))
        current_value: dict[str, Any] = {"averageValue": average_text}
        if utilization:
            current_value["averageUtilization"] = int(measured)
        reason = f"{resource} resource utilization (percentage of request) above target" if utilization \
            else f"{resource} resource above target"
        return proposed, {"type": "Resource", "resource": {"name": resource, "current": current_value}}, reason
