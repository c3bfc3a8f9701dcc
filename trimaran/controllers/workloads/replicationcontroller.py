"""core v1 ReplicationController: ``spec.replicas`` pods of its template, as kube-controller-manager's
replication manager keeps them.

The pods it counts are those its plain-map selector matches and that it controls: a matching pod
that no controller owns is adopted (its ownerReferences name the RC, ``controller: true``), an owned
pod whose labels no longer match is released. Too few: new pods ``<rc>-<5 chars>`` from the
template; too many: the least far along go first (not scheduled, then not running, then not
ready, then the newest), as upstream ranks them. Deleting the RC deletes its pods (the garbage
collector, by owner references).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from trimaran.api.apps import selector_matches
from trimaran.api.meta import replica_count
from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of
from trimaran.controllers.pods import (
    claim_pods,
    is_orphan,
    is_ready,
    is_terminating,
    new_pod,
    phase,
    request_deletion,
)
from trimaran.controllers.workloads.deployment import is_available
from trimaran.store import NotFound

__all__ = ["ReplicationControllerReconciler"]


class ReplicationControllerReconciler(Reconciler):
    name = "replicationcontroller"
    kinds = ("ReplicationController",)
    watches = ("Pod",)

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        """A pod's controller, or, for a pod no controller owns, the RCs whose selector matches it (to adopt it)."""
        keys = list(super().keys_for(event_kind, obj))
        if keys or event_kind != "Pod" or not is_orphan(obj):
            return keys
        labels = obj["metadata"].get("labels") or {}
        return [key_of(rc) for rc in self.store.list("ReplicationController", obj["metadata"].get("namespace", ""))
                if (rc.get("spec") or {}).get("selector")
                and selector_matches({"matchLabels": rc["spec"]["selector"]}, labels)]

    def reconcile(self, key: Key) -> float | None:
        try:
            rc = self.store.get("ReplicationController", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(rc):
            return None
        spec = rc["spec"]
        pods = self._claim(rc)
        for pod in pods:
            if phase(pod) in ("Failed", "Succeeded"):  # restartPolicy Always: only a failed start ends here
                request_deletion(self.store, pod)
        live = [p for p in pods if not is_terminating(p) and phase(p) not in ("Failed", "Succeeded")]
        desired = replica_count(spec)
        if len(live) < desired:
            for _ in range(desired - len(live)):
                created = self.store.create(self._build_pod(rc))
                self.store.record_event(rc, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        elif len(live) > desired:
            ranked = sorted(live, key=lambda p: (bool(p["spec"].get("nodeName")), phase(p) == "Running",
                                                 is_ready(p), p["metadata"].get("creationTimestamp") or ""))
            for pod in ranked[:len(live) - desired]:
                request_deletion(self.store, pod)
                self.store.record_event(rc, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
            live = ranked[len(live) - desired:]
        return self._write_status(rc, live)

    def _claim(self, rc: dict) -> list[dict]:
        """The pods the RC controls: its own that still match, plus matching orphans, adopted."""
        selector = {"matchLabels": rc["spec"].get("selector") or {}}
        return claim_pods(self.store, rc, lambda pod: selector_matches(selector, pod["metadata"].get("labels")))

    def _build_pod(self, rc: dict) -> dict:
        meta = rc["metadata"]
        template = copy.deepcopy(rc["spec"]["template"])
        tmeta = template.get("metadata") or {}
        return new_pod(f"{meta['name']}-", meta["namespace"], template.get("spec") or {}, owner=rc, generate=True,
                       labels=dict(tmeta.get("labels") or {}), annotations=dict(tmeta.get("annotations") or {}))

    def _write_status(self, rc: dict, live: list[dict]) -> float | None:
        spec = rc["spec"]
        min_ready = int(spec.get("minReadySeconds") or 0)
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        before = copy.deepcopy(rc.get("status") or {})
        status = copy.deepcopy(before)
        status.update(replicas=len(live),
                      fullyLabeledReplicas=sum(1 for p in live
                                               if selector_matches({"matchLabels": template_labels},
                                                                   p["metadata"].get("labels"))),
                      readyReplicas=sum(1 for p in live if is_ready(p)),
                      availableReplicas=sum(1 for p in live if is_available(p, min_ready)),
                      observedGeneration=rc["metadata"].get("generation", 1))
        waiting = min_ready if min_ready and status["availableReplicas"] < status["readyReplicas"] else None
        return self.settle_status(rc, status, before, float(waiting) if waiting else None)
