"""The ``pods/eviction`` subresource (``policy/v1`` Eviction, POST), what ``kubectl drain`` calls.

As kube-apiserver's eviction REST: the Eviction names the pod in the URL, its ``deleteOptions``
(preconditions, dry run) apply to the delete; a pod that is terminal, still Pending or already
being deleted is deleted at once, and a running one first gets the ``DisruptionTarget`` condition
(``EvictionByEvictionAPI``), then a graceful delete: the kubelet stops it with its grace period and
its controller (Deployment, Job, ...) makes a new one. There are no PodDisruptionBudgets yet, so no
eviction is refused for one (the 429 a budget gives comes with that kind).
"""

from __future__ import annotations

from typing import Any

from trimaran.controllers.conditions import set_condition
from trimaran.controllers.gc import PreconditionFailed, request_delete
from trimaran.server.kube.errors import StatusError
from trimaran.store import Conflict, NotFound, Store

__all__ = ["evict"]

_VERSIONS = ("policy/v1", "policy/v1beta1")


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
