"""Feeding the autoscalers: the router's per-second buckets into a KPA, pod CPU or memory into an HPA.

Which autoscaler a component gets follows KServe in Knative mode: the HPA class
(``autoscaling.knative.dev/class: hpa.autoscaling.knative.dev``, or ``scaleMetric`` cpu/memory),
else the KPA on concurrency (default) or rps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from trimaran.api.quantity import parse_cpu, parse_memory
from trimaran.runtime import NodeAPI
from trimaran.serving.autoscaler import HPA, KPA, Decision, HPAConfig, KPAConfig

__all__ = ["ResourceSampler", "RevisionScaler"]

_CLASS = "autoscaling.knative.dev/class"
_METRIC = "autoscaling.knative.dev/metric"


def _uses_hpa(spec: dict, annotations: dict[str, str]) -> bool:
    metric = annotations.get(_METRIC) or annotations.get("serving.kserve.io/metrics") or spec.get("scaleMetric")
    return (annotations.get(_CLASS) == "hpa.autoscaling.knative.dev"
            or annotations.get("serving.kserve.io/autoscalerClass") == "hpa" or metric in ("cpu", "memory"))


class RevisionScaler:
    """One revision's autoscaler with the state Knative keeps per revision (its tick)."""

    def __init__(self, spec: dict, annotations: dict[str, str], now: float, ready_pods: int) -> None:
        self.hpa: HPA | None = None
        self.kpa: KPA | None = None
        if _uses_hpa(spec, annotations):
            self.hpa = HPA(self._hpa_config(spec, annotations), now)
        else:
            self.kpa = KPA(self.config_for(spec, annotations), now, ready_pods_at_start=ready_pods)
        self._last_tick: float | None = None

    @staticmethod
    def config_for(spec: dict, annotations: dict[str, str]) -> KPAConfig:
        """The KPA configuration of a component (KServe's field → annotation mapping)."""
        return KPAConfig.from_annotations(
            annotations, min_replicas=spec.get("minReplicas"), max_replicas=spec.get("maxReplicas"),
            scale_target=spec.get("scaleTarget"), scale_metric=spec.get("scaleMetric"),
            container_concurrency=spec.get("containerConcurrency"))

    @staticmethod
    def _hpa_config(spec: dict, annotations: dict[str, str]) -> HPAConfig:
        return HPAConfig.from_fields(annotations, min_replicas=spec.get("minReplicas"),
                                     max_replicas=spec.get("maxReplicas"), scale_target=spec.get("scaleTarget"),
                                     scale_metric=annotations.get(_METRIC) or annotations.get(
                                         "serving.kserve.io/metrics") or spec.get("scaleMetric"))

    def reconfigure(self, spec: dict, annotations: dict[str, str]) -> None:
        """Apply the component's current bounds and targets (live fields need no new revision)."""
        if self.kpa is not None:
            self.kpa.reconfigure(self.config_for(spec, annotations))
        if self.hpa is not None:
            self.hpa.reconfigure(self._hpa_config(spec, annotations))

    def decide(self, now: float, stats: dict | None, ready: int, current: int,
               utilization: Callable[[str], float | None]) -> Decision | None:
        """A decision when one is due (each KPA tick, each HPA sync), else None (keep the count).

        ``stats`` is the router's entry for the revision; without it (router down) nothing is decided,
        so a missing metric never reads as an idle revision. ``utilization(metric)`` measures the
        replicas for the HPA ("cpu" or "memory", % of their request).
        """
        if stats is None:
            return None
        if self.hpa is not None:
            value = utilization(self.hpa.config.metric)
            return None if value is None else self.hpa.recommend(now, current, value)
        assert self.kpa is not None
        cfg = self.kpa.config
        for second, concurrency, requests in stats.get("buckets") or []:
            self.kpa.record(float(second), concurrency if cfg.metric == "concurrency" else float(requests))
        inflight = int(stats.get("inflight") or 0)
        waking = current == 0 and inflight > 0
        if inflight and cfg.metric == "concurrency" or waking:
            # The second under way is not in a bucket yet: count what is in flight now (held requests
            # included), as the activator pokes the autoscaler when a request arrives at zero.
            self.kpa.record(now, float(inflight))
        if not waking and self._last_tick is not None and now - self._last_tick < cfg.tick:
            return None
        self._last_tick = now
        return self.kpa.scale(now, ready)


class ResourceSampler:
    """Mean CPU or memory use of a revision's replicas as a percentage of their request (what the HPA
    reads): CPU as the rate of CPU seconds between two samples, memory as resident set size."""

    def __init__(self, runtime: NodeAPI | None) -> None:
        self.runtime = runtime
        self._last: dict[str, tuple[float, float]] = {}

    def utilization(self, pods: list[dict], spec: dict, metric: str = "cpu") -> float | None:
        """None while no replica can be measured (for CPU: until two samples exist)."""
        request = _request(spec, metric)
        values = [used / request * 100.0 for used in (self.pod_usage(pod, metric) for pod in pods)
                  if used is not None]
        return sum(values) / len(values) if values else None

    def pod_usage(self, pod: dict, metric: str) -> float | None:
        """A pod's CPU use in cores since its previous sample (None at its first), or its resident bytes;
        None when the pod has no process to measure."""
        now = time.monotonic()
        for uid in [u for u, (t, _) in self._last.items() if t < now - 600]:
            del self._last[uid]  # replicas not seen for ten minutes are gone
        uid = pod["metadata"]["uid"]
        used = self._usage(uid, metric)
        if used is None or metric == "memory":
            return used
        prev = self._last.get(uid)
        self._last[uid] = (now, used)
        return (used - prev[1]) / (now - prev[0]) if prev is not None and now > prev[0] else None

    def _usage(self, uid: str, metric: str) -> float | None:
        """CPU seconds, or resident bytes, of the pod's processes and their children."""
        if self.runtime is None:
            return None
        try:
            state = self.runtime.pod_status(uid)
        except Exception:  # noqa: BLE001 - a pod that just went away has nothing to report
            return None
        total = 0.0
        found = False
        for container in state.containers.values():
            if not container.pid:
                continue
            try:
                proc = psutil.Process(container.pid)
                for p in [proc, *proc.children(recursive=True)]:
                    if metric == "memory":
                        total += p.memory_info().rss
                    else:
                        times = p.cpu_times()
                        total += times.user + times.system
                found = True
            except psutil.Error:
                continue
        return total if found else None


def _request(spec: dict, metric: str) -> float:
    """Cores (cpu) or bytes (memory) the replica requests, limits filling in for requests; when unset,
    KServe's defaults: 1 core, 2Gi."""
    model = next((spec[k] for k in ("model", "sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "onnx")
                  if spec.get(k)), None)
    resources = (model or {}).get("resources") or ((spec.get("containers") or [{}])[0].get("resources") or {})
    amount = (resources.get("requests") or {}).get(metric) or (resources.get("limits") or {}).get(metric)
    if metric == "memory":
        return float(parse_memory(amount)) if amount else 2.0 * 2**30
    return float(parse_cpu(amount)) if amount else 1.0
