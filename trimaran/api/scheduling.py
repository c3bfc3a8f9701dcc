"""scheduling.k8s.io/v1 PriorityClass: a name for a pod priority (``spec.priorityClassName``),
which the Priority admission plugin turns into ``spec.priority`` and ``spec.preemptionPolicy``."""

from __future__ import annotations

from typing import Any

from trimaran.api.errors import FieldError
from trimaran.api.meta import Int32, Resource
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "PREEMPT_LOWER_PRIORITY", "PRIORITYCLASS_COLUMNS", "PriorityClass", "SYSTEM_CLASSES",
           "system_class"]

API_VERSION = "scheduling.k8s.io/v1"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, "Never")
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
# kube-apiserver's built-in classes (pkg/apis/scheduling: SystemPriorityClasses), made at start.
SYSTEM_CLASSES = {"system-node-critical": (2_000_001_000, "Used for system critical pods that must not be moved "
                                                          "from their current node."),
                  "system-cluster-critical": (2_000_000_000, "Used for system critical pods that must run in the "
                                                             "cluster, but can be moved to another node if "
                                                             "necessary.")}


def system_class(name: str) -> dict[str, Any]:
    """One of the built-in classes, as kube-apiserver stores it."""
    value, description = SYSTEM_CLASSES[name]
    return {"apiVersion": API_VERSION, "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
            "description": description, "preemptionPolicy": PREEMPT_LOWER_PRIORITY}


class PriorityClass(Resource):
    """A cluster-scoped priority: ``value`` (higher runs first and may preempt lower), at most one
    ``globalDefault``, and ``preemptionPolicy`` (``Never``: queued ahead, but evicts nobody)."""

    value: Int32
    global_default: bool | None = None
    description: str | None = None
    preemption_policy: str | None = None

    def set_defaults(self) -> None:
        if self.preemption_policy is None:
            self.preemption_policy = PREEMPT_LOWER_PRIORITY

    def check(self) -> list[FieldError]:
        """ValidatePriorityClass: names starting ``system-`` are the built-in classes', and a
        user's value is at most one billion."""
        errs = super().check()
        name = self.metadata.name or ""
        if name.startswith(SYSTEM_PREFIX):
            known = SYSTEM_CLASSES.get(name)
            if known is None or known[0] != self.value or self.global_default:
                problem = f"{name} is not a known system priority class" if known is None else \
                    f"value of {name} PriorityClass must be {known[0]}"
                errs.append(FieldError.forbidden("metadata.name", "priority class names with 'system-' prefix are "
                                                 f"reserved for system use only. error: {problem}"))
        elif self.value > HIGHEST_USER_DEFINABLE_PRIORITY:
            errs.append(FieldError.forbidden("value", "maximum allowed value of a user defined priority is "
                                             f"{HIGHEST_USER_DEFINABLE_PRIORITY}"))
        if self.preemption_policy not in PREEMPTION_POLICIES:
            errs.append(FieldError.not_supported("preemptionPolicy", self.preemption_policy, PREEMPTION_POLICIES))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """ValidatePriorityClassUpdate: the value and the preemption policy stay."""
        errs = []
        if old.get("value") != new.get("value"):
            errs.append(FieldError.forbidden("value", "may not be changed in an update."))
        if old.get("preemptionPolicy") != new.get("preemptionPolicy"):
            errs.append(FieldError.invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"))
        return errs


#: printPriorityClass: NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY.
PRIORITYCLASS_COLUMNS = (PrinterColumn("Value", "integer", value=lambda o: o.get("value", 0)),
                         PrinterColumn("Global-Default", "boolean", value=lambda o: bool(o.get("globalDefault"))),
                         AGE,
                         PrinterColumn("PreemptionPolicy", value=lambda o: o.get("preemptionPolicy", "")))
