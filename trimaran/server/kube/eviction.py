"""The ``pods/eviction`` subresource (``policy/v1`` Eviction, POST), what ``kubectl drain`` calls.

As kube-apiserver's eviction REST: the Eviction names the pod in the URL, its ``deleteOptions``
(preconditions, dry run) apply to the delete; a pod that is terminal, still Pending or already
being deleted is deleted at once, and a running one first gets the ``DisruptionTarget`` condition
(``EvictionByEvictionAPI``), then a graceful delete: the kubelet stops it with its grace period and
its controller (Deployment, Job, ...) makes a new one.

A running pod a PodDisruptionBudget covers is evicted only while the budget allows a disruption, as
upstream's ``checkAndDecrement``: its ``disruptionsAllowed`` is spent (the pod named in
``disruptedPods``, which the disruption controller reads) in a write that a racing eviction's makes
conflict and read again; none left is 429 TooManyRequests "Cannot evict pod as it would violate the
pod's disruption budget." with the ``DisruptionBudget`` cause, which ``kubectl drain`` retries every
5 s. A pod that is not Ready passes where the budget is healthy anyway or its
``unhealthyPodEvictionPolicy`` is AlwaysAllow; two budgets over one pod are upstream's 500.
"""

from __future__ import annotations

from typing import Any

from trimaran.controllers.conditions import is_true, now_rfc3339, set_condition
from trimaran.controllers.gc import PreconditionFailed, request_delete
from trimaran.controllers.workloads.pdb import budgets_of, set_disruption_allowed
from trimaran.server.kube.errors import StatusError
from trimaran.store import Conflict, NotFound, Store

__all__ = ["evict"]

_VERSIONS = ("policy/v1", "policy/v1beta1")
_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
# Writes of a budget's status lost to racing evictions before the eviction gives up, as upstream's retries.
_BUDGET_ATTEMPTS = 5


def evict(store: Store, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """Evict pod ``namespace/name`` as ``body`` (an Eviction) asks; the Status to answer with 201.

    Raises:
        StatusError: the body is not an Eviction of this pod (400), the pod is not found (404), or a
            precondition does not hold (409).
    """
    # A body without apiVersion and kind is read as the Eviction the path expects, as kube-apiserver
    # decodes it (the Python client sends one).
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction" or \
            body.get("apiVersion", "policy/v1") not in _VERSIONS:
        raise StatusError.bad_request("the body of an eviction must be a policy/v1 Eviction")
    named = (body.get("metadata") or {}).get("name")
    if named and named != name:
        raise StatusError.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    if not isinstance(options, dict):
        raise StatusError.bad_request("deleteOptions: must be a DeleteOptions object")
    preconditions = options.get("preconditions") if isinstance(options.get("preconditions"), dict) else None
    dry_run = options.get("dryRun") == ["All"]
    try:
        pod = store.get("Pod", namespace, name)
        for field in ("uid", "resourceVersion"):
            # Checked before the condition is written (which moves the resourceVersion), as upstream.
            wanted = (preconditions or {}).get(field)
            if wanted and wanted != pod["metadata"].get(field):
                raise PreconditionFailed(pod, field, wanted, pod["metadata"].get(field))
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase not in ("Succeeded", "Failed", "Pending") and not pod["metadata"].get("deletionTimestamp"):
            _spend_budget(store, pod, dry_run)
        if phase == "Running" and not pod["metadata"].get("deletionTimestamp") and not dry_run:
            status = dict(pod.get("status") or {})
            if set_condition(status, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting"):
                pod["status"] = status
                pod = store.update_status(pod)
        request_delete(store, pod, options.get("propagationPolicy") or "Background",
                       {"uid": pod["metadata"]["uid"]}, dry_run)
    except NotFound:
        raise StatusError.not_found("", "pods", name) from None
    except Conflict as exc:
        raise StatusError.conflict("", "pods", name, str(exc)) from None
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def _too_many(message: str, retry_after: int) -> StatusError:
    """apimachinery's ``NewTooManyRequests`` with the ``DisruptionBudget`` cause."""
    return StatusError(429, "TooManyRequests", _REFUSED,
                       {"causes": [{"reason": "DisruptionBudget", "message": message}],
                        "retryAfterSeconds": retry_after},
                       {"Retry-After": str(retry_after)} if retry_after else None)


def _spend_budget(store: Store, pod: dict[str, Any], dry_run: bool) -> None:
    """Upstream's budget check of an eviction: spend one of the covering budget's disruptions, or refuse.

    Raises:
        StatusError: 429 when the budget allows none (or has not yet seen its latest spec), 500 for a
            pod under two budgets.
    """
    budgets = budgets_of(store, pod)
    if not budgets:
        return
    if len(budgets) > 1:
        message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        raise StatusError(500, "InternalError", f"Internal error occurred: {message}",
                          {"causes": [{"message": message}]})
    pdb = budgets[0]
    spec = pdb.get("spec") or {}
    if not is_true(pod.get("status") or {}, "Ready"):
        status = pdb.get("status") or {}
        desired = int(status.get("desiredHealthy") or 0)
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or \
                int(status.get("currentHealthy") or 0) >= desired > 0:
            return  # an unready pod does not count against a budget that holds without it
    name = pdb["metadata"]["name"]
    for _ in range(_BUDGET_ATTEMPTS):
        status = dict(pdb.get("status") or {})
        if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
            raise _too_many(f"The disruption budget {name} is still being processed by the server.", 10)
        if int(status.get("disruptionsAllowed") or 0) <= 0:
            raise _too_many(f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} healthy "
                            f"pods and has {int(status.get('currentHealthy') or 0)} currently", 0)
        if dry_run:
            return
        status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
        if status["disruptionsAllowed"] == 0:
            status["conditions"] = [dict(c) for c in status.get("conditions") or []]
            set_disruption_allowed(status)
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod["metadata"]["name"]: now_rfc3339()}
        try:
            store.update_status({**pdb, "status": status})
            return
        except Conflict:
            pdb = store.get("PodDisruptionBudget", pdb["metadata"]["namespace"], name)
    raise StatusError(504, "Timeout", f"couldn't update PodDisruptionBudget \"{name}\" due to conflicts",
                      {"retryAfterSeconds": 10})
