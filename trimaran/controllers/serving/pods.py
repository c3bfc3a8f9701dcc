"""The pods the serving controller runs: revision replicas (the model server, or custom containers)
and the router.

A model replica runs ``python -m trimaran.serving`` on a port of its own, with the model mounted
read-only where KServe puts it: ``/mnt/models`` (a local path; or, for a remote URI, the emptyDir
``kserve-provision-location`` that the replica's own ``storage-initializer`` init container fills
inside the pod before the server starts, as KServe's webhook lays it out) or ``/mnt/pvc`` (a claim,
read-only, as KServe mounts it). Custom containers (a custom predictor, a
transformer) get Knative's ``PORT`` and KServe's ``MODEL_NAME``, plus ``PREDICTOR_HOST`` and
``PREDICTOR_PROTOCOL`` in a transformer; their ``args`` may refer to them as ``$(PORT)``.
"""

from __future__ import annotations

import copy
from pathlib import Path

from trimaran.api.meta import pod_hostname
from trimaran.api.serving import parse_storage_uri
from trimaran.controllers.pods import owner_reference, set_gang

__all__ = [
    "COMPONENT_LABEL",
    "ISVC_LABEL",
    "PORTS_ANNOTATION",
    "REVISION_LABEL",
    "ROUTER_NAME",
    "ROUTER_NAMESPACE",
    "replica_pod",
    "router_pod",
    "standard_app",
    "standard_pod_template",
]

ISVC_LABEL = "serving.kserve.io/inferenceservice"
COMPONENT_LABEL = "component"
REVISION_LABEL = "serving.knative.dev/revision"
INDEX_LABEL = "serving.trimaran.io/replica-index"
PORTS_ANNOTATION = "serving.trimaran.io/ports"  # "http[,grpc]"
PROBE_ANNOTATION = "serving.trimaran.io/probe-path"
ROUTER_NAMESPACE = "trimaran-system"
ROUTER_NAME = "trimaran-router"
ROUTES_MOUNT = "/etc/trimaran/routes"
MODEL_MOUNT = "/mnt/models"
PROVISION_VOLUME = "kserve-provision-location"
PVC_MOUNT = "/mnt/pvc"
MAIN_CONTAINER = "kserve-container"
HEALTH_PATH = "/v2/health/ready"
APP_LABEL = "app"
STANDARD_HTTP_PORT = 8080  # KServe's model servers' ports (the Service's 80 forwards to the first)
STANDARD_GRPC_PORT = 8081


def source_env() -> list[dict]:
    """``PYTHONPATH`` for a container running this control plane's own code (the model server, the
    router): the checkout the sandbox shows every pod, as the storage initializer gets it; the
    interpreter's editable install may name another checkout, which pods do not see."""
    return [{"name": "PYTHONPATH", "value": str(Path(__file__).resolve().parents[3])}]


def router_pod(routes_dir: Path) -> dict:
    """The router as a pod: restarted in place if it dies, re-adopted after a control-plane restart."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": ROUTER_NAME, "namespace": ROUTER_NAMESPACE, "labels": {"app": ROUTER_NAME}},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 5,
            # The serving data plane stays on the host's network (loopback ports, no bridge hop), as
            # ingress gateways do on a cluster: the pod network must not slow it down.
            "hostNetwork": True,
            "containers": [{
                "name": "router", "image": "trimaran/router",
                "command": ["python", "-m", "trimaran.serving.router", "--routes", f"{ROUTES_MOUNT}/routes.json"],
                "env": source_env(),
                "volumeMounts": [{"name": "routes", "mountPath": ROUTES_MOUNT, "readOnly": True}],
            }],
            "volumes": [{"name": "routes", "hostPath": {"path": str(routes_dir), "type": "DirectoryOrCreate"}}],
        },
        "status": {"phase": "Pending"},
    }
    set_gang(pod, ROUTER_NAME, 1, {})
    return pod


def model_storage(storage_uri: str, host_path: Path | None) -> tuple[dict, dict, str]:
    """The pod volume, the container's mount and the model directory inside the sandbox.
    ``host_path`` is the resolved directory of a path URI (a claim is mounted by name instead; a
    remote URI's volume is an emptyDir its storage initializer fills)."""
    loc = parse_storage_uri(storage_uri)
    if loc.kind == "remote":
        volume = {"name": PROVISION_VOLUME, "emptyDir": {}}
        return volume, {"name": PROVISION_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}, MODEL_MOUNT
    if loc.kind == "pvc":
        volume = {"name": "kserve-pvc-source", "persistentVolumeClaim": {"claimName": loc.claim, "readOnly": True}}
        mount = {"name": "kserve-pvc-source", "mountPath": PVC_MOUNT, "readOnly": True}
        return volume, mount, f"{PVC_MOUNT}/{loc.path}".rstrip("/")
    if host_path is None:
        raise ValueError(f"{storage_uri}: a path URI needs its resolved directory")
    volume = {"name": PROVISION_VOLUME, "hostPath": {"path": str(host_path)}}
    mount = {"name": PROVISION_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}
    return volume, mount, MODEL_MOUNT


def model_server_args(isvc_name: str, model: dict, component: dict, model_dir: str, http_port: int,
                      grpc_port: int, extra: list[str] | None = None, host: str = "127.0.0.1") -> list[str]:
    """``python -m trimaran.serving`` arguments for one replica; the user's ``args`` come last (and win)."""
    args = ["--model-name", isvc_name, "--model-dir", model_dir, "--host", host,
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--workers", "1"]
    fmt = (model.get("modelFormat") or {}).get("name")
    if fmt:
        args += ["--model-format", fmt]
    batcher = component.get("batcher") or {}
    if batcher.get("maxBatchSize"):
        args += ["--max-batch-size", str(batcher["maxBatchSize"])]
    if batcher.get("maxLatency") is not None:
        args += ["--max-batch-latency-ms", str(batcher["maxLatency"])]
    if component.get("timeout"):
        args += ["--request-timeout", str(component["timeout"])]
    return args + list(extra or []) + list(model.get("args") or [])


def replica_pod(isvc: dict, component_name: str, revision: dict, index: int, ports: list[int],
                host_path: Path | None, predictor_host: str | None, initializer: dict | None = None) -> dict:
    """Replica ``index`` of ``revision`` (a status.revisions entry) on ``ports`` (http[, grpc]);
    ``initializer`` is the storage-initializer init container of a remote model."""
    ns = isvc["metadata"]["namespace"]
    http_port = ports[0]
    grpc_port = ports[1] if len(ports) > 1 else 0
    spec, labels, annotations, probe = _pod_parts(isvc, component_name, revision, http_port, grpc_port, host_path,
                                                  predictor_host, initializer, own_network=False)
    labels.update({REVISION_LABEL: revision["name"], INDEX_LABEL: str(index)})
    annotations[PORTS_ANNOTATION] = ",".join(map(str, ports))
    if probe:
        annotations[PROBE_ANNOTATION] = probe
    # On the host's network, beside the router that calls it on loopback (see router_pod).
    spec.update(hostname=pod_hostname(revision["name"]), hostNetwork=True)
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{revision['name']}-deployment-{index}", "namespace": ns, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(isvc)]},
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    set_gang(pod, f"{isvc['metadata']['uid']}/{revision['name']}/{index}", 1, {})
    return pod


def standard_pod_template(isvc: dict, component_name: str, component: dict, model: dict | None,
                          host_path: Path | None, predictor_host: str | None,
                          initializer: dict | None = None) -> tuple[dict, int]:
    """The pod template of a component's Deployment in Standard mode, and the port its server answers
    on: the same pod as a Knative replica's, on the pod network (its own address, KServe's ports
    8080 and 8081 for the model server, a custom container's first declared port or 8080), with a
    readiness probe, since the kubelet's probes (not a router's) make the Service's endpoints."""
    main_ports = next((c.get("ports") or [] for c in component.get("containers") or []
                       if c.get("name") == MAIN_CONTAINER), None)
    if main_ports is None:
        main_ports = ((component.get("containers") or [{}])[0]).get("ports") or []
    http_port = int(main_ports[0]["containerPort"]) if model is None and main_ports else STANDARD_HTTP_PORT
    revision = {"name": f"{isvc['metadata']['name']}-{component_name}", "spec": component,
                **({"model": model} if model is not None else {})}
    spec, labels, annotations, probe = _pod_parts(isvc, component_name, revision, http_port,
                                                  STANDARD_GRPC_PORT if model is not None else 0, host_path,
                                                  predictor_host, initializer, own_network=True)
    labels[APP_LABEL] = standard_app(isvc["metadata"]["name"], component_name)
    main = next((c for c in spec["containers"] if c.get("name") == MAIN_CONTAINER), spec["containers"][0])
    if not main.get("ports"):
        main["ports"] = [{"name": "http1", "containerPort": http_port, "protocol": "TCP"}]
        if model is not None:
            main["ports"].append({"name": "grpc", "containerPort": STANDARD_GRPC_PORT, "protocol": "TCP"})
    if not main.get("readinessProbe"):
        check = {"httpGet": {"path": probe, "port": http_port}} if probe else {"tcpSocket": {"port": http_port}}
        main["readinessProbe"] = {**check, "periodSeconds": 1, "failureThreshold": 3}
    meta: dict = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}, http_port


def standard_app(isvc_name: str, component_name: str) -> str:
    """The ``app`` label KServe gives a component's pods in Standard mode (its Deployment's selector)."""
    return f"isvc.{isvc_name}-{component_name}"


def _pod_parts(isvc: dict, component_name: str, revision: dict, http_port: int, grpc_port: int,
               host_path: Path | None, predictor_host: str | None, initializer: dict | None,
               own_network: bool) -> tuple[dict, dict, dict, str | None]:
    """What a component's pod is in either mode: its spec, labels, annotations and readiness path.
    ``own_network``: the pod has an address of its own (Standard mode), so the model server listens
    on every address of it; else it shares the host's and listens on loopback."""
    name, ns = isvc["metadata"]["name"], isvc["metadata"]["namespace"]
    component = copy.deepcopy(revision["spec"])
    model = revision.get("model")
    volumes = list(component.get("volumes") or [])
    env_extra = [{"name": "PORT", "value": str(http_port)}, {"name": "MODEL_NAME", "value": name}]
    if not own_network:  # Knative's: the revision the replica runs
        env_extra.append({"name": "K_REVISION", "value": revision["name"]})
    if predictor_host:
        protocol = "v2" if (isvc["spec"]["predictor"].get("model") or {}).get("protocolVersion") == "v2" else "v1"
        env_extra += [{"name": "PREDICTOR_HOST", "value": predictor_host},
                      {"name": "PREDICTOR_PROTOCOL", "value": protocol}]
    probe: str | None = HEALTH_PATH
    if model is not None:
        volume, mount, model_dir = model_storage(model["storageUri"], host_path)
        volumes.append(volume)
        log_args: list[str] = []
        logger = component.get("logger") or {}
        if logger.get("url"):  # KServe's agent's flags and CloudEvents extensions, served by the model server
            log_args += ["--log-url", logger["url"], "--log-mode", logger.get("mode") or "all"]
            for key, value in (("inferenceservicename", name), ("namespace", ns), ("component", component_name),
                               ("endpoint", "default")):
                log_args += ["--log-extension", f"{key}={value}"]
        args = model_server_args(name, model, component, model_dir, http_port, grpc_port, log_args,
                                 host="0.0.0.0" if own_network else "127.0.0.1")
        if predictor_host:
            args += ["--predictor-host", predictor_host]
        own = [] if model.get("command") else source_env()
        container = {
            "name": MAIN_CONTAINER, "image": model.get("image") or "trimaran/model-server",
            "command": list(model.get("command") or ["python", "-m", "trimaran.serving"]),
            "args": args, "env": env_extra + own + list(model.get("env") or []),
            "volumeMounts": [mount],
        }
        if model.get("resources"):
            container["resources"] = model["resources"]
        if model.get("workingDir"):
            container["workingDir"] = model["workingDir"]
        containers = [container]
    else:
        containers = copy.deepcopy(component.get("containers") or [])
        main = next((c for c in containers if c.get("name") == MAIN_CONTAINER), containers[0])
        main["env"] = env_extra + list(main.get("env") or [])
        http_get = ((main.get("readinessProbe") or {}).get("httpGet") or {})
        probe = http_get.get("path") if http_get else None
    labels = {**(component.get("labels") or {}), ISVC_LABEL: name, COMPONENT_LABEL: component_name}
    annotations = dict(component.get("annotations") or {})
    spec = {k: v for k, v in component.items() if k in _POD_FIELDS}
    spec.update(containers=containers, restartPolicy="Always")
    spec.setdefault("terminationGracePeriodSeconds", 10)
    if initializer is not None:
        spec["initContainers"] = [initializer, *(spec.get("initContainers") or [])]
    if volumes:
        spec["volumes"] = volumes
    return spec, labels, annotations, probe


# PodSpec fields of a component that carry over to its pods (the rest are KServe's own knobs).
_POD_FIELDS = {"nodeSelector", "affinity", "tolerations", "serviceAccountName", "securityContext",
               "terminationGracePeriodSeconds", "priorityClassName", "initContainers", "resources"}
