"""The InferenceService reconciler: revisions, replicas, traffic, autoscaling and KServe's status.

Each pass, for each component (predictor, and transformer when present):

1. a new revision when the component's spec changed (`revisions`), recorded in ``status.revisions``;
2. readiness of each replica as the router's probes see it (``GET /stats`` on its admin port) —
   a revision that has had a ready replica is *ready* from then on, as a Knative revision is;
3. traffic by KServe's canary rule (`plan_traffic`), from the rolled-out revisions in status;
4. replica counts: a revision that is a traffic target is scaled by its autoscaler (KPA for
   concurrency/rps, HPA for cpu/memory) fed with the router's per-second metrics; a new revision
   starts with its initial scale; revisions that no longer get traffic are drained and stopped;
5. the router's routes for the service (its own port, and ``Host: NAME.NAMESPACE.<domain>`` on the
   shared ingress port; V2 gRPC on a port of its own for the predictor, ``grpcUrl`` in status), then
   status and events.

A model at ``s3://``, ``gs://``, ``http(s)://``, ``hf://`` or MLflow's URIs is downloaded by each
replica's own ``storage-initializer`` init container, inside the pod's sandbox as its user, into the
emptyDir the model server reads at ``/mnt/models`` (as KServe): the control plane never downloads or
unpacks a model. Its credentials are env from the ServiceAccount's Secrets and the ``storage-config``
Secret (``secretKeyRef``s, as KServe's webhook sets them). Meanwhile the component's condition says
``ModelDownloading`` with the initializer's last progress line; a failed initializer is the
condition's ``ModelDownloadFailed`` with its termination message, from the first failure on (the
kubelet restarts it with back-off).

Why a revision is not ready is found each pass: its storage (a path that does not exist yet, or
outside the allowed roots: no replica is started; a replica's storage initializer that failed),
else the model server's own account of its
versions (``GET /v1/models/NAME``) once a replica has had a few seconds to load, else the end of a
restarting replica's log. It goes to the component's condition and ``modelStatus.lastFailureInfo``.
Besides KServe's fields, status carries ``revisions`` (see `revisions`) and, per component,
``replicas``: ready and total replicas of each revision (what ``describe`` shows).

Scaling down drains: a replica leaves the routes first and is stopped once the router has no
request in flight on it, so scale-downs and rollouts fail no request. The router runs as the pod
``trimaran-system/trimaran-router`` and outlives a control-plane restart; the autoscalers are
rebuilt after one (Knative's rule: a restarted autoscaler with more than one ready pod starts in
panic mode, so it does not scale down before it has history again).
"""

from __future__ import annotations

import copy
import http.client
import json
import time
from pathlib import Path

from trimaran.api import validate
from trimaran.api.serving import (
    DEPLOYMENT_MODE_ANNOTATION,
    InferenceService,
    StorageUriError,
    parse_storage_uri,
    requested_mode,
    resolve_storage_uri,
)
from trimaran.controllers.base import Key, Reconciler, is_being_deleted, key_of
from trimaran.controllers.conditions import now_rfc3339, seconds_since, set_condition
from trimaran.controllers.pods import is_terminating, owned_pods, phase, request_deletion, restart_count
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.serving import standard
from trimaran.controllers.serving.autoscaling import ResourceSampler, RevisionScaler
from trimaran.controllers.serving.pods import (
    COMPONENT_LABEL,
    HEALTH_PATH,
    INDEX_LABEL,
    ISVC_LABEL,
    MAIN_CONTAINER,
    MODEL_MOUNT,
    PORTS_ANNOTATION,
    PROBE_ANNOTATION,
    PROVISION_VOLUME,
    REVISION_LABEL,
    ROUTER_NAME,
    ROUTER_NAMESPACE,
    STANDARD_GRPC_PORT,
    replica_pod,
    router_pod,
    standard_pod_template,
)
from trimaran.controllers.serving.revisions import Rollout, plan_traffic, revision_name, spec_hash
from trimaran.controllers.serving.routes import DOMAIN, RouterClient, RoutesFile, fixed_ingress_port
from trimaran.runtime import NodeAPI
from trimaran.runtime.network import PodNetwork
from trimaran.serving.storage import (
    INITIALIZER_NAME,
    STORAGE_CONFIG_SECRET,
    StorageError,
    credential_env,
    initializer_container,
    resolve_storage_spec,
    storage_spec_env,
)
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

DRAINING_ANNOTATION = "serving.trimaran.io/draining-since"
INGRESS_PATH_ANNOTATION = "serving.trimaran.io/ingress-path"
INGRESS_WEIGHT_ANNOTATION = "serving.trimaran.io/ingress-weight"
SHADOW_ANNOTATION = "serving.trimaran.io/shadow"
GRAPH_ROUTE_ANNOTATION = "serving.trimaran.io/graph"  # an InferenceGraph's router config, run in the router
DRAIN_SECONDS = 1.0  # the router re-reads routes every 0.2 s; then in-flight requests finish
BUSY_REQUEUE = 0.3  # while something is starting, draining or not yet ready
LOG_TAIL_LINES = 5
KEPT_REVISIONS = 10
STANDARD_RESYNC = 5.0  # a ready Standard InferenceService: its Deployment's and Services' events wake it sooner
# A replica younger than this may still be scanning its model directory: its "no version" is not a failure.
LOAD_GRACE_SECONDS = 3.0
# The model container's variables its storage initializer also gets: the ones naming where the
# model is and how to sign in there (KServe's HF_TOKEN on the predictor, MLflow's tracking server).
_INITIALIZER_ENV_PREFIXES = ("MLFLOW_", "HF_", "AWS_", "S3_")


class InferenceServiceReconciler(Reconciler):
    """Runs InferenceServices (see the module docstring)."""

    name = "serving"
    kinds = ("InferenceService",)
    # Standard mode's children: their status is the InferenceService's (Endpoints carry its label).
    watches = ("Pod", "Deployment", "Service", "Endpoints")

    def __init__(self, store: Store, home: Path, ports: PortAllocator | None = None, runtime: NodeAPI | None = None,
                 gateway: str = "127.0.0.1") -> None:
        """``gateway``: where pods reach this machine (the pod network's bridge, else loopback)."""
        super().__init__(store)
        self.home = home
        self.ports = ports or PortAllocator()
        self.runtime = runtime
        self.routes = RoutesFile(home / "serving", self.ports, gateway)
        self.scalers: dict[tuple[str, str, str], RevisionScaler] = {}  # (namespace, isvc, revision)
        self.usage = ResourceSampler(runtime)
        for pod in store.list("Pod"):
            self.ports.reserve(_pod_ports(pod))
        existing = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in store.list("InferenceService")}
        for owner in self.routes.owners() - existing:
            self.routes.set_services(owner, {})
        self._events: list[tuple[str, str, str]] = []

    def keys_for(self, event_kind: str, obj: dict) -> list[Key]:
        if event_kind == "Pod" and obj["metadata"].get("name") == ROUTER_NAME and \
                obj["metadata"].get("namespace") == ROUTER_NAMESPACE:
            return [key_of(o) for o in self.store.list("InferenceService")]
        if event_kind == "Endpoints":
            owner = (obj["metadata"].get("labels") or {}).get(ISVC_LABEL)
            return [Key("InferenceService", obj["metadata"]["namespace"], owner)] if owner else []
        return list(super().keys_for(event_kind, obj))

    # -- the loop ---------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        try:
            obj = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            self._forget(key)
            return None
        if is_being_deleted(obj):
            return None
        self._events = []
        isvc = InferenceService.model_validate(obj)
        status = copy.deepcopy(obj.get("status") or {})
        before = copy.deepcopy(status)
        if self._mode(obj, status) == "Standard":
            return self._standard(key, obj, isvc, status, before)
        if before.get("deploymentMode") == "Standard":
            self._drop_standard(obj, status)
        now = time.time()
        ingress, admin = self.routes.ensure_ports()
        self._ensure_router()
        router = RouterClient(admin, self.routes.data["adminToken"])
        stats = router.stats()
        owner = f"{key.namespace}/{key.name}"
        transformer = obj["spec"].get("transformer")
        entry_key = owner
        predictor_key = f"{owner}-predictor" if transformer else owner
        port_problems = self._port_problems(router, stats, owner, (entry_key, predictor_key))
        if port_problems:
            ingress, admin = self.routes.ensure_ports()
        ports = {k: self.routes.service_port(k) for k in dict.fromkeys((entry_key, predictor_key))}
        # Only the predictor's replicas run the model server, so only its service speaks gRPC.
        grpc_port = self.routes.service_port(predictor_key, grpc=True)
        revisions: list[dict] = status.setdefault("revisions", [])
        services: dict[str, dict] = {}
        busy = False
        outcomes: dict[str, _Outcome] = {}
        for component in ("predictor", "transformer"):
            spec = obj["spec"].get(component)
            if spec is None:
                continue
            service_key = entry_key if component == "transformer" or not transformer else predictor_key
            predictor_host = f"127.0.0.1:{ports[predictor_key]}" if component == "transformer" else None
            outcome = self._component(obj, isvc, component, spec, revisions, status, stats, now, predictor_host)
            outcomes[component] = outcome
            busy |= outcome.busy
            services[service_key] = {
                "port": ports[service_key],
                **({"grpcPort": grpc_port} if component == "predictor" else {}),
                "hosts": [f"{key.name}{'-predictor' if service_key != entry_key else ''}.{key.namespace}.{DOMAIN}"],
                "timeout": float(spec.get("timeout") or 300),
                "activationTimeout": float(spec.get("timeout") or 120),
                "traffic": [{"revisionName": t["revisionName"], "percent": t["percent"]}
                            for t in outcome.rollout.traffic],
                "revisions": outcome.routes,
                **(_ingress_path(obj) if service_key == entry_key else {}),
                **(_graph_route(obj) if service_key == entry_key else {}),
            }
            self._component_status(status, component, outcome, ports[service_key],
                                   grpc_port if component == "predictor" else None)
        self.routes.set_services(owner, services)
        busy |= not self.routes.loaded(owner, stats)
        self._conditions(status, outcomes, stats, key, port_problems)
        if port_problems and _reason_message(before, "IngressReady") != _reason_message(status, "IngressReady"):
            # Once per problem: a port that stays taken (a fixed ingress port) is not an event a second.
            for problem in port_problems:
                self._event("Warning", "PortInUse", problem)
        status["url"] = f"http://{self.routes.host}:{ports[entry_key]}"
        status["address"] = {"url": f"http://{key.name}.{key.namespace}.{DOMAIN}:{ingress}"}
        status["deploymentMode"] = "Knative"
        status["observedGeneration"] = obj["metadata"].get("generation", 1)
        return self._store_status(obj, status, before, BUSY_REQUEUE if busy or stats is None else 1.0)

    def _store_status(self, obj: dict, status: dict, before: dict, requeue: float | None) -> float | None:
        """Write the status when it changed, then record the pass's events."""
        if status != before:
            obj["status"] = status
            try:
                self.write_status(obj)
            except Conflict:
                # The next pass decides again from fresh state; what this one did to pods stays told.
                self._events = [e for e in self._events if e[1] == "Scaled"]
                requeue = 0.05
            except NotFound:
                return None
        for etype, reason, message in self._events:
            self.store.record_event(obj, etype, reason, message)
        return requeue

    # -- Standard mode ----------------------------------------------------------------------------
    def _mode(self, obj: dict, status: dict) -> str:
        """The mode this pass serves ``obj`` in: its annotation's (else the one its status records, as
        upstream keeps it), Knative by default; Standard falls back to Knative without a pod network,
        with a Warning event the first time, since its replicas need addresses of their own."""
        wanted = requested_mode(obj["metadata"].get("annotations")) or status.get("deploymentMode") or "Knative"
        if wanted != "Standard":
            return "Knative"
        if self.ports.pod_network:
            return "Standard"
        if status.get("deploymentMode") != "Knative":
            why = PodNetwork.unavailable() or "the control plane started without one"
            asked = (obj["metadata"].get("annotations") or {}).get(DEPLOYMENT_MODE_ANNOTATION) or "Standard"
            self._event("Warning", "StandardModeUnavailable",
                        f"{DEPLOYMENT_MODE_ANNOTATION} {asked} "
                        f"needs the pod network (each replica an address of its own behind a Service), and this "
                        f"control plane has none ({why}): serving in Knative mode, through the router")
        return "Knative"

    def _standard(self, key: Key, obj: dict, isvc: InferenceService, status: dict, before: dict) -> float | None:
        """One pass in Standard mode (see `standard`): the children, then KServe's status."""
        name, ns = key.name, key.namespace
        annotations = obj["metadata"].get("annotations") or {}
        self._drop_knative(obj, status)
        owned = {kind: {o["metadata"]["name"]: o for o in self.store.list(kind, ns, owner_uid=obj["metadata"]["uid"])}
                 for kind in ("Deployment", "Service", "HorizontalPodAutoscaler")}
        keep: set[tuple[str, str]] = set()
        outcomes: dict[str, _Outcome] = {}
        top = "transformer" if obj["spec"].get("transformer") else "predictor"
        busy = False
        for component in ("predictor", "transformer"):
            spec = obj["spec"].get(component)
            if spec is None:
                continue
            child = f"{name}-{component}"
            view = isvc.spec.predictor.model_view() if component == "predictor" else None
            model = view.to_dict() if view is not None else None
            outcome = outcomes[component] = _Outcome()
            outcome.rollout.latest_created = child
            host_path = initializer = None
            if model is not None:
                host_path, initializer, outcome.latest_failure = self._model_source(ns, spec, model)
            if outcome.latest_failure is not None:
                # No Deployment for a model it could not mount: the failure is the condition's, and
                # what serves an earlier spec keeps serving.
                keep |= {(kind, child) for kind in owned} | ({("Service", name)} if component == top else set())
                continue
            # KServe's raw predictor host, with the Service's port spelled out: transformers that
            # split it into host and port, as they must for Knative mode's, work unchanged.
            predictor_host = f"{name}-predictor.{ns}:{standard.SERVICE_PORT}" if component == "transformer" else None
            template, port = standard_pod_template(obj, component, spec, model, host_path, predictor_host, initializer)
            low, _ = standard.replicas_bounds(spec)
            comp_annotations = {**annotations, **(spec.get("annotations") or {})}
            keep |= {("Deployment", child), ("Service", child)}
            deploy = self._apply_child(standard.deployment(obj, component, spec, template, low),
                                       owned["Deployment"].get(child),
                                       keep_replicas=standard.autoscaler_class(comp_annotations) != "none")
            self._apply_child(standard.service(obj, child, component, port, grpc=model is not None),
                              owned["Service"].get(child))
            hpa = standard.autoscaler(obj, component, spec, comp_annotations)
            if hpa is not None:
                keep.add(("HorizontalPodAutoscaler", child))
                self._apply_child(hpa, owned["HorizontalPodAutoscaler"].get(child))
            if component == top:
                keep.add(("Service", name))
                self._apply_child(standard.service(obj, name, component, port, grpc=model is not None,
                                                   load_balancer=True), owned["Service"].get(name))
            busy |= self._deployment_outcome(deploy, outcome, model, initializer, self._endpoints(ns, child))
            cstatus = status.setdefault("components", {}).setdefault(component, {})
            for field in ("traffic", "latestCreatedRevision", "latestReadyRevision", "latestRolledoutRevision",
                          "previousRolledoutRevision"):
                cstatus.pop(field, None)
            # Ready and total replicas, as Knative mode's per revision, here of the one Deployment.
            cstatus["replicas"] = {d: {"ready": ready, "total": total}
                                   for d, (ready, total) in outcome.replicas.items()}
            cluster_ip = ((owned["Service"].get(child) or {}).get("spec") or {}).get("clusterIP")
            if cluster_ip:
                url = f"http://{cluster_ip}:{standard.SERVICE_PORT}"
                cstatus.update(url=url, restUrl=url)
                if model is not None:
                    cstatus["grpcUrl"] = f"grpc://{cluster_ip}:{STANDARD_GRPC_PORT}"
            cstatus["address"] = {"url": f"http://{child}.{ns}.svc.cluster.local"}
        for kind, children in owned.items():
            for child_name in children:
                if (kind, child_name) not in keep:
                    try:
                        self.store.delete(kind, ns, child_name)
                    except NotFound:
                        pass
        for component in set(status.get("components") or {}) - set(outcomes):
            del status["components"][component]
        lb = self._find("Service", ns, name) or {}
        lb_ip = next((i["ip"] for i in ((lb.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
                      if i.get("ip")), None)
        if lb and not any(r.get("uid") == obj["metadata"]["uid"] for r in lb["metadata"].get("ownerReferences") or []):
            lb_ip = None  # someone else's Service of that name: its address is not this InferenceService's
            problem = f"the Service {name} exists and is not this InferenceService's; delete or rename it"
        elif not (lb_ip and self._endpoints(ns, name)):
            problem = f"the LoadBalancer Service {name} has no address or no ready endpoint yet"
        else:
            problem = None
        self._standard_conditions(status, outcomes, problem)
        if lb_ip:
            status["url"] = f"http://{lb_ip}:{standard.SERVICE_PORT}"
        else:
            status.pop("url", None)
        status["address"] = {"url": f"http://{name}-{top}.{ns}.svc.cluster.local"}
        status["deploymentMode"] = "Standard"
        status["observedGeneration"] = obj["metadata"].get("generation", 1)
        ready = status_true(status, "Ready")
        return self._store_status(obj, status, before, BUSY_REQUEUE if busy or not ready else STANDARD_RESYNC)

    def _apply_child(self, want: dict, current: dict | None, keep_replicas: bool = False) -> dict | None:
        """Create ``want`` (defaulted as the API stores it) or bring ``current`` to it; the stored object,
        or None when a racing write wins (its event brings the InferenceService back)."""
        want = validate(want).object
        try:
            if current is None:
                return self.store.create(want)
            if want["kind"] == "Service":
                if standard.service_shape(current) == standard.service_shape(want):
                    return current
                spec = {**current["spec"], **{k: want["spec"][k] for k in ("type", "selector", "ports")}}
                return self.store.update({**current, "spec": spec})
            if keep_replicas:
                want["spec"]["replicas"] = current["spec"].get("replicas", want["spec"]["replicas"])
            if current["spec"] == want["spec"]:
                return current
            return self.store.update({**current, "spec": want["spec"]})
        except (AlreadyExists, Conflict, NotFound):
            return None

    def _endpoints(self, namespace: str, service: str) -> int:
        """How many ready addresses the Service forwards to: its rules are written with its Endpoints,
        so a component is ready once callers of its Service reach a pod, not merely once a pod is."""
        endpoints = self._find("Endpoints", namespace, service) or {}
        return sum(len(s.get("addresses") or []) for s in endpoints.get("subsets") or [])

    def _deployment_outcome(self, deploy: dict | None, outcome: _Outcome, model: dict | None,
                            initializer: dict | None, endpoints: int) -> bool:
        """Fill ``outcome`` from the Deployment, its pods and its Service's ready endpoints; whether
        anything is still in motion."""
        if deploy is None:
            return True
        dstatus = deploy.get("status") or {}
        name = deploy["metadata"]["name"]
        pods = [p for p in self.store.list("Pod", deploy["metadata"]["namespace"], owner_uid=deploy["metadata"]["uid"])
                if not is_terminating(p)]
        ready = int(dstatus.get("readyReplicas") or 0)
        outcome.replicas[name] = (ready, len(pods))
        available = any(c.get("type") == "Available" and c.get("status") == "True"
                        for c in dstatus.get("conditions") or [])
        if available and ready and endpoints:
            outcome.rollout.latest_ready = name
            return dstatus.get("observedGeneration") != deploy["metadata"].get("generation")
        failure = pending = None
        if model is not None:
            failure, pending = self._initializer_state({"model": model}, pods, initializer)
        outcome.latest_failure = failure or (None if pending else self._restart_failure(pods))
        outcome.latest_pending = None if outcome.latest_failure else pending
        return True

    def _standard_conditions(self, status: dict, outcomes: dict[str, _Outcome], ingress_problem: str | None) -> None:
        """KServe's raw conditions: each component's, IngressReady (the LoadBalancer's address), Ready."""
        status["conditions"] = [c for c in status.get("conditions") or []
                                if c.get("type") not in ("RoutesReady", "LatestDeploymentReady")]
        for component, outcome in outcomes.items():
            ctype = "PredictorReady" if component == "predictor" else "TransformerReady"
            if outcome.latest_failure:
                set_condition(status, ctype, "False", outcome.latest_failure["reason"],
                              outcome.latest_failure["message"])
            elif outcome.latest_pending:
                set_condition(status, ctype, "False", "ModelDownloading", outcome.latest_pending)
            elif outcome.rollout.latest_ready:
                set_condition(status, ctype, "True", "", "")
            else:
                set_condition(status, ctype, "False", "MinimumReplicasUnavailable",
                              f"Deployment {outcome.rollout.latest_created} does not have minimum availability")
            if component == "predictor":
                _model_status(status, outcome)
        if ingress_problem is None:
            set_condition(status, "IngressReady", "True", "", "")
        else:
            set_condition(status, "IngressReady", "False", "LoadBalancerPending", ingress_problem)
        ready = all(status_true(status, c["type"]) for c in status["conditions"]
                    if c["type"] in ("PredictorReady", "TransformerReady", "IngressReady"))
        if ready:
            set_condition(status, "Ready", "True", "", "")
        else:
            blocking = next(c for c in status["conditions"] if c["type"] in ("PredictorReady", "TransformerReady",
                                                                             "IngressReady") and c["status"] != "True")
            set_condition(status, "Ready", "False", blocking.get("reason") or "NotReady", blocking.get("message") or "")
        order = ["PredictorReady", "TransformerReady", "IngressReady", "Ready"]
        status["conditions"].sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))

    def _drop_knative(self, obj: dict, status: dict) -> None:
        """What a Knative pass left (the control plane served a Standard InferenceService in Knative
        mode while it had no pod network): its replicas, routes and revisions."""
        owner = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if status.pop("revisions", None) is None and owner not in self.routes.owners():
            return
        self.routes.set_services(owner, {})
        for pod in owned_pods(self.store, obj):
            request_deletion(self.store, pod)
            self.ports.release(_pod_ports(pod))
        for scaler_key in [k for k in self.scalers if k[:2] == (obj["metadata"]["namespace"], obj["metadata"]["name"])]:
            del self.scalers[scaler_key]

    def _drop_standard(self, obj: dict, status: dict) -> None:
        """What a Standard pass left, when this one serves in Knative mode (the pod network is gone)."""
        ns = obj["metadata"]["namespace"]
        for kind in ("HorizontalPodAutoscaler", "Service", "Deployment"):
            for child in self.store.list(kind, ns, owner_uid=obj["metadata"]["uid"]):
                try:
                    self.store.delete(kind, ns, child["metadata"]["name"])
                except NotFound:
                    pass
        status.pop("components", None)
        status.pop("url", None)

    def _event(self, etype: str, reason: str, message: str) -> None:
        """Queue an event; it is recorded once the status it reports is stored."""
        self._events.append((etype, reason, message))

    def _port_problems(self, router: RouterClient, stats: dict | None, owner: str, keys: tuple[str, ...]) -> list[str]:
        """Ports the router could not listen on for this service, or at all (the shared ingress and
        admin ports): each is said, and moved to a new port unless the user chose it. Errors are acted
        on only when they are about the routes as they are now, so one taken port moves once."""
        problems: list[str] = []
        if router.foreign:
            self.routes.move_shared("admin")
            problems.append(f"another process answers on port {router.port}, the router's admin port "
                            f"({router.foreign}); moving the router's admin port")
        if stats is None:
            return problems
        ingress = ((stats.get("listenErrors") or {}).get("ingress")) or {}
        if ingress.get("port") == self.routes.data.get("ingressPort") and self.routes.current(stats):
            if ingress["port"] == fixed_ingress_port():
                problems.append(f"the router cannot listen on the ingress port {ingress['port']} "
                                f"(TRIMARAN_INGRESS_PORT): {ingress.get('error')}; choose a free one")
            else:
                self.routes.move_shared("ingress")
                problems.append(f"the router cannot listen on the ingress port {ingress['port']} "
                                f"({ingress.get('error')}); moving the ingress to another port")
        if self.routes.loaded(owner, stats):
            for field, grpc in (("bindErrors", False), ("grpcBindErrors", True)):
                for service_key, error in (stats.get(field) or {}).items():
                    if service_key in keys:
                        self.routes.move(service_key, grpc=grpc)
                        problems.append(f"the router could not listen for {service_key} ({error}); "
                                        "moving it to another port")
        return problems

    # -- one component ----------------------------------------------------------------------------
    def _component(self, obj: dict, isvc: InferenceService, component: str, spec: dict, revisions: list[dict],
                   status: dict, stats: dict | None, now: float, predictor_host: str | None) -> _Outcome:
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        digest = spec_hash(spec)
        mine = [r for r in revisions if r["component"] == component]
        if not mine or mine[-1]["hash"] != digest:
            number = int(mine[-1]["name"].rsplit("-", 1)[1]) + 1 if mine else 1
            view = isvc.spec.predictor.model_view() if component == "predictor" else None
            record = {"name": revision_name(name, component, number), "component": component, "hash": digest,
                      "spec": spec, "created": now_rfc3339()}
            if view is not None:
                record["model"] = view.to_dict()
            revisions.append(record)
            mine.append(record)
            self._event("Normal", "RevisionCreated", f"Created {component} revision {record['name']}")
        rev_stats = (stats or {}).get("revisions") or {}
        latest = mine[-1]
        outcome = _Outcome()
        host_paths: dict[str, Path] = {}
        initializers: dict[str, dict] = {}  # revision -> the storage-initializer of its replicas
        for rev in mine:
            rev.pop("failure", None)  # found again below while it lasts
            if rev.get("model"):
                host_path, initializer, failure = self._model_source(ns, spec, rev["model"])
                if failure is not None:
                    rev["failure"] = failure
                    continue
                if host_path is not None:
                    host_paths[rev["name"]] = host_path
                if initializer is not None:
                    initializers[rev["name"]] = initializer
            if rev_stats.get(rev["name"], {}).get("ready"):
                if not rev.get("ready"):
                    self._event("Normal", "RevisionReady", f"Revision {rev['name']} is ready")
                rev["ready"] = True
        cstatus = status.setdefault("components", {}).setdefault(component, {})
        canary = spec.get("canaryTrafficPercent")
        rollout = plan_traffic([r["name"] for r in mine], {r["name"] for r in mine if r.get("ready")},
                               None if canary is None else int(canary),
                               cstatus.get("latestRolledoutRevision"), cstatus.get("previousRolledoutRevision"))
        if rollout.traffic and rollout.traffic != cstatus.get("traffic"):
            shares = ", ".join(f"{t['revisionName']} {t['percent']}%" for t in rollout.traffic) or "none"
            self._event("Normal", "TrafficSplit", f"{component} traffic: {shares}")
        outcome.rollout = rollout
        wanted = {t["revisionName"] for t in rollout.traffic} | {latest["name"]}
        pods = [p for p in owned_pods(self.store, obj)
                if (p["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == component]
        annotations = {**(obj["metadata"].get("annotations") or {}), **(spec.get("annotations") or {})}
        for rev in mine:
            rpods = [p for p in pods if p["metadata"]["labels"].get(REVISION_LABEL) == rev["name"]]
            ready = set((rev_stats.get(rev["name"]) or {}).get("ready") or [])
            draining_in_router = set((rev_stats.get(rev["name"]) or {}).get("draining") or [])
            scaler_key = (ns, name, rev["name"])
            if rev["name"] not in wanted or rev.get("failure"):  # only storage failures are known yet
                desired = 0
                self.scalers.pop(scaler_key, None)
            elif not rev.get("ready"):
                desired = max(1, RevisionScaler.config_for(spec, annotations).initial())
                outcome.busy = True
            else:
                scaler = self.scalers.get(scaler_key)
                live_ready = sum(1 for p in rpods if _address(p) in ready)
                if scaler is None:
                    scaler = self.scalers[scaler_key] = RevisionScaler(spec, annotations, now, live_ready)
                scaler.reconfigure(spec, annotations)
                current = sum(1 for p in rpods if not is_terminating(p) and not _draining(p))
                decision = scaler.decide(now, rev_stats.get(rev["name"]), live_ready, current,
                                         lambda metric, pods=rpods: self.usage.utilization(pods, spec, metric))
                desired = current if decision is None else decision.desired
                if decision is not None and desired != current:
                    self._event("Normal", "Scaled",
                                f"Scaled {component} revision {rev['name']} from {current} to {desired}: "
                                f"{decision.reason}")
            outcome.busy |= self._scale(obj, component, rev, rpods, desired, ready, draining_in_router,
                                        host_paths.get(rev["name"]), initializers.get(rev["name"]),
                                        predictor_host, now)
            live = [p for p in rpods if not is_terminating(p) and not _draining(p)]
            outcome.replicas[rev["name"]] = (sum(1 for p in live if _address(p) in ready), len(live))
            if rev["name"] in wanted and not rev.get("failure"):
                # Every revision that may get traffic is routed, ready or not: the router's probes are
                # what finds it ready; traffic only goes to the targets.
                probe = HEALTH_PATH if rev.get("model") else next(
                    ((p["metadata"].get("annotations") or {}).get(PROBE_ANNOTATION) for p in live), None)
                running = [p for p in live if phase(p) == "Running"]
                outcome.routes[rev["name"]] = {
                    "endpoints": sorted(_address(p) for p in running),
                    "grpcEndpoints": {_address(p): _grpc_address(p) for p in running if _grpc_address(p)},
                    "containerConcurrency": int(spec.get("containerConcurrency") or 0),
                    "probePath": probe,
                }
            if rev is latest and not rev.get("ready") and not rev.get("failure") and live:
                failure, pending = self._initializer_state(rev, live, initializers.get(rev["name"]))
                failure = failure or (None if pending else self._load_failure(obj, rev, live))
                if failure:
                    rev["failure"] = failure
                outcome.latest_pending = pending
        outcome.latest_failure = latest.get("failure")
        if outcome.latest_failure:
            outcome.latest_pending = None
        # Knative keeps old revisions around but not forever: beyond the newest KEPT_REVISIONS, one that
        # no traffic, rollout record or replica refers to any more is forgotten.
        keep = wanted | {rollout.latest_rolledout, rollout.previous_rolledout} | {
            p["metadata"]["labels"].get(REVISION_LABEL) for p in pods}
        for rev in mine[:-KEPT_REVISIONS]:
            if rev["name"] not in keep:
                revisions.remove(rev)
        return outcome

    def _model_source(self, namespace: str, spec: dict, model: dict) -> tuple[Path | None, dict | None, dict | None]:
        """Where a component's replicas get its model: the resolved directory of a local URI (a
        claim's too), or the storage-initializer of a remote one; or why they cannot (a failure
        dict). KServe's ``storage:`` form is resolved into ``model["storageUri"]`` here."""
        if model.get("storage") is not None and not model.get("storageUri"):
            # KServe's storage: form names its bucket in a Secret; the model keeps the URI it found.
            try:
                model["storageUri"] = self._storage_spec(namespace, model["storage"])[0]
            except StorageError as exc:
                return None, None, {"reason": "InvalidStorageSpec", "message": str(exc)}
        try:
            remote = parse_storage_uri(model["storageUri"]).kind == "remote"
            path = None if remote else resolve_storage_uri(model["storageUri"], self.home, namespace)
        except StorageUriError as exc:
            return None, None, {"reason": "InvalidStorageUri", "message": str(exc)}
        if path is None:
            try:
                return None, self._initializer(namespace, spec, model), None
            except StorageError as exc:
                return None, None, {"reason": "InvalidStorageSpec", "message": str(exc)}
        if not path.exists():
            return None, None, {"reason": "ModelNotFound",
                                "message": f"{model['storageUri']}: {path} does not exist (yet)"}
        return path, None, None

    def _initializer(self, namespace: str, spec: dict, model: dict) -> dict:
        """The storage-initializer init container of a remote model's replicas: ``SRC /mnt/models``
        with the env KServe's webhook gives it (the ServiceAccount's Secrets; for the ``storage:``
        form, the ``storage-config`` entry), and the model container's own variables naming its
        source's server and sign-in. Raises StorageError (a ``storage:`` entry that cannot be read)."""
        env, origin = credential_env(self._find, namespace, spec.get("serviceAccountName") or "default")
        if model.get("storage") is not None:
            _, spec_env = storage_spec_env(model["storage"], self._find("Secret", namespace, STORAGE_CONFIG_SECRET))
            env += spec_env
            origin += f", Secret {namespace}/{STORAGE_CONFIG_SECRET}"
        own = [e for e in model.get("env") or [] if str(e.get("name", "")).startswith(_INITIALIZER_ENV_PREFIXES)]
        if own:
            env += own
            origin += f", the {MAIN_CONTAINER} container's env"
        return initializer_container([(model["storageUri"], PROVISION_VOLUME, MODEL_MOUNT)], env, origin)

    def _initializer_state(self, rev: dict, pods: list[dict],
                           wanted: dict | None) -> tuple[dict | None, str | None]:
        """The latest revision's download as its replicas' storage initializers report it: a failure
        (from the first one on: its termination message), or what is still downloading. A replica
        whose initializer failed with credentials that have changed since (a Secret attached to the
        ServiceAccount, say) is replaced, as a retry could not see them: a pod's env is fixed."""
        pending = None
        for pod in pods:
            found = next((cs for cs in (pod.get("status") or {}).get("initContainerStatuses") or []
                          if cs.get("name") == INITIALIZER_NAME), None)
            if found is None:
                continue
            state, last = found.get("state") or {}, found.get("lastState") or {}
            term = state.get("terminated") or last.get("terminated") or {}
            current = next((c for c in pod["spec"].get("initContainers") or [] if c.get("name") == INITIALIZER_NAME),
                           None)
            if term.get("exitCode", 0) != 0 and wanted is not None and current != wanted:
                request_deletion(self.store, pod)
                self.ports.release(_pod_ports(pod))
            if term.get("exitCode", 0) != 0:
                again = "; restarting it with back-off" if "waiting" in state else ""
                message = (term.get("message") or "").strip().splitlines() or [term.get("reason") or "Error"]
                return {"reason": "ModelDownloadFailed",
                        "message": f"{message[-1]} (storage-initializer of {pod['metadata']['name']} exited with "
                                   f"code {term.get('exitCode')}{again})"}, None
            if not term:
                pending = pending or self._progress(pod, rev["model"]["storageUri"])
        return None, pending

    def _progress(self, pod: dict, uri: str) -> str:
        """The storage initializer's last progress line (``downloading URI: 1.2 MB of 3.4 MB``)."""
        line = ""
        if self.runtime is not None:
            try:
                path = self.runtime.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"], INITIALIZER_NAME)
                with path.open("rb") as log:
                    log.seek(max(0, path.stat().st_size - 4096))
                    line = next((ln for ln in reversed(log.read().decode(errors="replace").splitlines())
                                 if ln.startswith(f"downloading {uri}: ")), "")
            except OSError:
                pass
        return line or f"downloading {uri}: starting"

    def _storage_spec(self, namespace: str, storage: dict) -> tuple[str, dict[str, str]]:
        """The URI and credential variables of KServe's ``storage:`` form, from the namespace's
        ``storage-config`` Secret. Raises StorageError."""
        try:
            secret: dict | None = self.store.get("Secret", namespace, STORAGE_CONFIG_SECRET)
        except NotFound:
            secret = None
        return resolve_storage_spec(storage, secret)

    def _find(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(kind, namespace, name)
        except NotFound:
            return None

    def _scale(self, obj: dict, component: str, rev: dict, pods: list[dict], desired: int, ready: set[str],
               draining_in_router: set[str], host_path: Path | None, initializer: dict | None,
               predictor_host: str | None, now: float) -> bool:
        """Create or drain replicas toward ``desired``; returns whether anything is still in motion."""
        busy = False
        live = [p for p in pods if not is_terminating(p) and not _draining(p)]
        if len(live) < desired and (host_path is not None or initializer is not None or not rev.get("model")):
            used = {int(p["metadata"]["labels"].get(INDEX_LABEL, "0")) for p in pods}
            index = 0
            for _ in range(desired - len(live)):
                while index in used:
                    index += 1
                used.add(index)
                # http, and gRPC for the model server (a custom container gets $PORT only).
                ports = self.ports.allocate(2 if rev.get("model") else 1)
                pod = replica_pod(obj, component, rev, index, ports, host_path, predictor_host, initializer)
                try:
                    self.store.create(pod)
                except AlreadyExists:
                    self.ports.release(ports)
            busy = True
        elif len(live) > desired:
            # Unready replicas go first, then the newest.
            victims = sorted(live, key=lambda p: (_address(p) in ready,
                                                  -int(p["metadata"]["labels"].get(INDEX_LABEL, "0"))))
            for pod in victims[: len(live) - desired]:
                _mark_draining(self.store, pod, now)
            busy = True
        for pod in pods:
            since = _draining(pod)
            if since is None or is_terminating(pod):
                continue
            busy = True
            if now - since >= DRAIN_SECONDS and _address(pod) not in draining_in_router:
                request_deletion(self.store, pod)
                self.ports.release(_pod_ports(pod))
        return busy or any(phase(p) == "Pending" or is_terminating(p) for p in pods)

    def _load_failure(self, obj: dict, rev: dict, pods: list[dict]) -> dict | None:
        """Why the latest revision is not ready, when it is failing (not merely starting): the model
        server's own account of its versions, else the end of a restarting replica's log."""
        name = obj["metadata"]["name"]
        for pod in pods:
            if phase(pod) != "Running" or not rev.get("model") or _running_for(pod) < LOAD_GRACE_SECONDS:
                continue
            port = _pod_ports(pod)[0]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
            try:
                conn.request("GET", f"/v1/models/{name}")
                body = json.loads(conn.getresponse().read() or b"{}")
            except (OSError, ValueError, http.client.HTTPException):
                continue
            finally:
                conn.close()
            versions = body.get("model_version_status")
            if versions is not None and not any(v.get("state") in ("AVAILABLE", "LOADING", "START") for v in versions):
                errors = [f"version {v.get('version')}: {(v.get('status') or {}).get('error_message')}"
                          for v in versions if (v.get("status") or {}).get("error_message")]
                where = rev["model"]["storageUri"]
                detail = "; ".join(errors) or body.get("error") or "the directory holds no model the server loads"
                message = f"no loadable model version in {where}: {detail}"
                return {"reason": "ModelLoadFailed", "message": message}
            if body.get("error") and versions is None and "not found" not in str(body["error"]).lower():
                return {"reason": "ModelLoadFailed", "message": str(body["error"])}
        return self._restart_failure(pods)

    def _restart_failure(self, pods: list[dict]) -> dict | None:
        """A replica that keeps restarting, with the end of its log."""
        for pod in pods:
            if restart_count(pod) > 0 and self.runtime is not None:
                try:
                    path = self.runtime.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
                    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
                except OSError:
                    lines = []
                tail = " | ".join(lines[-LOG_TAIL_LINES:]) or "(empty log)"
                return {"reason": "RuntimeUnhealthy",
                        "message": f"replica {pod['metadata']['name']} restarted {restart_count(pod)} times; "
                                   f"last log lines: {tail}"}
        return None

    # -- status -----------------------------------------------------------------------------------
    def _component_status(self, status: dict, component: str, outcome: _Outcome, port: int,
                          grpc_port: int | None) -> None:
        cstatus = status["components"][component]
        r = outcome.rollout
        url = f"http://{self.routes.host}:{port}"
        cstatus.update(url=url, restUrl=url, address={"url": url}, traffic=r.traffic)
        if grpc_port:
            cstatus["grpcUrl"] = f"grpc://127.0.0.1:{grpc_port}"
        else:
            cstatus.pop("grpcUrl", None)
        for field, value in (("latestCreatedRevision", r.latest_created), ("latestReadyRevision", r.latest_ready),
                             ("latestRolledoutRevision", r.latest_rolledout),
                             ("previousRolledoutRevision", r.previous_rolledout)):
            if value:
                cstatus[field] = value
            else:
                cstatus.pop(field, None)
        cstatus["replicas"] = {rev: {"ready": ready, "total": total} for rev, (ready, total) in outcome.replicas.items()
                               if total or rev in {t["revisionName"] for t in r.traffic}}

    def _conditions(self, status: dict, outcomes: dict[str, _Outcome], stats: dict | None, key: Key,
                    port_problems: list[str]) -> None:
        ready_all = True
        for component, outcome in outcomes.items():
            ctype = "PredictorReady" if component == "predictor" else "TransformerReady"
            r = outcome.rollout
            failure = outcome.latest_failure
            serving = f"; revision {r.latest_ready} keeps serving" if r.latest_ready else ""
            if failure:
                set_condition(status, ctype, "False", failure["reason"], failure["message"] + serving)
            elif outcome.latest_pending:
                set_condition(status, ctype, "False", "ModelDownloading", outcome.latest_pending + serving)
            elif r.latest_ready and r.latest_ready == r.latest_created:
                set_condition(status, ctype, "True", "", "")
            elif r.latest_created:
                set_condition(status, ctype, "False", "RevisionNotReady",
                              f"revision {r.latest_created} is starting: waiting for a ready replica")
            ready_all &= status_true(status, ctype)
            if component == "predictor":
                _model_status(status, outcome)
        routed = self.routes.loaded(f"{key.namespace}/{key.name}", stats)
        if port_problems:
            set_condition(status, "IngressReady", "False", "PortInUse", "; ".join(port_problems))
        elif stats is None:
            set_condition(status, "IngressReady", "False", "RouterNotReady",
                          f"the router ({ROUTER_NAMESPACE}/{ROUTER_NAME}) is not answering yet")
        elif not routed:
            set_condition(status, "IngressReady", "False", "RoutesPending", "the router has not loaded the routes yet")
        else:
            set_condition(status, "IngressReady", "True", "", "")
        has_traffic = all(o.rollout.traffic for o in outcomes.values())
        set_condition(status, "RoutesReady", "True" if has_traffic else "False",
                      "" if has_traffic else "NoReadyRevision",
                      "" if has_traffic else "no revision has become ready yet")
        deployed = all(o.rollout.latest_ready == o.rollout.latest_created for o in outcomes.values())
        set_condition(status, "LatestDeploymentReady", "True" if deployed else "False",
                      "" if deployed else "RevisionNotReady",
                      "" if deployed else "the latest revision is not ready yet")
        if ready_all and status_true(status, "IngressReady") and has_traffic:
            set_condition(status, "Ready", "True", "", "")
        else:
            blocking = next((c for c in status["conditions"] if c["type"] != "Ready" and c["status"] != "True"
                             and c["type"] in ("PredictorReady", "TransformerReady", "IngressReady", "RoutesReady")),
                            None)
            reason = (blocking or {}).get("reason") or "NotReady"
            message = (blocking or {}).get("message") or ""
            set_condition(status, "Ready", "False", reason, message)
        # Ready last: kubectl's and our READY column read it; the order is stable between passes.
        order = ["PredictorReady", "TransformerReady", "IngressReady", "RoutesReady", "LatestDeploymentReady", "Ready"]
        status["conditions"].sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))

    # -- the router and deletion ------------------------------------------------------------------
    def _ensure_router(self) -> None:
        try:
            self.store.get("Pod", ROUTER_NAMESPACE, ROUTER_NAME)
            return
        except NotFound:
            pass
        self.store.ensure_namespace(ROUTER_NAMESPACE)
        try:
            self.store.create(router_pod(self.routes.directory))
        except AlreadyExists:
            pass

    def _forget(self, key: Key) -> None:
        owner = f"{key.namespace}/{key.name}"
        self.routes.set_services(owner, {})
        for scaler_key in [k for k in self.scalers if k[:2] == (key.namespace, key.name)]:
            del self.scalers[scaler_key]
        # The garbage collector stops the replicas; their ports are free once they are gone.
        for pod in self.store.list("Pod", key.namespace, {ISVC_LABEL: key.name}):
            if not any(ref.get("kind") == "InferenceService" for ref in pod["metadata"].get("ownerReferences") or []):
                continue
            self.ports.release(_pod_ports(pod))
        # The router serves Knative mode only: Standard-mode InferenceServices do not keep it running.
        if all((o.get("status") or {}).get("deploymentMode") == "Standard"
               for o in self.store.list("InferenceService")):
            try:
                request_deletion(self.store, self.store.get("Pod", ROUTER_NAMESPACE, ROUTER_NAME))
            except NotFound:
                pass


class _Outcome:
    """What one component's pass found: its rollout, routes, replica counts and any failure."""

    def __init__(self) -> None:
        self.rollout = Rollout()
        self.routes: dict[str, dict] = {}
        self.replicas: dict[str, tuple[int, int]] = {}
        self.latest_failure: dict | None = None
        #: What the latest revision's replicas wait for before the server starts (its model's download).
        self.latest_pending: str | None = None
        self.busy = False


def _reason_message(status: dict, ctype: str) -> tuple[str, str] | None:
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)
    return None if cond is None else (cond.get("reason", ""), cond.get("message", ""))


def status_true(status: dict, ctype: str) -> bool:
    """Whether condition ``ctype`` is True."""
    return any(c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or [])


def _model_status(status: dict, outcome: _Outcome) -> None:
    r = outcome.rollout
    failure = outcome.latest_failure
    ready_copies = outcome.replicas.get(r.latest_ready or "", (0, 0))[0]
    total = sum(t for _, t in outcome.replicas.values())
    model: dict = {"copies": {"totalCopies": total, "failedCopies": 0}}
    if failure:
        invalid = failure["reason"] in ("InvalidStorageUri", "InvalidStorageSpec")
        model["transitionStatus"] = "InvalidSpec" if invalid else "BlockedByFailedLoad"
        model["states"] = {"activeModelState": "Loaded" if r.latest_ready else "FailedToLoad",
                           "targetModelState": "FailedToLoad"}
        model["lastFailureInfo"] = {"reason": "InvalidPredictorSpec" if invalid else failure["reason"],
                                    "message": failure["message"], "modelRevisionName": r.latest_created,
                                    "time": now_rfc3339()}
        prior = (status.get("modelStatus") or {}).get("lastFailureInfo") or {}
        if prior.get("message") == failure["message"]:
            model["lastFailureInfo"]["time"] = prior.get("time")
        model["copies"]["failedCopies"] = total - ready_copies
    elif r.latest_ready and r.latest_ready == r.latest_created:
        model["transitionStatus"] = "UpToDate"
        model["states"] = {"activeModelState": "Loaded", "targetModelState": "Loaded"}
    else:
        model["transitionStatus"] = "InProgress"
        model["states"] = {"activeModelState": "Loaded" if r.latest_ready else "Pending",
                           "targetModelState": "Loading"}
    status["modelStatus"] = model


def _ingress_path(obj: dict) -> dict:
    """The router's path route for an InferenceService that stands for a SeldonDeployment's predictor
    (`controllers/serving/seldon`): its prefix, weight and whether it is a shadow, from its annotations."""
    annotations = obj["metadata"].get("annotations") or {}
    prefix = annotations.get(INGRESS_PATH_ANNOTATION)
    # Only a path of its own namespace: an annotation must not draw another namespace's traffic.
    if not prefix or not prefix.startswith(f"/seldon/{obj['metadata']['namespace']}/"):
        return {}
    return {"path": {"prefix": prefix, "weight": float(annotations.get(INGRESS_WEIGHT_ANNOTATION) or 100),
                     "shadow": annotations.get(SHADOW_ANNOTATION) == "true"}}


def _graph_route(obj: dict) -> dict:
    """The graph an InferenceGraph's router service runs in the router (`controllers/serving/inferencegraph`);
    the router could call no URL its replicas could not, so the annotation needs no more trust than they do."""
    config = (obj["metadata"].get("annotations") or {}).get(GRAPH_ROUTE_ANNOTATION)
    if not config:
        return {}
    try:
        return {"graph": json.loads(config)}
    except ValueError:
        return {}  # not the controller's: its replicas, which read the same config from their env, serve it


def _running_for(pod: dict) -> float:
    """Seconds since the replica's current attempt started (0 when it is not running)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if started:
            return seconds_since(started)
    return 0.0


def _pod_ports(pod: dict) -> list[int]:
    raw = (pod["metadata"].get("annotations") or {}).get(PORTS_ANNOTATION)
    return [int(p) for p in raw.split(",")] if raw else []


def _address(pod: dict) -> str:
    ports = _pod_ports(pod)
    return f"127.0.0.1:{ports[0]}" if ports else ""


def _grpc_address(pod: dict) -> str | None:
    ports = _pod_ports(pod)
    return f"127.0.0.1:{ports[1]}" if len(ports) > 1 else None


def _draining(pod: dict) -> float | None:
    raw = (pod["metadata"].get("annotations") or {}).get(DRAINING_ANNOTATION)
    return float(raw) if raw else None


def _mark_draining(store: Store, pod: dict, now: float) -> None:
    pod["metadata"].setdefault("annotations", {})[DRAINING_ANNOTATION] = f"{now:.3f}"
    try:
        pod["metadata"] = store.update(pod)["metadata"]
    except (Conflict, NotFound):
        pass  # the next pass decides again
