"""KServe InferenceGraphs: each graph runs as an InferenceService of its own whose container is the graph
router (``python -m trimaran.serving.graph``), so it gets what every service gets (a stable port, the
ingress by host name, replicas, readiness) and ``status.url`` never moves.

Steps naming an InferenceService (``serviceName``) are resolved here to that service's own URL and its
predict path, V1 ``/v1/models/<name>:predict`` or V2 ``/v2/models/<name>/infer`` by its ``protocolVersion``,
as KServe's controller does; until every named service exists the router is not started, and ``Ready``
stays False naming those missing or not ready.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable

from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of, owner_key
from trimaran.controllers.conditions import set_condition
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.serving.reconciler import GRAPH_ROUTE_ANNOTATION, status_true
from trimaran.store import AlreadyExists, Conflict, NotFound

__all__ = ["InferenceGraphReconciler", "router_service_name"]

GRAPH_LABEL = "serving.kserve.io/inferencegraph"
RECHECK_SECONDS = 1.0


def router_service_name(graph_name: str) -> str:
    """The InferenceService that runs graph ``graph_name``'s router."""
    return f"{graph_name}-graph"


def _service_names(graph: dict) -> set[str]:
    return {step["serviceName"] for node in graph["spec"]["nodes"].values() for step in node.get("steps") or []
            if step.get("serviceName")}


def _predict_url(isvc: dict) -> str:
    name = isvc["metadata"]["name"]
    model = (isvc["spec"].get("predictor") or {}).get("model") or {}
    base = (isvc.get("status") or {})["url"]
    if model.get("protocolVersion") == "v2":
        return f"{base}/v2/models/{name}/infer"
    return f"{base}/v1/models/{name}:predict"


def router_config(graph: dict, services: dict[str, dict]) -> dict:
    """The router's configuration: the graph with every ``serviceName`` resolved through ``services``."""
    nodes = {}
    for name, node in graph["spec"]["nodes"].items():
        steps = []
        for step in node.get("steps") or []:
            out = {k: step[k] for k in ("name", "data", "condition", "dependency", "weight",
                                        "mapPredictionsToInstances") if step.get(k) is not None}
            if step.get("nodeName"):
                out["node"] = step["nodeName"]
            elif step.get("serviceName"):
                out["url"] = _predict_url(services[step["serviceName"]])
            else:
                out["url"] = step["serviceUrl"]
            steps.append(out)
        nodes[name] = {"routerType": node["routerType"], "steps": steps}
    return {"name": graph["metadata"]["name"], "timeout": graph["spec"].get("timeout") or 60, "nodes": nodes}


def router_service(graph: dict, services: dict[str, dict]) -> dict:
    """The InferenceService running ``graph``'s router."""
    spec = graph["spec"]
    name, ns = graph["metadata"]["name"], graph["metadata"]["namespace"]
    config = json.dumps(router_config(graph, services), sort_keys=True)
    container = {"name": "kserve-container", "command": ["python", "-m", "trimaran.serving.graph"],
                 "env": [{"name": "INFERENCE_GRAPH_CONFIG", "value": config}]}
    if spec.get("resources"):
        container["resources"] = spec["resources"]
    min_replicas = spec.get("minReplicas")
    predictor: dict = {"containers": [container], "minReplicas": 1 if min_replicas is None else min_replicas,
                       "labels": {GRAPH_LABEL: name}}
    if spec.get("maxReplicas"):
        predictor["maxReplicas"] = spec["maxReplicas"]
    for key in ("scaleTarget", "scaleMetric", "timeout", "serviceAccountName", "nodeSelector", "tolerations",
                "affinity"):
        if spec.get(key) is not None:
            predictor[key] = spec[key]
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": router_service_name(name), "namespace": ns, "labels": {GRAPH_LABEL: name},
                         # The InferenceService router runs the graph itself from this (no hop to the replica).
                         "annotations": {GRAPH_ROUTE_ANNOTATION: config},
                         "ownerReferences": [owner_reference(graph)]},
            "spec": {"predictor": predictor}}


class InferenceGraphReconciler(Reconciler):
    """Runs InferenceGraphs (see the module docstring)."""

    name = "inferencegraph"
    kinds = ("InferenceGraph",)
    watches = ("InferenceService",)

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        """A graph's own router service, and every graph of the namespace that names a changed service."""
        if event_kind in self.kinds:
            return [key_of(obj)]
        keys = []
        owner = owner_key(obj, self.kinds)
        if owner:
            keys.append(owner)
        ns, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        for graph in self.store.list("InferenceGraph", ns):
            if name in _service_names(graph):
                keys.append(key_of(graph))
        return keys

    def reconcile(self, key: Key) -> float | None:
        try:
            graph = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(graph):
            return None
        status = copy.deepcopy(graph.get("status") or {})
        before = copy.deepcopy(status)
        services: dict[str, dict] = {}
        missing, unready = [], []
        for name in sorted(_service_names(graph)):
            try:
                services[name] = self.store.get("InferenceService", key.namespace, name)
            except NotFound:
                missing.append(name)
                continue
            if not (services[name].get("status") or {}).get("url"):
                missing.append(name)
            elif not status_true(services[name]["status"], "Ready"):
                unready.append(name)
        router = None
        if not missing:
            router = self._apply(router_service(graph, services))
        router_status = (router or {}).get("status") or {}
        if router_status.get("url"):
            status["url"] = router_status["url"]
            status["address"] = router_status.get("address")
        if missing:
            reason, message = "InferenceServiceNotFound", f"InferenceServices not found: {', '.join(missing)}"
        elif unready:
            reason, message = "InferenceServiceNotReady", f"InferenceServices not ready: {', '.join(unready)}"
        elif not status_true(router_status, "Ready"):
            reason, message = "RouterNotReady", f"the graph's router ({router_service_name(key.name)}) is starting"
        else:
            reason, message = "", ""
        set_condition(status, "Ready", "False" if reason else "True", reason, message)
        status["deploymentMode"] = "Serverless"
        status["observedGeneration"] = graph["metadata"].get("generation", 1)
        return self.settle_status(graph, status, before, RECHECK_SECONDS if reason else None)

    def _apply(self, wanted: dict) -> dict | None:
        ns, name = wanted["metadata"]["namespace"], wanted["metadata"]["name"]
        try:
            current = self.store.get("InferenceService", ns, name)
        except NotFound:
            try:
                return self.store.create(wanted)
            except AlreadyExists:
                return None
        if current["spec"] == wanted["spec"]:
            return current
        try:
            return self.store.update({**current, "spec": wanted["spec"]})
        except (Conflict, NotFound):
            return None  # decided again on the next pass (the Ready condition is not True yet)
