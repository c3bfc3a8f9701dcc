"""KServe's Standard deployment mode (legacy name RawDeployment): plain Kubernetes objects per component.

For each component (predictor, and transformer when present) the InferenceService owns, as
KServe's raw reconcilers make them:

- a Deployment ``<isvc>-<component>`` whose pod template is the Knative replica's pod
  (`pods.standard_pod_template`) on the pod network, selected by ``app: isvc.<isvc>-<component>``;
- a ClusterIP Service of the same name, port 80 to the server's port (and 8081 for the model
  server's gRPC);
- an autoscaling/v2 HorizontalPodAutoscaler of the same name, unless the autoscaler class
  (``serving.kserve.io/autoscalerClass``) is ``none``, ``external`` or ``keda``: cpu (or
  ``serving.kserve.io/metrics``/``scaleMetric`` memory) at ``targetUtilizationPercentage`` or
  ``scaleTarget`` (default 80 %), between minReplicas (0 counts as 1) and maxReplicas (at least min).

and a LoadBalancer Service ``<isvc>`` in front of the top component (the transformer if any, else
the predictor), whose address, reachable from this machine as kind's and k3s' LoadBalancers are,
is ``status.url``: requests reach the pods by the Services' nftables forwarding, with no process
in between (no router, activator or queue-proxy). Deletion is the garbage collector's, from the
ownerReferences.

The Deployment's replicas are written at its creation (minReplicas); afterwards they are the
HPA's (or, for ``external`` and ``keda``, whoever scales it), except with class ``none``, where
minReplicas is kept.
"""

from __future__ import annotations

from typing import Any

from trimaran.api.serving import SERVING_PREFIX
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.serving.pods import COMPONENT_LABEL, ISVC_LABEL, STANDARD_GRPC_PORT, standard_app

__all__ = ["CLASS_ANNOTATION", "autoscaler", "autoscaler_class", "deployment", "replicas_bounds", "service",
           "service_shape"]

CLASS_ANNOTATION = SERVING_PREFIX + "autoscalerClass"
METRICS_ANNOTATION = SERVING_PREFIX + "metrics"
TARGET_ANNOTATION = SERVING_PREFIX + "targetUtilizationPercentage"
SERVICE_PORT = 80  # KServe's raw Services' port (constants.CommonDefaultHttpPort)
DEFAULT_CPU_UTILIZATION = 80


def autoscaler_class(annotations: dict[str, str]) -> str:
    """``hpa`` (the default), ``external``, ``keda`` or ``none``."""
    return annotations.get(CLASS_ANNOTATION) or "hpa"


def replicas_bounds(component: dict) -> tuple[int, int]:
    """minReplicas (0, which an HPA cannot reach, counts as 1, as upstream's) and maxReplicas (at least min)."""
    low = max(1, int(component.get("minReplicas") or 1))
    return low, max(low, int(component.get("maxReplicas") or 0))


def _meta(isvc: dict, name: str, component: str) -> dict:
    return {"name": name, "namespace": isvc["metadata"]["namespace"],
            "labels": {ISVC_LABEL: isvc["metadata"]["name"], COMPONENT_LABEL: component},
            "ownerReferences": [owner_reference(isvc)]}


def deployment(isvc: dict, component: str, spec: dict, template: dict, replicas: int) -> dict:
    """The component's Deployment around ``template`` (`pods.standard_pod_template`)."""
    name = f"{isvc['metadata']['name']}-{component}"
    app = standard_app(isvc["metadata"]["name"], component)
    out: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template}
    if spec.get("deploymentStrategy"):
        out["strategy"] = spec["deploymentStrategy"]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(isvc, name, component), "spec": out}


def service(isvc: dict, name: str, component: str, port: int, grpc: bool, load_balancer: bool = False) -> dict:
    """A Service to the component's pods: port 80 to ``port`` (and gRPC's 8081 for the model server)."""
    ports = [{"name": "http", "port": SERVICE_PORT, "targetPort": port, "protocol": "TCP"}]
    if grpc:
        ports.append({"name": "grpc", "port": STANDARD_GRPC_PORT, "targetPort": STANDARD_GRPC_PORT, "protocol": "TCP"})
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(isvc, name, component),
            "spec": {"type": "LoadBalancer" if load_balancer else "ClusterIP",
                     "selector": {"app": standard_app(isvc["metadata"]["name"], component)}, "ports": ports}}


def service_shape(svc: dict) -> tuple:
    """What of a Service this controller decides (the rest, clusterIP and node ports, is allocated)."""
    spec = svc.get("spec") or {}
    return (spec.get("type") or "ClusterIP", spec.get("selector"),
            [(p.get("name"), p.get("port"), p.get("targetPort"), p.get("protocol") or "TCP")
             for p in spec.get("ports") or []])


def autoscaler(isvc: dict, component: str, spec: dict, annotations: dict[str, str]) -> dict | None:
    """The component's HorizontalPodAutoscaler, or None where the class says another scales it (or nothing)."""
    if autoscaler_class(annotations) != "hpa":
        return None
    name = f"{isvc['metadata']['name']}-{component}"
    low, high = replicas_bounds(spec)
    metric = annotations.get(METRICS_ANNOTATION) or spec.get("scaleMetric") or "cpu"
    if metric not in ("cpu", "memory"):
        metric = "cpu"  # concurrency and rps are Knative's autoscaler's; an HPA measures resources
    value = annotations.get(TARGET_ANNOTATION) or spec.get("scaleTarget") or DEFAULT_CPU_UTILIZATION
    if spec.get("scaleMetricType") == "AverageValue":
        target: dict[str, Any] = {"type": "AverageValue", "averageValue": str(value)}
    else:
        target = {"type": "Utilization", "averageUtilization": int(value)}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(isvc, name, component),
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Resource", "resource": {"name": metric, "target": target}}]}}
