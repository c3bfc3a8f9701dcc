"""policy/v1 PodDisruptionBudget status, as kube-controller-manager's disruption controller keeps it.

A pass counts the budget's pods (its selector in its namespace: an empty selector is every pod, none
is no pod): ``expectedPods`` (the pods themselves for an integer ``minAvailable``, else the sum of
their controllers' replica counts, read where the kind registry says a kind keeps them),
``desiredHealthy`` (``minAvailable``, or expected less ``maxUnavailable``, percentages rounded up),
``currentHealthy`` (Ready pods not being deleted nor named in ``disruptedPods``), and
``disruptionsAllowed`` (their difference, 0 while nothing is expected), with the
``DisruptionAllowed`` condition (``SufficientPods``/``InsufficientPods``, ``SyncFailed`` when a pod's
controller has no replica count). The eviction API spends ``disruptionsAllowed`` and names the pod
in ``disruptedPods``, which a pass forgets once the pod is being deleted or after two minutes.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from trimaran.api.apps import percent_or_int, selector_matches
from trimaran.api.kinds import UnknownKindError, for_object
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.conditions import is_true, now_rfc3339, parse_rfc3339
from trimaran.store import NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["PodDisruptionBudgetReconciler", "budgets_of", "covers", "set_disruption_allowed"]

# How long a pod named in disruptedPods is not counted healthy while it is not yet being deleted.
DELETION_TIMEOUT = timedelta(minutes=2)


def covers(pdb: dict, labels: dict[str, str] | None) -> bool:
    """Whether the budget's selector matches ``labels`` (policy/v1: none matches nothing)."""
    selector = (pdb.get("spec") or {}).get("selector")
    return selector is not None and selector_matches(selector, labels)


def budgets_of(store: Store, pod: dict) -> list[dict]:
    """The budgets of the pod's namespace whose selector matches it."""
    meta = pod["metadata"]
    return [b for b in store.list("PodDisruptionBudget", meta.get("namespace")) if covers(b, meta.get("labels"))]


def set_disruption_allowed(status: dict[str, Any], reason: str = "", message: str = "") -> None:
    """Upstream's ``UpdateDisruptionAllowedCondition`` (or, with a reason, its fail-safe one): a
    metav1.Condition whose transition time moves only when its status does."""
    allowed = not reason and int(status.get("disruptionsAllowed") or 0) > 0
    wanted = {"type": "DisruptionAllowed", "status": "True" if allowed else "False",
              "observedGeneration": status.get("observedGeneration", 0),
              "reason": reason or ("SufficientPods" if allowed else "InsufficientPods"), "message": message}
    conditions = status.setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == "DisruptionAllowed"), None)
    if current is None:
        conditions.append({**wanted, "lastTransitionTime": now_rfc3339()})
    else:
        if current.get("status") != wanted["status"]:
            current["lastTransitionTime"] = now_rfc3339()
        current.update(wanted)


class PodDisruptionBudgetReconciler(Reconciler):
    name = "disruption"
    kinds = ("PodDisruptionBudget",)
    watches = ("Pod",)

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        # Each budget's selector, kept from the watch: a pod's event maps to budgets without a query.
        self._selectors: dict[Key, dict] = {}

    def initial_keys(self) -> list[Key]:
        budgets = self.store.list("PodDisruptionBudget")
        self._selectors = {key_of(b): b for b in budgets}
        return list(self._selectors)

    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if obj["kind"] == "PodDisruptionBudget":
            if event.type == "DELETED":
                self._selectors.pop(key_of(obj), None)
            else:
                self._selectors[key_of(obj)] = obj
            return [key_of(obj)]
        namespace, labels = obj["metadata"].get("namespace"), obj["metadata"].get("labels")
        return [key for key, pdb in list(self._selectors.items()) if key.namespace == namespace and covers(pdb, labels)]

    def reconcile(self, key: Key) -> float | None:
        try:
            pdb = self.store.get("PodDisruptionBudget", key.namespace, key.name)
        except NotFound:
            return None
        status = copy.deepcopy(pdb.get("status") or {})
        before = copy.deepcopy(status)
        pods = [p for p in self.store.list("Pod", key.namespace) if covers(pdb, p["metadata"].get("labels"))]
        if not pods:
            self.store.record_event(pdb, "Normal", "NoPods", "No matching pods found")
        try:
            expected, desired = self._expected(pdb, pods)
        except LookupError as exc:
            self.store.record_event(pdb, "Warning", "CalculateExpectedPodCountFailed",
                                    f"Failed to calculate the number of expected pods: {exc}")
            status["disruptionsAllowed"] = 0
            set_disruption_allowed(status, "SyncFailed", str(exc))
            return self.settle_status(pdb, status, before, None)
        now = datetime.now(timezone.utc)
        disrupted, recheck = {}, None
        for pod in pods:
            since = (status.get("disruptedPods") or {}).get(pod["metadata"]["name"])
            if since is None or pod["metadata"].get("deletionTimestamp"):
                continue
            due = parse_rfc3339(since) + DELETION_TIMEOUT
            if due < now:
                self.store.record_event(pod, "Warning", "NotDeleted", f"Pod was expected by PDB {key.namespace}/"
                                        f"{key.name} to be deleted but it wasn't")
            else:
                disrupted[pod["metadata"]["name"]] = since
                recheck = min(recheck or due, due)
        healthy = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp")
                      and p["metadata"]["name"] not in disrupted and is_true(p.get("status") or {}, "Ready"))
        allowed = healthy - desired if expected > 0 else 0
        status.update(currentHealthy=healthy, desiredHealthy=desired, expectedPods=expected,
                      disruptionsAllowed=max(0, allowed), observedGeneration=pdb["metadata"].get("generation", 1))
        if disrupted:
            status["disruptedPods"] = disrupted
        else:
            status.pop("disruptedPods", None)
        set_disruption_allowed(status)
        requeue = (recheck - now).total_seconds() + 0.1 if recheck is not None else None
        return self.settle_status(pdb, status, before, requeue)

    def _expected(self, pdb: dict, pods: list[dict]) -> tuple[int, int]:
        """Upstream's ``getExpectedPodCount``: (expectedPods, desiredHealthy)."""
        spec = pdb.get("spec") or {}
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable is not None:
            expected = self._expected_scale(pdb, pods)
            return expected, max(0, expected - percent_or_int(max_unavailable, expected, True))
        if isinstance(min_available, int):
            return len(pods), min_available
        if min_available is not None:
            expected = self._expected_scale(pdb, pods)
            return expected, percent_or_int(min_available, expected, True)
        return 0, 0

    def _expected_scale(self, pdb: dict, pods: list[dict]) -> int:
        """Upstream's ``getExpectedScale``: the replica counts of the pods' controllers, each once.

        Raises:
            LookupError: a pod's controller keeps no replica count (a Job's pod, say).
        """
        scales: dict[str, int] = {}
        unmanaged = []
        for pod in pods:
            ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref["uid"] in scales:
                continue
            scales[ref["uid"]] = self._replicas(ref, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if unmanaged:
            selector = (pdb.get("spec") or {}).get("selector")
            self.store.record_event(pdb, "Warning", "UnmanagedPods", (
                f"Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a "
                f"result, the status of the PDB cannot be calculated correctly, which may result in undefined "
                f'behavior. To account for these pods please set ".spec.minAvailable" field of the PDB to an '
                f"integer value."))
        return sum(scales.values())

    def _replicas(self, ref: dict, namespace: str, pod: str) -> int:
        try:
            info = for_object(ref.get("apiVersion", ""), ref.get("kind", ""))
            owner = self.store.get(info.kind, namespace if info.namespaced else "", ref["name"])
        except (UnknownKindError, NotFound):
            info = owner = None
        if info is None or info.scale is None or owner is None or owner["metadata"].get("uid") != ref["uid"]:
            raise LookupError(f'found no controllers for pod "{pod}"')
        value: Any = owner
        for part in info.scale.spec_replicas_path.strip(".").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return int(value) if isinstance(value, int) else 1
