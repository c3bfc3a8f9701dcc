"""The SeldonDeployment reconciler: each predictor becomes an InferenceService that runs its graph.

A predictor ``P`` of SeldonDeployment ``S`` is the InferenceService ``S-P`` (owned by ``S``, so deleting
one deletes the other), whose predictor is a custom container running the whole graph in one process
(``python -m trimaran.serving.seldon``: a hop between units is a call, not a request). That gives the
predictor everything an InferenceService has: replicas as pods, the router's readiness probes (the
executor listens once every unit has loaded), retries, draining, scaling and restarts. The router
serves it on the ingress port at ``/seldon/<namespace>/<S>/`` as Seldon's ingress does, weighted by
the predictor's ``traffic``; a ``shadow`` predictor gets a copy of each request and its answer is dropped.

Where units come from: a prepackaged server's ``modelUri`` is mounted read-only (a claim, or a local
directory after the same checks as an InferenceService's storageUri) or, for a remote URI, fetched by
the executor with `trimaran.serving.storage.fetch`; a unit named after a componentSpecs container is
that container's Python class: ``MODEL_NAME`` in its env or the argument after
``seldon-core-microservice``, found in its ``workingDir`` or volume mounts (a ConfigMap, a claim), whose
volumes, mounts and env the executor's container takes over; a unit with ``endpoint.service_host`` is a
Seldon microservice running there (a Service's name, say), called over HTTP. A unit whose container is an
image naming no class (``seldonio/mock_classifier_rest:1.3``, say) is that image, as Seldon's operator
runs it: a Deployment of its own (``S-P-<unit>``, owned by ``S``, its pods labelled with the unit) serving
Seldon's microservice API on port 9000 (``PREDICTIVE_UNIT_HTTP_SERVICE_PORT``), which the executor calls at
its ready pods' ``status.podIP`` (round robin); the InferenceService waits for them, and follows their
addresses when they change. With ``protocol: v2`` a
lone prepackaged MODEL is served by the model server itself (V2 REST, named after the unit).

Replicas follow Seldon's precedence (`trimaran.api.seldon.predictor_replicas`). A componentSpec's
``hpaSpec`` becomes an autoscaling/v2 HorizontalPodAutoscaler owned by ``S``, named as Seldon's operator
names it (after the Deployment it would make: ``S-P-<index>-<containers>``), whose target is ``S``'s own
scale subresource (``spec.replicas``): a predictor with an hpaSpec runs that many replicas, so scaling
has one path, the HPA controller's (`controllers/workloads/hpa.py`). The first hpaSpec is the HPA: all
of a predictor's units run in one executor, and one count is all ``S`` can hold.
Status: ``state`` Creating until every predictor's InferenceService is Ready (Available), Failed when
one cannot start, ``address.url`` the ingress path, ``deploymentStatus`` per predictor.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from trimaran.api import ManifestError, validate
from trimaran.api.seldon import PREPACKAGED_SERVERS, predictor_replicas
from trimaran.api.serving import StorageUriError, parse_storage_uri, resolve_storage_uri
from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.probes import resolve_port
from trimaran.controllers.serving.pods import source_env
from trimaran.controllers.serving.reconciler import (
    INGRESS_PATH_ANNOTATION,
    INGRESS_WEIGHT_ANNOTATION,
    SHADOW_ANNOTATION,
    status_true,
)
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["SeldonDeploymentReconciler", "autoscaler_for", "image_units", "predictor_service", "unit_deployment"]

SDEP_LABEL = "seldon-deployment-id"
PREDICTOR_LABEL = "seldon.io/predictor"
UNIT_LABEL = "seldon.io/unit"
MODEL_MOUNT = "/mnt/seldon"
RECHECK_SECONDS = 1.0
#: Seldon's microservice port (REST), and the name a unit's pod declares it under.
UNIT_PORT, UNIT_PORT_NAME = 9000, "http"


class SpecProblem(ValueError):
    """A predictor this machine cannot run (a model directory outside the allowed roots, say)."""


class UnitsPending(Exception):
    """Image units whose pods are not ready yet: the executor has no address to call them at."""


def _replicas(sdep: dict, predictor: dict) -> int:
    spec = sdep["spec"]
    if spec.get("replicas") is not None and any(c.get("hpaSpec") for c in predictor.get("componentSpecs") or []):
        return int(spec["replicas"])  # what the HPA last wrote through the scale subresource
    return predictor_replicas(spec, predictor)


def predictor_service(sdep: dict, predictor: dict, home: Path, unit_urls: dict[str, list[str]] | None = None) -> dict:
    """The InferenceService that runs ``predictor`` of ``sdep``; ``unit_urls`` are the image units'
    ready pods' addresses (see :func:`image_units`). Raises SpecProblem, or UnitsPending when an
    image unit has none."""
    name, ns = sdep["metadata"]["name"], sdep["metadata"]["namespace"]
    spec = sdep["spec"]
    protocol = spec.get("protocol") or "seldon"
    graph = predictor["graph"]
    replicas = _replicas(sdep, predictor)
    component = {"minReplicas": replicas, "maxReplicas": max(replicas, 1),
                 "labels": {SDEP_LABEL: name, PREDICTOR_LABEL: predictor["name"]}}
    lone = not graph.get("children") and graph.get("implementation") in PREPACKAGED_SERVERS
    if protocol in ("v2", "kfserving") and lone and PREPACKAGED_SERVERS[graph["implementation"]]:
        component["model"] = {"modelFormat": {"name": PREPACKAGED_SERVERS[graph["implementation"]]},
                              "storageUri": graph["modelUri"], "protocolVersion": "v2",
                              "args": ["--model-name", graph["name"]]}
        # The unit's own container sets the server's env (MLFLOW_TRACKING_URI for a models:/ URI, say).
        unit_env = [e for cs in predictor.get("componentSpecs") or [] for c in (cs.get("spec") or {}).get("containers")
                    or [] if c.get("name") == graph["name"] for e in c.get("env") or []]
        if unit_env:
            component["model"]["env"] = unit_env
    elif protocol in ("v2", "kfserving") and lone:
        component.update(_triton(graph, sdep["metadata"]["namespace"], home))
    else:
        component.update(_executor(sdep, predictor, protocol, home, unit_urls or {}))
    annotations = {INGRESS_PATH_ANNOTATION: f"/seldon/{ns}/{name}/",
                   INGRESS_WEIGHT_ANNOTATION: str(predictor.get("traffic") or 0)}
    if predictor.get("shadow"):
        annotations[SHADOW_ANNOTATION] = "true"
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": f"{name}-{predictor['name']}", "namespace": ns, "annotations": annotations,
                     "labels": {**(predictor.get("labels") or {}), SDEP_LABEL: name,
                                PREDICTOR_LABEL: predictor["name"]},
                     "ownerReferences": [owner_reference(sdep)]},
        "spec": {"predictor": component},
    }


def autoscaler_for(sdep: dict) -> dict | None:
    """The HorizontalPodAutoscaler Seldon's operator makes of the first ``hpaSpec``, aimed at ``sdep``'s scale
    subresource; its ``metrics`` in autoscaling/v2beta1's shape are converted, ``metricsv2`` taken as is."""
    name = sdep["metadata"]["name"]
    for predictor in sdep["spec"]["predictors"]:
        for index, component in enumerate(predictor.get("componentSpecs") or []):
            hpa = component.get("hpaSpec")
            if not hpa:
                continue
            deployment = (component.get("metadata") or {}).get("name") or "-".join(
                [name, predictor["name"], str(index),
                 *(c["name"] for c in (component.get("spec") or {}).get("containers") or [])])
            if len(deployment) > 63:
                deployment = "seldon-" + hashlib.md5(deployment.encode()).hexdigest()
            spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": sdep["apiVersion"], "kind": "SeldonDeployment",
                                                       "name": name},
                                    "maxReplicas": hpa["maxReplicas"]}
            if hpa.get("minReplicas") is not None:
                spec["minReplicas"] = hpa["minReplicas"]
            metrics = hpa.get("metricsv2") or [_v2_metric(m) for m in hpa.get("metrics") or []]
            if metrics:
                spec["metrics"] = metrics
            return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": deployment, "namespace": sdep["metadata"]["namespace"],
                                 "labels": {SDEP_LABEL: name}, "ownerReferences": [owner_reference(sdep)]},
                    "spec": spec}
    return None


def _v2_metric(metric: dict) -> dict:
    """An autoscaling/v2beta1 MetricSpec (``targetAverageUtilization``, ``targetAverageValue``) in v2's shape."""
    kind = metric.get("type")
    source = dict(metric.get({"Resource": "resource", "Pods": "pods"}.get(kind or "", "")) or {})
    if "targetAverageUtilization" in source:
        source["target"] = {"type": "Utilization", "averageUtilization": source.pop("targetAverageUtilization")}
    elif "targetAverageValue" in source:
        source["target"] = {"type": "AverageValue", "averageValue": source.pop("targetAverageValue")}
    if kind == "Pods" and "metricName" in source:
        source["metric"] = {"name": source.pop("metricName")}
    return {**metric, {"Resource": "resource", "Pods": "pods"}[kind]: source} if kind in ("Resource", "Pods") \
        else metric


def _executor(sdep: dict, predictor: dict, protocol: str, home: Path, unit_urls: dict[str, list[str]]) -> dict:
    """The predictor's pod: one container running the graph, with what its units need mounted."""
    ns = sdep["metadata"]["namespace"]
    containers = {c["name"]: (j, c) for j, cs in enumerate(predictor.get("componentSpecs") or [])
                  for c in (cs.get("spec") or {}).get("containers") or []}
    volumes: list[dict] = []
    mounts: list[dict] = []
    env: list[dict] = []
    sources: dict[str, dict] = {}
    pod_fields: dict[str, Any] = {}
    images = image_units(predictor)
    pending = [unit for unit in images if not unit_urls.get(unit)]
    if pending:
        raise UnitsPending(f"waiting for the pods of image unit(s) {', '.join(pending)}")
    for unit in _walk(predictor["graph"]):
        impl = unit.get("implementation")
        if impl in PREPACKAGED_SERVERS:
            sources[unit["name"]] = _model_source(unit, ns, home, volumes, mounts)
            # A container named after a prepackaged unit sets its server's env (MLFLOW_TRACKING_URI, say).
            env += (containers.get(unit["name"], (0, {}))[1]).get("env") or []
        elif unit["name"] not in containers and (unit.get("endpoint") or {}).get("service_host"):
            endpoint = unit["endpoint"]
            port = endpoint.get("service_port") or endpoint.get("httpPort") or 9000
            sources[unit["name"]] = {"url": f"http://{endpoint['service_host']}:{port}"}
        elif unit["name"] in images:
            sources[unit["name"]] = {"urls": unit_urls[unit["name"]]}
        elif unit["name"] in containers:
            j, container = containers[unit["name"]]
            pod_spec = (predictor["componentSpecs"][j].get("spec") or {})
            for key in ("serviceAccountName", "securityContext", "nodeSelector", "tolerations", "affinity"):
                if key in pod_spec:
                    pod_fields.setdefault(key, pod_spec[key])
            renamed = {v["name"]: f"c{j}-{v['name']}" for v in pod_spec.get("volumes") or []}
            for volume in pod_spec.get("volumes") or []:
                if not any(v["name"] == renamed[volume["name"]] for v in volumes):
                    volumes.append({**volume, "name": renamed[volume["name"]]})
            paths = [container["workingDir"]] if container.get("workingDir") else []
            for mount in container.get("volumeMounts") or []:
                mounts.append({**mount, "name": renamed.get(mount["name"], mount["name"])})
                paths.append(mount["mountPath"])
            env += [e for e in container.get("env") or [] if e.get("name") != "MODEL_NAME"]
            class_name = _class_name(container)
            if class_name is None:
                raise SpecProblem(f"unit {unit['name']!r}: container {container['name']!r} names no class and no "
                                  "image: set MODEL_NAME in its env or run seldon-core-microservice CLASS, with "
                                  "the class's file in its workingDir or a volume, or give it an image that "
                                  "serves Seldon's microservice API")
            sources[unit["name"]] = {"class": class_name, "paths": paths}
    config = {"name": sdep["metadata"]["name"], "namespace": ns, "predictor": predictor["name"], "protocol": protocol,
              "graph": predictor["graph"], "sources": sources}
    main = {"name": "kserve-container", "command": ["python", "-m", "trimaran.serving.seldon"],
            "env": [{"name": "SELDON_GRAPH_CONFIG", "value": json.dumps(config, sort_keys=True)}, *env,
                    # The units' own PYTHONPATH, if they set one, is theirs to keep.
                    *([] if any(e.get("name") == "PYTHONPATH" for e in env) else source_env())]}
    if mounts:
        main["volumeMounts"] = _unique(mounts, "mountPath")
    # The executor runs every unit: it asks what the orchestrator asks for, else what the first unit's container
    # does (a CPU request is what an hpaSpec's utilization target is measured against).
    unit_resources = [c.get("resources") for _, c in containers.values() if c.get("resources")]
    resources = (predictor.get("svcOrchSpec") or {}).get("resources") or next(iter(unit_resources), None)
    if resources:
        main["resources"] = resources
    out: dict[str, Any] = {"containers": [main], **pod_fields}
    if volumes:
        out["volumes"] = volumes
    return out


def _triton(unit: dict, namespace: str, home: Path) -> dict:
    """TRITON_SERVER: our V2 server on the model's directory, its format found from its files."""
    volumes: list[dict] = []
    mounts: list[dict] = []
    source = _model_source(unit, namespace, home, volumes, mounts)
    if "modelDir" not in source:
        raise SpecProblem(f"unit {unit['name']!r}: TRITON_SERVER reads a claim or local modelUri here, "
                          f"not {unit['modelUri']}")
    container = {"name": "kserve-container", "command": ["python", "-m", "trimaran.serving"],
                 "args": ["--model-name", unit["name"], "--model-dir", source["modelDir"], "--host", "127.0.0.1",
                          "--http-port", "$(PORT)", "--grpc-port", "0", "--workers", "1"],
                 "env": source_env(), "volumeMounts": mounts}
    return {"containers": [container], "volumes": volumes}


def _model_source(unit: dict, namespace: str, home: Path, volumes: list[dict], mounts: list[dict]) -> dict:
    uri = unit["modelUri"]
    try:
        loc = parse_storage_uri(uri)
        if loc.kind == "remote":
            return {"modelUri": uri}
        volume_name = f"model-{len(volumes)}"
        where = f"{MODEL_MOUNT}/{unit['name']}"
        if loc.kind == "pvc":
            volumes.append({"name": volume_name, "persistentVolumeClaim": {"claimName": loc.claim, "readOnly": True}})
            mounts.append({"name": volume_name, "mountPath": where, "readOnly": True})
            return {"modelDir": f"{where}/{loc.path}".rstrip("/")}
        host = resolve_storage_uri(uri, home, namespace)
    except StorageUriError as exc:
        raise SpecProblem(f"unit {unit['name']!r}: modelUri {uri}: {exc}") from None
    if not host.exists():
        raise SpecProblem(f"unit {unit['name']!r}: modelUri {uri}: {host} does not exist")
    volumes.append({"name": volume_name, "hostPath": {"path": str(host)}})
    mounts.append({"name": volume_name, "mountPath": where, "readOnly": True})
    return {"modelDir": where}


def _class_name(container: dict) -> str | None:
    """The class ``seldon-core-microservice`` would load: its first argument, else ``MODEL_NAME``."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if len(argv) == 1 and " " in argv[0]:
        argv = shlex.split(argv[0])
    for i, word in enumerate(argv[:-1]):
        if word.endswith("seldon-core-microservice"):
            return argv[i + 1]
    for var in container.get("env") or []:
        if var.get("name") == "MODEL_NAME" and var.get("value"):
            return str(var["value"])
    return None


def image_units(predictor: dict) -> dict[str, tuple[int, dict]]:
    """The graph's units that are an image of their own (a container naming no class, with an
    image): unit name -> (its componentSpec's index, its container)."""
    containers = {c["name"]: (j, c) for j, cs in enumerate(predictor.get("componentSpecs") or [])
                  for c in (cs.get("spec") or {}).get("containers") or []}
    out = {}
    for unit in _walk(predictor["graph"]):
        found = containers.get(unit["name"])
        if found is None or unit.get("implementation") in PREPACKAGED_SERVERS:
            continue
        if found[1].get("image") and _class_name(found[1]) is None:
            out[unit["name"]] = found
    return out


def _unit_parameters(predictor: dict, unit_name: str) -> list[dict]:
    return next((u.get("parameters") or [] for u in _walk(predictor["graph"]) if u["name"] == unit_name), [])


def unit_deployment(sdep: dict, predictor: dict, unit: str) -> dict:
    """The Deployment that runs image unit ``unit`` of ``predictor`` as Seldon's operator runs it:
    its componentSpec's pod with that container alone, Seldon's variables set, the microservice's
    port 9000 declared as ``http`` and read from ``$(PORT)`` (a port of its own per pod where pods
    share the host's network), ready once it accepts connections there."""
    name, ns = sdep["metadata"]["name"], sdep["metadata"]["namespace"]
    index, container = image_units(predictor)[unit]
    pod_spec = copy.deepcopy(predictor["componentSpecs"][index].get("spec") or {})
    container = copy.deepcopy(container)
    seldon_env = {
        "PREDICTIVE_UNIT_SERVICE_PORT": "$(PORT)", "PREDICTIVE_UNIT_HTTP_SERVICE_PORT": "$(PORT)",
        "PREDICTIVE_UNIT_ID": unit, "PREDICTOR_ID": predictor["name"], "SELDON_DEPLOYMENT_ID": name,
        "PREDICTIVE_UNIT_PARAMETERS": json.dumps(_unit_parameters(predictor, unit)),
    }
    container["env"] = [*({"name": k, "value": v} for k, v in seldon_env.items()),
                        *(e for e in container.get("env") or [] if e.get("name") not in seldon_env)]
    container["ports"] = [{"name": UNIT_PORT_NAME, "containerPort": UNIT_PORT, "protocol": "TCP"},
                          *(p for p in container.get("ports") or [] if p.get("containerPort") != UNIT_PORT)]
    container.setdefault("readinessProbe", {"tcpSocket": {"port": UNIT_PORT_NAME}, "periodSeconds": 1,
                                            "failureThreshold": 3})
    used = {m["name"] for m in container.get("volumeMounts") or []}
    pod_spec["containers"] = [container]
    pod_spec["volumes"] = [v for v in pod_spec.get("volumes") or [] if v["name"] in used]
    if not pod_spec["volumes"]:
        del pod_spec["volumes"]
    labels = {SDEP_LABEL: name, PREDICTOR_LABEL: predictor["name"], UNIT_LABEL: unit}
    deployment = f"{name}-{predictor['name']}-{unit}"
    if len(deployment) > 63:
        deployment = "seldon-" + hashlib.md5(deployment.encode()).hexdigest()
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment, "namespace": ns, "labels": labels,
                         "ownerReferences": [owner_reference(sdep)]},
            "spec": {"replicas": _replicas(sdep, predictor), "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}


def _walk(unit: dict) -> list[dict]:
    out = [unit]
    for child in unit.get("children") or []:
        out += _walk(child)
    return out


def _unique(items: list[dict], key: str) -> list[dict]:
    return list({item[key]: item for item in items}.values())


class SeldonDeploymentReconciler(Reconciler):
    """Runs SeldonDeployments (see the module docstring)."""

    name = "seldon"
    kinds = ("SeldonDeployment",)
    watches = ("InferenceService", "HorizontalPodAutoscaler", "Deployment")

    def __init__(self, store: Store, home: Path) -> None:
        super().__init__(store)
        self.home = home

    def reconcile(self, key: Key) -> float | None:
        try:
            obj = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(obj):
            return None
        status = copy.deepcopy(obj.get("status") or {})
        before = copy.deepcopy(status)
        wanted: dict[str, dict] = {}
        problems: list[str] = []
        waiting: list[str] = []
        try:
            units = self._image_units(obj)
        except SpecProblem as exc:
            problems.append(str(exc))
            units = {}
        owned = {o["metadata"]["name"]: o for o in self.store.list("InferenceService", key.namespace,
                                                                   owner_uid=obj["metadata"]["uid"])}
        for predictor in obj["spec"]["predictors"]:
            try:
                wanted[predictor["name"]] = predictor_service(obj, predictor, self.home, units.get(predictor["name"]))
            except SpecProblem as exc:
                problems.append(f"predictor {predictor['name']!r}: {exc}")
            except UnitsPending as exc:
                waiting.append(f"predictor {predictor['name']!r}: {exc}")
                # Its InferenceService, if any, stays as it is until the units' pods are back.
                name = f"{obj['metadata']['name']}-{predictor['name']}"
                if name in owned:
                    owned.pop(name)
        for child in wanted.values():
            self._apply(child, owned.get(child["metadata"]["name"]))
        for stale in set(owned) - {c["metadata"]["name"] for c in wanted.values()}:
            try:
                self.store.delete("InferenceService", key.namespace, stale)
            except NotFound:
                pass
        problems += self._autoscaler(obj)
        self._status(obj, status, wanted, problems, waiting)
        if status != before:
            obj["status"] = status
            try:
                self.write_status(obj)
            except Conflict:
                return 0.05
            except NotFound:
                return None
        return None if status.get("state") == "Available" else RECHECK_SECONDS

    def _image_units(self, sdep: dict) -> dict[str, dict[str, list[str]]]:
        """Keep a Deployment per image unit (none for units gone); per predictor, each unit's ready
        pods' addresses (``http://<status.podIP>:<its http port>``)."""
        ns, uid = sdep["metadata"]["namespace"], sdep["metadata"]["uid"]
        existing = {d["metadata"]["name"]: d for d in self.store.list("Deployment", ns, owner_uid=uid)}
        urls: dict[str, dict[str, list[str]]] = {}
        keep = set()
        for predictor in sdep["spec"]["predictors"]:
            for unit in image_units(predictor):
                try:
                    want = validate(unit_deployment(sdep, predictor, unit)).object  # as the API stores it
                except ManifestError as exc:
                    raise SpecProblem(f"unit {unit!r}: its Deployment: {'; '.join(exc.problems)}") from None
                name = want["metadata"]["name"]
                keep.add(name)
                current = existing.get(name)
                try:
                    if current is None:
                        current = self.store.create(want)
                    elif current["spec"] != want["spec"]:
                        current = self.store.update({**current, "spec": want["spec"]})
                except (AlreadyExists, Conflict, NotFound):
                    self.wake(key_of(sdep))
                    continue
                urls.setdefault(predictor["name"], {})[unit] = self._ready_urls(ns, current)
        for name in set(existing) - keep:
            try:
                self.store.delete("Deployment", ns, name)
            except NotFound:
                pass
        return urls

    def _ready_urls(self, namespace: str, deployment: dict) -> list[str]:
        out = []
        for pod in self.store.list("Pod", namespace, owner_uid=deployment["metadata"]["uid"]):
            status = pod.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            port = resolve_port(pod, UNIT_PORT_NAME)
            if ready and status.get("podIP") and port and not is_being_deleted(pod):
                out.append(f"http://{status['podIP']}:{port}")
        return sorted(out)

    def _apply(self, child: dict, current: dict | None) -> None:
        if current is None:
            try:
                self.store.create(child)
            except AlreadyExists:
                pass
            return
        if current["spec"] == child["spec"] and current["metadata"].get("annotations") == \
                child["metadata"]["annotations"]:
            return
        current = {**current, "spec": child["spec"],
                   "metadata": {**current["metadata"], "annotations": child["metadata"]["annotations"]}}
        try:
            self.store.update(current)
        except (Conflict, NotFound):
            self.wake(key_of(current))  # decided again from fresh state on the next pass

    def _autoscaler(self, sdep: dict) -> list[str]:
        """Keep the HPA of the hpaSpec as Seldon's operator makes it (and none without one); what is wrong with it."""
        wanted = autoscaler_for(sdep)
        problems: list[str] = []
        if wanted is not None:
            try:
                wanted = validate(wanted).object  # defaulted as the API would store it
            except ManifestError as exc:
                problems.append(f"hpaSpec: {'; '.join(exc.problems)}")
                wanted = None
        ns = sdep["metadata"]["namespace"]
        existing = {o["metadata"]["name"]: o for o in self.store.list("HorizontalPodAutoscaler", ns,
                                                                      owner_uid=sdep["metadata"]["uid"])}
        keep = wanted["metadata"]["name"] if wanted is not None else None
        for name in set(existing) - {keep}:
            try:
                self.store.delete("HorizontalPodAutoscaler", ns, name)
            except NotFound:
                pass
        current = existing.get(keep or "")
        try:
            if wanted is not None and current is None:
                self.store.create(wanted)
            elif wanted is not None and current is not None and current["spec"] != wanted["spec"]:
                self.store.update({**current, "spec": wanted["spec"]})
        except (AlreadyExists, Conflict, NotFound):
            self.wake(key_of(sdep))  # decided again from fresh state on the next pass
        return problems

    def _status(self, obj: dict, status: dict, wanted: dict[str, dict], problems: list[str],
                waiting: list[str]) -> None:
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        deployment: dict[str, dict] = {}
        ready_all = not problems and not waiting
        failures = list(problems)
        replicas = 0
        for predictor, child in wanted.items():
            try:
                stored = self.store.get("InferenceService", ns, child["metadata"]["name"])
            except NotFound:
                ready_all = False
                continue
            child_status = stored.get("status") or {}
            counts = ((child_status.get("components") or {}).get("predictor") or {}).get("replicas") or {}
            ready = sum(int(r.get("ready", 0)) for r in counts.values()) if isinstance(counts, dict) else 0
            total = sum(int(r.get("total", 0)) for r in counts.values()) if isinstance(counts, dict) else 0
            replicas += total
            deployment[child["metadata"]["name"]] = {"replicas": total, "availableReplicas": ready,
                                                     "name": child["metadata"]["name"], "predictor": predictor}
            if not status_true(child_status, "Ready"):
                ready_all = False
                failure = (child_status.get("modelStatus") or {}).get("lastFailureInfo") or {}
                if failure.get("message"):
                    failures.append(f"predictor {predictor!r}: {failure['message']}")
        status["deploymentStatus"] = deployment
        status["replicas"] = replicas
        status["selector"] = f"{SDEP_LABEL}={name}"  # the scale subresource's: every predictor's pods
        status["address"] = {"url": f"http://127.0.0.1:{self._ingress_port()}/seldon/{ns}/{name}/api/v1.0/predictions"}
        if failures:
            status["state"], status["description"] = "Failed", "; ".join(failures)
        elif ready_all:
            status["state"], status["description"] = "Available", ""
        else:
            status["state"], status["description"] = "Creating", "; ".join(waiting) or \
                "waiting for the predictors' replicas"

    def _ingress_port(self) -> int:
        try:
            return int(json.loads((self.home / "serving" / "routes.json").read_text()).get("ingressPort") or 0)
        except (OSError, ValueError):
            return 0
