"""apps/v1 Deployment, DaemonSet, StatefulSet and ControllerRevision, core v1 Service and
ReplicationController, defaulted and validated as the Kubernetes API server does.

One local rule beyond upstream, without the pod network (trimaran.runtime.network: then each pod
has its own address and this rule is off): pods share this machine's network, so a containerPort is a
port of the machine. A Deployment whose container declares ports and does not read its port from
``$(PORT)`` (or ``$(PORT_<NAME>)``) holds those ports fixed, and only one of its pods can run at a
time: more than one replica is refused with the reason, and such a Deployment rolls as Recreate.
Containers that say ``--port=$(PORT)`` get a port of their own per pod (see
``controllers/workloads/deployment.py``) and scale freely.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in batch.py.

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from trimaran.api.core import (
    PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus,
    PodTemplateSpec,
    Volume,
    is_valid_port_name,
)
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import (
    ApiModel,
    Condition,
    LabelSelector,
    NonNegInt32,
    ObjectMeta,
    Resource,
    check_labels,
    is_dns1035_label,
    is_dns1123_label,
)
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["APPS_V1", "CONTROLLERREVISION_COLUMNS", "DAEMONSET_COLUMNS", "DEPLOYMENT_COLUMNS", "ENDPOINTS_COLUMNS",
           "REPLICASET_COLUMNS", "REPLICATIONCONTROLLER_COLUMNS", "SERVICE_COLUMNS", "STATEFULSET_COLUMNS",
           "ControllerRevision", "DaemonSet", "Deployment", "Endpoints", "ReplicaSet", "ReplicationController",
           "Service", "StatefulSet", "fixed_ports", "percent_or_int", "port_env_name", "reads_port_from_env",
           "selector_matches", "set_pod_network"]

APPS_V1 = "apps/v1"
_PORT_REFERENCE = re.compile(r"\$\(PORT(?:_[A-Z0-9_]+)?\)")
_PERCENT = re.compile(r"^([0-9]+)%$")


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("status") or {}


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("spec") or {}


def _service_ports(obj: dict[str, Any]) -> str:
    """kubectl's ``makePortString``: ``80/TCP``, ``80:30080/TCP`` with a node port."""
    ports = (obj.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
                    f"{p.get('protocol') or 'TCP'}" for p in ports) or "<none>"


def _service_external_ip(obj: dict[str, Any]) -> str:
    """kubectl's ``getServiceExternalIP``: a LoadBalancer's ingress addresses (``<pending>`` until it
    has one), an ExternalName's name, else the Service's externalIPs."""
    spec = obj.get("spec") or {}
    external = list(spec.get("externalIPs") or [])
    if spec.get("type") == "ExternalName":
        return spec.get("externalName") or "<none>"
    if spec.get("type") == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        found = [i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")] + external
        return ",".join(found) or "<pending>"
    return ",".join(external) or "<none>"


# kube-apiserver's columns for `kubectl get deployments` and `kubectl get services`.
DEPLOYMENT_COLUMNS = (
    PrinterColumn("Ready", value=lambda o: f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 0)}"),
    PrinterColumn("Up-to-date", "integer", value=lambda o: _status(o).get("updatedReplicas", 0)),
    PrinterColumn("Available", "integer", value=lambda o: _status(o).get("availableReplicas", 0)),
    AGE)
REPLICASET_COLUMNS = (
    PrinterColumn("Desired", "integer", value=lambda o: _spec(o).get("replicas", 0)),
    PrinterColumn("Current", "integer", value=lambda o: _status(o).get("replicas", 0)),
    PrinterColumn("Ready", "integer", value=lambda o: _status(o).get("readyReplicas", 0)),
    AGE)
ENDPOINTS_COLUMNS = (
    PrinterColumn("Endpoints", value=lambda o: ",".join(
        f"{a.get('ip')}:{p.get('port')}" for s in o.get("subsets") or [] for a in s.get("addresses") or []
        for p in s.get("ports") or []) or "<none>"),
    AGE)
SERVICE_COLUMNS = (
    PrinterColumn("Type", value=lambda o: (o.get("spec") or {}).get("type", "ClusterIP")),
    PrinterColumn("Cluster-IP", value=lambda o: (o.get("spec") or {}).get("clusterIP") or "<none>"),
    PrinterColumn("External-IP", value=_service_external_ip),
    PrinterColumn("Port(s)", value=_service_ports),
    AGE)


def port_env_name(port_name: str | None) -> str:
    """The variable a per-pod port is given in: ``PORT`` for the first, ``PORT_<NAME>`` for named ones."""
    return "PORT_" + port_name.upper().replace("-", "_") if port_name else "PORT"


def reads_port_from_env(container: dict[str, Any]) -> bool:
    """Whether a container takes its listening port from ``$(PORT...)`` rather than a fixed number."""
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    words += [str(e.get("value") or "") for e in container.get("env") or []]
    return any(_PORT_REFERENCE.search(w) for w in words)


# Whether pods have network namespaces of their own (trimaran.runtime.network), set once by the
# control plane: then no containerPort is a port of the machine, and nothing limits replicas.
_own_pod_network = False


def set_pod_network(on: bool) -> None:
    """Say whether pods have a network of their own (the control plane, at start)."""
    global _own_pod_network
    _own_pod_network = on


def fixed_ports(pod_spec: dict[str, Any]) -> list[tuple[str, int]]:
    """(container, port) of every declared containerPort a container binds as written, and so holds
    on this machine; none on the pod network, where each pod binds its own address."""
    if _own_pod_network:
        return []
    return [(str(c.get("name")), int(p["containerPort"])) for c in pod_spec.get("containers") or []
            if not reads_port_from_env(c) for p in c.get("ports") or [] if p.get("containerPort")]


# kube-apiserver's default --service-node-port-range.
NODE_PORT_MIN, NODE_PORT_MAX = 30000, 32767


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def percent_or_int(value: int | str, total: int, round_up: bool) -> int:
    """An IntOrString of a rolling update (``2`` or ``"25%"``) against ``total`` replicas, rounded as
    the Deployment controller rounds maxSurge (up) and maxUnavailable (down)."""
    if isinstance(value, int):
        return value
    match = _PERCENT.match(value)
    if match is None:
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    scaled = int(match.group(1)) * total
    return -(-scaled // 100) if round_up else scaled // 100


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str] | None) -> bool:
    """A LabelSelector (``matchLabels`` and ``matchExpressions``) against labels; an empty one matches all."""
    labels = labels or {}
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values or op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True


def _check_int_or_percent(path: str, value: int | str | None) -> list[FieldError]:
    if value is None:
        return []
    if isinstance(value, int):
        return [FieldError.invalid(path, value, "must be greater than or equal to 0")] if value < 0 else []
    match = _PERCENT.match(value)
    if match is None:
        return [FieldError.invalid(path, value, "a valid percent string must be a numeric string followed by an "
                                                "ending '%' (e.g. '1%',  or '93%', regex used for validation is "
                                                "'[0-9]+%')")]
    return []


class RollingUpdateDeployment(ApiModel):
    max_unavailable: int | str | None = None
    max_surge: int | str | None = None


class DeploymentStrategy(ApiModel):
    type: Literal["Recreate", "RollingUpdate"] | None = None
    rolling_update: RollingUpdateDeployment | None = None


class DeploymentSpec(ApiModel):
    replicas: NonNegInt32 | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec
    strategy: DeploymentStrategy | None = None
    min_ready_seconds: NonNegInt32 | None = None
    revision_history_limit: NonNegInt32 | None = None
    paused: bool | None = None
    progress_deadline_seconds: NonNegInt32 | None = None


class DeploymentStatus(ApiModel):
    observed_generation: int | None = None
    replicas: NonNegInt32 | None = None
    updated_replicas: NonNegInt32 | None = None
    ready_replicas: NonNegInt32 | None = None
    available_replicas: NonNegInt32 | None = None
    unavailable_replicas: NonNegInt32 | None = None
    terminating_replicas: NonNegInt32 | None = None
    conditions: list[Condition] | None = None
    collision_count: NonNegInt32 | None = None
    selector: str | None = None  # the scale subresource's label selector, as a CRD's status carries it


class Deployment(Resource):
    """apps/v1 Deployment."""

    spec: DeploymentSpec
    status: DeploymentStatus | None = None

    def set_defaults(self) -> None:
        """``SetDefaults_Deployment`` of apps/v1."""
        spec = self.spec
        if spec.replicas is None:
            spec.replicas = 1
        if spec.strategy is None:
            spec.strategy = DeploymentStrategy()
        if spec.strategy.type is None:
            spec.strategy.type = "RollingUpdate"
        if spec.strategy.type == "RollingUpdate":
            rolling = spec.strategy.rolling_update = spec.strategy.rolling_update or RollingUpdateDeployment()
            if rolling.max_unavailable is None:
                rolling.max_unavailable = "25%"
            if rolling.max_surge is None:
                rolling.max_surge = "25%"
        if spec.revision_history_limit is None:
            spec.revision_history_limit = 10
        if spec.progress_deadline_seconds is None:
            spec.progress_deadline_seconds = 600
        if spec.min_ready_seconds is None:
            spec.min_ready_seconds = 0
        if spec.template.spec.restart_policy is None:
            spec.template.spec.restart_policy = "Always"

    def check(self) -> list[FieldError]:
        """``ValidateDeploymentSpec``'s rules, then this machine's port rule."""
        spec = self.spec
        errs = super().check()
        template_labels = (spec.template.metadata.labels if spec.template.metadata is not None else None) or {}
        if spec.selector is None:
            errs.append(FieldError.required("spec.selector"))
        else:
            errs.extend(spec.selector.check("spec.selector"))
            selector = spec.selector.to_dict()
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errs.append(FieldError.invalid("spec.selector", selector, "empty selector is invalid for deployment"))
            elif not selector_matches(selector, template_labels):
                errs.append(FieldError.invalid("spec.template.metadata.labels", template_labels,
                                               "`selector` does not match template `labels`"))
        restart = spec.template.spec.restart_policy
        if restart != "Always":
            errs.append(FieldError.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
        errs.extend(spec.template.check("spec.template", require_image=False))
        strategy = spec.strategy
        if strategy is not None and strategy.type == "Recreate" and strategy.rolling_update is not None:
            errs.append(FieldError.forbidden("spec.strategy.rollingUpdate",
                                             "may not be specified when strategy `type` is 'Recreate'"))
        elif strategy is not None and strategy.rolling_update is not None:
            errs.extend(self._check_rolling(strategy.rolling_update))
        if spec.replicas is not None and spec.replicas > 1:
            held = fixed_ports(spec.template.to_dict().get("spec") or {})
            if held:
                container, port = held[0]
                errs.append(FieldError.invalid(
                    "spec.replicas", spec.replicas,
                    f"container {container!r} binds containerPort {port} as written, and pods share this machine's "
                    f"network, so only one replica can hold it; pass the port as $(PORT) (e.g. --port=$(PORT)) to "
                    f"give each replica a port of its own"))
        return errs

    @staticmethod
    def _check_rolling(rolling: RollingUpdateDeployment) -> list[FieldError]:
        path = "spec.strategy.rollingUpdate"
        errs = _check_int_or_percent(join_path(path, "maxUnavailable"), rolling.max_unavailable)
        errs += _check_int_or_percent(join_path(path, "maxSurge"), rolling.max_surge)
        if errs:
            return errs
        unavailable = rolling.max_unavailable if rolling.max_unavailable is not None else "25%"
        surge = rolling.max_surge if rolling.max_surge is not None else "25%"
        if isinstance(unavailable, str) and percent_or_int(unavailable, 100, False) > 100:
            errs.append(FieldError.invalid(join_path(path, "maxUnavailable"), unavailable,
                                           "must not be greater than 100%"))
        if surge in (0, "0%") and unavailable in (0, "0%"):
            errs.append(FieldError.invalid(join_path(path, "maxUnavailable"), unavailable,
                                           "may not be 0 when `maxSurge` is 0"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        if (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
            return [FieldError.invalid("spec.selector", (new.get("spec") or {}).get("selector"),
                                       "field is immutable")]
        return []


# --- Service ------------------------------------------------------------------------------------

_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")


@dataclass(frozen=True)
class _DuplicatePort(FieldError):
    """A repeated (protocol, port) pair, written as kube-apiserver writes it: its key, an internal
    ``core.ServicePort`` with only those two fields set, as JSON in Go's field order."""

    def __str__(self) -> str:
        return f"{self.path}: Duplicate value: {json.dumps(self.value, separators=(',', ':'))}"


class ServicePort(ApiModel):
    name: str | None = None
    protocol: Literal["SCTP", "TCP", "UDP"] | None = None  # kube-apiserver's, in its message's (sorted) order
    app_protocol: str | None = None
    port: int
    target_port: int | str | None = None
    node_port: int | None = None


class ServiceSpec(ApiModel):
    type: str | None = None
    ports: list[ServicePort] | None = None
    selector: dict[str, str] | None = None
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    cluster_ips: list[str] | None = Field(default=None, alias="clusterIPs")
    external_name: str | None = None
    session_affinity: Literal["None", "ClientIP"] | None = None
    ip_families: list[str] | None = None
    ip_family_policy: str | None = None
    internal_traffic_policy: str | None = None
    publish_not_ready_addresses: bool | None = None
    external_traffic_policy: str | None = None
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP")
    external_i_ps: list[str] | None = Field(default=None, alias="externalIPs")


class Service(Resource):
    """core v1 Service; here each is a loopback address of its own (``spec.clusterIP``)."""

    spec: ServiceSpec = Field(default_factory=ServiceSpec)
    status: dict[str, Any] | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """Service names are DNS-1035 labels (they become DNS names)."""
        return is_dns1035_label(name)

    def set_defaults(self) -> None:
        spec = self.spec
        if spec.type is None:
            spec.type = "ClusterIP"
        if spec.session_affinity is None:
            spec.session_affinity = "None"
        for port in spec.ports or []:
            if port.protocol is None:
                port.protocol = "TCP"
            if port.target_port is None:
                port.target_port = port.port

    def check(self) -> list[FieldError]:
        spec = self.spec
        errs = super().check()
        if spec.type not in _SERVICE_TYPES:
            errs.append(FieldError.not_supported("spec.type", spec.type, _SERVICE_TYPES))
        if spec.type == "ExternalName":
            if not spec.external_name:
                errs.append(FieldError.required("spec.externalName"))
            return errs
        if not spec.ports and spec.cluster_ip != "None":  # a headless Service may name no port
            errs.append(FieldError.required("spec.ports"))
        if spec.cluster_ip not in (None, "", "None") and not _is_ip(spec.cluster_ip):
            errs.append(FieldError.invalid("spec.clusterIP", spec.cluster_ip,
                                           "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
        names: set[str] = set()
        for i, port in enumerate(spec.ports or []):
            path = join_path("spec", "ports", i)
            if len(spec.ports or []) > 1 and not port.name:
                errs.append(FieldError.required(join_path(path, "name")))
            if port.name:
                # A Service port's name is a DNS label ("81-8000", as `kubectl create service` names
                # one, is valid); its string targetPort names a container port, an IANA service name.
                errs.extend(FieldError.invalid(join_path(path, "name"), port.name, m)
                            for m in is_dns1123_label(port.name))
                if port.name in names:
                    errs.append(FieldError.duplicate(join_path(path, "name"), port.name))
                names.add(port.name)
            if not 1 <= port.port <= 65535:
                errs.append(FieldError.invalid(join_path(path, "port"), port.port,
                                               "must be between 1 and 65535, inclusive"))
            target = port.target_port
            if isinstance(target, int) and not 1 <= target <= 65535:
                errs.append(FieldError.invalid(join_path(path, "targetPort"), target,
                                               "must be between 1 and 65535, inclusive"))
            elif isinstance(target, str):
                errs.extend(FieldError.invalid(join_path(path, "targetPort"), target, m)
                            for m in is_valid_port_name(target))
            if port.node_port is not None:
                if spec.type not in ("NodePort", "LoadBalancer"):
                    errs.append(FieldError.forbidden(join_path(path, "nodePort"),
                                                     f"may not be used when `type` is '{spec.type}'"))
                elif not NODE_PORT_MIN <= port.node_port <= NODE_PORT_MAX:
                    errs.append(FieldError.invalid(
                        join_path(path, "nodePort"), port.node_port,
                        f"provided port is not in the valid range. The range of valid ports is "
                        f"{NODE_PORT_MIN}-{NODE_PORT_MAX}"))
        # One port number may serve several protocols (53/TCP and 53/UDP), but a (protocol, port)
        # pair, or a node port of one protocol, only once: each is one forwarding rule.
        node_ports: set[tuple[str, int]] = set()
        pairs: set[tuple[str, int]] = set()
        for i, port in enumerate(spec.ports or []):
            path = join_path("spec", "ports", i)
            protocol = port.protocol or "TCP"
            if port.node_port:
                if (protocol, port.node_port) in node_ports:
                    errs.append(FieldError.duplicate(join_path(path, "nodePort"), port.node_port))
                node_ports.add((protocol, port.node_port))
            if (protocol, port.port) in pairs:
                errs.append(_DuplicatePort(path, "Duplicate", value={
                    "Name": "", "Protocol": protocol, "AppProtocol": None, "Port": port.port, "TargetPort": 0,
                    "NodePort": 0}))
            pairs.add((protocol, port.port))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        before = (old.get("spec") or {}).get("clusterIP")
        after = (new.get("spec") or {}).get("clusterIP")
        if before and after and before != after:
            return [FieldError.invalid("spec.clusterIP", after, "field is immutable")]
        return []



class Endpoints(Resource):
    """core v1 Endpoints: the ready (and not ready) pods behind a Service, at their ports."""

    subsets: list[dict[str, Any]] | None = None


class ReplicaSet(Resource):
    """apps/v1 ReplicaSet, here the record of one revision of a Deployment (its template, how many
    of its pods run): the Deployment controller writes it and owns the pods itself, so a ReplicaSet
    of one's own is refused."""

    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None

    def check(self) -> list[FieldError]:
        owners = [ref for ref in self.metadata.owner_references or [] if ref.kind == "Deployment" and ref.controller]
        if not owners:
            return [FieldError.forbidden("metadata.ownerReferences", "ReplicaSets are made by Deployments here: "
                                         "apply a Deployment with this template instead")]
        return super().check()


# --- ReplicationController (core v1) and DaemonSet (apps/v1) -------------------------------------

REPLICATIONCONTROLLER_COLUMNS = REPLICASET_COLUMNS  # kubectl's: NAME DESIRED CURRENT READY AGE


def _node_selector(obj: dict[str, Any]) -> str:
    selector = ((_spec(obj).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>"


DAEMONSET_COLUMNS = (
    PrinterColumn("Desired", "integer", value=lambda o: _status(o).get("desiredNumberScheduled", 0)),
    PrinterColumn("Current", "integer", value=lambda o: _status(o).get("currentNumberScheduled", 0)),
    PrinterColumn("Ready", "integer", value=lambda o: _status(o).get("numberReady", 0)),
    PrinterColumn("Up-to-date", "integer", value=lambda o: _status(o).get("updatedNumberScheduled", 0)),
    PrinterColumn("Available", "integer", value=lambda o: _status(o).get("numberAvailable", 0)),
    PrinterColumn("Node Selector", value=_node_selector),
    AGE)


def _check_restart_always(template: PodTemplateSpec, path: str) -> list[FieldError]:
    restart = template.spec.restart_policy
    if restart != "Always":
        return [FieldError.not_supported(join_path(path, "spec", "restartPolicy"), restart, ("Always",))]
    return []


class ReplicationControllerSpec(ApiModel):
    replicas: NonNegInt32 | None = None
    min_ready_seconds: NonNegInt32 | None = None
    selector: dict[str, str] | None = None
    template: PodTemplateSpec | None = None


class ReplicationControllerStatus(ApiModel):
    replicas: NonNegInt32 | None = None
    fully_labeled_replicas: NonNegInt32 | None = None
    ready_replicas: NonNegInt32 | None = None
    available_replicas: NonNegInt32 | None = None
    observed_generation: int | None = None
    conditions: list[Condition] | None = None


class ReplicationController(Resource):
    """core v1 ReplicationController: ``replicas`` pods of its template, those its plain-map selector matches."""

    spec: ReplicationControllerSpec = Field(default_factory=ReplicationControllerSpec)
    status: ReplicationControllerStatus | None = None

    def set_defaults(self) -> None:
        """``SetDefaults_ReplicationController`` of core v1: the selector and the labels are the
        template's when omitted, one replica."""
        spec = self.spec
        template_labels = (spec.template.metadata.labels if spec.template and spec.template.metadata else None) or {}
        if spec.template is not None:
            if not spec.selector:
                spec.selector = dict(template_labels)
            if not self.metadata.labels:
                self.metadata.labels = dict(template_labels)
            if spec.template.spec.restart_policy is None:
                spec.template.spec.restart_policy = "Always"
        if spec.replicas is None:
            spec.replicas = 1
        if spec.min_ready_seconds is None:
            spec.min_ready_seconds = 0
        if self.status is None:  # ``replicas`` is not omitempty: kube-apiserver writes 0, and clients require it
            self.status = ReplicationControllerStatus(replicas=0)

    def check(self) -> list[FieldError]:
        """``ValidateReplicationControllerSpec``: a non-empty selector that matches the template's labels."""
        spec = self.spec
        errs = super().check()
        if not spec.selector:
            errs.append(FieldError.required("spec.selector"))
        else:
            errs.extend(check_labels("spec.selector", spec.selector))
        if spec.template is None:
            errs.append(FieldError.required("spec.template"))
            return errs
        template_labels = (spec.template.metadata.labels if spec.template.metadata is not None else None) or {}
        if spec.selector and not selector_matches({"matchLabels": spec.selector}, template_labels):
            errs.append(FieldError.invalid("spec.template.metadata.labels", template_labels,
                                           "selector does not match labels in spec.template"))
        errs.extend(_check_restart_always(spec.template, "spec.template"))
        errs.extend(spec.template.check("spec.template", require_image=False))
        return errs


class RollingUpdateDaemonSet(ApiModel):
    max_unavailable: int | str | None = None
    max_surge: int | str | None = None


class DaemonSetUpdateStrategy(ApiModel):
    type: Literal["OnDelete", "RollingUpdate"] | None = None
    rolling_update: RollingUpdateDaemonSet | None = None


class DaemonSetSpec(ApiModel):
    selector: LabelSelector | None = None
    template: PodTemplateSpec
    update_strategy: DaemonSetUpdateStrategy | None = None
    min_ready_seconds: NonNegInt32 | None = None
    revision_history_limit: NonNegInt32 | None = None


class DaemonSetStatus(ApiModel):
    current_number_scheduled: NonNegInt32 | None = None
    number_misscheduled: NonNegInt32 | None = None
    desired_number_scheduled: NonNegInt32 | None = None
    number_ready: NonNegInt32 | None = None
    observed_generation: int | None = None
    updated_number_scheduled: NonNegInt32 | None = None
    number_available: NonNegInt32 | None = None
    number_unavailable: NonNegInt32 | None = None
    collision_count: NonNegInt32 | None = None
    conditions: list[Condition] | None = None


class DaemonSet(Resource):
    """apps/v1 DaemonSet: one pod of its template on each node that admits it (here, this one)."""

    spec: DaemonSetSpec
    status: DaemonSetStatus | None = None

    def set_defaults(self) -> None:
        """``SetDefaults_DaemonSet`` of apps/v1."""
        spec = self.spec
        strategy = spec.update_strategy = spec.update_strategy or DaemonSetUpdateStrategy()
        if strategy.type is None:
            strategy.type = "RollingUpdate"
        if strategy.type == "RollingUpdate":
            rolling = strategy.rolling_update = strategy.rolling_update or RollingUpdateDaemonSet()
            if rolling.max_unavailable is None:
                rolling.max_unavailable = 1
            if rolling.max_surge is None:
                rolling.max_surge = 0
        if spec.revision_history_limit is None:
            spec.revision_history_limit = 10
        if spec.min_ready_seconds is None:
            spec.min_ready_seconds = 0
        if spec.template.spec.restart_policy is None:
            spec.template.spec.restart_policy = "Always"
        if self.status is None:  # these four are not omitempty: kube-apiserver writes 0, and clients require them
            self.status = DaemonSetStatus.model_validate({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                                          "desiredNumberScheduled": 0, "numberReady": 0})

    def check(self) -> list[FieldError]:
        """``ValidateDaemonSetSpec``'s rules."""
        spec = self.spec
        errs = super().check()
        template_labels = (spec.template.metadata.labels if spec.template.metadata is not None else None) or {}
        if spec.selector is None:
            errs.append(FieldError.required("spec.selector"))
        else:
            errs.extend(spec.selector.check("spec.selector"))
            selector = spec.selector.to_dict()
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errs.append(FieldError.invalid("spec.selector", selector, "empty selector is invalid for daemonset"))
            elif not selector_matches(selector, template_labels):
                errs.append(FieldError.invalid("spec.template.metadata.labels", template_labels,
                                               "`selector` does not match template `labels`"))
        errs.extend(_check_restart_always(spec.template, "spec.template"))
        if spec.template.spec.active_deadline_seconds is not None:
            errs.append(FieldError.forbidden("spec.template.spec.activeDeadlineSeconds",
                                             "activeDeadlineSeconds in DaemonSet is not Supported"))
        errs.extend(spec.template.check("spec.template", require_image=False))
        strategy = spec.update_strategy
        if strategy is not None and strategy.type == "OnDelete" and strategy.rolling_update is not None:
            errs.append(FieldError.forbidden("spec.updateStrategy.rollingUpdate",
                                             "may not be specified when strategy `type` is 'OnDelete'"))
        elif strategy is not None and strategy.rolling_update is not None:
            path = "spec.updateStrategy.rollingUpdate"
            rolling = strategy.rolling_update
            errs.extend(_check_int_or_percent(join_path(path, "maxUnavailable"), rolling.max_unavailable))
            errs.extend(_check_int_or_percent(join_path(path, "maxSurge"), rolling.max_surge))
            for name, value in (("maxUnavailable", rolling.max_unavailable), ("maxSurge", rolling.max_surge)):
                if isinstance(value, str) and _PERCENT.match(value) and percent_or_int(value, 100, False) > 100:
                    errs.append(FieldError.invalid(join_path(path, name), value, "must not be greater than 100%"))
            if rolling.max_unavailable in (0, "0%") and rolling.max_surge in (0, "0%", None):
                errs.append(FieldError.invalid(join_path(path, "maxUnavailable"), rolling.max_unavailable,
                                               "cannot be 0 when maxSurge is 0"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        if (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
            return [FieldError.invalid("spec.selector", (new.get("spec") or {}).get("selector"),
                                       "field is immutable")]
        return []


# --- StatefulSet and ControllerRevision (apps/v1) -----------------------------------------------

def _containers_of(obj: dict[str, Any], key: str) -> str:
    containers = ((_spec(obj).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(str(c.get(key) or "") for c in containers)


# kube-apiserver's columns for `kubectl get statefulsets` (``printStatefulSet``): NAME READY AGE,
# and with -o wide CONTAINERS IMAGES.
STATEFULSET_COLUMNS = (
    PrinterColumn("Ready", value=lambda o: f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 1)}"),
    AGE,
    PrinterColumn("Containers", priority=1, value=lambda o: _containers_of(o, "name")),
    PrinterColumn("Images", priority=1, value=lambda o: _containers_of(o, "image")))


def _revision_controller(obj: dict[str, Any]) -> str:
    """``printControllerRevision``'s CONTROLLER: ``<kind>.<group>/<name>`` of its controller, lower-cased."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            group = str(ref.get("apiVersion") or "").rpartition("/")[0]
            kind = f"{ref.get('kind')}.{group}" if group else str(ref.get("kind"))
            return f"{kind.lower()}/{ref.get('name')}"
    return "<none>"


CONTROLLERREVISION_COLUMNS = (
    PrinterColumn("Controller", value=_revision_controller),
    PrinterColumn("Revision", "integer", value=lambda o: o.get("revision", 0)),
    AGE)

_RETENTION_POLICIES = ("Retain", "Delete")


class RollingUpdateStatefulSetStrategy(ApiModel):
    partition: NonNegInt32 | None = None
    max_unavailable: int | str | None = None


class StatefulSetUpdateStrategy(ApiModel):
    type: str | None = None
    rolling_update: RollingUpdateStatefulSetStrategy | None = None


class StatefulSetPersistentVolumeClaimRetentionPolicy(ApiModel):
    when_deleted: str | None = None
    when_scaled: str | None = None


class StatefulSetOrdinals(ApiModel):
    start: int | None = None


class PersistentVolumeClaimTemplate(ApiModel):
    """A claim a StatefulSet makes per ordinal: a PersistentVolumeClaim, its apiVersion and kind optional."""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec | None = None
    status: PersistentVolumeClaimStatus | None = None


class StatefulSetSpec(ApiModel):
    replicas: int | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec
    volume_claim_templates: list[PersistentVolumeClaimTemplate] | None = None
    service_name: str | None = None
    pod_management_policy: str | None = None
    update_strategy: StatefulSetUpdateStrategy | None = None
    revision_history_limit: int | None = None
    min_ready_seconds: int | None = None
    persistent_volume_claim_retention_policy: StatefulSetPersistentVolumeClaimRetentionPolicy | None = None
    ordinals: StatefulSetOrdinals | None = None


class StatefulSetStatus(ApiModel):
    observed_generation: int | None = None
    replicas: NonNegInt32 | None = None
    ready_replicas: NonNegInt32 | None = None
    current_replicas: NonNegInt32 | None = None
    updated_replicas: NonNegInt32 | None = None
    current_revision: str | None = None
    update_revision: str | None = None
    collision_count: NonNegInt32 | None = None
    conditions: list[Condition] | None = None
    available_replicas: NonNegInt32 | None = None


@dataclass(frozen=True)
class _InvalidObject(FieldError):
    """An Invalid error whose value is a map or a struct, written as kube-apiserver writes it for a
    built-in kind: the value as JSON (``Invalid value: {"app":"web"}: ...``), not a type word."""

    def __str__(self) -> str:
        value = json.dumps(self.value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return f"{self.path}: Invalid value: {value}: {self.detail}"


def _invalid_object(path: str, value: dict[str, Any], detail: str) -> FieldError:
    return _InvalidObject(path, "Invalid", detail, value)


def _nonnegative(path: str, value: int | None) -> list[FieldError]:
    """``ValidateNonnegativeField``."""
    if value is not None and value < 0:
        return [FieldError.invalid(path, value, "must be greater than or equal to 0")]
    return []


class StatefulSet(Resource):
    """apps/v1 StatefulSet: ``replicas`` pods ``<name>-<ordinal>`` with stable identities and a claim
    per volumeClaimTemplate each (see ``controllers/workloads/statefulset.py``)."""

    spec: StatefulSetSpec
    status: StatefulSetStatus | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """``ValidateStatefulSetName``: a DNS-1123 label, as its pods' hostnames derive from it."""
        return is_dns1123_label(name)

    def set_defaults(self) -> None:
        """``SetDefaults_StatefulSet`` of apps/v1 (a RollingUpdate type given without ``rollingUpdate``
        stays without it, as upstream leaves it)."""
        spec = self.spec
        if not spec.pod_management_policy:
            spec.pod_management_policy = "OrderedReady"
        strategy = spec.update_strategy = spec.update_strategy or StatefulSetUpdateStrategy()
        if not strategy.type:
            strategy.type = "RollingUpdate"
            strategy.rolling_update = strategy.rolling_update or RollingUpdateStatefulSetStrategy()
        if strategy.type == "RollingUpdate" and strategy.rolling_update is not None \
                and strategy.rolling_update.partition is None:
            strategy.rolling_update.partition = 0
        policy = spec.persistent_volume_claim_retention_policy = (
            spec.persistent_volume_claim_retention_policy or StatefulSetPersistentVolumeClaimRetentionPolicy())
        policy.when_deleted = policy.when_deleted or "Retain"
        policy.when_scaled = policy.when_scaled or "Retain"
        if spec.replicas is None:
            spec.replicas = 1
        if spec.revision_history_limit is None:
            spec.revision_history_limit = 10
        if spec.template.spec.restart_policy is None:
            spec.template.spec.restart_policy = "Always"
        for claim in spec.volume_claim_templates or []:  # SetDefaults_PersistentVolumeClaim on each template
            if claim.spec is not None and claim.spec.volume_mode is None:
                claim.spec.volume_mode = "Filesystem"
            claim.status = claim.status or PersistentVolumeClaimStatus()
            claim.status.phase = claim.status.phase or "Pending"
        if self.status is None:  # ``replicas`` and ``availableReplicas`` are not omitempty: kube-apiserver writes 0
            self.status = StatefulSetStatus(replicas=0, available_replicas=0)

    def check(self) -> list[FieldError]:
        """``ValidateStatefulSetSpec``'s rules, in its order."""
        spec = self.spec
        errs = super().check()
        policy = spec.pod_management_policy
        if not policy:
            errs.append(FieldError.required("spec.podManagementPolicy"))
        elif policy not in ("OrderedReady", "Parallel"):
            errs.append(FieldError.invalid("spec.podManagementPolicy", policy, "must be 'OrderedReady' or 'Parallel'"))
        strategy = spec.update_strategy or StatefulSetUpdateStrategy()
        if not strategy.type:
            errs.append(FieldError.required("spec.updateStrategy"))
        elif strategy.type == "OnDelete":
            if strategy.rolling_update is not None:
                errs.append(_invalid_object("spec.updateStrategy.rollingUpdate", strategy.rolling_update.to_dict(),
                                             "only allowed for updateStrategy 'RollingUpdate'"))
        elif strategy.type == "RollingUpdate":
            if strategy.rolling_update is not None:
                path = "spec.updateStrategy.rollingUpdate"
                unavailable = strategy.rolling_update.max_unavailable
                errs.extend(_check_int_or_percent(join_path(path, "maxUnavailable"), unavailable))
                if unavailable in (0, "0%"):
                    errs.append(FieldError.invalid(join_path(path, "maxUnavailable"), unavailable, "cannot be 0"))
                elif isinstance(unavailable, str) and _PERCENT.match(unavailable) \
                        and percent_or_int(unavailable, 100, False) > 100:
                    errs.append(FieldError.invalid(join_path(path, "maxUnavailable"), unavailable,
                                                   "must not be greater than 100%"))
                errs.extend(_nonnegative(join_path(path, "partition"), strategy.rolling_update.partition))
        else:
            errs.append(_invalid_object("spec.updateStrategy", strategy.to_dict(),
                                        "must be 'RollingUpdate' or 'OnDelete'"))
        retention = spec.persistent_volume_claim_retention_policy
        if retention is not None:
            for name, value in (("whenDeleted", retention.when_deleted), ("whenScaled", retention.when_scaled)):
                if value not in _RETENTION_POLICIES:
                    errs.append(FieldError.not_supported(
                        join_path("spec.persistentVolumeClaimRetentionPolicy", name), value, _RETENTION_POLICIES))
        errs.extend(_nonnegative("spec.replicas", spec.replicas))
        errs.extend(_nonnegative("spec.minReadySeconds", spec.min_ready_seconds))
        if spec.ordinals is not None:
            errs.extend(_nonnegative("spec.ordinals.start", spec.ordinals.start))
        if spec.service_name:
            errs.extend(FieldError.invalid("spec.serviceName", spec.service_name, m)
                        for m in is_dns1123_label(spec.service_name))
        template_labels = (spec.template.metadata.labels if spec.template.metadata is not None else None) or {}
        if spec.selector is None:
            errs.append(FieldError.required("spec.selector"))
        else:
            errs.extend(spec.selector.check("spec.selector"))
            selector = spec.selector.to_dict()
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errs.append(_invalid_object("spec.selector", selector, "empty selector is invalid for statefulset"))
            elif not selector_matches(selector, template_labels):
                errs.append(_invalid_object("spec.template.metadata.labels", template_labels,
                                            "`selector` does not match template `labels`"))
        # The pods mount each claim template as a volume of its name, which the controller adds.
        template = spec.template.model_copy(deep=True)
        claims = [c.metadata.name or "" for c in spec.volume_claim_templates or []]
        template.spec.volumes = [v for v in template.spec.volumes or [] if v.name not in claims] + [
            Volume(name=c, persistentVolumeClaim={"claimName": c}) for c in claims if c]
        errs.extend(template.check("spec.template", require_image=False))
        errs.extend(_check_restart_always(spec.template, "spec.template"))
        if spec.template.spec.active_deadline_seconds is not None:
            errs.append(FieldError.forbidden("spec.template.spec.activeDeadlineSeconds",
                                             "activeDeadlineSeconds in StatefulSet is not Supported"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """``ValidateStatefulSetUpdate``: only these fields of the spec may change."""
        mutable = ("replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit",
                   "persistentVolumeClaimRetentionPolicy", "minReadySeconds")
        before = {k: v for k, v in (old.get("spec") or {}).items() if k not in mutable}
        after = {k: v for k, v in (new.get("spec") or {}).items() if k not in mutable}
        if before != after:
            return [FieldError.forbidden("spec", "updates to statefulset spec for fields other than 'replicas', "
                                         "'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', "
                                         "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")]
        return []


class ControllerRevision(Resource):
    """apps/v1 ControllerRevision: an immutable snapshot of a StatefulSet's or DaemonSet's template
    (``data``, the patch its controller stores) and its place in the history (``revision``)."""

    data: Any = None
    revision: int = 0

    def check(self) -> list[FieldError]:
        """``ValidateControllerRevision``."""
        errs = super().check()
        if self.data is None:
            errs.append(FieldError.required("data", "data is mandatory"))
        errs.extend(_nonnegative("revision", self.revision))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """``ValidateControllerRevisionUpdate``: ``data`` is immutable (``revision`` moves on a rollback)."""
        if old.get("data") != new.get("data"):
            return [_invalid_object("data", new.get("data"), "field is immutable")]
        return []
