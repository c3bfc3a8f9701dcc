"""apps/v1 Deployment: pods stamped from the template, rolled by strategy, with upstream's status.

Upstream goes Deployment → ReplicaSet → Pods; here the Deployment owns its pods directly and each
template revision is the ``pod-template-hash`` label (the ReplicaSet a cluster would name
``<deployment>-<hash>``, as events and pod names say). The status is upstream's
(``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
``observedGeneration``, conditions ``Available`` and ``Progressing`` with its reasons), so
``kubectl rollout status`` and ``kubectl wait --for=condition=Available`` work unchanged.

Ports: pods share this machine's network. A container that reads its port from ``$(PORT)`` (or
``$(PORT_<NAME>)``) gets a port of its own per pod from the machine-wide allocator: its
``containerPort`` in the pod is that port, the variables hold it, and the declared number maps to it
(annotation ``trimaran.io/ports``) for Services whose ``targetPort`` names the declared number. A
container that binds a declared port as written holds it fixed: the API allows one replica, and
the Deployment rolls as Recreate (a second pod could not bind it while the first runs).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import secrets
import string

from trimaran.api.apps import fixed_ports, percent_or_int, port_env_name, reads_port_from_env
from trimaran.api.meta import replica_count
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import get_condition, now_rfc3339, seconds_since, set_condition
from trimaran.controllers.pods import (
    LOOPBACK,
    is_terminating,
    new_pod,
    owned_pods,
    owner_reference,
    phase,
    request_deletion,
    set_gang,
)
from trimaran.controllers.ports import PortAllocator
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["HASH_LABEL", "PORTS_ANNOTATION", "REVISION_ANNOTATION", "DeploymentReconciler", "is_available"]

log = logging.getLogger(__name__)

HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
PORTS_ANNOTATION = "trimaran.io/ports"  # declared containerPort -> this pod's own port
_TEMPLATE_HASH_ANNOTATION = "trimaran.io/template-hash"
_CHANGE_CAUSE = "kubernetes.io/change-cause"


def template_hash(template: dict) -> str:
    """A short, stable digest of a pod template (upstream uses FNV over the same content). Empty
    fields do not count: a client that writes ``resources: {}`` back (``kubectl rollout undo``)
    means the same template."""
    text = json.dumps(_pruned(template), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _pruned(value: object) -> object:
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def is_available(pod: dict, min_ready_seconds: int = 0) -> bool:
    """Ready, and for at least ``minReadySeconds`` (upstream's ``IsPodAvailable``)."""
    if is_terminating(pod) or phase(pod) != "Running":
        return False
    ready = get_condition(pod.get("status") or {}, "Ready")
    if not ready or ready.get("status") != "True":
        return False
    return min_ready_seconds <= 0 or seconds_since(ready.get("lastTransitionTime")) >= min_ready_seconds


def pod_ports(pod: dict) -> list[int]:
    """The per-pod ports recorded on a Deployment's pod."""
    recorded = (pod["metadata"].get("annotations") or {}).get(PORTS_ANNOTATION)
    return [int(p) for p in json.loads(recorded).values()] if recorded else []


class DeploymentReconciler(Reconciler):
    name = "deployment"
    kinds = ("Deployment",)
    watches = ("Pod",)

    def __init__(self, store: Store, ports: PortAllocator) -> None:
        super().__init__(store)
        self.ports = ports
        self._held: dict[Key, set[int]] = {}  # per Deployment: the ports its pods hold

    def reconcile(self, key: Key) -> float | None:
        try:
            deploy = self.store.get("Deployment", key.namespace, key.name)
        except NotFound:
            self._track_ports(key, [])
            return None
        pods = owned_pods(self.store, deploy)
        self._track_ports(key, pods)
        if is_being_deleted(deploy):
            return None
        spec = deploy["spec"]
        current = template_hash(spec["template"])
        revision = self._revision(deploy, current)
        if revision is None:
            return 0.05  # the annotation write conflicted: read again
        live = [p for p in pods if not is_terminating(p)]
        for pod in live:
            if phase(pod) in ("Failed", "Succeeded"):  # restartPolicy Always: only a failed start ends here
                request_deletion(self.store, pod)
        live = [p for p in live if not is_terminating(p)]
        new = [p for p in live if _hash(p) == current]
        old = [p for p in live if _hash(p) != current]
        if not spec.get("paused"):
            self._roll(deploy, current, revision, new, old, pods)
            live = [p for p in live if not is_terminating(p)]
            new = [p for p in new if not is_terminating(p)]
        self._record_revisions(deploy, current, revision, live)
        return self._write_status(deploy, current, live, new, pods)

    # -- revisions ----------------------------------------------------------------------------
    def _record_revisions(self, deploy: dict, current: str, revision: str, live: list[dict]) -> None:
        """Keep one ReplicaSet per revision, as upstream's (template, revision, how many of its pods
        run), which ``kubectl rollout history|undo`` and ``describe`` read; the oldest empty ones
        beyond ``revisionHistoryLimit`` go."""
        meta, spec = deploy["metadata"], deploy["spec"]
        min_ready = int(spec.get("minReadySeconds") or 0)
        records = {rs["metadata"]["name"]: rs for rs in self.store.list("ReplicaSet", meta["namespace"],
                                                                         owner_uid=meta["uid"])}
        by_hash: dict[str, list[dict]] = {}
        for pod in live:
            by_hash.setdefault(_hash(pod), []).append(pod)
        for rs in records.values():
            by_hash.setdefault(rs["metadata"].get("labels", {}).get(HASH_LABEL, ""), [])
        by_hash.setdefault(current, [])
        for h, pods in by_hash.items():
            if not h:
                continue
            name = f"{meta['name']}-{h}"
            rs = records.get(name)
            if rs is None and h != current:
                continue  # an old revision whose record was never made (made before this controller kept them)
            replicas = replica_count(spec) if h == current else len(pods)
            if rs is None:
                rs = self._new_record(deploy, h, revision, replicas)
            wanted = dict(rs["metadata"].get("annotations") or {})
            if h == current:
                wanted[REVISION_ANNOTATION] = revision
                cause = (meta.get("annotations") or {}).get(_CHANGE_CAUSE)
                if cause:
                    wanted[_CHANGE_CAUSE] = cause
            if rs["spec"].get("replicas") != replicas or rs["metadata"].get("annotations") != wanted:
                rs["spec"]["replicas"] = replicas
                rs["metadata"]["annotations"] = wanted
                try:
                    rs = self.store.update(rs)
                except (Conflict, NotFound):
                    continue
            status = {"replicas": len(pods), "fullyLabeledReplicas": len(pods),
                      "readyReplicas": sum(1 for p in pods if is_available(p)),
                      "availableReplicas": sum(1 for p in pods if is_available(p, min_ready)),
                      "observedGeneration": rs["metadata"].get("generation", 1)}
            if rs.get("status") != status:
                rs["status"] = status
                try:
                    self.store.update_status(rs)
                except (Conflict, NotFound):
                    pass
        limit = int(spec.get("revisionHistoryLimit", 10))
        spent = sorted((rs for rs in records.values()
                        if rs["metadata"].get("labels", {}).get(HASH_LABEL) != current
                        and not by_hash.get(rs["metadata"].get("labels", {}).get(HASH_LABEL, ""))),
                       key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION_ANNOTATION) or 0))
        for rs in spent[:max(0, len(spent) - limit)]:
            try:
                self.store.delete("ReplicaSet", meta["namespace"], rs["metadata"]["name"])
            except NotFound:
                pass

    def _new_record(self, deploy: dict, current: str, revision: str, replicas: int) -> dict:
        meta, spec = deploy["metadata"], deploy["spec"]
        template = copy.deepcopy(spec["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = current
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = current
        body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": f"{meta['name']}-{current}", "namespace": meta["namespace"],
                             "labels": dict(template["metadata"]["labels"]),
                             "annotations": {REVISION_ANNOTATION: revision},
                             "ownerReferences": [owner_reference(deploy)]},
                "spec": {"replicas": replicas, "selector": selector, "template": template,
                         "minReadySeconds": int(spec.get("minReadySeconds") or 0)}}
        try:
            return self.store.create(body)
        except AlreadyExists:
            return self.store.get("ReplicaSet", meta["namespace"], body["metadata"]["name"])

    # -- rolling ------------------------------------------------------------------------------
    def _roll(self, deploy: dict, current: str, revision: str, new: list[dict], old: list[dict],
              pods: list[dict]) -> None:
        spec = deploy["spec"]
        desired = replica_count(spec)
        strategy = spec.get("strategy") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        recreate = strategy.get("type") == "Recreate" or bool(fixed_ports(spec["template"].get("spec") or {}))
        if recreate:
            if old:
                self._delete(deploy, old)
                return
            if any(is_terminating(p) and _hash(p) != current for p in pods):
                return  # Recreate: no new pod while an old one still runs
            self._scale_new(deploy, current, revision, new, desired)
            return
        rolling = strategy.get("rollingUpdate") or {}
        surge = percent_or_int(rolling.get("maxSurge", "25%"), desired, round_up=True)
        unavailable = percent_or_int(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1  # upstream's ResolveFenceposts
        if not old:
            self._scale_new(deploy, current, revision, new, desired)
            return
        # Scale up the new revision within maxSurge.
        room = desired + surge - len(new) - len(old)
        grow = max(0, min(room, desired - len(new)))
        if grow:
            self._create(deploy, current, revision, grow)
        # Scale down old pods as far as maxUnavailable allows: unhealthy ones first.
        new_available = sum(1 for p in new if is_available(p, min_ready))
        healthy = [p for p in old if is_available(p, min_ready)]
        unhealthy = [p for p in old if not is_available(p, min_ready)]
        min_available = desired - unavailable
        budget = len(new) + grow + len(old) - min_available - (len(new) + grow - new_available)
        doomed = unhealthy[:max(budget, 0)]
        budget -= len(doomed)
        can_lose = new_available + len(healthy) - min_available
        doomed += _newest_first(healthy)[:max(0, min(budget, can_lose))]
        if doomed:
            self._delete(deploy, doomed)

    def _scale_new(self, deploy: dict, current: str, revision: str, new: list[dict], desired: int) -> None:
        if len(new) < desired:
            self._create(deploy, current, revision, desired - len(new))
        elif len(new) > desired:
            # Upstream's order: not yet running, then not ready, then the newest.
            ranked = sorted(new, key=lambda p: (phase(p) == "Running", is_available(p),
                                                 -_created(p)))
            self._delete(deploy, ranked[:len(new) - desired])

    def _create(self, deploy: dict, current: str, revision: str, count: int) -> None:
        for _ in range(count):
            self.store.create(self._build_pod(deploy, current, revision))
        total = len([p for p in owned_pods(self.store, deploy) if _hash(p) == current and not is_terminating(p)])
        self.store.record_event(deploy, "Normal", "ScalingReplicaSet",
                                f"Scaled up replica set {deploy['metadata']['name']}-{current} to {total}")

    def _delete(self, deploy: dict, pods: list[dict]) -> None:
        by_hash: dict[str, int] = {}
        for pod in pods:
            request_deletion(self.store, pod)
            by_hash[_hash(pod)] = by_hash.get(_hash(pod), 0) + 1
        remaining = owned_pods(self.store, deploy)
        for h in by_hash:
            left = sum(1 for p in remaining if _hash(p) == h and not is_terminating(p))
            self.store.record_event(deploy, "Normal", "ScalingReplicaSet",
                                    f"Scaled down replica set {deploy['metadata']['name']}-{h} to {left} from "
                                    f"{left + by_hash[h]}")

    def _build_pod(self, deploy: dict, current: str, revision: str) -> dict:
        name, ns = deploy["metadata"]["name"], deploy["metadata"]["namespace"]
        template = copy.deepcopy(deploy["spec"]["template"])
        tmeta = template.get("metadata") or {}
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        pod_name = f"{name}-{current}-{suffix}"
        labels = {**(tmeta.get("labels") or {}), HASH_LABEL: current}
        annotations = {**(tmeta.get("annotations") or {}), REVISION_ANNOTATION: revision}
        spec = template.get("spec") or {}
        own_ports = self._own_ports(spec)
        if own_ports:
            annotations[PORTS_ANNOTATION] = json.dumps(own_ports, separators=(",", ":"))
        pod = new_pod(pod_name, ns, spec, owner=deploy, labels=labels, annotations=annotations)
        set_gang(pod, pod_name, 1, {pod_name: LOOPBACK})
        return pod

    def _own_ports(self, spec: dict) -> dict[str, int]:
        """Give each port of the containers that read ``$(PORT...)`` a port of this pod's own, in place."""
        mapping: dict[str, int] = {}
        for container in spec.get("containers") or []:
            declared = container.get("ports") or []
            if not declared or not reads_port_from_env(container):
                continue
            # On the pod network the declared port is the pod's own: nothing to allocate or map.
            allocated = [int(p["containerPort"]) for p in declared] if self.ports.pod_network \
                else self.ports.allocate(len(declared))
            env = [e for e in container.get("env") or [] if not e.get("name", "").startswith("PORT")]
            for i, (port, own) in enumerate(zip(declared, allocated, strict=True)):
                if not self.ports.pod_network:
                    mapping[str(port["containerPort"])] = own
                port["containerPort"] = own
                if i == 0:
                    env.append({"name": "PORT", "value": str(own)})
                if port.get("name"):
                    env.append({"name": port_env_name(port["name"]), "value": str(own)})
            # First, so that $(PORT) in the container's own variables expands to it.
            container["env"] = [e for e in env if e.get("name", "").startswith("PORT")] + \
                [e for e in env if not e.get("name", "").startswith("PORT")]
        return mapping

    def _track_ports(self, key: Key, pods: list[dict]) -> None:
        """Hold the ports of the Deployment's pods (again after a restart), free those of pods gone."""
        now = {p for pod in pods for p in pod_ports(pod)}
        before = self._held.get(key, set())
        if now - before:
            self.ports.reserve(sorted(now - before))
        if before - now:
            self.ports.release(sorted(before - now))
        if now:
            self._held[key] = now
        else:
            self._held.pop(key, None)

    def _revision(self, deploy: dict, current: str) -> str | None:
        """The revision number of the current template: a new number for each new template."""
        annotations = deploy["metadata"].get("annotations") or {}
        if annotations.get(_TEMPLATE_HASH_ANNOTATION) == current and annotations.get(REVISION_ANNOTATION):
            return annotations[REVISION_ANNOTATION]
        revision = str(int(annotations.get(REVISION_ANNOTATION) or 0) + 1)
        fresh = copy.deepcopy(deploy)
        fresh["metadata"].setdefault("annotations", {}).update(
            {REVISION_ANNOTATION: revision, _TEMPLATE_HASH_ANNOTATION: current})
        try:
            stored = self.store.update(fresh)
        except (Conflict, NotFound):
            return None
        deploy["metadata"] = stored["metadata"]
        return revision

    # -- status -------------------------------------------------------------------------------
    def _write_status(self, deploy: dict, current: str, live: list[dict], new: list[dict],
                      pods: list[dict]) -> float | None:
        spec = deploy["spec"]
        desired = replica_count(spec)
        min_ready = int(spec.get("minReadySeconds") or 0)
        status = copy.deepcopy(deploy.get("status") or {})
        before = copy.deepcopy(status)
        ready = sum(1 for p in live if get_condition(p.get("status") or {}, "Ready") and
                    get_condition(p["status"], "Ready").get("status") == "True")
        available = sum(1 for p in live if is_available(p, min_ready))
        status.update(observedGeneration=deploy["metadata"].get("generation", 1), replicas=len(live),
                      updatedReplicas=len(new), readyReplicas=ready, availableReplicas=available,
                      unavailableReplicas=max(len(live) - available, 0),
                      terminatingReplicas=sum(1 for p in pods if is_terminating(p)))
        status["selector"] = ",".join(f"{k}={v}" for k, v in
                                      ((spec.get("selector") or {}).get("matchLabels") or {}).items())
        strategy = spec.get("strategy") or {}
        unavailable = 0
        if strategy.get("type") != "Recreate":
            rolling = strategy.get("rollingUpdate") or {}
            unavailable = percent_or_int(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
        if available >= desired - unavailable:
            set_condition(status, "Available", "True", "MinimumReplicasAvailable",
                          "Deployment has minimum availability.")
        else:
            set_condition(status, "Available", "False", "MinimumReplicasUnavailable",
                          "Deployment does not have minimum availability.")
        rs_name = f"{deploy['metadata']['name']}-{current}"
        complete = len(new) == desired and len(live) == desired and \
            sum(1 for p in new if is_available(p, min_ready)) == desired
        progressing = get_condition(status, "Progressing")
        requeue = None
        if spec.get("paused"):
            set_condition(status, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
        elif complete:
            set_condition(status, "Progressing", "True", "NewReplicaSetAvailable",
                          f'ReplicaSet "{rs_name}" has successfully progressed.')
        elif status != before or progressing is None or progressing.get("reason") in (
                "NewReplicaSetAvailable", "DeploymentPaused"):
            set_condition(status, "Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
            requeue = float(spec.get("progressDeadlineSeconds", 600))
        elif progressing.get("reason") == "ReplicaSetUpdated":
            left = float(spec.get("progressDeadlineSeconds", 600)) - seconds_since(progressing.get("lastUpdateTime"))
            if left <= 0:
                set_condition(status, "Progressing", "False", "ProgressDeadlineExceeded",
                              f'ReplicaSet "{rs_name}" has timed out progressing.')
                self.store.record_event(deploy, "Warning", "ProgressDeadlineExceeded",
                                        f'ReplicaSet "{rs_name}" has timed out progressing.')
            else:
                requeue = left
        if min_ready and not complete:
            requeue = min(requeue or float(min_ready), float(min_ready))
        if status != before:
            for cond in status.get("conditions") or []:
                cond.setdefault("lastUpdateTime", now_rfc3339())
        return self.settle_status(deploy, status, before, requeue)


def _hash(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("labels", {}).get(HASH_LABEL, "")


def _created(pod: dict) -> float:
    return -seconds_since(pod["metadata"].get("creationTimestamp"))


def _newest_first(pods: list[dict]) -> list[dict]:
    return sorted(pods, key=_created, reverse=True)
