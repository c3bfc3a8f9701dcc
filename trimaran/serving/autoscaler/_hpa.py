"""Kubernetes' HorizontalPodAutoscaler rule for a CPU (or memory) utilisation target (serving.md §4.2)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trimaran.serving.autoscaler._base import Decision

__all__ = ["HPA", "HPAConfig"]


@dataclass(frozen=True)
class HPAConfig:
    """HPA defaults: 80 % utilisation (KServe's default CPU target), tolerance 0.1, a 15 s sync
    period, 300 s scale-down stabilisation, scale-up by at most max(100 %, 4 pods) per period and
    scale-down by at most 100 % per period."""

    metric: str = "cpu"
    target_utilization: float = 80.0
    tolerance: float = 0.1
    sync_period: float = 15.0
    down_stabilization: float = 300.0
    up_percent: float = 100.0
    up_pods: int = 4
    min_replicas: int = 1
    max_replicas: int = 0  # 0: unlimited

    @classmethod
    def from_fields(cls, annotations: Mapping[str, str], *, min_replicas: int | None, max_replicas: int | None,
                    scale_target: int | None, scale_metric: str | None) -> HPAConfig:
        """KServe's mapping: scaleTarget is the utilisation percentage (or the
        ``autoscaling.knative.dev/target`` annotation); HPA cannot go below one replica."""
        target = annotations.get("autoscaling.knative.dev/target") or annotations.get(
            "serving.kserve.io/targetUtilizationPercentage")
        return cls(metric=scale_metric if scale_metric in ("cpu", "memory") else "cpu",
                   target_utilization=float(target) if target else float(scale_target or 80),
                   min_replicas=max(1, int(min_replicas if min_replicas is not None else 1)),
                   max_replicas=int(max_replicas or 0))


class HPA:
    """One revision's HPA. ``recommend`` is called as often as convenient; it decides once per sync period.

    >>> hpa = HPA(HPAConfig(), now=0.0)
    >>> hpa.recommend(now=15.0, current=2, utilization=160.0).desired   # twice the 80 % target
    4
    >>> hpa.recommend(now=20.0, current=4, utilization=10.0) is None    # not a sync yet
    True
    """

    def __init__(self, config: HPAConfig, now: float) -> None:
        self.config = config
        self._last_sync = now
        self._recommendations: list[tuple[float, int]] = []

    def reconfigure(self, config: HPAConfig) -> None:
        """Apply a changed target or bounds, keeping the stabilisation history."""
        self.config = config

    def recommend(self, now: float, current: int, utilization: float) -> Decision | None:
        """Desired replicas for the mean utilisation (% of the pods' requests), or None between syncs."""
        cfg = self.config
        if now - self._last_sync < cfg.sync_period:
            return None
        self._last_sync = now
        ratio = utilization / cfg.target_utilization
        current = max(current, 1)
        raw = current if abs(ratio - 1.0) <= cfg.tolerance else math.ceil(current * ratio)
        self._recommendations = [(t, r) for t, r in self._recommendations if now - t < cfg.down_stabilization]
        self._recommendations.append((now, raw))
        desired = raw
        reason = f"{cfg.metric} utilization {utilization:.3g}% of requests, target {cfg.target_utilization:.3g}%"
        if desired < current:
            # Scale-down stabilisation: the highest recommendation of the window.
            stabilized = max(r for _, r in self._recommendations)
            if stabilized > desired:
                reason += f"; held at {min(stabilized, current)} by the {cfg.down_stabilization:.0f}s stabilization"
            desired = min(stabilized, current)
        up_limit = max(math.ceil(current * (1 + cfg.up_percent / 100.0)), current + cfg.up_pods)
        if desired > up_limit:
            desired = up_limit
            reason += f"; scale-up limited to {up_limit} this period"
        bounded = max(desired, cfg.min_replicas)
        if cfg.max_replicas:
            bounded = min(bounded, cfg.max_replicas)
        return Decision(desired=bounded, mode="hpa", observed=utilization, target=cfg.target_utilization,
                        reason=reason)
