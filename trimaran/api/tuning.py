"""Katib's kinds (``kubeflow.org/v1beta1``): Experiment, Trial and Suggestion.

Defaulting follows Katib's mutating webhook (``experiment_defaults.go``) and validation its
validating webhook (``validator.go``), with field paths on every problem. Beyond the webhook,
search spaces that no algorithm could sample are rejected at apply (``min`` above ``max``,
numbers that do not parse, a ``step`` wider than the range, ...), as are the checks Katib's
suggestion services would make later (grid needs a ``step`` on every double).

Two pure helpers serve the controllers: `trial_parameter_refs` (which trial parameter takes
which search parameter or trial metadata) and `substitute_trial_template` (fill the
``${trialParameters.x}`` placeholders of a trial template)::

    refs = trial_parameter_refs(experiment["spec"])          # {"lr": "learning_rate", ...}
    values = trial_parameter_values(experiment["spec"], {"learning_rate": "0.01"})
    run_spec = substitute_trial_template(template, values, {"name": "exp-abcd1234", "namespace": "ns"})
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import copy
import math
import posixpath
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, PrivateAttr

from trimaran.api.core import Container
from trimaran.api.errors import FieldError, join_path
from trimaran.api.labels import (  # Katib's two re-exported; the others name its defaults' pods
    EXPERIMENT_LABEL,
    JOB_ROLE_LABEL,
    REPLICATED_JOB_NAME_KEY,
    TRIAL_LABEL,
)
from trimaran.api.meta import ApiModel, Condition, Int32, NonNegInt32, Resource, check_labels

__all__ = [
    "ALGORITHMS",
    "API_VERSION",
    "DEFAULT_JOB_FAILURE_CONDITION",
    "DEFAULT_JOB_SUCCESS_CONDITION",
    "DEFAULT_KUBEFLOW_JOB_FAILURE_CONDITION",
    "DEFAULT_KUBEFLOW_JOB_PRIMARY_POD_LABELS",
    "DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION",
    "DEFAULT_METRICS_FILE",
    "DEFAULT_METRICS_FILTER",
    "DEFAULT_PARALLEL_TRIAL_COUNT",
    "DEFAULT_PROMETHEUS_PATH",
    "DEFAULT_PROMETHEUS_PORT",
    "DEFAULT_TFEVENT_DIR",
    "EARLY_STOPPING_ALGORITHMS",
    "EXPERIMENT_LABEL",
    "TRIAL_KINDS",
    "TRIAL_LABEL",
    "AlgorithmSpec",
    "CollectorSpec",
    "EarlyStoppingRule",
    "EarlyStoppingSpec",
    "Experiment",
    "ExperimentSpec",
    "ExperimentStatus",
    "FeasibleSpace",
    "FileSystemPath",
    "FilterSpec",
    "Metric",
    "MetricsCollectorSpec",
    "NameValue",
    "ObjectiveSpec",
    "Observation",
    "OptimalTrial",
    "ParameterSpec",
    "SourceSpec",
    "Suggestion",
    "SuggestionSpec",
    "SuggestionStatus",
    "TrialTemplateError",
    "Trial",
    "TrialAssignment",
    "TrialParameterSpec",
    "TrialSpec",
    "TrialStatus",
    "TrialTemplate",
    "check_trial_spec",
    "is_metadata_reference",
    "resolve_metadata_reference",
    "substitute_trial_template",
    "template_parameter_names",
    "trial_parameter_refs",
    "trial_parameter_values",
]

GROUP = "kubeflow.org"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

# Katib's StdOut collector is a sidecar of this name, whose log KatibClient.get_job_logs reads; here
# the pod carries, under this annotation, the container whose log stands in for it.
METRICS_COLLECTOR_CONTAINER = "metrics-logger-and-collector"
METRICS_LOGS_ANNOTATION = "trimaran.io/metrics-logs-of"

DEFAULT_PARALLEL_TRIAL_COUNT = 3
#: Suggestion algorithms (katib-config ``runtime.suggestions``, without the NAS ones).
ALGORITHMS = (
    "random", "grid", "bayesianoptimization", "tpe", "multivariate-tpe", "cmaes", "sobol", "hyperband", "pbt",
    # Beyond Katib: multi-objective search (see controllers/tuning/records.py: objectives()).
    "nsga2",
)
#: Early-stopping algorithms (katib-config ``runtime.earlyStoppings``).
EARLY_STOPPING_ALGORITHMS = ("medianstop", "asha")

DEFAULT_METRICS_FILE = "/var/log/katib/metrics.log"
DEFAULT_TFEVENT_DIR = "/var/log/katib/tfevent/"
DEFAULT_PROMETHEUS_PATH = "/metrics"
DEFAULT_PROMETHEUS_PORT = 8080
#: The StdOut/File TEXT filter used when ``metricsFormat`` is empty: group 1 name, group 2 value.
DEFAULT_METRICS_FILTER = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"

# GJSON queries on the trial job's object (Katib's constants.go).
DEFAULT_JOB_SUCCESS_CONDITION = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
DEFAULT_JOB_FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
DEFAULT_KUBEFLOW_JOB_FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
DEFAULT_KUBEFLOW_JOB_PRIMARY_POD_LABELS = {JOB_ROLE_LABEL: "master"}
# Katib has no defaults for a JobSet; these read JobSet's own terminal conditions.
DEFAULT_JOBSET_SUCCESS_CONDITION = 'status.conditions.#(type=="Completed")#|#(status=="True")#'
DEFAULT_JOBSET_FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
# Katib's TrainJob defaults: Job's conditions, and the metrics of node 0 (torchrun's rank 0).
DEFAULT_TRAINJOB_PRIMARY_POD_LABELS = {REPLICATED_JOB_NAME_KEY: "node",
                                       "batch.kubernetes.io/job-completion-index": "0"}

#: Kinds a trial may run, with their apiVersions: katib-config's default
#: ``init.controller.trialResources`` plus the MPI operator's MPIJob, the other v1 kinds and JobSet.
TRIAL_KINDS: dict[str, tuple[str, ...]] = {
    "TrainJob": ("trainer.kubeflow.org/v1alpha1",),
    "Job": ("batch/v1",),
    "TFJob": ("kubeflow.org/v1",),
    "PyTorchJob": ("kubeflow.org/v1",),
    "XGBoostJob": ("kubeflow.org/v1",),
    "JAXJob": ("kubeflow.org/v1",),
    "PaddleJob": ("kubeflow.org/v1",),
    "MPIJob": ("kubeflow.org/v1", "kubeflow.org/v2beta1"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2",),
}
# The training operator's kinds among them (Katib's defaults for their conditions and primary pod).
_KUBEFLOW_JOB_KINDS = tuple(kind for kind, versions in TRIAL_KINDS.items() if "kubeflow.org/v1" in versions)

_NAME_MAX = 40
# Patterns are kept as text and compiled on first use (`re` caches them): compiling them all at
# import would cost `import trimaran.api` a few milliseconds for nothing.
_NAME = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_PLACEHOLDER = r"\$\{trialParameters\.(.+?)\}"
_META_REFERENCE = r"\$\{trialSpec\.(.+)\}"
_META_INDEXED = r"(.+)\[(.+)\]"
_META_KEYS = ("Name", "Namespace", "Kind", "APIVersion")
_META_MAPS = ("Labels", "Annotations")
_INT = r"[+-]?[0-9]+"
_FLOAT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


class TrialTemplateError(ValueError):
    """A trial template cannot be rendered (a placeholder or metadata reference has no value)."""


# --- shared parts ------------------------------------------------------------------------------


class NameValue(ApiModel):
    """``{name, value}``: a parameter assignment, an algorithm setting, a metric strategy."""

    name: str
    value: str


class MetricStrategy(ApiModel):
    """Which observed value of a metric ranks trials: its ``min``, ``max`` or ``latest``."""

    name: str
    value: Literal["min", "max", "latest"]


class ObjectiveSpec(ApiModel):
    """What to optimise: one metric, minimised or maximised, optionally until ``goal``."""

    type: Literal["minimize", "maximize"] | None = None
    goal: float | None = None
    objective_metric_name: str | None = None
    additional_metric_names: list[str] | None = None
    metric_strategies: list[MetricStrategy] | None = None


class AlgorithmSpec(ApiModel):
    """A search algorithm by name, with string settings."""

    algorithm_name: str | None = None
    algorithm_settings: list[NameValue] | None = None


class EarlyStoppingSpec(AlgorithmSpec):
    """An early-stopping algorithm by name (``medianstop``), with string settings."""


class EarlyStoppingRule(ApiModel):
    """Stop a trial whose ``name`` metric compares to ``value`` as given, from ``startStep`` on."""

    name: str
    value: str
    comparison: Literal["equal", "less", "greater"]
    start_step: Int32 | None = None


class FileSystemPath(ApiModel):
    """Where a collector reads metrics: a file (TEXT or JSON lines) or a directory (tfevents)."""

    path: str | None = None
    kind: Literal["File", "Directory"] | None = None
    format: Literal["TEXT", "JSON", ""] | None = None


class FilterSpec(ApiModel):
    """Regexes whose group 1 is a metric name and group 2 its value."""

    metrics_format: list[str] | None = None


class HTTPGetAction(ApiModel):
    """core/v1 HTTPGetAction: where a PrometheusMetric collector scrapes."""

    path: str | None = None
    port: int | str | None = None
    host: str | None = None
    scheme: str | None = None
    http_headers: list[dict[str, Any]] | None = None


class SourceSpec(ApiModel):
    """Where metrics come from."""

    http_get: HTTPGetAction | None = None
    file_system_path: FileSystemPath | None = None
    filter: FilterSpec | None = None


class CollectorSpec(ApiModel):
    """Which collector runs. ``None`` is the pre-0.18 name of ``Push``."""

    kind: Literal["StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom", "Push", "None"] | None = None
    custom_collector: Container | None = None


class MetricsCollectorSpec(ApiModel):
    """How a trial's metrics are collected."""

    source: SourceSpec | None = None
    collector: CollectorSpec | None = None


class Metric(ApiModel):
    """One metric of an observation: its min, max and latest values, as strings."""

    name: str
    min: str | None = None
    max: str | None = None
    latest: str | None = None


class Observation(ApiModel):
    """The metrics observed for a trial."""

    metrics: list[Metric] | None = None


# --- Experiment --------------------------------------------------------------------------------


class FeasibleSpace(ApiModel):
    """A parameter's range (``min``, ``max``, optional ``step``) or choices (``list``), all strings."""

    max: str | None = None
    min: str | None = None
    list_: list[str] | None = Field(default=None, alias="list")
    step: str | None = None
    distribution: Literal["uniform", "logUniform", "normal", "logNormal", ""] | None = None


class ParameterSpec(ApiModel):
    """One search-space dimension."""

    name: str | None = None
    parameter_type: Literal["double", "int", "discrete", "categorical"] | None = None
    feasible_space: FeasibleSpace | None = None


class TrialParameterSpec(ApiModel):
    """``${trialParameters.<name>}`` in the template takes the value ``reference`` names."""

    name: str | None = None
    description: str | None = None
    reference: str | None = None


class ConfigMapSource(ApiModel):
    """A trial template kept in a ConfigMap key."""

    config_map_name: str | None = None
    config_map_namespace: str | None = None
    template_path: str | None = None


class TrialTemplate(ApiModel):
    """What each trial runs: ``trialSpec`` (inline) or ``configMap``, with placeholders."""

    retain: bool | None = None
    trial_spec: dict[str, Any] | None = None
    config_map: ConfigMapSource | None = None
    trial_parameters: list[TrialParameterSpec] | None = None
    primary_pod_labels: dict[str, str] | None = None
    primary_container_name: str | None = None
    success_condition: str | None = None
    failure_condition: str | None = None


class ExperimentSpec(ApiModel):
    """An experiment: a search space, an objective, an algorithm, and a trial template."""

    parameters: list[ParameterSpec] | None = None
    objective: ObjectiveSpec | None = None
    algorithm: AlgorithmSpec | None = None
    early_stopping: EarlyStoppingSpec | None = None
    trial_template: TrialTemplate | None = None
    parallel_trial_count: Int32 | None = None
    max_trial_count: Int32 | None = None
    max_failed_trial_count: Int32 | None = None
    metrics_collector_spec: MetricsCollectorSpec | None = None
    nas_config: dict[str, Any] | None = None
    resume_policy: Literal["Never", "LongRunning", "FromVolume", ""] | None = None


class OptimalTrial(ApiModel):
    """The best trial so far: its name, assignments and observation."""

    best_trial_name: str | None = None
    parameter_assignments: list[NameValue] | None = None
    observation: Observation | None = None


class ExperimentStatus(ApiModel):
    """Conditions, the best trial, trial names per state and their counts."""

    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    conditions: list[Condition] | None = None
    current_optimal_trial: OptimalTrial | None = None
    running_trial_list: list[str] | None = None
    pending_trial_list: list[str] | None = None
    failed_trial_list: list[str] | None = None
    succeeded_trial_list: list[str] | None = None
    killed_trial_list: list[str] | None = None
    early_stopped_trial_list: list[str] | None = None
    metrics_unavailable_trial_list: list[str] | None = None
    trials: NonNegInt32 | None = None
    trials_succeeded: NonNegInt32 | None = None
    trials_failed: NonNegInt32 | None = None
    trials_killed: NonNegInt32 | None = None
    trials_pending: NonNegInt32 | None = None
    trials_running: NonNegInt32 | None = None
    trials_early_stopped: NonNegInt32 | None = None
    trial_metrics_unavailable: NonNegInt32 | None = None


_HINTS = (
    (r"spec\.(algorithmName|algorithmSettings)", "spec.algorithm.{}"),
    (r"spec\.(objectiveMetricName|additionalMetricNames|metricStrategies|goal)", "spec.objective.{}"),
    (r"spec\.(trialSpec|trialParameters|primaryContainerName|primaryPodLabels|successCondition|failureCondition"
     r"|configMap)", "spec.trialTemplate.{}"),
    (r"(spec\.parameters\[[0-9]+\])\.(min|max|step|list|distribution)", "{}.feasibleSpace.{}"),
    (r"(spec\.parameters\[[0-9]+\])\.type", "{}.parameterType"),
    (r"spec\.metricsCollector", "spec.metricsCollectorSpec"),
    (r"spec\.metricsCollectorSpec\.(kind|customCollector)", "spec.metricsCollectorSpec.collector.{}"),
    (r"spec\.metricsCollectorSpec\.(fileSystemPath|filter|httpGet)", "spec.metricsCollectorSpec.source.{}"),
)


_EDITABLE_SPEC_FIELDS = ("parallelTrialCount", "maxTrialCount", "maxFailedTrialCount")


class Experiment(Resource):
    """kubeflow.org/v1beta1 Experiment: Katib's hyperparameter search."""

    spec: ExperimentSpec
    status: ExperimentStatus | None = None

    _push_alias: bool = PrivateAttr(default=False)
    _parallel_defaulted: bool = PrivateAttr(default=False)

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """Katib's webhook: once created, only the three trial counts of the spec may change, and a
        completed experiment only when it can be restarted (resumePolicy LongRunning or FromVolume,
        goal not reached)."""
        before, after = old.get("spec") or {}, new.get("spec") or {}
        errs = [
            FieldError.forbidden(f"spec.{field}", "only spec.parallelTrialCount, spec.maxTrialCount and "
                                 "spec.maxFailedTrialCount may be changed after an Experiment is created")
            for field in sorted(set(before) | set(after))
            if field not in _EDITABLE_SPEC_FIELDS and before.get(field) != after.get(field)
        ]
        changed = [field for field in _EDITABLE_SPEC_FIELDS if before.get(field) != after.get(field)]
        ended = {c.get("type"): c.get("reason") for c in (old.get("status") or {}).get("conditions") or []
                 if c.get("status") == "True" and c.get("type") in ("Succeeded", "Failed")}
        if changed and ended:
            policy = before.get("resumePolicy") or "Never"
            if ended.get("Succeeded") == "ExperimentGoalReached":
                detail = "the experiment has reached its goal and cannot be restarted"
            elif policy not in ("LongRunning", "FromVolume"):
                detail = (f"the experiment has completed and its resumePolicy is {policy}: only an experiment "
                          "with resumePolicy LongRunning or FromVolume can be restarted")
            else:
                return errs
            errs += [FieldError.forbidden(f"spec.{field}", detail) for field in changed]
        return errs

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """Katib's rule: a DNS-1035-like label of at most 40 characters (trial names append 9)."""
        errs = []
        if not re.fullmatch(_NAME, name):
            errs.append("name must consist of lower case alphanumeric characters or '-', start with an "
                        "alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or "
                        "'abc-123', regex used for validation is '^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        if len(name) > _NAME_MAX:
            errs.append(f"name must be no more than {_NAME_MAX} characters")
        return errs

    def set_defaults(self) -> None:
        """Katib's ``Experiment.SetDefault``, plus the StdOut collector's file."""
        spec = self.spec
        if spec.parallel_trial_count is None:
            spec.parallel_trial_count = DEFAULT_PARALLEL_TRIAL_COUNT
            self._parallel_defaulted = True
        if not spec.resume_policy:
            spec.resume_policy = "Never"
        if spec.objective is not None:
            _default_metric_strategies(spec.objective)
        if spec.trial_template is not None:
            _default_trial_template(spec.trial_template)
        self._push_alias = _default_metrics_collector(spec)
        for param in spec.parameters or []:
            if param.feasible_space is None:
                continue  # check() reports it; Katib's struct would be empty and fail the same way
            if not param.feasible_space.distribution:
                param.feasible_space.distribution = "uniform"

    def check(self) -> list[FieldError]:
        """Katib's validating webhook, and search spaces no algorithm could sample."""
        spec = self.spec
        errs = super().check()
        errs.extend(self._check_counts())
        errs.extend(_check_objective(spec.objective))
        errs.extend(_check_algorithm("spec.algorithm", spec.algorithm, ALGORITHMS, required=True))
        errs.extend(_check_algorithm_settings(spec))
        errs.extend(_check_algorithm("spec.earlyStopping", spec.early_stopping, EARLY_STOPPING_ALGORITHMS))
        # Katib requires a trialTemplate; Trimaran accepts an experiment without one (the seed's
        # "same as above" example) and leaves it to the controller to report that no trial can run.
        if spec.trial_template is not None:
            errs.extend(_check_trial_template(spec))
        if not spec.parameters and spec.nas_config is None:
            errs.append(FieldError.required("spec.parameters", "spec.parameters or spec.nasConfig must be specified"))
        if spec.parameters and spec.nas_config is not None:
            errs.append(FieldError.forbidden(
                "spec.nasConfig", "only one of spec.parameters and spec.nasConfig can be specified"))
        errs.extend(_check_parameters(spec))
        errs.extend(_check_metrics_collector(spec.metrics_collector_spec))
        return errs

    def _check_counts(self) -> list[FieldError]:
        spec = self.spec
        errs = []
        max_trials, parallel, max_failed = spec.max_trial_count, spec.parallel_trial_count, spec.max_failed_trial_count
        if max_failed is not None and max_failed < 0:
            errs.append(FieldError.invalid("spec.maxFailedTrialCount", max_failed, "should not be less than 0"))
        if max_trials is not None and max_trials <= 0:
            errs.append(FieldError.invalid("spec.maxTrialCount", max_trials, "must be greater than 0"))
        if parallel is not None and parallel <= 0:
            errs.append(FieldError.invalid("spec.parallelTrialCount", parallel, "must be greater than 0"))
        if max_failed is not None and max_trials is not None and max_failed > max_trials:
            errs.append(FieldError.invalid(
                "spec.maxFailedTrialCount", max_failed, "should be less than or equal to spec.maxTrialCount"))
        if parallel is not None and max_trials is not None and parallel > max_trials:
            detail = "should be less than or equal to spec.maxTrialCount"
            if self._parallel_defaulted:
                detail += f" (parallelTrialCount defaults to {DEFAULT_PARALLEL_TRIAL_COUNT}; set it)"
            errs.append(FieldError.invalid("spec.parallelTrialCount", parallel, detail))
        return errs

    def admission_warnings(self) -> list[str]:
        """The deprecated collector name."""
        if self._push_alias:
            return ['spec.metricsCollectorSpec.collector.kind "None" is deprecated (Katib 0.18 renamed it); '
                    'it was stored as "Push"']
        return []

    def unknown_field_hint(self, path: str) -> str | None:
        """Fields commonly written one level too high (or too low)."""
        for pattern, target in _HINTS:
            m = re.fullmatch(pattern, path)
            if m is not None:
                return f'did you mean "{target.format(*m.groups())}"?'
        return None


def _default_metric_strategies(objective: ObjectiveSpec) -> None:
    """Objective metric first, then each additional one: min when minimising, max when maximising."""
    strategy = {"minimize": "min", "maximize": "max"}.get(objective.type or "", "latest")
    strategies = list(objective.metric_strategies or [])
    named = {s.name for s in strategies}
    for name in [objective.objective_metric_name, *(objective.additional_metric_names or [])]:
        if name is not None and name not in named:
            strategies.append(MetricStrategy(name=name, value=strategy))  # type: ignore[arg-type]
            named.add(name)
    objective.metric_strategies = strategies


def _default_trial_template(template: TrialTemplate) -> None:
    """Success/failure conditions (and primary pod labels) for the known job kinds."""
    if template.trial_spec is None:
        return
    kind = template.trial_spec.get("kind")
    if kind == "Job":
        success, failure = DEFAULT_JOB_SUCCESS_CONDITION, DEFAULT_JOB_FAILURE_CONDITION
    elif kind == "TrainJob":
        success, failure = DEFAULT_JOB_SUCCESS_CONDITION, DEFAULT_JOB_FAILURE_CONDITION
        if not template.primary_pod_labels:
            template.primary_pod_labels = dict(DEFAULT_TRAINJOB_PRIMARY_POD_LABELS)
    elif kind in _KUBEFLOW_JOB_KINDS:
        success, failure = DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION, DEFAULT_KUBEFLOW_JOB_FAILURE_CONDITION
        if not template.primary_pod_labels:
            template.primary_pod_labels = dict(DEFAULT_KUBEFLOW_JOB_PRIMARY_POD_LABELS)
            if kind == "MPIJob" and template.trial_spec.get("apiVersion") == "kubeflow.org/v2beta1":
                # The MPI operator labels its launcher "launcher" (v1's launcher is the "master").
                template.primary_pod_labels = {JOB_ROLE_LABEL: "launcher"}
            elif kind == "PaddleJob" and "Master" not in ((template.trial_spec.get("spec") or {})
                                                          .get("paddleReplicaSpecs") or {}):
                # A collective PaddleJob has no master-role pod, and any worker may be rank 0: read them all.
                template.primary_pod_labels = None
    elif kind == "JobSet":
        success, failure = DEFAULT_JOBSET_SUCCESS_CONDITION, DEFAULT_JOBSET_FAILURE_CONDITION
    else:
        return
    if not template.success_condition:
        template.success_condition = success
    if not template.failure_condition:
        template.failure_condition = failure


def _default_metrics_collector(spec: ExperimentSpec) -> bool:
    """Katib's collector defaults; returns whether the ``None`` alias was rewritten to ``Push``."""
    if spec.metrics_collector_spec is None:
        spec.metrics_collector_spec = MetricsCollectorSpec()
    mc = spec.metrics_collector_spec
    if mc.collector is None:
        mc.collector = CollectorSpec()
    alias = mc.collector.kind == "None"
    if not mc.collector.kind or alias:
        mc.collector.kind = "Push" if alias else "StdOut"
    kind = mc.collector.kind
    if kind in ("StdOut", "File", "TensorFlowEvent"):
        if mc.source is None:
            mc.source = SourceSpec()
        if mc.source.file_system_path is None:
            mc.source.file_system_path = FileSystemPath()
        fsp = mc.source.file_system_path
        directory = kind == "TensorFlowEvent"
        if not fsp.kind:
            fsp.kind = "Directory" if directory else "File"
        if not fsp.path:
            fsp.path = DEFAULT_TFEVENT_DIR if directory else DEFAULT_METRICS_FILE
        if not fsp.format and not directory:
            fsp.format = "TEXT"
    elif kind == "PrometheusMetric":
        if mc.source is None:
            mc.source = SourceSpec()
        if mc.source.http_get is None:
            mc.source.http_get = HTTPGetAction()
        if not mc.source.http_get.path:
            mc.source.http_get.path = DEFAULT_PROMETHEUS_PATH
        if mc.source.http_get.port in (None, 0, "", "0"):
            mc.source.http_get.port = DEFAULT_PROMETHEUS_PORT
    return alias


# --- Experiment validation ---------------------------------------------------------------------


def _check_objective(objective: ObjectiveSpec | None) -> list[FieldError]:
    if objective is None:
        return [FieldError.required("spec.objective", "must be specified")]
    errs = []
    if objective.type is None:
        errs.append(FieldError.required("spec.objective.type", "must be minimize or maximize"))
    if not objective.objective_metric_name:
        errs.append(FieldError.required("spec.objective.objectiveMetricName", "must be specified"))
    for i, name in enumerate(objective.additional_metric_names or []):
        if name == objective.objective_metric_name:
            errs.append(FieldError.invalid(join_path("spec.objective.additionalMetricNames", i), name,
                                           "should not contain spec.objective.objectiveMetricName"))
    return errs


def _check_algorithm(
    path: str, spec: AlgorithmSpec | None, known: tuple[str, ...], *, required: bool = False
) -> list[FieldError]:
    if spec is None:
        return [FieldError.required(path, "must be specified")] if required else []
    name_path = join_path(path, "algorithmName")
    if not spec.algorithm_name:
        return [FieldError.required(name_path, "must be specified")]
    if spec.algorithm_name not in known:
        return [FieldError.not_supported(name_path, spec.algorithm_name, known)]
    return []


def _check_algorithm_settings(spec: ExperimentSpec) -> list[FieldError]:
    """Each algorithm's settings by Katib's names and rules (Katib's ValidateAlgorithmSettings,
    which it only calls once the Suggestion runs; here a bad setting is refused at apply), and pbt's
    need for ``resumePolicy: FromVolume``: its trials' checkpoints live in the experiment's volume,
    which only FromVolume gives it."""
    # Imported here: `import trimaran.api` must stay light (the CLI imports it on every call).
    from trimaran.tuning import get_algorithm
    from trimaran.tuning.early_stopping import get_early_stopper
    from trimaran.tuning.errors import TuningError

    errs: list[FieldError] = []
    if spec.algorithm is not None and spec.algorithm.algorithm_name == "pbt" and spec.resume_policy != "FromVolume":
        errs.append(FieldError.invalid("spec.resumePolicy", spec.resume_policy,
                                       'must be "FromVolume" when spec.algorithm.algorithmName is pbt (the '
                                       "trials' checkpoints live in the experiment's volume)"))
    for path, algorithm, known, build in (
            ("spec.algorithm", spec.algorithm, ALGORITHMS, get_algorithm),
            ("spec.earlyStopping", spec.early_stopping, EARLY_STOPPING_ALGORITHMS, get_early_stopper)):
        if algorithm is None or algorithm.algorithm_name not in known:
            continue  # _check_algorithm reports it
        settings = algorithm.algorithm_settings or []
        base = join_path(path, "algorithmSettings")
        # objective_types is read by the experiment controller (several objectives), not the sampler.
        values = {s.name: s.value for s in settings if s.name != "objective_types"}
        try:
            build(algorithm.algorithm_name, values)
        except TuningError as exc:
            where = next((i for i, s in enumerate(settings) if f'setting "{s.name}"' in str(exc)), None)
            if where is None:
                errs.append(FieldError.required(base, str(exc)))
            else:
                errs.append(FieldError.invalid(join_path(base, where, "value"), settings[where].value, str(exc)))
    return errs


def _number(text: str, integer: bool) -> float | None:
    """The value of a feasible-space bound, or None when it is not a (whole) number."""
    if not re.fullmatch(_INT if integer else _FLOAT, text.strip()):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


# `trimaran.tuning._space`'s tolerance for a range that is a whole number of steps within rounding.
_GRID_TOL = Decimal("1e-9")


def _exact(text: str) -> Decimal:
    """A bound or step exactly as written: in binary floating point 0.6 - 0.4 is less than 0.2, so
    ranges and steps are compared, and grid points counted, in decimal (as `trimaran.tuning._space`
    enumerates them). ``text`` has passed `_number`."""
    return Decimal(text.strip())


def _decimal_text(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def _check_parameters(spec: ExperimentSpec) -> list[FieldError]:
    """Each parameter must be samplable; grid also needs steps and enough points."""
    errs: list[FieldError] = []
    grid = spec.algorithm is not None and spec.algorithm.algorithm_name == "grid"
    seen: set[str] = set()
    grid_points: int | None = 1
    for i, param in enumerate(spec.parameters or []):
        path = join_path("spec.parameters", i)
        if not param.name:
            errs.append(FieldError.required(join_path(path, "name")))
        elif param.name in seen:
            errs.append(FieldError.duplicate(join_path(path, "name"), param.name))
        else:
            seen.add(param.name)
        param_errs, points = _check_parameter(path, param, grid)
        errs.extend(param_errs)
        grid_points = None if points is None or grid_points is None else grid_points * points
    if grid and not errs and grid_points is not None and spec.max_trial_count is not None:
        if spec.max_trial_count > grid_points:
            errs.append(FieldError.invalid(
                "spec.maxTrialCount", spec.max_trial_count,
                f"must not be greater than the number of grid points ({grid_points}) when "
                "spec.algorithm.algorithmName is grid"))
    return errs


def _check_parameter(path: str, param: ParameterSpec, grid: bool) -> tuple[list[FieldError], int | None]:
    """Errors of one parameter, and its number of grid points (None when unknown)."""
    ptype = param.parameter_type
    fs = param.feasible_space
    fs_path = join_path(path, "feasibleSpace")
    if ptype is None:
        return [FieldError.required(join_path(path, "parameterType"),
                                    "must be one of double, int, discrete, categorical")], None
    if fs is None or (fs.min, fs.max, fs.step, fs.list_) == (None, None, None, None):
        return [FieldError.required(fs_path, "feasibleSpace must be specified")], None
    errs: list[FieldError] = []
    if ptype in ("discrete", "categorical"):
        for key, value in (("min", fs.min), ("max", fs.max), ("step", fs.step)):
            if value:
                errs.append(FieldError.forbidden(join_path(fs_path, key),
                                                 f"feasibleSpace .max, .min and .step is not supported for "
                                                 f"parameterType: {ptype}"))
        if not fs.list_:
            errs.append(FieldError.required(join_path(fs_path, "list"),
                                            f"must be specified for parameterType: {ptype}"))
        return errs, len(fs.list_ or []) or None
    integer = ptype == "int"
    word = "an integer" if integer else "a number"
    if fs.list_:
        errs.append(FieldError.invalid(join_path(fs_path, "list"), fs.list_,
                                       f"feasibleSpace.list is not supported for parameterType: {ptype}"))
    bounds: dict[str, float] = {}
    for key, text in (("min", fs.min), ("max", fs.max)):
        if not text:
            errs.append(FieldError.required(join_path(fs_path, key), f"must be specified for parameterType: {ptype}"))
            continue
        value = _number(text, integer)
        if value is None:
            errs.append(FieldError.invalid(join_path(fs_path, key), text, f"must be {word}"))
        else:
            bounds[key] = value
    lo, hi = bounds.get("min"), bounds.get("max")
    if lo is not None and hi is not None and lo > hi:
        errs.append(FieldError.invalid(join_path(fs_path, "max"), fs.max, f'must be greater than min "{fs.min}"'))
        hi = None
    step: float | None = None
    if fs.step:
        step = _number(fs.step, integer)
        if step is None:
            errs.append(FieldError.invalid(join_path(fs_path, "step"), fs.step, f"must be {word}"))
        elif step <= 0:
            errs.append(FieldError.invalid(join_path(fs_path, "step"), fs.step, "must be greater than 0"))
            step = None
        elif lo is not None and hi is not None and _exact(fs.step) > _exact(fs.max) - _exact(fs.min):
            width = _decimal_text(_exact(fs.max) - _exact(fs.min))
            errs.append(FieldError.invalid(join_path(fs_path, "step"), fs.step,
                                           f"must not be larger than max - min ({width})"))
            step = None
    elif grid and not integer:
        errs.append(FieldError.required(join_path(fs_path, "step"),
                                        "must be specified for parameterType double when "
                                        "spec.algorithm.algorithmName is grid"))
    if fs.distribution in ("logUniform", "logNormal") and lo is not None and lo <= 0:
        errs.append(FieldError.invalid(join_path(fs_path, "min"), fs.min,
                                       f"must be greater than 0 for distribution {fs.distribution}"))
    if errs or lo is None or hi is None:
        return errs, None
    if integer:
        return errs, int(hi - lo) // int(step or 1) + 1
    if step is None:
        return errs, None
    # The same count as the grid's enumeration (`Parameter.grid_values`), tolerance included.
    return errs, int((_exact(fs.max) - _exact(fs.min)) / _exact(fs.step) + _GRID_TOL) + 1


def _check_trial_template(spec: ExperimentSpec) -> list[FieldError]:
    """Katib's ``validateTrialTemplate``, located per field."""
    template = spec.trial_template
    assert template is not None
    base = "spec.trialTemplate"
    errs: list[FieldError] = []
    if not template.primary_container_name:
        errs.append(FieldError.required(join_path(base, "primaryContainerName"), "must be specified"))
    # A trialSpec of an unsupported kind gets no default conditions; its kind error says why.
    unsupported = template.trial_spec is not None and template.trial_spec.get("kind") not in tuple(TRIAL_KINDS)
    for key, value in (("successCondition", template.success_condition),
                       ("failureCondition", template.failure_condition)):
        if not value and not unsupported:
            errs.append(FieldError.required(join_path(base, key), "successCondition and failureCondition must be "
                                            "specified (they are defaulted only for a trialSpec of a known kind)"))
    errs.extend(check_labels(join_path(base, "primaryPodLabels"), template.primary_pod_labels))
    if template.trial_spec is None and template.config_map is None:
        errs.append(FieldError.required(join_path(base, "trialSpec"), "spec.trialTemplate.trialSpec or "
                                        "spec.trialTemplate.configMap must be specified"))
    elif template.trial_spec is not None and template.config_map is not None:
        errs.append(FieldError.forbidden(join_path(base, "configMap"),
                                         "only one of spec.trialTemplate.trialSpec or spec.trialTemplate.configMap "
                                         "can be specified"))
    elif template.config_map is not None:
        cm = template.config_map
        for key, value in (("configMapName", cm.config_map_name), ("configMapNamespace", cm.config_map_namespace),
                           ("templatePath", cm.template_path)):
            if not value:
                errs.append(FieldError.required(join_path(base, "configMap", key), "must be specified"))
    if template.trial_parameters is None:
        errs.append(FieldError.required(join_path(base, "trialParameters"), "must be specified"))
    else:
        errs.extend(_check_trial_parameters(spec, template.trial_parameters))
    if template.trial_spec is not None:
        declared = [p.name for p in template.trial_parameters or [] if p.name]
        errs.extend(check_trial_spec(template.trial_spec, declared, template.primary_container_name))
    return errs


def _check_trial_parameters(spec: ExperimentSpec, trial_parameters: list[TrialParameterSpec]) -> list[FieldError]:
    base = "spec.trialTemplate.trialParameters"
    parameter_names = [p.name for p in spec.parameters or [] if p.name]
    errs: list[FieldError] = []
    names: set[str] = set()
    references: set[str] = set()
    for i, tp in enumerate(trial_parameters):
        path = join_path(base, i)
        if not tp.name:
            errs.append(FieldError.required(join_path(path, "name")))
        elif "{" in tp.name or "}" in tp.name:
            errs.append(FieldError.invalid(join_path(path, "name"), tp.name, "must not contain '{' or '}'"))
        elif tp.name in names:
            errs.append(FieldError.duplicate(join_path(path, "name"), tp.name))
        else:
            names.add(tp.name)
        if not tp.reference:
            errs.append(FieldError.required(join_path(path, "reference")))
            continue
        if tp.reference in references:
            errs.append(FieldError.duplicate(join_path(path, "reference"), tp.reference))
            continue
        references.add(tp.reference)
        # As Katib: references are checked against spec.parameters only when there are some (NAS
        # experiments reference the NAS algorithm's outputs instead).
        if parameter_names and tp.reference not in parameter_names and not is_metadata_reference(tp.reference):
            shown = ", ".join(f'"{n}"' for n in parameter_names)
            errs.append(FieldError.invalid(
                join_path(path, "reference"), tp.reference,
                f"must be the name of one of spec.parameters ({shown}) or a trial metadata reference: "
                "${trialSpec.Name}, ${trialSpec.Namespace}, ${trialSpec.Kind}, ${trialSpec.APIVersion}, "
                "${trialSpec.Labels[<key>]}, ${trialSpec.Annotations[<key>]}"))
    return errs


def _placeholders(node: Any, path: str, out: list[tuple[str, str, str]]) -> None:
    """(path, text, name) of every ``${trialParameters.<name>}`` in strings and keys under `node`."""
    if isinstance(node, str):
        out.extend((path, node, m.group(1)) for m in re.finditer(_PLACEHOLDER, node))
    elif isinstance(node, dict):
        for key, value in node.items():
            key_path = join_path(path, str(key))
            if isinstance(key, str):
                out.extend((key_path, key, m.group(1)) for m in re.finditer(_PLACEHOLDER, key))
            _placeholders(value, key_path, out)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _placeholders(item, join_path(path, i), out)


def template_parameter_names(trial_spec: Any) -> list[str]:
    """Names of the ``${trialParameters.<name>}`` placeholders in a template, in order, once each."""
    found: list[tuple[str, str, str]] = []
    _placeholders(trial_spec, "", found)
    return list(dict.fromkeys(name for _, _, name in found))


def _pod_containers(trial_spec: dict[str, Any]) -> list[str] | None:
    """Container names of the trial's pod templates, or None when the kind's layout is unknown."""

    def names(template: Any) -> list[str]:
        pod = template.get("spec") if isinstance(template, dict) else None
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if not isinstance(containers, list):
            return []
        return [c["name"] for c in containers if isinstance(c, dict) and isinstance(c.get("name"), str)]

    spec = trial_spec.get("spec")
    if not isinstance(spec, dict):
        return []
    kind = trial_spec.get("kind")
    if kind == "Job":
        return names(spec.get("template"))
    if kind == "TrainJob":
        return None  # its pods' containers are its runtime's, read when the trial's job is made
    if kind == "JobSet":
        rjobs = spec.get("replicatedJobs")
        return list(dict.fromkeys(
            name for rjob in (rjobs if isinstance(rjobs, list) else []) if isinstance(rjob, dict)
            for name in names(((rjob.get("template") or {}).get("spec") or {}).get("template"))))
    if kind in _KUBEFLOW_JOB_KINDS:
        out: list[str] = []
        for key, replicas in spec.items():
            if isinstance(key, str) and key.endswith("ReplicaSpecs") and isinstance(replicas, dict):
                for replica in replicas.values():
                    if isinstance(replica, dict):
                        out.extend(names(replica.get("template")))
        return list(dict.fromkeys(out))
    return None


def check_trial_spec(
    trial_spec: dict[str, Any],
    declared: list[str],
    primary_container_name: str | None,
    *,
    path: str = "spec.trialTemplate.trialSpec",
    parameters_path: str = "spec.trialTemplate.trialParameters",
    container_path: str = "spec.trialTemplate.primaryContainerName",
) -> list[FieldError]:
    """The rules for a trial template (inline, or read from a ConfigMap by a controller):
    apiVersion and kind of a supported trial kind, no metadata.name/namespace, every
    ``${trialParameters.x}`` declared in `declared` (trial parameter names) and every declared
    name used, and `primary_container_name` naming a container of the trial's pods. The paths
    say where each part sits, for the messages.
    """
    errs: list[FieldError] = []
    api_version, kind = trial_spec.get("apiVersion"), trial_spec.get("kind")
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if not isinstance(value, str) or not value:
            errs.append(FieldError.required(join_path(path, key), "APIVersion and Kind in spec.trialTemplate "
                                            "must be specified"))
    if isinstance(kind, str) and kind:
        expected = TRIAL_KINDS.get(kind)
        if expected is None:
            errs.append(FieldError.not_supported(join_path(path, "kind"), kind, list(TRIAL_KINDS)))
        elif isinstance(api_version, str) and api_version and api_version not in expected:
            errs.append(FieldError.not_supported(join_path(path, "apiVersion"), api_version, list(expected)))
    metadata = trial_spec.get("metadata")
    if isinstance(metadata, dict):
        for key in ("name", "namespace"):
            if metadata.get(key):
                errs.append(FieldError.forbidden(join_path(path, "metadata", key), "metadata.name and "
                                                 "metadata.namespace in spec.trialTemplate must be omitted"))
    found: list[tuple[str, str, str]] = []
    _placeholders(trial_spec, path, found)
    declared_set = set(declared)
    for where, text, name in found:
        if name not in declared_set:
            errs.append(FieldError.invalid(where, text, f'parameter "{name}" in spec.trialTemplate not found in '
                                           "spec.trialTemplate.trialParameters"))
    used = {name for _, _, name in found}
    for i, name in enumerate(declared):
        if name not in used:
            errs.append(FieldError.invalid(join_path(parameters_path, i, "name"), name,
                                           f"parameter name: {name} in spec.trialParameters not found in "
                                           "spec.trialTemplate"))
    if primary_container_name:
        containers = _pod_containers(trial_spec)
        if containers is not None and primary_container_name not in containers:
            shown = ", ".join(f'"{c}"' for c in containers) or "none"
            errs.append(FieldError.invalid(
                container_path, primary_container_name,
                f"must be the name of a container of the trial's pods (containers: {shown})"))
    return errs


def _check_metrics_collector(mc: MetricsCollectorSpec | None) -> list[FieldError]:
    """Katib's ``validateMetricsCollector``; filters are checked for every collector kind."""
    if mc is None or mc.collector is None:
        return []
    base = "spec.metricsCollectorSpec"
    src = join_path(base, "source")
    kind = mc.collector.kind
    source = mc.source or SourceSpec()
    fsp = source.file_system_path
    errs: list[FieldError] = []
    filters = source.filter.metrics_format if source.filter is not None else None
    if kind in ("File", "TensorFlowEvent", "Custom") and fsp is not None:
        wanted = {"File": ("File",), "TensorFlowEvent": ("Directory",)}.get(kind, ("File", "Directory"))
        if fsp.kind not in wanted:
            errs.append(FieldError.not_supported(join_path(src, "fileSystemPath", "kind"), fsp.kind, wanted))
        if not fsp.path:
            errs.append(FieldError.required(join_path(src, "fileSystemPath", "path"),
                                            "file path where metrics file exists is required"))
        elif not posixpath.isabs(fsp.path):
            errs.append(FieldError.invalid(join_path(src, "fileSystemPath", "path"), fsp.path,
                                           "must be an absolute path"))
    if kind == "File" and fsp is not None:
        if fsp.format not in ("TEXT", "JSON"):
            errs.append(FieldError.required(join_path(src, "fileSystemPath", "format"),
                                            "format of metrics file is required for metrics collector"))
        if fsp.format == "JSON" and filters:
            errs.append(FieldError.forbidden(join_path(src, "filter"),
                                             "filter must be nil when format of metrics file is json"))
    elif kind == "TensorFlowEvent" and fsp is not None and fsp.format:
        errs.append(FieldError.invalid(join_path(src, "fileSystemPath", "format"), fsp.format, "must be empty"))
    elif kind == "PrometheusMetric" and source.http_get is not None:
        port, http_path = source.http_get.port, source.http_get.path
        number = port if isinstance(port, int) else int(port) if isinstance(port, str) and port.isdigit() else 0
        if number <= 0:
            errs.append(FieldError.invalid(join_path(src, "httpGet", "port"), port,
                                           f"must be a positive integer value for metrics collector kind: {kind}"))
        if not (http_path or "").startswith("/"):
            errs.append(FieldError.invalid(join_path(src, "httpGet", "path"), http_path,
                                           f"path is invalid for metrics collector kind: {kind}"))
    elif kind == "Custom" and mc.collector.custom_collector is None:
        errs.append(FieldError.required(join_path(base, "collector", "customCollector"),
                                        f"metrics collector kind: {kind} is required"))
    for i, pattern in enumerate(filters or []):
        where = join_path(src, "filter", "metricsFormat", i)
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            errs.append(FieldError.invalid(where, pattern, f"invalid filter: {exc}"))
            continue
        if compiled.groups < 2:
            errs.append(FieldError.invalid(where, pattern, "two top subexpressions are required (group 1 the "
                                           "metric name, group 2 its value)"))
    return errs


# --- Trial -------------------------------------------------------------------------------------


class TrialSpec(ApiModel):
    """One trial: the rendered job (``runSpec``) and how to judge and observe it."""

    objective: ObjectiveSpec | None = None
    parameter_assignments: list[NameValue] | None = None
    early_stopping_rules: list[EarlyStoppingRule] | None = None
    run_spec: dict[str, Any] | None = None
    retain_run: bool | None = None
    metrics_collector: MetricsCollectorSpec | None = None
    primary_pod_labels: dict[str, str] | None = None
    primary_container_name: str | None = None
    success_condition: str | None = None
    failure_condition: str | None = None
    labels: dict[str, str] | None = None


class TrialStatus(ApiModel):
    """Conditions (Created, Running, Succeeded, Killed, Failed, MetricsUnavailable, EarlyStopped) and metrics."""

    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    conditions: list[Condition] | None = None
    observation: Observation | None = None


class Trial(Resource):
    """kubeflow.org/v1beta1 Trial: one set of assignments run as one job."""

    spec: TrialSpec
    status: TrialStatus | None = None

    def check(self) -> list[FieldError]:
        """Labels, and the run spec's apiVersion/kind."""
        errs = super().check()
        errs.extend(check_labels("spec.primaryPodLabels", self.spec.primary_pod_labels))
        errs.extend(check_labels("spec.labels", self.spec.labels))
        run_spec = self.spec.run_spec
        if run_spec is not None:
            for key in ("apiVersion", "kind"):
                if not isinstance(run_spec.get(key), str) or not run_spec.get(key):
                    errs.append(FieldError.required(join_path("spec.runSpec", key)))
        return errs


# --- Suggestion --------------------------------------------------------------------------------


class TrialAssignment(ApiModel):
    """One suggestion: a trial name and its parameter assignments (and early-stopping rules)."""

    name: str | None = None
    parameter_assignments: list[NameValue] | None = None
    early_stopping_rules: list[EarlyStoppingRule] | None = None
    labels: dict[str, str] | None = None


class SuggestionSpec(ApiModel):
    """The algorithm, and how many assignments were asked for so far (``requests``)."""

    algorithm: AlgorithmSpec | None = None
    early_stopping: EarlyStoppingSpec | None = None
    requests: NonNegInt32 | None = None
    resume_policy: Literal["Never", "LongRunning", "FromVolume", ""] | None = None


class SuggestionStatus(ApiModel):
    """Every assignment made, the algorithm's saved state (``algorithmSettings``) and conditions."""

    algorithm_settings: list[NameValue] | None = None
    suggestion_count: NonNegInt32 | None = None
    suggestions: list[TrialAssignment] | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    conditions: list[Condition] | None = None


class Suggestion(Resource):
    """kubeflow.org/v1beta1 Suggestion: one per experiment, same name."""

    spec: SuggestionSpec
    status: SuggestionStatus | None = None


# --- trial template rendering ------------------------------------------------------------------


def _spec_dict(experiment_spec: Any) -> Mapping[str, Any]:
    if isinstance(experiment_spec, ApiModel):
        return experiment_spec.to_dict()
    return experiment_spec if isinstance(experiment_spec, Mapping) else {}


def trial_parameter_refs(experiment_spec: Mapping[str, Any] | ExperimentSpec) -> dict[str, str]:
    """``{trial parameter name: reference}`` of an experiment's ``spec.trialTemplate.trialParameters``.

    A reference is a ``spec.parameters`` name (``learning_rate``) or a metadata reference
    (``${trialSpec.Name}``, see `is_metadata_reference`). Accepts the stored (camelCase) spec or the model.
    """
    template = _spec_dict(experiment_spec).get("trialTemplate") or {}
    out: dict[str, str] = {}
    for tp in template.get("trialParameters") or []:
        if isinstance(tp, Mapping) and tp.get("name") and tp.get("reference"):
            out[tp["name"]] = tp["reference"]
    return out


def trial_parameter_values(
    experiment_spec: Mapping[str, Any] | ExperimentSpec, assignments: Mapping[str, str] | list[Mapping[str, Any]]
) -> dict[str, str]:
    """The `values` for `substitute_trial_template`: ``{trial parameter name: value}``.

    `assignments` maps ``spec.parameters`` names to suggested values (a dict, or Katib's
    ``[{name, value}]`` list). Metadata references are passed through as the reference itself
    (``${trialSpec.Name}``), which `substitute_trial_template` resolves from the trial's metadata.
    Raises TrialTemplateError when a referenced parameter has no assignment.
    """
    if not isinstance(assignments, Mapping):
        assignments = {a["name"]: a["value"] for a in assignments}
    out: dict[str, str] = {}
    for name, reference in trial_parameter_refs(experiment_spec).items():
        if reference in assignments:
            out[name] = str(assignments[reference])
        elif is_metadata_reference(reference):
            out[name] = reference
        else:
            raise TrialTemplateError(f"trial parameter {name!r}: no assignment for parameter {reference!r}")
    return out


def _metadata_key(reference: str) -> tuple[str, str | None] | None:
    m = re.fullmatch(_META_REFERENCE, reference)
    if m is None:
        return None
    key = m.group(1)
    if key in _META_KEYS:
        return key, None
    indexed = re.fullmatch(_META_INDEXED, key)
    if indexed is not None and indexed.group(1) in _META_MAPS:
        return indexed.group(1), indexed.group(2)
    return None


def is_metadata_reference(reference: str) -> bool:
    """Whether `reference` is ``${trialSpec.Name|Namespace|Kind|APIVersion}`` or
    ``${trialSpec.Labels[<key>]}`` / ``${trialSpec.Annotations[<key>]}``."""
    return _metadata_key(reference) is not None


def resolve_metadata_reference(reference: str, trial_meta: Mapping[str, Any]) -> str:
    """The value of a metadata reference for a trial whose metadata is `trial_meta`
    (``{name, namespace, kind, apiVersion, labels, annotations}``).

    Raises TrialTemplateError for an unknown reference or a missing value.
    """
    parsed = _metadata_key(reference)
    if parsed is None:
        raise TrialTemplateError(f"{reference!r} is not a trial metadata reference")
    key, index = parsed
    field = {"Name": "name", "Namespace": "namespace", "Kind": "kind", "APIVersion": "apiVersion",
             "Labels": "labels", "Annotations": "annotations"}[key]
    value = trial_meta.get(field)
    if index is not None:
        value = value.get(index) if isinstance(value, Mapping) else None
    if not isinstance(value, str):
        what = f"{field} key {index!r}" if index is not None else field
        raise TrialTemplateError(f"{reference}: the trial has no {what}")
    return value


def substitute_trial_template(
    trial_spec: dict[str, Any], values: Mapping[str, str], trial_meta: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of `trial_spec` with every ``${trialParameters.<name>}`` replaced by ``values[name]``.

    Replacement is textual inside each string (and mapping key), in one pass, so a value is
    never re-expanded and never changes the structure: an argv element stays one element,
    whatever spaces or quotes the value holds, and numbers stay strings (as in Katib, which
    substitutes into the template's JSON text). A value that is itself a metadata reference
    (``${trialSpec.Name}``, from `trial_parameter_values`) is resolved from `trial_meta`
    (``{name, namespace, kind, apiVersion, labels, annotations}``; kind and apiVersion default
    to the template's own). The input is not modified.

    Raises TrialTemplateError when a placeholder has no value.
    """
    meta = dict(trial_meta)
    meta.setdefault("kind", trial_spec.get("kind"))
    meta.setdefault("apiVersion", trial_spec.get("apiVersion"))
    resolved: dict[str, str] = {}
    for name, value in values.items():
        resolved[name] = resolve_metadata_reference(value, meta) if is_metadata_reference(value) else value

    def replace(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in resolved:
            raise TrialTemplateError(f"trial parameter {name!r} used in the trial template has no value")
        return resolved[name]

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return re.sub(_PLACEHOLDER, replace, node) if "${" in node else node
        if isinstance(node, dict):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return copy.deepcopy(node)

    result: dict[str, Any] = walk(trial_spec)
    return result
