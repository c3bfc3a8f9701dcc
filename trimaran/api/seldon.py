"""Seldon Core v1 ``machinelearning.seldon.io`` SeldonDeployment (``v1``, and the ``v1alpha2``/``v1alpha3``
spellings older manifests use), checked at apply as Seldon's webhook and operator would refuse it.

A predictor's ``graph`` is a tree of units. A unit is served by one of:

- a built-in (``SIMPLE_MODEL``, ``SIMPLE_ROUTER``, ``RANDOM_ABTEST``, ``AVERAGE_COMBINER``);
- a prepackaged server (``SKLEARN_SERVER``, ``XGBOOST_SERVER``, ``TENSORFLOW_SERVER``, ``TRITON_SERVER``,
  ``MLFLOW_SERVER``) reading its ``modelUri`` (``models:/`` and ``runs:/`` too, resolved by the tracking
  server of ``MLFLOW_TRACKING_URI`` in the env of a componentSpecs container named after the unit);
- a container of the predictor's ``componentSpecs`` with the unit's name: a Python class in Seldon's
  wrapper shape (see `trimaran.serving.seldon`);
- a Seldon microservice already running at ``endpoint.service_host``/``service_port`` (a Service, say),
  called over Seldon's internal REST API.

Anything else is refused with the unit's field path, as are duplicate unit names (a graph is a
tree: a name met twice would make a cycle of the executor's calls), parameters whose value does
not parse as their type, and graphs the chosen protocol cannot run.
"""

# Annotations are evaluated eagerly, as in the other API modules (pydantic compiles them at build).

import json
from typing import Any, Literal

from pydantic import Field

from trimaran.api.core import PodSpec
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, NonNegInt32, ObjectMeta, Resource
from trimaran.api.serving import StorageUriError, check_logger_url, parse_storage_uri

__all__ = [
    "API_VERSIONS",
    "BUILTIN_IMPLEMENTATIONS",
    "GROUP",
    "PREPACKAGED_SERVERS",
    "PredictiveUnit",
    "SeldonDeployment",
    "parameter_value",
    "predictor_replicas",
]

GROUP = "machinelearning.seldon.io"
API_VERSIONS = (f"{GROUP}/v1", f"{GROUP}/v1alpha3", f"{GROUP}/v1alpha2")

UNIT_TYPES = ("MODEL", "TRANSFORMER", "OUTPUT_TRANSFORMER", "ROUTER", "COMBINER", "UNKNOWN_TYPE")
#: Built-in units and the type each one is.
BUILTIN_IMPLEMENTATIONS = {"SIMPLE_MODEL": "MODEL", "SIMPLE_ROUTER": "ROUTER", "RANDOM_ABTEST": "ROUTER",
                           "AVERAGE_COMBINER": "COMBINER"}
#: Prepackaged servers and the local model runtime that serves each one's modelUri.
PREPACKAGED_SERVERS = {"SKLEARN_SERVER": "sklearn", "XGBOOST_SERVER": "xgboost", "TENSORFLOW_SERVER": "tensorflow",
                       "TRITON_SERVER": None, "MLFLOW_SERVER": "mlflow"}
# Seldon's other servers, which have no local equivalent.
_UNAVAILABLE_SERVERS = ("HUGGINGFACE_SERVER", "TEMPO_SERVER")
PARAMETER_TYPES = ("INT", "FLOAT", "DOUBLE", "STRING", "BOOL", "JSON")
METHODS = ("TRANSFORM_INPUT", "TRANSFORM_OUTPUT", "ROUTE", "AGGREGATE", "SEND_FEEDBACK")
PROTOCOLS = ("seldon", "tensorflow", "kfserving", "v2")


class Parameter(ApiModel):
    """A constructor argument of the unit's class (or a prepackaged server's option), typed as a string."""

    name: str
    value: str
    type: str = "STRING"


class Endpoint(ApiModel):
    """Where a unit listens on a cluster; locally every unit runs in its predictor's executor."""

    # Seldon spells these two in snake case.
    service_host: str | None = Field(default=None, alias="service_host")
    service_port: NonNegInt32 | None = Field(default=None, alias="service_port")
    type: Literal["REST", "GRPC"] | None = None
    http_port: NonNegInt32 | None = None
    grpc_port: NonNegInt32 | None = None


class Logger(ApiModel):
    """Request logging for a unit (``mode`` all, request or response; ``url`` a CloudEvents sink): the executor
    sends what the unit receives and answers (trimaran/serving/logger.py)."""

    url: str | None = None
    mode: Literal["all", "request", "response"] | None = None

    def check(self, path: str) -> list[FieldError]:
        return check_logger_url(join_path(path, "url"), self.url)


class PredictiveUnit(ApiModel):
    """A node of a predictor's graph."""

    name: str = ""
    children: list["PredictiveUnit"] | None = None
    type: str | None = None
    implementation: str | None = None
    methods: list[str] | None = None
    endpoint: Endpoint | None = None
    parameters: list[Parameter] | None = None
    model_uri: str | None = None
    service_account_name: str | None = None
    env_secret_ref_name: str | None = None
    storage_initializer_image: str | None = None
    logger: Logger | None = None

    def walk(self, path: str) -> list[tuple[str, "PredictiveUnit"]]:
        """Every unit of the tree under this one, with its field path, depth first."""
        units = [(path, self)]
        for i, child in enumerate(self.children or []):
            units += child.walk(join_path(path, "children", i))
        return units

    def unit_type(self) -> str:
        """The declared type, else the built-in's, else MODEL (Seldon's default for a unit without one)."""
        if self.type and self.type != "UNKNOWN_TYPE":
            return self.type
        return BUILTIN_IMPLEMENTATIONS.get(self.implementation or "", "MODEL")


class HpaSpec(ApiModel):
    """``componentSpecs[].hpaSpec``: the bounds and metrics of a HorizontalPodAutoscaler."""

    min_replicas: NonNegInt32 | None = None
    max_replicas: NonNegInt32 = 1
    metrics: list[dict[str, Any]] | None = None
    metricsv2: list[dict[str, Any]] | None = None


class SeldonPodSpec(ApiModel):
    """A pod spec holding the containers of the units named after them."""

    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None
    replicas: NonNegInt32 | None = None
    hpa_spec: HpaSpec | None = None
    keda_spec: dict[str, Any] | None = None
    pdb_spec: dict[str, Any] | None = None


class SvcOrchSpec(ApiModel):
    """The executor's (service orchestrator's) resources, env and replicas."""

    resources: dict[str, Any] | None = None
    env: list[dict[str, Any]] | None = None
    replicas: NonNegInt32 | None = None


class PredictorSpec(ApiModel):
    """One predictor: a graph, the pods of its custom units, replicas and its share of the traffic."""

    name: str = ""
    graph: PredictiveUnit
    component_specs: list[SeldonPodSpec] | None = None
    replicas: NonNegInt32 | None = None
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    engine_resources: dict[str, Any] | None = None
    svc_orch_spec: SvcOrchSpec | None = None
    traffic: NonNegInt32 | None = None
    explainer: dict[str, Any] | None = None
    shadow: bool | None = None
    ssl: dict[str, Any] | None = None
    progress_deadline_seconds: NonNegInt32 | None = None

    def container_names(self) -> set[str]:
        return {c.name for cs in self.component_specs or [] if cs.spec is not None for c in cs.spec.containers}


class SeldonDeploymentSpec(ApiModel):
    """``spec``: the predictors and what applies to all of them."""

    name: str | None = None
    predictors: list[PredictorSpec]
    oauth_key: str | None = Field(default=None, alias="oauth_key")
    oauth_secret: str | None = Field(default=None, alias="oauth_secret")
    annotations: dict[str, str] | None = None
    protocol: str | None = None
    transport: str | None = None
    replicas: NonNegInt32 | None = None
    server_type: str | None = None


class SeldonDeployment(Resource):
    """machinelearning.seldon.io SeldonDeployment: graphs of models behind one URL.

    ``status`` is the controller's (Seldon's shape: ``state``, ``description``, ``address.url``,
    ``deploymentStatus`` per predictor, ``replicas``); it is kept as given.
    """

    spec: SeldonDeploymentSpec
    status: dict[str, Any] | None = Field(default=None)

    def set_defaults(self) -> None:
        """Seldon's defaults: protocol seldon, transport rest, a lone predictor takes all the traffic."""
        if self.spec.protocol is None:
            self.spec.protocol = "seldon"
        if self.spec.transport is None:
            self.spec.transport = "rest"
        live = [p for p in self.spec.predictors if not p.shadow]
        if len(live) == 1 and live[0].traffic is None:
            live[0].traffic = 100
        for predictor in self.spec.predictors:
            for _, unit in predictor.graph.walk(""):
                if unit.type is None and unit.implementation in BUILTIN_IMPLEMENTATIONS:
                    unit.type = BUILTIN_IMPLEMENTATIONS[unit.implementation]

    def admission_warnings(self) -> list[str]:
        """Fields accepted for portability that change nothing here: say so rather than ignore them."""
        warnings: list[str] = []
        for i, predictor in enumerate(self.spec.predictors):
            path = f"spec.predictors[{i}]"
            for j, component in enumerate(predictor.component_specs or []):
                for field, value in (("kedaSpec", component.keda_spec), ("pdbSpec", component.pdb_spec)):
                    if value:
                        warnings.append(f"{path}.componentSpecs[{j}].{field}: ignored locally (one node)")
            if predictor.ssl:
                warnings.append(f"{path}.ssl: ignored locally; the ingress speaks plain HTTP on loopback")
        if self.spec.oauth_key or self.spec.oauth_secret:
            warnings.append("spec.oauth_key: ignored locally; the ingress does not authenticate (as without oauth)")
        return warnings

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec
        if spec.protocol not in PROTOCOLS:
            errs.append(FieldError.not_supported("spec.protocol", spec.protocol, PROTOCOLS))
        if spec.transport not in ("rest", "grpc"):
            errs.append(FieldError.not_supported("spec.transport", spec.transport, ("rest", "grpc")))
        elif spec.transport == "grpc":
            errs.append(FieldError.forbidden("spec.transport", "only the REST transport is served locally"))
        if spec.server_type not in (None, "rpc"):
            errs.append(FieldError.forbidden("spec.serverType", "only rpc is served locally (no Kafka)"))
        if not spec.predictors:
            errs.append(FieldError.required("spec.predictors", "at least one predictor"))
        names: set[str] = set()
        for i, predictor in enumerate(spec.predictors):
            path = join_path("spec.predictors", i)
            if not predictor.name:
                errs.append(FieldError.required(join_path(path, "name")))
            elif predictor.name in names:
                errs.append(FieldError.duplicate(join_path(path, "name"), predictor.name))
            names.add(predictor.name)
            errs.extend(_check_predictor(path, predictor, spec.protocol or "seldon"))
        live = [p for p in spec.predictors if not p.shadow]
        if not live and spec.predictors:
            errs.append(FieldError.invalid("spec.predictors", "shadow", "at least one predictor must not be a shadow"))
        total = sum(p.traffic or 0 for p in live)
        if len(live) > 1 and total != 100:
            errs.append(FieldError.invalid("spec.predictors", total,
                                           "traffic must sum to 100 across the predictors that are not shadows"))
        return errs


def _check_predictor(path: str, predictor: PredictorSpec, protocol: str) -> list[FieldError]:
    errs: list[FieldError] = []
    containers = predictor.container_names()
    for j, component in enumerate(predictor.component_specs or []):
        if component.spec is not None:
            errs.extend(component.spec.check(join_path(path, "componentSpecs", j, "spec"), require_image=False))
        hpa = component.hpa_spec
        if hpa is not None and hpa.min_replicas is not None and hpa.min_replicas > hpa.max_replicas:
            errs.append(FieldError.invalid(join_path(path, "componentSpecs", j, "hpaSpec", "minReplicas"),
                                           hpa.min_replicas, "must not be greater than maxReplicas"))
    if predictor.explainer:
        errs.append(FieldError.forbidden(join_path(path, "explainer"), "explainers are not served locally"))
    graph = predictor.graph
    if protocol in ("v2", "kfserving") and (graph.children or graph.implementation not in PREPACKAGED_SERVERS):
        errs.append(FieldError.forbidden(join_path(path, "graph"),
                                         f"protocol {protocol} serves one prepackaged model (a graph of one unit with "
                                         "a prepackaged implementation) locally; graphs speak the seldon protocol"))
    seen: dict[str, str] = {}
    for unit_path, unit in predictor.graph.walk(join_path(path, "graph")):
        if not unit.name:
            errs.append(FieldError.required(join_path(unit_path, "name")))
        elif unit.name in seen:
            errs.append(FieldError.duplicate(join_path(unit_path, "name"), unit.name))
            errs.append(FieldError.invalid(join_path(unit_path, "name"), unit.name,
                                           f"also the name of {seen[unit.name]}: a graph is a tree, and a unit "
                                           "reached twice would make a cycle"))
        else:
            seen[unit.name] = unit_path
        errs.extend(_check_unit(unit_path, unit, containers, protocol))
    return errs


def _check_unit(path: str, unit: PredictiveUnit, containers: set[str], protocol: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if unit.logger is not None:
        errs.extend(unit.logger.check(join_path(path, "logger")))
    if unit.type is not None and unit.type not in UNIT_TYPES:
        errs.append(FieldError.not_supported(join_path(path, "type"), unit.type, UNIT_TYPES))
        return errs
    kind = unit.unit_type()
    impl = unit.implementation
    children = unit.children or []
    if impl in (None, "", "UNKNOWN_IMPLEMENTATION"):
        remote = unit.endpoint is not None and unit.endpoint.service_host
        if unit.name and unit.name not in containers and not remote:
            errs.append(FieldError.invalid(
                join_path(path, "name"), unit.name,
                "names no container of the predictor's componentSpecs, has no implementation "
                f"(built-ins: {', '.join(BUILTIN_IMPLEMENTATIONS)}; prepackaged servers: "
                f"{', '.join(_available_servers())}) and no endpoint.service_host to call"))
    elif impl in BUILTIN_IMPLEMENTATIONS:
        if kind != BUILTIN_IMPLEMENTATIONS[impl]:
            errs.append(FieldError.invalid(join_path(path, "type"), kind,
                                           f"{impl} is a {BUILTIN_IMPLEMENTATIONS[impl]}"))
        if impl == "RANDOM_ABTEST" and len(children) != 2:
            errs.append(FieldError.invalid(join_path(path, "children"), len(children),
                                           "RANDOM_ABTEST routes between exactly 2 children"))
    elif impl in PREPACKAGED_SERVERS or impl in _UNAVAILABLE_SERVERS:
        if impl not in _available_servers():
            errs.append(FieldError.not_supported(join_path(path, "implementation"), impl,
                                                 [*BUILTIN_IMPLEMENTATIONS, *_available_servers()]))
        elif not unit.model_uri:
            errs.append(FieldError.required(join_path(path, "modelUri"), f"{impl} serves the model at modelUri"))
        else:
            try:
                parse_storage_uri(unit.model_uri)
            except StorageUriError as exc:
                errs.append(FieldError.invalid(join_path(path, "modelUri"), unit.model_uri, str(exc)))
        if kind != "MODEL":
            errs.append(FieldError.invalid(join_path(path, "type"), kind, f"{impl} is a MODEL"))
    else:
        errs.append(FieldError.not_supported(join_path(path, "implementation"), impl,
                                             [*BUILTIN_IMPLEMENTATIONS, *_available_servers()]))
    if kind in ("ROUTER", "COMBINER") and not children:
        errs.append(FieldError.required(join_path(path, "children"), f"a {kind} needs children"))
    if kind not in ("ROUTER", "COMBINER") and len(children) > 1:
        errs.append(FieldError.invalid(join_path(path, "children"), len(children),
                                       f"a {kind} passes its output to one child; only a ROUTER or COMBINER "
                                       "has several"))
    if protocol in ("tensorflow", "v2") and kind in ("ROUTER", "COMBINER"):
        errs.append(FieldError.forbidden(join_path(path, "type"),
                                         f"protocol {protocol} runs single models and transformer chains only; "
                                         "routing and combining need the seldon protocol"))
    for i, method in enumerate(unit.methods or []):
        if method not in METHODS:
            errs.append(FieldError.not_supported(join_path(path, "methods", i), method, METHODS))
    if unit.endpoint is not None and unit.endpoint.type == "GRPC":
        errs.append(FieldError.forbidden(join_path(path, "endpoint", "type"), "units are called over REST locally"))
    for i, param in enumerate(unit.parameters or []):
        where = join_path(path, "parameters", i)
        if param.type not in PARAMETER_TYPES:
            errs.append(FieldError.not_supported(join_path(where, "type"), param.type, PARAMETER_TYPES))
            continue
        try:
            parameter_value(param.type, param.value)
        except ValueError as exc:
            errs.append(FieldError.invalid(join_path(where, "value"), param.value, str(exc)))
    return errs


def _available_servers() -> list[str]:
    """The prepackaged servers this machine serves: those whose model runtime is registered."""
    from trimaran.serving.runtimes import runtime_names  # the model runtimes, loaded on first check

    installed = set(runtime_names())
    return [name for name, runtime in PREPACKAGED_SERVERS.items() if runtime is None or runtime in installed]


def parameter_value(kind: str, text: str) -> Any:
    """A parameter's value as its type says (Seldon's wrapper does the same before calling the class)."""
    if kind == "INT":
        return int(text)
    if kind in ("FLOAT", "DOUBLE"):
        return float(text)
    if kind == "BOOL":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError("a BOOL is true or false")
        return text.lower() in ("true", "1")
    if kind == "JSON":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    return text


def predictor_replicas(spec: dict[str, Any], predictor: dict[str, Any]) -> int:
    """Seldon's precedence: ``spec.replicas`` < ``predictors[].replicas`` < ``componentSpecs[].replicas``
    (the largest a component asks for, since all of a predictor's units run in one executor here), 1 by default."""
    component = [c["replicas"] for c in predictor.get("componentSpecs") or [] if c.get("replicas") is not None]
    if component:
        return max(component)
    if predictor.get("replicas") is not None:
        return int(predictor["replicas"])
    if spec.get("replicas") is not None:
        return int(spec["replicas"])
    return 1
