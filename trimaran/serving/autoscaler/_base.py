"""What every autoscaler returns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Decision"]


@dataclass(frozen=True)
class Decision:
    """A desired replica count and why: ``mode`` (stable/panic for KPA, hpa), the observed metric
    value the decision used and the per-pod target it was divided by."""

    desired: int
    mode: str
    observed: float
    target: float
    reason: str
    stable_average: float = 0.0
    panic_average: float = 0.0
