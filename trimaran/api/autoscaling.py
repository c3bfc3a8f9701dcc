"""autoscaling/v2 HorizontalPodAutoscaler, defaulted and validated as the Kubernetes API server does.

Beyond upstream, the target must be a kind this API serves with a scale subresource: a cluster
accepts any reference and fails later in the controller, here nothing else could ever scale it, so
``spec.scaleTargetRef.kind`` is refused at apply with the reason. Only ``Resource`` metrics (cpu,
memory) are measured on this machine; ``Pods``, ``Object``, ``External`` and ``ContainerResource``
metrics are accepted as upstream does and reported unsupported in the ``ScalingActive`` condition.

``autoscaling/v1`` (what ``kubectl autoscale`` sends: ``targetCPUUtilizationPercentage``) is served too.
Versions of a kind are stored as written here (no conversion), so the controller reads either through
`metrics_of`.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

from typing import Any

from pydantic import Field

from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, Condition, Int32, LabelSelector, Resource
from trimaran.api.printers import AGE, PrinterColumn
from trimaran.api.quantity import parse_quantity

__all__ = ["API_VERSION", "API_VERSION_V1", "HPA_COLUMNS", "HorizontalPodAutoscaler", "HorizontalPodAutoscalerV1",
           "default_rules", "metrics_of", "scale_target_info", "targets_text"]

API_VERSION = "autoscaling/v2"
API_VERSION_V1 = "autoscaling/v1"
_V1_DEFAULT_CPU_PERCENT = 80
_METRIC_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")
_TARGET_TYPES = ("AverageValue", "Utilization", "Value")
_POLICY_TYPES = ("Percent", "Pods")
_SELECT_POLICIES = ("Disabled", "Max", "Min")
_MAX_STABILIZATION_SECONDS = 3600
_MAX_PERIOD_SECONDS = 1800


class CrossVersionObjectReference(ApiModel):
    kind: str | None = None
    name: str | None = None
    api_version: str | None = None


class MetricTarget(ApiModel):
    type: str | None = None
    value: str | int | None = None
    average_value: str | int | None = None
    average_utilization: Int32 | None = None


class MetricIdentifier(ApiModel):
    name: str | None = None
    selector: LabelSelector | None = None


class ResourceMetricSource(ApiModel):
    name: str | None = None
    target: MetricTarget | None = None


class ContainerResourceMetricSource(ResourceMetricSource):
    container: str | None = None


class PodsMetricSource(ApiModel):
    metric: MetricIdentifier | None = None
    target: MetricTarget | None = None


class ObjectMetricSource(ApiModel):
    described_object: CrossVersionObjectReference | None = None
    metric: MetricIdentifier | None = None
    target: MetricTarget | None = None


class ExternalMetricSource(ApiModel):
    metric: MetricIdentifier | None = None
    target: MetricTarget | None = None


class MetricSpec(ApiModel):
    type: str | None = None
    resource: ResourceMetricSource | None = None
    container_resource: ContainerResourceMetricSource | None = None
    pods: PodsMetricSource | None = None
    object: ObjectMetricSource | None = None
    external: ExternalMetricSource | None = None


class HPAScalingPolicy(ApiModel):
    type: str
    value: Int32
    period_seconds: Int32


class HPAScalingRules(ApiModel):
    stabilization_window_seconds: Int32 | None = None
    select_policy: str | None = None
    policies: list[HPAScalingPolicy] | None = None


class HorizontalPodAutoscalerBehavior(ApiModel):
    scale_up: HPAScalingRules | None = None
    scale_down: HPAScalingRules | None = None


class HorizontalPodAutoscalerSpec(ApiModel):
    scale_target_ref: CrossVersionObjectReference | None = None
    min_replicas: Int32 | None = None
    max_replicas: Int32 | None = None
    metrics: list[MetricSpec] | None = None
    behavior: HorizontalPodAutoscalerBehavior | None = None


class HorizontalPodAutoscalerStatus(ApiModel):
    observed_generation: int | None = None
    last_scale_time: str | None = None
    current_replicas: Int32 | None = None
    desired_replicas: Int32 | None = None
    current_metrics: list[dict[str, Any]] | None = None
    conditions: list[Condition] | None = None


def default_rules(direction: str) -> dict[str, Any]:
    """Upstream's rules for a direction the spec leaves out: up at once by 4 pods or 100 % per 15 s
    (the larger), down by up to 100 % per 15 s after the highest recommendation of 300 s."""
    if direction == "scaleUp":
        return {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                             {"type": "Percent", "value": 100, "periodSeconds": 15}]}
    return {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def scale_target_info(ref: dict[str, Any]) -> Any:
    """The registered kind ``ref`` names (its ``apiVersion`` and ``kind``; without an apiVersion, the
    kind by name). Raises LookupError with kube-apiserver's words when no such kind is served."""
    from trimaran.api.kinds import for_object, lookup  # the registry imports this module

    kind, api_version = ref.get("kind") or "", ref.get("apiVersion")
    info = for_object(api_version, kind) if api_version else lookup(kind)
    if info.kind != kind:  # lookup also takes plurals and short names; a reference names the kind
        raise LookupError(f'no matches for kind "{kind}"')
    return info


def _check_quantity(path: str, value: str | int | None) -> list[FieldError]:
    if value is None:
        return []
    try:
        amount = parse_quantity(value)
    except ValueError as exc:  # QuantityError, with Kubernetes' words
        return [FieldError.invalid(path, value, str(exc))]
    return [FieldError.invalid(path, value, "must be positive")] if amount <= 0 else []


def _check_target(path: str, target: MetricTarget | None, resource: bool) -> list[FieldError]:
    if target is None:
        return [FieldError.required(path, "must specify a metric target")]
    errs: list[FieldError] = []
    if not target.type:
        errs.append(FieldError.required(join_path(path, "type"), "must specify a metric target type"))
    elif target.type not in _TARGET_TYPES:
        errs.append(FieldError.not_supported(join_path(path, "type"), target.type, _TARGET_TYPES))
    errs += _check_quantity(join_path(path, "value"), target.value)
    errs += _check_quantity(join_path(path, "averageValue"), target.average_value)
    if target.average_utilization is not None and target.average_utilization < 1:
        errs.append(FieldError.invalid(join_path(path, "averageUtilization"), target.average_utilization,
                                       "must be greater than 0"))
    if resource:
        if target.average_utilization is None and target.average_value is None:
            errs.append(FieldError.required(join_path(path, "averageUtilization"),
                                            "must set either a target raw value or a target utilization"))
        elif target.average_utilization is not None and target.average_value is not None:
            errs.append(FieldError.forbidden(join_path(path, "averageValue"),
                                             "may not set both a target raw value and a target utilization"))
    elif target.type == "Value" and target.value is None:
        errs.append(FieldError.required(join_path(path, "value"), "must set either a target value or averageValue"))
    elif target.type == "AverageValue" and target.average_value is None:
        errs.append(FieldError.required(join_path(path, "averageValue"),
                                        "must set either a target value or averageValue"))
    return errs


def _check_metric(path: str, metric: MetricSpec) -> list[FieldError]:
    sources = {"Resource": ("resource", metric.resource), "ContainerResource":
               ("containerResource", metric.container_resource), "Pods": ("pods", metric.pods),
               "Object": ("object", metric.object), "External": ("external", metric.external)}
    errs: list[FieldError] = []
    if not metric.type:
        errs.append(FieldError.required(join_path(path, "type"), "must specify a metric source type"))
    elif metric.type not in _METRIC_TYPES:
        errs.append(FieldError.not_supported(join_path(path, "type"), metric.type, _METRIC_TYPES))
    for type_name, (field, source) in sources.items():
        if source is not None and type_name != metric.type:
            errs.append(FieldError.forbidden(join_path(path, field), "must populate the given metric source only"))
    if metric.type not in sources:
        return errs
    field, source = sources[metric.type]
    if source is None:
        return [*errs, FieldError.required(join_path(path, field), "must populate information for the given "
                                                                   "metric source")]
    source_path = join_path(path, field)
    if isinstance(source, ResourceMetricSource):
        if not source.name:
            errs.append(FieldError.required(join_path(source_path, "name"), "must specify a resource name"))
        if isinstance(source, ContainerResourceMetricSource) and not source.container:
            errs.append(FieldError.required(join_path(source_path, "container"), "must specify a container"))
        return errs + _check_target(join_path(source_path, "target"), source.target, resource=True)
    if isinstance(source, ObjectMetricSource):
        ref = source.described_object
        if ref is None or not ref.kind:
            errs.append(FieldError.required(join_path(source_path, "describedObject", "kind")))
        if ref is None or not ref.name:
            errs.append(FieldError.required(join_path(source_path, "describedObject", "name")))
    if source.metric is None or not source.metric.name:
        errs.append(FieldError.required(join_path(source_path, "metric", "name"), "must specify a metric name"))
    return errs + _check_target(join_path(source_path, "target"), source.target, resource=False)


def _check_rules(path: str, rules: HPAScalingRules | None) -> list[FieldError]:
    if rules is None:
        return []
    errs: list[FieldError] = []
    window = rules.stabilization_window_seconds
    if window is not None and window < 0:
        errs.append(FieldError.invalid(join_path(path, "stabilizationWindowSeconds"), window,
                                       "must be greater than or equal to zero"))
    elif window is not None and window > _MAX_STABILIZATION_SECONDS:
        errs.append(FieldError.invalid(join_path(path, "stabilizationWindowSeconds"), window,
                                       f"must be less than or equal to {_MAX_STABILIZATION_SECONDS}"))
    if rules.select_policy is not None and rules.select_policy not in _SELECT_POLICIES:
        errs.append(FieldError.not_supported(join_path(path, "selectPolicy"), rules.select_policy, _SELECT_POLICIES))
    if not rules.policies:
        errs.append(FieldError.required(join_path(path, "policies"), "must specify at least one Policy"))
    for i, policy in enumerate(rules.policies or []):
        at = join_path(path, "policies", i)
        if policy.type not in _POLICY_TYPES:
            errs.append(FieldError.not_supported(join_path(at, "type"), policy.type, _POLICY_TYPES))
        if policy.value <= 0:
            errs.append(FieldError.invalid(join_path(at, "value"), policy.value, "must be greater than zero"))
        if policy.period_seconds <= 0:
            errs.append(FieldError.invalid(join_path(at, "periodSeconds"), policy.period_seconds,
                                           "must be greater than zero"))
        elif policy.period_seconds > _MAX_PERIOD_SECONDS:
            errs.append(FieldError.invalid(join_path(at, "periodSeconds"), policy.period_seconds,
                                           f"must be less than or equal to {_MAX_PERIOD_SECONDS}"))
    return errs


class HorizontalPodAutoscaler(Resource):
    """autoscaling/v2 HorizontalPodAutoscaler."""

    spec: HorizontalPodAutoscalerSpec
    status: HorizontalPodAutoscalerStatus | None = None

    def set_defaults(self) -> None:
        """``SetDefaults_HorizontalPodAutoscaler`` of autoscaling/v2: one replica at least, 80 % CPU
        when no metric is named, and a given ``behavior``'s missing rules filled in."""
        spec = self.spec
        if spec.min_replicas is None:
            spec.min_replicas = 1
        if not spec.metrics:
            spec.metrics = [MetricSpec.model_validate({"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}})]
        if spec.behavior is None:
            return
        for direction in ("scale_up", "scale_down"):
            defaults = HPAScalingRules.model_validate(default_rules("scaleUp" if direction == "scale_up"
                                                                    else "scaleDown"))
            rules = getattr(spec.behavior, direction)
            if rules is None:
                setattr(spec.behavior, direction, defaults)
                continue
            if rules.stabilization_window_seconds is None:
                rules.stabilization_window_seconds = defaults.stabilization_window_seconds
            if rules.select_policy is None:
                rules.select_policy = "Max"
            if rules.policies is None:
                rules.policies = defaults.policies

    def check(self) -> list[FieldError]:
        """``ValidateHorizontalPodAutoscaler``'s rules, then the target's scale subresource."""
        spec = self.spec
        errs = super().check()
        errs += self._check_target()
        errs += _check_replicas(spec.min_replicas, spec.max_replicas)
        for i, metric in enumerate(spec.metrics or []):
            errs += _check_metric(join_path("spec.metrics", i), metric)
        if spec.behavior is not None:
            errs += _check_rules("spec.behavior.scaleUp", spec.behavior.scale_up)
            errs += _check_rules("spec.behavior.scaleDown", spec.behavior.scale_down)
        return errs

    def _check_target(self) -> list[FieldError]:
        return _check_scale_target(self.spec.scale_target_ref)


def _check_replicas(min_replicas: int | None, max_replicas: int | None) -> list[FieldError]:
    errs: list[FieldError] = []
    if min_replicas is not None and min_replicas < 1:
        errs.append(FieldError.invalid("spec.minReplicas", min_replicas, "must be greater than or equal to 1"))
    if max_replicas is None:
        errs.append(FieldError.required("spec.maxReplicas"))
    elif max_replicas < 1:
        errs.append(FieldError.invalid("spec.maxReplicas", max_replicas, "must be greater than 0"))
    elif min_replicas is not None and max_replicas < min_replicas:
        errs.append(FieldError.invalid("spec.maxReplicas", max_replicas,
                                       "must be greater than or equal to `minReplicas`"))
    return errs


def _check_scale_target(ref: CrossVersionObjectReference | None) -> list[FieldError]:
    path = "spec.scaleTargetRef"
    if ref is None:
        return [FieldError.required(path)]
    errs = [] if ref.name else [FieldError.required(join_path(path, "name"))]
    if not ref.kind:
        return [*errs, FieldError.required(join_path(path, "kind"))]
    try:
        info = scale_target_info(ref.to_dict())
    except LookupError:
        version = f' in version "{ref.api_version}"' if ref.api_version else ""
        return [*errs, FieldError.invalid(join_path(path, "kind"), ref.kind,
                                          f'no matches for kind "{ref.kind}"{version}')]
    if info.scale is None:
        from trimaran.api.kinds import all_kinds

        scalable = sorted({k.kind for k in all_kinds() if k.scale is not None})
        errs.append(FieldError.invalid(
            join_path(path, "kind"), ref.kind,
            f"{info.api_version} {info.kind} has no scale subresource, so nothing can set its replicas; "
            f"kinds that have one: {', '.join(scalable)}"))
    return errs


class HorizontalPodAutoscalerSpecV1(ApiModel):
    scale_target_ref: CrossVersionObjectReference | None = None
    min_replicas: Int32 | None = None
    max_replicas: Int32 | None = None
    target_cpu_utilization_percentage: Int32 | None = Field(None, alias="targetCPUUtilizationPercentage")


class HorizontalPodAutoscalerStatusV1(ApiModel):
    observed_generation: int | None = None
    last_scale_time: str | None = None
    current_replicas: Int32 | None = None
    desired_replicas: Int32 | None = None
    current_cpu_utilization_percentage: Int32 | None = Field(None, alias="currentCPUUtilizationPercentage")


class HorizontalPodAutoscalerV1(Resource):
    """autoscaling/v1 HorizontalPodAutoscaler: one CPU utilisation target."""

    spec: HorizontalPodAutoscalerSpecV1
    status: HorizontalPodAutoscalerStatusV1 | None = None

    def set_defaults(self) -> None:
        if self.spec.min_replicas is None:
            self.spec.min_replicas = 1

    def check(self) -> list[FieldError]:
        spec = self.spec
        errs = super().check() + _check_scale_target(spec.scale_target_ref)
        errs += _check_replicas(spec.min_replicas, spec.max_replicas)
        percent = spec.target_cpu_utilization_percentage
        if percent is not None and percent < 1:
            errs.append(FieldError.invalid("spec.targetCPUUtilizationPercentage", percent, "must be greater than 0"))
        return errs


def metrics_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """An HPA's metrics in autoscaling/v2's shape, whichever version it was written in."""
    spec = obj.get("spec") or {}
    if obj.get("apiVersion") != API_VERSION_V1:
        return spec.get("metrics") or []
    percent = spec.get("targetCPUUtilizationPercentage") or _V1_DEFAULT_CPU_PERCENT
    return [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                        "averageUtilization": percent}}}]


_SOURCE_FIELD = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
                 "Object": "object", "External": "external"}


def _metric_text(spec: dict[str, Any], current: dict[str, Any] | None) -> str:
    """One metric of kubectl's TARGETS column: ``cpu: 45%/50%``, ``memory: 100Mi/200Mi``."""
    field = _SOURCE_FIELD.get(spec.get("type") or "", "")
    source = spec.get(field) or {}
    target = source.get("target") or {}
    now = ((current or {}).get(field) or {}).get("current") or {}
    name = source.get("name") or (source.get("metric") or {}).get("name") or ""
    if target.get("averageUtilization") is not None:
        value = f"{now['averageUtilization']}%" if now.get("averageUtilization") is not None else "<unknown>"
        return f"{name}: {value}/{target['averageUtilization']}%"
    wanted = target.get("averageValue") if target.get("averageValue") is not None else target.get("value")
    value = now.get("averageValue") if now.get("averageValue") is not None else now.get("value")
    return f"{name}: {value if value is not None else '<unknown>'}/{wanted}"


def targets_text(obj: dict[str, Any]) -> str:
    """kubectl's TARGETS column: each metric's current value over its target (at most two, then ``+ N more``)."""
    metrics = metrics_of(obj)
    if not metrics:
        return "<none>"
    status = obj.get("status") or {}
    current = status.get("currentMetrics") or []
    if obj.get("apiVersion") == API_VERSION_V1 and status.get("currentCPUUtilizationPercentage") is not None:
        current = [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": status["currentCPUUtilizationPercentage"]}}}]
    parts = [_metric_text(m, current[i] if i < len(current) else None) for i, m in enumerate(metrics[:2])]
    more = f" + {len(metrics) - 2} more..." if len(metrics) > 2 else ""
    return ", ".join(parts) + more


def _reference(obj: dict[str, Any]) -> str:
    ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


# kubectl's columns for `kubectl get hpa`.
HPA_COLUMNS = (
    PrinterColumn("Reference", value=_reference),
    PrinterColumn("Targets", value=targets_text),
    PrinterColumn("MinPods", value=lambda o: str((o.get("spec") or {}).get("minReplicas", "<unset>"))),
    PrinterColumn("MaxPods", "integer", value=lambda o: (o.get("spec") or {}).get("maxReplicas", 0)),
    PrinterColumn("Replicas", "integer", value=lambda o: (o.get("status") or {}).get("currentReplicas", 0)),
    AGE)
