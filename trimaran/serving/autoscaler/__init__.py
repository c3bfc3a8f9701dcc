"""Autoscalers for InferenceService revisions: Knative's KPA (concurrency, rps) and an HPA (cpu, memory).

Both are pure: they take metric samples and the current pod count with an explicit ``now`` and
return a `Decision`; the serving controller feeds them from the router and applies the result.
"""

from trimaran.serving.autoscaler._base import Decision
from trimaran.serving.autoscaler._hpa import HPA, HPAConfig
from trimaran.serving.autoscaler._kpa import KPA, KPAConfig

__all__ = ["HPA", "KPA", "Decision", "HPAConfig", "KPAConfig"]
