"""Kubeflow Pipelines v2 as kinds: what ``kfp.Client`` and ``trimaran run`` create.

``Pipeline`` and ``PipelineVersion`` are KFP's own CRDs (``pipelines.kubeflow.org/v2beta1``, its
Kubernetes-native pipeline store). KFP keeps experiments, runs and recurring runs in its database;
here they are kinds too (``pipelines.trimaran.io/v1``), so they share the store, watch, garbage
collection and `kubectl get` with everything else. The KFP REST API (``server/kfp/``) translates
between KFP's ids (an object's ``metadata.uid``) and these objects.

A run's pipeline is its compiled IR (``PipelineSpec``, the first YAML document ``kfp.compiler``
writes) with the optional ``platforms: kubernetes`` document of ``kfp-kubernetes``; it is checked
whole at apply (``trimaran.pipelines.ir``), and the run's parameters against its inputs.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

from typing import Any, Literal

from pydantic import Field

from trimaran._home import home_dir
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, Condition, Resource

__all__ = [
    "KFP_API_VERSION",
    "FINISHED_RUN_STATES",
    "FINISHED_TASK_STATES",
    "RUN_LABEL",
    "RUN_STATES",
    "TASK_LABEL",
    "TASK_STATES",
    "TRIMARAN_API_VERSION",
    "ArtifactRef",
    "Pipeline",
    "PipelineExperiment",
    "PipelineVersion",
    "RecurringRun",
    "Run",
    "RunStatus",
    "TaskStatus",
]

KFP_API_VERSION = "pipelines.kubeflow.org/v2beta1"
TRIMARAN_API_VERSION = "pipelines.trimaran.io/v1"
# Every pod of a run carries the run's name and its task's id (TaskStatus.id) under these labels.
RUN_LABEL = "pipelines.trimaran.io/run"
TASK_LABEL = "pipelines.trimaran.io/task"

# KFP's V2beta1RuntimeState, as `kfp.Client` reads it (`wait_for_run_completion` lower-cases it).
RUN_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "SKIPPED", "FAILED", "CANCELING", "CANCELED", "PAUSED")
# A task's state: KFP's, plus CACHED (KFP reports a cache hit as SKIPPED with a cached execution;
# the dashboard and CLI say what happened).
TASK_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "SKIPPED", "FAILED", "CANCELING", "CANCELED", "CACHED")
# The states a run, or a task, ends in (kfp.Client's wait stops at these).
FINISHED_RUN_STATES = frozenset({"SUCCEEDED", "SKIPPED", "FAILED", "CANCELED"})
FINISHED_TASK_STATES = FINISHED_RUN_STATES | {"CACHED"}


class PipelineSpec(ApiModel):
    display_name: str | None = None
    description: str | None = None


class Pipeline(Resource):
    """A named pipeline; its versions hold the IR."""

    spec: PipelineSpec = Field(default_factory=PipelineSpec)


class PipelineVersionSpec(ApiModel):
    pipeline_name: str
    display_name: str | None = None
    description: str | None = None
    code_source_url: str | None = Field(default=None, alias="codeSourceURL")
    pipeline_spec_uri: str | None = Field(default=None, alias="pipelineSpecURI")
    pipeline_spec: dict[str, Any]
    platform_spec: dict[str, Any] | None = None


class PipelineVersion(Resource):
    """One compiled pipeline, owned by its Pipeline."""

    spec: PipelineVersionSpec

    def check(self) -> list[FieldError]:
        from trimaran.pipelines import ir

        return super().check() + ir.spec_errors(self.spec.pipeline_spec, "spec.pipelineSpec",
                                               self.spec.platform_spec, "spec.platformSpec")


class ExperimentSpec(ApiModel):
    display_name: str | None = None
    description: str | None = None
    archived: bool | None = None


class PipelineExperiment(Resource):
    """KFP's experiment: a folder of runs. (``Experiment`` is Katib's kind.)"""

    spec: ExperimentSpec = Field(default_factory=ExperimentSpec)


class PipelineVersionRef(ApiModel):
    pipeline: str  # a Pipeline's name in the run's namespace
    version: str | None = None  # a PipelineVersion's name; none: the pipeline's newest


class _RunTemplate(ApiModel):
    """What a run is made from: shared by Run and RecurringRun."""

    display_name: str | None = None
    description: str | None = None
    experiment: str | None = None  # a PipelineExperiment's name in the namespace
    pipeline_spec: dict[str, Any] | None = None
    platform_spec: dict[str, Any] | None = None
    pipeline_version_ref: PipelineVersionRef | None = None
    parameters: dict[str, Any] | None = None
    pipeline_root: str | None = None
    enable_caching: bool | None = None
    service_account_name: str | None = None

    def set_defaults(self) -> None:
        if self.enable_caching is None:
            self.enable_caching = True  # as on a cluster: every task caches unless told not to
        if self.parameters is None:
            self.parameters = {}

    def errors(self) -> list[FieldError]:
        from trimaran.pipelines import ir

        if (self.pipeline_spec is None) == (self.pipeline_version_ref is None):
            return [FieldError.required("spec.pipelineSpec", "exactly one of pipelineSpec and pipelineVersionRef "
                                        "must be set")]
        if self.pipeline_spec is None:
            return []  # checked against the stored version (KindInfo.references)
        errs = ir.spec_errors(self.pipeline_spec, "spec.pipelineSpec", self.platform_spec, "spec.platformSpec")
        if not errs:
            errs = ir.parameter_errors(self.pipeline_spec, self.parameters or {}, "spec.parameters")
        return errs


class RunSpec(_RunTemplate):
    terminate: bool | None = None  # set by :terminate; the run's pods are stopped and it ends CANCELED
    retry: int | None = Field(default=None, ge=0)  # raised by :retry; each raise runs failed tasks again
    archived: bool | None = None  # KFP's storage state
    recurring_run: str | None = None  # the RecurringRun that made this run


class ArtifactRef(ApiModel):
    """An artifact a task read or wrote: KFP's RuntimeArtifact with a local URI."""

    name: str | None = None
    uri: str
    type: str | None = None  # its schemaTitle: system.Model, system.Metrics, ...
    metadata: dict[str, Any] | None = None


class TaskIO(ApiModel):
    parameters: dict[str, Any] | None = None
    artifacts: dict[str, list[ArtifactRef]] | None = None


class TaskStatus(ApiModel):
    """One task of a run: a step (a pod), a DAG (a nested pipeline, a condition, a loop), a loop
    iteration or an importer."""

    id: str  # unique in the run: "train", "for-loop-2.iteration-0.add"; the pod's TASK_LABEL
    name: str  # taskInfo.name, as the user wrote it
    parent: str | None = None  # the enclosing DAG task's id; none at the root
    component: str | None = None  # componentRef.name
    type: Literal["container", "importer", "dag", "loop", "iteration", "condition", "exit-handler"] = "container"
    state: Literal[TASK_STATES] = "PENDING"  # type: ignore[valid-type]
    pod_name: str | None = None
    attempts: int | None = None
    iteration: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    message: str | None = None  # why it failed or was skipped; a failed step's last log lines
    cache_key: str | None = None
    cached_from: str | None = None  # "<run>/<task id>" whose outputs a cache hit reused
    inputs: TaskIO | None = None
    outputs: TaskIO | None = None


class RunStatus(ApiModel):
    state: Literal[RUN_STATES] | None = None  # type: ignore[valid-type]
    started_at: str | None = None
    finished_at: str | None = None
    message: str | None = None
    pipeline_root: str | None = None  # where its artifacts are, resolved
    observed_retry: int | None = None
    conditions: list[Condition] | None = None
    tasks: list[TaskStatus] | None = None


class Run(Resource):
    """One execution of a pipeline with its parameters."""

    spec: RunSpec
    status: RunStatus | None = None

    def set_defaults(self) -> None:
        self.spec.set_defaults()
        if self.spec.terminate is None:
            self.spec.terminate = False
        if self.spec.retry is None:
            self.spec.retry = 0

    def check(self) -> list[FieldError]:
        return super().check() + self.spec.errors()


class CronSchedule(ApiModel):
    cron: str  # KFP's six fields (seconds first) or the usual five
    start_time: str | None = None
    end_time: str | None = None


class PeriodicSchedule(ApiModel):
    interval_second: int = Field(ge=1)
    start_time: str | None = None
    end_time: str | None = None


class Trigger(ApiModel):
    cron_schedule: CronSchedule | None = None
    periodic_schedule: PeriodicSchedule | None = None


class RecurringRunSpec(_RunTemplate):
    trigger: Trigger
    max_concurrency: int | None = Field(default=None, ge=1, le=10)
    no_catchup: bool | None = None
    mode: Literal["ENABLE", "DISABLE"] | None = None


class RecurringRunStatus(ApiModel):
    last_run_time: str | None = None
    next_run_time: str | None = None
    runs_created: int | None = None
    conditions: list[Condition] | None = None


class RecurringRun(Resource):
    """Runs made on a schedule (KFP's recurring run; its ScheduledWorkflow on a cluster)."""

    spec: RecurringRunSpec
    status: RecurringRunStatus | None = None

    def set_defaults(self) -> None:
        self.spec.set_defaults()
        if self.spec.max_concurrency is None:
            self.spec.max_concurrency = 1
        if self.spec.mode is None:
            self.spec.mode = "ENABLE"

    def check(self) -> list[FieldError]:
        errs = super().check() + self.spec.errors()
        trigger = self.spec.trigger
        if (trigger.cron_schedule is None) == (trigger.periodic_schedule is None):
            errs.append(FieldError.required("spec.trigger", "exactly one of cronSchedule and periodicSchedule "
                                            "must be set"))
        elif trigger.cron_schedule is not None:
            from trimaran.pipelines import schedule

            errs += [FieldError.invalid(join_path("spec.trigger.cronSchedule", "cron"), trigger.cron_schedule.cron,
                                        msg) for msg in schedule.cron_errors(trigger.cron_schedule.cron)]
        return errs


def run_reference_errors(obj: dict[str, Any], lookup: Any) -> list[FieldError]:
    """What a run needs of the control plane it is sent to (checked there, before it is stored): its
    ``pipelineRoot`` under an allowed root of that control plane's home, and, made from a stored
    pipeline version, the version must exist and the parameters fit it."""
    spec = obj.get("spec") or {}
    if spec.get("pipelineRoot"):
        from trimaran.pipelines import roots

        error = roots.local_path_error(spec["pipelineRoot"], home_dir())  # the API server's own home
        if error:
            return [FieldError.invalid("spec.pipelineRoot", spec["pipelineRoot"], error)]
    ref = spec.get("pipelineVersionRef")
    if not ref:
        return []
    namespace = (obj.get("metadata") or {}).get("namespace") or "default"
    if lookup("Pipeline", namespace, ref["pipeline"]) is None:
        return [FieldError.not_found("spec.pipelineVersionRef.pipeline", ref["pipeline"])]
    if not ref.get("version"):
        return []  # the pipeline's newest version, picked when the run starts
    version = lookup("PipelineVersion", namespace, ref["version"])
    if version is None or version["spec"].get("pipelineName") != ref["pipeline"]:
        return [FieldError.not_found("spec.pipelineVersionRef.version", ref["version"])]
    from trimaran.pipelines import ir

    return ir.parameter_errors(version["spec"]["pipelineSpec"], spec.get("parameters") or {}, "spec.parameters")
