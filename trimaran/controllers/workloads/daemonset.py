"""apps/v1 DaemonSet: one pod of its template on each node whose admission lets it in, as
kube-controller-manager's daemon controller runs them. This machine is one node.

Whether the pod belongs here is the node's own admission (``Node.check_constraints``: nodeSelector,
required node affinity, taints, cordon) over the template with the tolerations upstream adds to
every daemon pod (not-ready, unreachable, the pressure taints, unschedulable) and ``spec.nodeName``
set to this node, as the daemon controller binds its pods itself. The pod is ``<ds>-<5 chars>``,
labelled ``controller-revision-hash`` (the template's digest) and ``pod-template-generation``.

Updates: ``RollingUpdate`` replaces a pod of an older template (deleted first when ``maxSurge`` is 0,
as ``maxUnavailable`` 1 allows on one node; else the new one first, and the old goes once the new is
available); ``OnDelete`` replaces it only once someone deletes it. The status is upstream's, which
``kubectl rollout status ds/NAME`` reads; each template is kept as a ControllerRevision
``<ds>-<hash>``, which ``kubectl rollout history|undo ds/NAME`` read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from trimaran.api.apps import percent_or_int
from trimaran.api.labels import CONTROLLER_REVISION_HASH_LABEL
from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of
from trimaran.controllers.pods import is_ready, is_terminating, new_pod, owned_pods, phase, request_deletion
from trimaran.controllers.workloads.deployment import is_available, template_hash
from trimaran.controllers.workloads.history import owned_revisions, sync_revision, truncate_history
from trimaran.runtime.node import Node
from trimaran.store import NotFound, Store

__all__ = ["GENERATION_LABEL", "DaemonSetReconciler", "daemon_tolerations"]

GENERATION_LABEL = "pod-template-generation"


def daemon_tolerations(pod_spec: dict) -> list[dict]:
    """The tolerations upstream's daemon controller adds to each daemon pod (``AddOrUpdateDaemonPodTolerations``)."""
    added = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
             {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
             {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
             {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
             {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
             {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    if pod_spec.get("hostNetwork"):
        added.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"})
    tolerations = list(pod_spec.get("tolerations") or [])
    have = {(t.get("key"), t.get("effect")) for t in tolerations}
    return tolerations + [t for t in added if (t["key"], t["effect"]) not in have]


def _revision(pod: dict) -> str:
    return (pod["metadata"].get("labels") or {}).get(CONTROLLER_REVISION_HASH_LABEL, "")


class DaemonSetReconciler(Reconciler):
    name = "daemonset"
    kinds = ("DaemonSet",)
    watches = ("Pod", "Node")

    def __init__(self, store: Store, node: Node) -> None:
        super().__init__(store)
        self.node = node

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        """A change of the Node (labels, taints, cordon) may change where every DaemonSet belongs."""
        if event_kind == "Node":
            return [key_of(ds) for ds in self.store.list("DaemonSet")]
        return super().keys_for(event_kind, obj)

    def _pod_spec(self, ds: dict) -> dict:
        spec = copy.deepcopy(ds["spec"]["template"].get("spec") or {})
        spec["nodeName"] = self.node.name
        spec["tolerations"] = daemon_tolerations(spec)
        return spec

    def reconcile(self, key: Key) -> float | None:
        try:
            ds = self.store.get("DaemonSet", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(ds):
            return None
        spec = ds["spec"]
        current = template_hash(spec["template"])
        pod_spec = self._pod_spec(ds)
        belongs = self.node.check_constraints(pod_spec) is None
        pods = owned_pods(self.store, ds)
        self._record_history(ds, current, pods)
        for pod in pods:
            if not is_terminating(pod) and phase(pod) == "Failed":  # upstream deletes failed daemon pods
                request_deletion(self.store, pod)
        live = [p for p in pods if not is_terminating(p) and phase(p) != "Failed"]
        if not belongs:
            for pod in live:
                request_deletion(self.store, pod)
            return self._write_status(ds, current, belongs, [], misscheduled=bool(live))
        live = self._update(ds, current, pod_spec, live, any(is_terminating(p) for p in pods))
        return self._write_status(ds, current, belongs, live, misscheduled=False)

    def _record_history(self, ds: dict, current: str, pods: list[dict]) -> None:
        """The template as a ControllerRevision ``<ds>-<hash>`` (``history.py``), as upstream's
        ``constructHistory`` keeps it for ``kubectl rollout history|undo ds/NAME``; at most
        ``revisionHistoryLimit`` others, never one a pod still runs."""
        revisions = owned_revisions(self.store, ds)
        sync_revision(self.store, ds, revisions, CONTROLLER_REVISION_HASH_LABEL,
                      int((ds.get("status") or {}).get("collisionCount") or 0), name_hash=current)
        name = ds["metadata"]["name"]
        keep = {f"{name}-{h}" for h in [current, *(_revision(p) for p in pods)]}
        truncate_history(self.store, revisions, keep, int(ds["spec"].get("revisionHistoryLimit", 10)))

    def _update(self, ds: dict, current: str, pod_spec: dict, live: list[dict], draining: bool) -> list[dict]:
        """Bring the node to one pod of the current template within the update strategy; the live pods after."""
        spec = ds["spec"]
        min_ready = int(spec.get("minReadySeconds") or 0)
        new = [p for p in live if _revision(p) == current]
        old = [p for p in live if _revision(p) != current]
        if len(new) > 1:  # one per node: keep the oldest
            new.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
            for pod in new[1:]:
                request_deletion(self.store, pod)
            new = new[:1]
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type") == "OnDelete" or not old:
            if not new and not old and not draining:
                new = [self._create(ds, current, pod_spec)]
            if len(old) > 1:
                for pod in old[1:]:
                    request_deletion(self.store, pod)
                old = old[:1]
            return new + old
        rolling = strategy.get("rollingUpdate") or {}
        surge = percent_or_int(rolling.get("maxSurge", 0), 1, round_up=True)
        if surge > 0:
            if not new:
                new = [self._create(ds, current, pod_spec)]
            if is_available(new[0], min_ready):
                for pod in old:
                    request_deletion(self.store, pod)
                old = []
            return new + old
        # maxSurge 0: maxUnavailable is at least 1 (validation), so the node's one old pod may go first.
        for pod in old:
            request_deletion(self.store, pod)
            self.store.record_event(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
        return new

    def _create(self, ds: dict, current: str, pod_spec: dict) -> dict:
        meta = ds["metadata"]
        template = ds["spec"]["template"]
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), CONTROLLER_REVISION_HASH_LABEL: current,
                  GENERATION_LABEL: str(meta.get("generation", 1))}
        pod = new_pod(f"{meta['name']}-", meta["namespace"], copy.deepcopy(pod_spec), owner=ds, generate=True,
                      labels=labels, annotations=dict(tmeta.get("annotations") or {}))
        created = self.store.create(pod)
        self.store.record_event(ds, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return created

    def _write_status(self, ds: dict, current: str, belongs: bool, live: list[dict], misscheduled: bool
                      ) -> float | None:
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        before = copy.deepcopy(ds.get("status") or {})
        status = copy.deepcopy(before)
        desired = 1 if belongs else 0
        available = 1 if any(is_available(p, min_ready) for p in live) else 0
        status.update(desiredNumberScheduled=desired, currentNumberScheduled=1 if live else 0,
                      numberMisscheduled=1 if misscheduled else 0,
                      numberReady=1 if any(is_ready(p) for p in live) else 0,
                      numberAvailable=available, numberUnavailable=max(desired - available, 0),
                      updatedNumberScheduled=1 if any(_revision(p) == current for p in live) else 0,
                      observedGeneration=ds["metadata"].get("generation", 1))
        if not available:
            status.pop("numberAvailable")
        if not status["numberUnavailable"]:
            status.pop("numberUnavailable")
        waiting = float(min_ready) if min_ready and live and not available else None
        return self.settle_status(ds, status, before, waiting)
