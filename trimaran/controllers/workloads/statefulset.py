"""apps/v1 StatefulSet: ``replicas`` pods with stable identities, as kube-controller-manager's
StatefulSet controller keeps them.

Pod ``<set>-<ordinal>`` (ordinals from ``spec.ordinals.start``, 0 by default) has ``hostname`` its own
name and ``subdomain`` the set's ``serviceName``, so a headless Service of that name gives it the DNS
name ``<pod>.<service>`` (``controllers/workloads/service.py``), and labels
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index`` and
``controller-revision-hash`` (the name of its template's ControllerRevision, ``history.py``). Each
``volumeClaimTemplates`` entry gives each ordinal a PersistentVolumeClaim ``<template>-<set>-<ordinal>``,
mounted as the template's volume and created before the pod; ``persistentVolumeClaimRetentionPolicy``
Retain (the default) keeps it when the pod goes, Delete removes it when the set is deleted
(``whenDeleted``, the set owns the claim) or scaled below its ordinal (``whenScaled``, the condemned
pod owns it and the garbage collector takes it after the pod).

``OrderedReady`` creates ordinals lowest first, one at a time, each once the one before is Running
and Ready, and removes them highest first, one at a time; ``Parallel`` creates and removes them all
at once. A template change under ``RollingUpdate`` deletes the pods of older revisions from the highest
ordinal down to ``partition``, one at a time (``maxUnavailable`` at a time when given), each once the
one above it runs the new template and is ready; the replacement comes from the new template, and
ordinals below ``partition`` are made from the current revision. ``OnDelete`` replaces a pod only once
someone deletes it. The status is upstream's, which ``kubectl rollout status sts/NAME`` reads.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable

from trimaran.api.apps import percent_or_int, selector_matches
from trimaran.api.labels import (
    CONTROLLER_REVISION_HASH_LABEL,
    POD_INDEX_LABEL,
    REVISION_HASH_LABEL,
    STATEFULSET_POD_NAME_LABEL,
)
from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of
from trimaran.controllers.conditions import get_condition, seconds_since
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
from trimaran.controllers.workloads.history import owned_revisions, sync_revision, truncate_history
from trimaran.store import AlreadyExists, Conflict, NotFound

__all__ = ["StatefulSetReconciler", "claim_name", "pod_ordinal"]

_MEMBER = re.compile(r"^(.*)-([0-9]+)$")
# When a pod cannot be made yet for want of a change no watch reports (a claim being deleted), as
# upstream's requeue after an error.
_RETRY_SECONDS = 1.0


def pod_ordinal(set_name: str, pod: dict) -> int | None:
    """The ordinal of a pod named ``<set>-<ordinal>``; None for another name (``getParentNameAndOrdinal``)."""
    match = _MEMBER.match(pod["metadata"]["name"])
    return int(match.group(2)) if match and match.group(1) == set_name else None


def claim_name(template_name: str, set_name: str, ordinal: int) -> str:
    """``getPersistentVolumeClaimName``."""
    return f"{template_name}-{set_name}-{ordinal}"


def _revision_of(pod: dict) -> str:
    return (pod["metadata"].get("labels") or {}).get(CONTROLLER_REVISION_HASH_LABEL, "")


def _running_and_ready(pod: dict) -> bool:
    return phase(pod) == "Running" and is_ready(pod)


def _healthy(pod: dict, min_ready: int) -> bool:
    """Upstream's ``isHealthy``: running, ready, available, and not on its way out."""
    return _running_and_ready(pod) and is_available(pod, min_ready) and not is_terminating(pod)


def _template_of(revision: dict) -> dict:
    """The pod template a revision's data restores."""
    template = (((revision.get("data") or {}).get("spec") or {}).get("template")) or {}
    return {k: copy.deepcopy(v) for k, v in template.items() if k != "$patch"}


class StatefulSetReconciler(Reconciler):
    name = "statefulset"
    kinds = ("StatefulSet",)
    watches = ("Pod",)

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        """A pod's controller; for a pod no controller owns, the sets whose selector and name claim it (to adopt it)."""
        keys = list(super().keys_for(event_kind, obj))
        if keys or event_kind != "Pod" or not is_orphan(obj):
            return keys
        labels = obj["metadata"].get("labels") or {}
        return [key_of(sts) for sts in self.store.list("StatefulSet", obj["metadata"].get("namespace", ""))
                if pod_ordinal(sts["metadata"]["name"], obj) is not None
                and selector_matches((sts.get("spec") or {}).get("selector"), labels)]

    def reconcile(self, key: Key) -> float | None:
        try:
            sts = self.store.get("StatefulSet", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(sts):
            return None
        spec = sts["spec"]
        status_before = copy.deepcopy(sts.get("status") or {})
        pods = self._claim(sts)
        revisions = owned_revisions(self.store, sts)
        update, collisions = sync_revision(self.store, sts, revisions, REVISION_HASH_LABEL,
                                           int(status_before.get("collisionCount") or 0))
        current = next((r for r in revisions if r["metadata"]["name"] == status_before.get("currentRevision")), update)
        requeue = self._sync_pods(sts, pods, current, update)
        status = self._status(sts, pods, current, update, collisions, status_before)
        live = {_revision_of(p) for p in pods}
        truncate_history(self.store, revisions, live | {current["metadata"]["name"], update["metadata"]["name"]},
                         int(spec.get("revisionHistoryLimit", 10)))
        return self.settle_status(sts, status, status_before, requeue)

    # --- pods -----------------------------------------------------------------------------------

    def _claim(self, sts: dict) -> list[dict]:
        """The pods the set controls: its own that still match its selector, plus matching orphans
        named as its members, adopted (upstream's ``ClaimPods`` with ``isMemberOf``)."""
        selector = sts["spec"].get("selector")
        return claim_pods(self.store, sts, lambda pod: selector_matches(selector, pod["metadata"].get("labels")),
                          lambda pod: pod_ordinal(sts["metadata"]["name"], pod) is not None)

    def _sync_pods(self, sts: dict, pods: list[dict], current: dict, update: dict) -> float | None:
        """One pass of upstream's ``updateStatefulSet``: create, delete and roll pods within the set's
        policies. ``pods`` is updated in place (new pods added, deleted ones marked terminating). The
        seconds until another look is due without an event (a pod's minReadySeconds to pass, a claim
        to go), or None."""
        spec = sts["spec"]
        name = sts["metadata"]["name"]
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        count = int(spec.get("replicas", 1))
        min_ready = int(spec.get("minReadySeconds") or 0)
        monotonic = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("rollingUpdate")
        slots: dict[int, dict | None] = {o: None for o in range(start, start + count)}
        condemned: list[dict] = []
        for pod in pods:
            ordinal = pod_ordinal(name, pod)
            if ordinal in slots and slots[ordinal] is None:
                slots[ordinal] = pod
            else:
                condemned.append(pod)
        condemned.sort(key=lambda p: pod_ordinal(name, p) if pod_ordinal(name, p) is not None else -1)

        for pod in [*[p for p in slots.values() if p is not None], *condemned]:
            if phase(pod) in ("Failed", "Succeeded") and not is_terminating(pod):
                # restartPolicy Always: a pod ends only when it could not start; a new one takes its place
                self._delete_pod(sts, pod)
        if spec.get("volumeClaimTemplates"):
            self._sync_claim_owners(sts, slots)
        unhealthy = next((p for p in [*[slots[o] for o in sorted(slots)], *condemned]
                          if p is not None and not _healthy(p, min_ready)), None)
        for ordinal in sorted(slots):
            pod = slots[ordinal]
            if pod is None:
                # newVersionedStatefulSetPod: below the partition (or, without rollingUpdate, the
                # count already at the current revision) a pod is made from the current revision.
                if rolling is not None:
                    below = start + int(rolling.get("partition") or 0)
                elif strategy.get("type", "RollingUpdate") == "RollingUpdate":
                    below = start + int((sts.get("status") or {}).get("currentReplicas") or 0)
                else:
                    below = start
                revision = current if ordinal < below else update
                created = self._create_pod(sts, ordinal, revision)
                if created is None:  # a claim still being deleted, or a pod of that name: look again
                    return _RETRY_SECONDS
                pods.append(created)
                slots[ordinal] = created
                if monotonic:
                    return None
                continue
            if phase(pod) == "Pending" and not is_terminating(pod):
                self._ensure_claims(sts, ordinal, pod)  # a claim deleted under a waiting pod is made again
            if is_terminating(pod) or not _running_and_ready(pod):
                if monotonic:
                    return None
                continue
            if not is_available(pod, min_ready) and monotonic:
                return self._until_available(pod, min_ready)

        for pod in reversed(condemned):
            if is_terminating(pod):
                if monotonic:
                    return None
                continue
            if monotonic and not _running_and_ready(pod) and pod is not unhealthy:
                return None
            self._release_claims(sts, pod)
            self._delete_pod(sts, pod)
            if monotonic:
                return None

        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return None
        return self._roll(sts, [slots[o] for o in sorted(slots)], update, start, min_ready)

    def _roll(self, sts: dict, replicas: list[dict | None], update: dict, start: int, min_ready: int) -> float | None:
        """Replace pods of older revisions, highest ordinal first, down to the partition."""
        rolling = (sts["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
        floor = int(rolling.get("partition") or 0)
        updated = update["metadata"]["name"]
        if rolling.get("maxUnavailable") is None:
            for target in range(len(replicas) - 1, floor - 1, -1):
                pod = replicas[target]
                if pod is None:
                    return None
                if _revision_of(pod) != updated and not is_terminating(pod):
                    self._delete_pod(sts, pod)
                    return None
                if not _healthy(pod, min_ready):
                    return self._until_available(pod, min_ready)
            return None
        # maxUnavailable: as many of the highest outdated pods go at once as leave at most that many
        # of all the replicas unhealthy.
        allowed = max(percent_or_int(rolling["maxUnavailable"], len(replicas), round_up=False), 1)
        unavailable = sum(1 for p in replicas if p is None or not _healthy(p, min_ready))
        for pod in reversed(replicas[floor:]):
            if unavailable >= allowed:
                break
            if pod is not None and _revision_of(pod) != updated and not is_terminating(pod):
                self._delete_pod(sts, pod)
                unavailable += 1
        return None

    @staticmethod
    def _until_available(pod: dict, min_ready: int) -> float | None:
        if not min_ready or not _running_and_ready(pod):
            return None
        ready = get_condition(pod.get("status") or {}, "Ready") or {}
        return max(min_ready - seconds_since(ready.get("lastTransitionTime")), 0.0) + 0.05

    def _create_pod(self, sts: dict, ordinal: int, revision: dict) -> dict | None:
        meta = sts["metadata"]
        name = f"{meta['name']}-{ordinal}"
        template = _template_of(revision)
        tmeta = template.get("metadata") or {}
        pod_spec = copy.deepcopy(template.get("spec") or {})
        pod_spec["hostname"] = name
        service = sts["spec"].get("serviceName")
        if service:
            pod_spec["subdomain"] = service
        claims = {c["metadata"]["name"]: claim_name(c["metadata"]["name"], meta["name"], ordinal)
                  for c in sts["spec"].get("volumeClaimTemplates") or []}
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") not in claims]
        volumes += [{"name": t, "persistentVolumeClaim": {"claimName": c}} for t, c in claims.items()]
        if volumes:
            pod_spec["volumes"] = volumes
        labels = {**(tmeta.get("labels") or {}), CONTROLLER_REVISION_HASH_LABEL: revision["metadata"]["name"],
                  STATEFULSET_POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal)}
        pod = new_pod(name, meta["namespace"], pod_spec, owner=sts, labels=labels,
                      annotations=dict(tmeta.get("annotations") or {}))
        if not self._ensure_claims(sts, ordinal, pod):
            return None
        try:
            created = self.store.create(pod)
        except AlreadyExists:
            return None  # the old pod of this name is still going away
        self.store.record_event(sts, "Normal", "SuccessfulCreate",
                                f"create Pod {name} in StatefulSet {meta['name']} successful")
        return created

    def _ensure_claims(self, sts: dict, ordinal: int, pod: dict) -> bool:
        """Create the ordinal's claims that are missing; False while one is still being deleted."""
        meta = sts["metadata"]
        spec = sts["spec"]
        policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        selector_labels = (spec.get("selector") or {}).get("matchLabels") or {}
        for template in spec.get("volumeClaimTemplates") or []:
            name = claim_name(template["metadata"]["name"], meta["name"], ordinal)
            try:
                existing = self.store.get("PersistentVolumeClaim", meta["namespace"], name)
            except NotFound:
                existing = None
            if existing is not None:
                if is_being_deleted(existing):
                    return False
                continue
            claim = copy.deepcopy(template)
            claim.pop("status", None)
            claim_meta = claim.setdefault("metadata", {})
            claim.update(apiVersion="v1", kind="PersistentVolumeClaim")
            claim_meta.update(name=name, namespace=meta["namespace"],
                              labels={**(claim_meta.get("labels") or {}), **selector_labels})
            if policy.get("whenDeleted") == "Delete":  # upstream's setOwnerRef: an owner, not a controller
                claim_meta["ownerReferences"] = [{"apiVersion": sts["apiVersion"], "kind": sts["kind"],
                                                  "name": meta["name"], "uid": meta["uid"]}]
            try:
                self.store.create(claim)
            except AlreadyExists:
                continue
            self.store.record_event(sts, "Normal", "SuccessfulCreate",
                                    f"create Claim {name} Pod {pod['metadata']['name']} in StatefulSet "
                                    f"{meta['name']} success")
        return True

    def _sync_claim_owners(self, sts: dict, slots: dict[int, dict | None]) -> None:
        """The owners of the claims of the pods in range as the retention policy says now (upstream's
        ``updateClaimOwnerRefForSetAndPod``): the set under ``whenDeleted: Delete``, else none."""
        meta = sts["metadata"]
        owned = (sts["spec"].get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted") == "Delete"
        set_ref = {"apiVersion": sts["apiVersion"], "kind": sts["kind"], "name": meta["name"], "uid": meta["uid"]}
        claims = {c["metadata"]["name"]: c for c in self.store.list("PersistentVolumeClaim", meta["namespace"],
                                                                    shared=True)}
        for ordinal, pod in slots.items():
            if pod is None or is_terminating(pod):
                continue
            for template in sts["spec"]["volumeClaimTemplates"]:
                claim = claims.get(claim_name(template["metadata"]["name"], meta["name"], ordinal))
                if claim is None or is_being_deleted(claim):
                    continue
                refs = claim["metadata"].get("ownerReferences") or []
                wanted = [r for r in refs if r.get("uid") not in (meta["uid"], pod["metadata"]["uid"])]
                wanted += [set_ref] if owned else []
                if wanted != refs:
                    fresh = copy.deepcopy(claim)
                    fresh["metadata"]["ownerReferences"] = wanted
                    try:
                        self.store.update(fresh)
                    except (Conflict, NotFound):
                        pass

    def _release_claims(self, sts: dict, pod: dict) -> None:
        """``whenScaled: Delete``: the condemned pod owns its claims, so they go after it."""
        spec = sts["spec"]
        if (spec.get("persistentVolumeClaimRetentionPolicy") or {}).get("whenScaled") != "Delete":
            return
        ordinal = pod_ordinal(sts["metadata"]["name"], pod)
        if ordinal is None:
            return
        for template in spec.get("volumeClaimTemplates") or []:
            name = claim_name(template["metadata"]["name"], sts["metadata"]["name"], ordinal)
            try:
                claim = self.store.get("PersistentVolumeClaim", sts["metadata"]["namespace"], name)
            except NotFound:
                continue
            refs = [r for r in claim["metadata"].get("ownerReferences") or []
                    if r.get("uid") not in (sts["metadata"]["uid"], pod["metadata"]["uid"])]
            claim["metadata"]["ownerReferences"] = refs + [{"apiVersion": "v1", "kind": "Pod",
                                                            "name": pod["metadata"]["name"],
                                                            "uid": pod["metadata"]["uid"]}]
            try:
                self.store.update(claim)
            except (Conflict, NotFound):
                pass

    def _delete_pod(self, sts: dict, pod: dict) -> None:
        request_deletion(self.store, pod)
        self.store.record_event(sts, "Normal", "SuccessfulDelete",
                                f"delete Pod {pod['metadata']['name']} in StatefulSet {sts['metadata']['name']} "
                                "successful")

    # --- status ---------------------------------------------------------------------------------

    def _status(self, sts: dict, pods: list[dict], current: dict, update: dict, collisions: int,
                before: dict) -> dict:
        """Upstream's ``computeReplicaStatus`` and ``completeRollingUpdate``; zero counts left out
        where the API leaves them out (``replicas`` and ``availableReplicas`` are always written)."""
        min_ready = int(sts["spec"].get("minReadySeconds") or 0)
        current_name, update_name = current["metadata"]["name"], update["metadata"]["name"]
        live = [p for p in pods if not is_terminating(p)]
        status = {k: v for k, v in before.items() if k == "conditions"}
        counts = {"replicas": len(pods),
                  "readyReplicas": sum(1 for p in pods if _running_and_ready(p)),
                  "availableReplicas": sum(1 for p in pods if _running_and_ready(p) and is_available(p, min_ready)),
                  "currentReplicas": sum(1 for p in live if _revision_of(p) == current_name),
                  "updatedReplicas": sum(1 for p in live if _revision_of(p) == update_name)}
        if (sts["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate" and \
                counts["updatedReplicas"] == counts["replicas"] == counts["readyReplicas"]:
            counts["currentReplicas"] = counts["updatedReplicas"]
            current_name = update_name
        status.update(observedGeneration=sts["metadata"].get("generation", 1), currentRevision=current_name,
                      updateRevision=update_name, collisionCount=collisions, **counts)
        for omitted in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if not status[omitted]:
                status.pop(omitted)
        return status
