"""Pod helpers shared by the controllers that own pods."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable

from trimaran.controllers.conditions import now_rfc3339, seconds_since
from trimaran.store import Conflict, NotFound, Store

GANG_ANNOTATION = "scheduling.trimaran.io/gang"
GANG_SIZE_ANNOTATION = "scheduling.trimaran.io/gang-size"
HOSTS_ANNOTATION = "trimaran.io/hosts"
# When the gang joined the queue (epoch seconds): the FIFO order of admission. Creation timestamps
# have whole seconds and resourceVersions change with every status write, so neither orders it.
QUEUED_ANNOTATION = "scheduling.trimaran.io/queued-at"
LOOPBACK = "127.0.0.1"


def owner_reference(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def new_pod(name: str, namespace: str, spec: dict, *, owner: dict | None = None, labels: dict | None = None,
            annotations: dict | None = None, generate: bool = False) -> dict:
    """A Pod as a controller creates it from its template: ``Pending``, owned by ``owner`` (its
    controller, so GC removes it with the owner) when one is given. With ``generate``, ``name`` is a
    ``generateName`` prefix the store completes, as the ReplicaSet and DaemonSet controllers name pods."""
    metadata: dict = {"generateName" if generate else "name": name, "namespace": namespace, "labels": labels or {},
                      "annotations": annotations or {}}
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def is_ready(pod: dict) -> bool:
    """Its Ready condition is True (upstream's ``IsPodReady``)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def owned_pods(store: Store, owner: dict) -> list[dict]:
    return store.list("Pod", owner["metadata"]["namespace"], owner_uid=owner["metadata"]["uid"])


def controller_uid(obj: dict) -> str | None:
    """The uid of the object's controller (its ownerReference with ``controller: true``), if any."""
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def is_orphan(pod: dict) -> bool:
    """A live pod no controller owns: one a controller whose selector matches may adopt."""
    return controller_uid(pod) is None and not is_terminating(pod)


def claim_pods(store: Store, owner: dict, selects: Callable[[dict], bool],
               member: Callable[[dict], bool] = lambda pod: True) -> list[dict]:
    """The pods ``owner`` controls, as upstream's ControllerRefManager claims them: its own that
    ``selects`` still (or that are going anyway), the rest of its own released, and orphans that it
    selects and counts as ``member`` adopted. A pod changed meanwhile is left for the next pass."""
    uid = owner["metadata"]["uid"]
    claimed = []
    for pod in store.list("Pod", owner["metadata"]["namespace"]):
        controller = controller_uid(pod)
        if controller == uid:
            if selects(pod) or is_terminating(pod):
                claimed.append(pod)
            else:
                _set_controller(store, pod, None, uid)
        elif is_orphan(pod) and selects(pod) and member(pod):
            adopted = _set_controller(store, pod, owner, uid)
            if adopted is not None:
                claimed.append(adopted)
    return claimed


def _set_controller(store: Store, obj: dict, owner: dict | None, uid: str) -> dict | None:
    """Adopt ``obj`` (``owner`` given) or release it from the controller of ``uid``; the stored
    object, or None when it changed or went meanwhile."""
    fresh = copy.deepcopy(obj)
    refs = [r for r in fresh["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
    if owner is not None:
        refs.append(owner_reference(owner))
    fresh["metadata"]["ownerReferences"] = refs
    try:
        return store.update(fresh)
    except (Conflict, NotFound):
        return None


def set_gang(pod: dict, group: str, size: int, hosts: dict[str, str], queued_at: float | None = None) -> None:
    ann = pod["metadata"].setdefault("annotations", {})
    ann[GANG_ANNOTATION] = group
    ann[GANG_SIZE_ANNOTATION] = str(size)
    ann[QUEUED_ANNOTATION] = f"{time.time() if queued_at is None else queued_at:.6f}"
    ann[HOSTS_ANNOTATION] = json.dumps(hosts, separators=(",", ":"))


def phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def waiting_reason(pods: list[dict]) -> str | None:
    """Why a pending pod among ``pods`` is not running yet: the scheduler's Unschedulable message
    (too few cores, memory or GPUs), or a container's waiting reason (a missing ConfigMap, an
    image being pulled or in ImagePullBackOff), so that its owner says so instead of a silent
    Running or Created."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            continue
        name = pod["metadata"]["name"]
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return f"pod {name} cannot be scheduled: {cond.get('message') or cond.get('reason')}"
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                return f"pod {name} is waiting: {waiting['reason']}{detail}"
    return None


def is_terminating(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def request_deletion(store: Store, pod: dict) -> None:
    """Ask the kubelet to stop the pod's processes and then remove it (graceful delete).

    ``pod`` is marked terminating too, so the caller's counts in the same pass leave it out.
    """
    if is_terminating(pod):
        return
    try:
        fresh = store.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if not is_terminating(fresh):
            fresh["metadata"]["deletionTimestamp"] = now_rfc3339()
            fresh = store.update(fresh)
        pod["metadata"]["deletionTimestamp"] = fresh["metadata"]["deletionTimestamp"]
    except (NotFound, Conflict):
        pass  # gone already, or changed under us: the next reconcile sees the new state


def container_exit_code(pod: dict, container: str | None) -> int | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if container is None or cs.get("name") == container:
            term = (cs.get("state") or {}).get("terminated")
            if term is not None:
                return int(term.get("exitCode", 0))
    return None


def restart_count(pod: dict) -> int:
    return sum(int(cs.get("restartCount", 0)) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def expire_finished(store: Store, job: dict, status: dict, pods: list[dict]) -> float | None:
    """Apply ``ttlSecondsAfterFinished`` to a finished job: seconds left, or delete it and its pods.

    Both the training kinds (``spec.runPolicy``) and batch/v1 Job (``spec``) carry the field.
    """
    spec = job.get("spec") or {}
    ttl = (spec.get("runPolicy") or {}).get("ttlSecondsAfterFinished", spec.get("ttlSecondsAfterFinished"))
    if ttl is None or not status.get("completionTime"):
        return None
    left = float(ttl) - seconds_since(status["completionTime"])
    if left > 0:
        return left
    for pod in pods:
        request_deletion(store, pod)
    try:
        store.delete(job["kind"], job["metadata"]["namespace"], job["metadata"]["name"])
    except NotFound:
        pass
    return None
