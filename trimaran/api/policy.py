"""policy/v1 PodDisruptionBudget, validated as ``ValidatePodDisruptionBudgetSpec``; its status is
the disruption controller's (`trimaran.controllers.workloads.pdb`), spent by the eviction API."""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

from typing import Any

from trimaran.api.apps import _check_int_or_percent
from trimaran.api.errors import FieldError
from trimaran.api.meta import ApiModel, Condition, LabelSelector, NonNegInt32, Resource
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "PDB_COLUMNS", "PodDisruptionBudget"]

API_VERSION = "policy/v1"
_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")


class PodDisruptionBudgetSpec(ApiModel):
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    selector: LabelSelector | None = None
    unhealthy_pod_eviction_policy: str | None = None


class PodDisruptionBudgetStatus(ApiModel):
    observed_generation: int | None = None
    disrupted_pods: dict[str, str] | None = None
    disruptions_allowed: NonNegInt32 | None = None
    current_healthy: NonNegInt32 | None = None
    desired_healthy: NonNegInt32 | None = None
    expected_pods: NonNegInt32 | None = None
    conditions: list[Condition] | None = None


class PodDisruptionBudget(Resource):
    """policy/v1 PodDisruptionBudget (no defaults in v1: neither bound set means no bound)."""

    spec: PodDisruptionBudgetSpec | None = None
    status: PodDisruptionBudgetStatus | None = None

    def set_defaults(self) -> None:
        if self.spec is None:
            self.spec = PodDisruptionBudgetSpec()

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec or PodDisruptionBudgetSpec()
        if spec.min_available is not None and spec.max_unavailable is not None:
            errs.append(FieldError.invalid("spec", spec.to_dict(),
                                           "minAvailable and maxUnavailable cannot be both set"))
        for field, value in (("minAvailable", spec.min_available), ("maxUnavailable", spec.max_unavailable)):
            path = f"spec.{field}"
            errs += _check_int_or_percent(path, value)
            if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit() and int(value[:-1]) > 100:
                errs.append(FieldError.invalid(path, value, "must not be greater than 100%"))
        if spec.selector is not None:
            errs += spec.selector.check("spec.selector")
        policy = spec.unhealthy_pod_eviction_policy
        if policy is not None and policy not in _EVICTION_POLICIES:
            errs.append(FieldError.not_supported("spec.unhealthyPodEvictionPolicy", policy, _EVICTION_POLICIES))
        return errs


def _bound(field: str) -> Any:
    def value(obj: dict) -> str:
        bound = (obj.get("spec") or {}).get(field)
        return "N/A" if bound is None else str(bound)
    return value


# kube-apiserver's printPodDisruptionBudget columns.
PDB_COLUMNS = (
    PrinterColumn("Min Available", value=_bound("minAvailable")),
    PrinterColumn("Max Unavailable", value=_bound("maxUnavailable")),
    PrinterColumn("Allowed Disruptions", "integer",
                  value=lambda o: int((o.get("status") or {}).get("disruptionsAllowed") or 0)),
    AGE,
)
