"""The Knative Pod Autoscaler's decision rule (serving.md §4.1), as a pure class with an injectable clock."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from trimaran.api.serving import parse_duration
from trimaran.serving.autoscaler._base import Decision

__all__ = ["KPA", "KPAConfig"]

_PREFIX = "autoscaling.knative.dev/"


@dataclass(frozen=True)
class KPAConfig:
    """Knative's ``config-autoscaler`` defaults, overridable per revision by annotations.

    ``target`` is the per-pod value of ``metric`` before utilisation (``None``: the revision's
    containerConcurrency if set, else 100 for concurrency / 200 for rps). ``scale_to_zero_grace``
    is cluster-wide in Knative; here the annotation ``autoscaling.knative.dev/scale-to-zero-grace-period``
    sets it per service too, so tests need not wait 30 s. There is no target-burst-capacity: the router
    (the activator) is always in the data path, as Knative with a capacity of -1.
    """

    metric: str = "concurrency"
    target: float | None = None
    target_utilization: float = 0.7
    container_concurrency: int = 0
    stable_window: float = 60.0
    panic_window_percentage: float = 10.0
    panic_threshold_percentage: float = 200.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    tick: float = 2.0
    scale_to_zero_grace: float = 30.0
    pod_retention: float = 0.0
    scale_down_delay: float = 0.0
    min_scale: int = 0
    max_scale: int = 0  # 0: unlimited
    initial_scale: int = 1

    @property
    def panic_window(self) -> float:
        """Seconds the panic average covers: a percentage of the stable window (10 % → 6 s)."""
        return self.stable_window * self.panic_window_percentage / 100.0

    @property
    def per_pod_target(self) -> float:
        """Knative's ``ResolveMetricTarget``: the total (explicit target, else containerConcurrency, else
        the default), capped at containerConcurrency for concurrency, times utilisation, at least 0.01."""
        default = 200.0 if self.metric == "rps" else 100.0
        total = self.target if self.target is not None else (
            float(self.container_concurrency) if self.container_concurrency > 0 and self.metric == "concurrency"
            else default)
        if self.metric == "concurrency" and self.container_concurrency > 0:
            total = min(total, float(self.container_concurrency))
        return max(0.01, total * self.target_utilization)

    def initial(self) -> int:
        """Pods a new revision starts with: ``initial-scale`` (default 1), at least ``min-scale``."""
        return max(self.initial_scale, self.min_scale)

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str], *, min_replicas: int | None = None,
                         max_replicas: int | None = None, scale_target: int | None = None,
                         scale_metric: str | None = None, container_concurrency: int | None = None) -> KPAConfig:
        """Build the config as KServe's ``SetAutoScalingAnnotations`` maps the component's fields onto
        Knative annotations: an explicit annotation wins over the field."""
        ann = {k[len(_PREFIX):]: v for k, v in annotations.items() if k.startswith(_PREFIX)}
        cfg = cls(container_concurrency=int(container_concurrency or 0))
        if scale_metric in ("concurrency", "rps"):
            cfg = replace(cfg, metric=scale_metric)
        if scale_target is not None:
            cfg = replace(cfg, target=float(scale_target))
        if min_replicas is not None:
            cfg = replace(cfg, min_scale=int(min_replicas))
        if max_replicas:
            cfg = replace(cfg, max_scale=int(max_replicas))
        floats = {"target": "target", "panic-window-percentage": "panic_window_percentage",
                  "panic-threshold-percentage": "panic_threshold_percentage",
                  "max-scale-up-rate": "max_scale_up_rate", "max-scale-down-rate": "max_scale_down_rate"}
        durations = {"window": "stable_window", "scale-to-zero-grace-period": "scale_to_zero_grace",
                     "scale-to-zero-pod-retention-period": "pod_retention", "scale-down-delay": "scale_down_delay"}
        ints = {"min-scale": "min_scale", "max-scale": "max_scale", "initial-scale": "initial_scale"}
        changes: dict[str, object] = {}
        if ann.get("metric") in ("concurrency", "rps"):
            changes["metric"] = ann["metric"]
        if "target-utilization-percentage" in ann:
            changes["target_utilization"] = float(ann["target-utilization-percentage"]) / 100.0
        for key, attr in floats.items():
            if key in ann:
                changes[attr] = float(ann[key])
        for key, attr in durations.items():
            if key in ann:
                changes[attr] = parse_duration(ann[key])
        for key, attr in ints.items():
            if key in ann:
                changes[attr] = int(ann[key])
        return replace(cfg, **changes)  # type: ignore[arg-type]


@dataclass
class _Window:
    """Per-second buckets of a metric (Knative keeps 1-second buckets), averaged over trailing windows."""

    buckets: dict[int, float] = field(default_factory=dict)
    first: float | None = None

    def record(self, t: float, value: float) -> None:
        second = int(t)
        self.buckets[second] = value
        if self.first is None:
            self.first = t

    def average(self, now: float, window: float) -> float:
        """Mean over the last ``window`` seconds; seconds without a sample count as 0, and a window
        longer than the history is shortened to it, so a fresh revision is not diluted by the past."""
        if self.first is None:
            return 0.0
        span = max(1, min(int(round(window)), int(now) - int(self.first) + 1))
        start = int(now) - span + 1
        return sum(self.buckets.get(s, 0.0) for s in range(start, int(now) + 1)) / span

    def prune(self, now: float, keep: float) -> None:
        oldest = int(now - keep) - 1
        for s in [s for s in self.buckets if s < oldest]:
            del self.buckets[s]


class KPA:
    """One revision's Knative Pod Autoscaler: feed it the revision's total metric once per second
    (`record`), ask it every tick (`scale`).

    Example — 31.5 concurrent requests on one pod, containerConcurrency 10 (target 7)::

        >>> kpa = KPA(KPAConfig(container_concurrency=10), now=0.0)
        >>> for t in range(10):
        ...     kpa.record(float(t), 31.5)
        >>> d = kpa.scale(now=9.0, ready_pods=1)
        >>> d.desired, d.mode
        (5, 'panic')

    ``ready_pods_at_start`` > 1 starts in panic mode, as Knative does after an autoscaler restart, so
    a revision is not scaled down before history exists again.
    """

    def __init__(self, config: KPAConfig, now: float, ready_pods_at_start: int = 0) -> None:
        self.config = config
        self._window = _Window()
        self._panic_since: float | None = None
        self._max_panic_pods = 0
        self._zero_since: float | None = None
        self._last_active: float | None = None
        self._delay: list[tuple[float, int]] = []
        if ready_pods_at_start > 1:
            self._panic_since = now
            self._max_panic_pods = ready_pods_at_start

    def reconfigure(self, config: KPAConfig) -> None:
        """Apply changed annotations or fields without losing the metric history."""
        self.config = config

    def record(self, t: float, value: float) -> None:
        """The revision's total concurrency (or requests per second) during the second at ``t``."""
        self._window.record(t, value)
        if value > 0:
            self._last_active = t
        self._window.prune(t, max(self.config.stable_window, self.config.scale_down_delay) + 2)

    def scale(self, now: float, ready_pods: int) -> Decision:
        """The desired pod count at ``now`` (Knative's ``autoscaler.Scale``, then min/max and the
        scale-to-zero grace period)."""
        cfg = self.config
        target = cfg.per_pod_target
        stable_avg = self._window.average(now, cfg.stable_window)
        panic_avg = self._window.average(now, cfg.panic_window)
        ready = max(1, ready_pods)
        max_up = math.ceil(cfg.max_scale_up_rate * ready)
        max_down = math.floor(ready / cfg.max_scale_down_rate)
        stable_want = min(max(math.ceil(stable_avg / target), max_down), max_up)
        panic_want = min(max(math.ceil(panic_avg / target), max_down), max_up)
        over = panic_want / ready >= cfg.panic_threshold_percentage / 100.0
        if over:
            self._panic_since = now
        elif self._panic_since is not None and now - self._panic_since >= cfg.stable_window:
            self._panic_since = None
            self._max_panic_pods = 0
        if self._panic_since is None:
            desired, mode = stable_want, "stable"
        else:
            mode = "panic"
            desired = max(stable_want, panic_want)
            if desired > self._max_panic_pods:
                self._max_panic_pods = desired
            else:
                desired = self._max_panic_pods  # panic mode never scales down
        if cfg.scale_down_delay > 0:
            self._delay = [(t, d) for t, d in self._delay if now - t < cfg.scale_down_delay] + [(now, desired)]
            desired = max(d for _, d in self._delay)
        observed = panic_avg if mode == "panic" else stable_avg
        reason = f"{mode} mode, observed {cfg.metric} {observed:.3g}, target {target:.3g}"
        # Scale to zero: only once no request was seen for the whole stable window, and the last pod is
        # kept for the grace period (Knative keeps it while the activator takes over the data path).
        if desired == 0 and cfg.min_scale == 0:
            if self._last_active is not None and now - self._last_active < cfg.pod_retention:
                desired, reason = 1, f"{reason}; keeping the last pod for the retention period"
            elif ready_pods > 0:
                if self._zero_since is None:
                    self._zero_since = now
                if now - self._zero_since < cfg.scale_to_zero_grace:
                    desired = 1
                    reason = (f"{reason}; inactive, scaling to zero in "
                              f"{cfg.scale_to_zero_grace - (now - self._zero_since):.0f}s")
                else:
                    reason = f"{reason}; no requests for the stable window and the grace period"
        else:
            self._zero_since = None
        bounded = max(desired, cfg.min_scale)
        if cfg.max_scale > 0:
            bounded = min(bounded, cfg.max_scale)
        if bounded != desired:
            reason += f"; bounded to [{cfg.min_scale}, {cfg.max_scale or 'unlimited'}]"
        return Decision(desired=bounded, mode=mode, observed=observed, target=target, reason=reason,
                        stable_average=stable_avg, panic_average=panic_avg)
