"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``): TrainJob, TrainingRuntime and
ClusterTrainingRuntime, with the fields of Trainer v2.3.

A TrainJob names a runtime (a JobSet template plus an ML policy); the controller
(`controllers/trainer/`) turns the pair into one JobSet named like the TrainJob. Checks are the
CRDs' rules and Trainer's webhooks', with their wording; the ones that need the runtime (does it
exist, which framework reserves which variables) are `runtime_errors`, run by the API with the
stored runtime at create.

Earlier ``v1alpha1`` releases carried ``spec.labels``/``spec.annotations`` (v2.0),
``podSpecOverrides`` (v2.0) and ``podTemplateOverrides`` (v2.1), which v2.2 replaced with
``runtimePatches``; they are accepted and stored as the runtime patches they amount to.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in batch.py.

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import PrivateAttr

from trimaran.api.core import (
    Affinity,
    EnvFromSource,
    EnvVar,
    LocalObjectReference,
    ResourceRequirements,
    Toleration,
    Volume,
    VolumeMount,
)
from trimaran.api.errors import FieldError, join_path
from trimaran.api.jobset import JobSet, JobSetSpec
from trimaran.api.meta import INT32_MAX, ApiModel, Condition, NonNegInt32, ObjectMeta, Resource, is_dns1035_label

__all__ = [
    "ANCESTOR_LABEL",
    "API_VERSION",
    "CONTROLLER_NAME",
    "FRAMEWORK_LABEL",
    "TORCH_RESERVED_ENV",
    "XGBOOST_RESERVED_ENV",
    "ClusterTrainingRuntime",
    "TrainJob",
    "TrainingRuntime",
    "runtime_errors",
]

API_VERSION = "trainer.kubeflow.org/v1alpha1"
GROUP = "trainer.kubeflow.org"
CONTROLLER_NAME = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
# Which replicatedJob a TrainJob's trainer/initializer fields go to.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
NODE = "node"
LAUNCHER = "launcher"

# Variables a framework's plugin sets, which a TrainJob's trainer.env may not (jax's plugin checks none).
TORCH_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
XGBOOST_RESERVED_ENV = ("DMLC_NUM_WORKER", "DMLC_TASK_ID", "DMLC_TRACKER_URI", "DMLC_TRACKER_PORT")
NUM_PROC_WORDS = ("auto", "cpu", "gpu")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+")
_MANAGERS = (CONTROLLER_NAME, MULTIKUEUE)


# --- runtimes -------------------------------------------------------------------------------------

class TorchEnvInjectionTarget(ApiModel):
    """Other containers of a replicatedJob that get the PET_* variables too."""

    job_name: str
    container_names: list[str] | None = None


class TorchEnvInjection(ApiModel):
    targets: list[TorchEnvInjectionTarget] | None = None


class TorchMLPolicy(ApiModel):
    """torchrun's policy. ``numProcPerNode`` is the pre-v2.3 place of the per-node process count."""

    num_proc_per_node: int | str | None = None
    env_injection: TorchEnvInjection | None = None


class MPIMLPolicy(ApiModel):
    """mpirun's policy: slots per node, which MPI, and whether the launcher is node 0."""

    num_proc_per_node: NonNegInt32 | None = None
    mpi_implementation: Literal["OpenMPI", ""] | None = None
    ssh_auth_mount_path: str | None = None
    run_launcher_as_node: bool | None = None


class FluxMLPolicy(ApiModel):
    num_proc_per_node: int | None = None


class EmptyPolicy(ApiModel):
    """``jax: {}``, ``xgboost: {}``: the framework is chosen; it has no settings."""


class MLPolicy(ApiModel):
    num_nodes: int | None = None
    torch: TorchMLPolicy | None = None
    mpi: MPIMLPolicy | None = None
    jax: EmptyPolicy | None = None
    xgboost: EmptyPolicy | None = None
    flux: FluxMLPolicy | None = None

    def framework(self) -> str | None:
        """Which plugin runs: ``torch``, ``mpi``, ``jax``, ``xgboost``, ``flux`` or none (plain ML)."""
        return next((f for f in ("torch", "mpi", "jax", "xgboost", "flux") if getattr(self, f) is not None), None)


class PodGroupPolicy(ApiModel):
    coscheduling: dict[str, Any] | None = None
    volcano: dict[str, Any] | None = None


class JobSetTemplateSpec(ApiModel):
    """The JobSet a runtime stamps out for each TrainJob."""

    metadata: ObjectMeta | None = None
    spec: JobSetSpec


class TrainingRuntimeSpec(ApiModel):
    ml_policy: MLPolicy | None = None
    pod_group_policy: PodGroupPolicy | None = None
    template: JobSetTemplateSpec


class _Runtime(Resource):
    spec: TrainingRuntimeSpec

    def set_defaults(self) -> None:
        """The CRDs' defaults: MPI's OpenMPI, one slot, ``/root/.ssh``; the template's as a JobSet's."""
        mpi = self.spec.ml_policy.mpi if self.spec.ml_policy else None
        if mpi is not None:
            if mpi.num_proc_per_node is None:
                mpi.num_proc_per_node = 1
            if mpi.mpi_implementation is None:
                mpi.mpi_implementation = "OpenMPI"
            if mpi.ssh_auth_mount_path is None:
                mpi.ssh_auth_mount_path = "/root/.ssh"
            if mpi.run_launcher_as_node is None:
                mpi.run_launcher_as_node = False
        for rjob in self.spec.template.spec.replicated_jobs or []:
            if rjob.replicas is None:
                rjob.replicas = 1
            if rjob.group_name is None:
                rjob.group_name = "default"

    def check(self) -> list[FieldError]:
        errs = super().check()
        policy = self.spec.ml_policy
        if policy is not None:
            chosen = [f for f in ("torch", "mpi", "jax", "xgboost", "flux") if getattr(policy, f) is not None]
            if len(chosen) > 1:
                errs.append(FieldError.invalid("spec.mlPolicy", {f: {} for f in chosen},
                                               "Only one of the policy can be configured"))
            if policy.num_nodes is not None and not 1 <= policy.num_nodes <= INT32_MAX:
                errs.append(FieldError.invalid("spec.mlPolicy.numNodes", policy.num_nodes,
                                               "should be greater than or equal to 1"))
            if policy.flux is not None and (policy.flux.num_proc_per_node or 1) < 1:
                errs.append(FieldError.invalid("spec.mlPolicy.flux.numProcPerNode", policy.flux.num_proc_per_node,
                                               "NumProcPerNode in fluxPolicy must be >= 1"))
            if policy.torch is not None:
                errs.extend(_check_num_proc("spec.mlPolicy.torch.numProcPerNode", policy.torch.num_proc_per_node))
                for i, target in enumerate((policy.torch.env_injection.targets or [])
                                           if policy.torch.env_injection else []):
                    if NODE in (target.container_names or []):
                        errs.append(FieldError.invalid(
                            join_path("spec.mlPolicy.torch.envInjection.targets", i, "containerNames"),
                            target.container_names, "containerNames must not include the main node container "
                            "because PET_* envs are always injected into it"))
        rjobs = self.spec.template.spec.replicated_jobs or []
        for i, rjob in enumerate(rjobs):
            if rjob.replicas != 1:  # the webhook's rule: numNodes scales a Job's pods, not its copies
                errs.append(FieldError.invalid(join_path("spec.template.spec.replicatedJobs", i, "replicas"),
                                               rjob.replicas, "always must be 1"))
        # The template is checked as the JobSet it becomes (the name only bounds generated names).
        jobset = JobSet(apiVersion="jobset.x-k8s.io/v1alpha2", kind="JobSet", metadata=ObjectMeta(name="x"),
                        spec=self.spec.template.spec.model_copy(deep=True))
        jobset.set_defaults()
        for err in jobset.check():
            if err.path.startswith("spec."):
                errs.append(_moved(err, "spec.template.spec." + err.path[len("spec."):]))
        return errs


class TrainingRuntime(_Runtime):
    """trainer.kubeflow.org/v1alpha1 TrainingRuntime: a runtime TrainJobs of its namespace may name."""


class ClusterTrainingRuntime(_Runtime):
    """trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime: a runtime any namespace's TrainJobs may name."""


# --- TrainJob -------------------------------------------------------------------------------------

class RuntimeRef(ApiModel):
    name: str
    api_group: str | None = None
    kind: str | None = None


class SecretRef(ApiModel):
    name: str | None = None


class InitializerSource(ApiModel):
    """Where a dataset or model comes from (``hf://``, ``s3://``, ...) and the credentials to read it."""

    storage_uri: str | None = None
    env: list[EnvVar] | None = None
    secret_ref: SecretRef | None = None


class Initializer(ApiModel):
    dataset: InitializerSource | None = None
    model: InitializerSource | None = None


class Trainer(ApiModel):
    """What the TrainJob sets on the runtime's trainer container (``node``) and its node count."""

    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    num_nodes: int | None = None
    # An integer in v2.3; earlier releases also took "auto", "cpu" or "gpu".
    num_proc_per_node: int | str | None = None
    resources_per_node: ResourceRequirements | None = None


class ContainerPatch(ApiModel):
    name: str
    env: list[EnvVar] | None = None
    env_from: list[EnvFromSource] | None = None
    volume_mounts: list[VolumeMount] | None = None
    security_context: dict[str, Any] | None = None


class PodSpecPatch(ApiModel):
    """What a runtime patch may change in a pod template (the CRD's list)."""

    affinity: Affinity | None = None
    containers: list[ContainerPatch] | None = None
    init_containers: list[ContainerPatch] | None = None
    image_pull_secrets: list[LocalObjectReference] | None = None
    node_selector: dict[str, str] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    service_account_name: str | None = None
    termination_grace_period_seconds: int | None = None
    tolerations: list[Toleration] | None = None
    volumes: list[Volume] | None = None


class PodTemplatePatch(ApiModel):
    metadata: ObjectMeta | None = None
    spec: PodSpecPatch | None = None


class JobSpecPatch(ApiModel):
    template: PodTemplatePatch | None = None


class JobTemplatePatch(ApiModel):
    metadata: ObjectMeta | None = None
    spec: JobSpecPatch | None = None


class ReplicatedJobPatch(ApiModel):
    name: str
    template: JobTemplatePatch | None = None


class JobSetSpecPatch(ApiModel):
    replicated_jobs: list[ReplicatedJobPatch] | None = None


class JobSetTemplatePatch(ApiModel):
    metadata: ObjectMeta | None = None
    spec: JobSetSpecPatch | None = None


class TrainingRuntimeSpecPatch(ApiModel):
    template: JobSetTemplatePatch | None = None


class RuntimePatch(ApiModel):
    """One manager's changes to the runtime's JobSet template, for this TrainJob only."""

    manager: str
    time: str | None = None
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None


class TargetJob(ApiModel):
    name: str


class PodTemplateOverride(ApiModel):
    """v2.0's ``podSpecOverrides`` item and v2.1's ``podTemplateOverrides`` item."""

    target_jobs: list[TargetJob]
    metadata: ObjectMeta | None = None
    spec: PodSpecPatch | None = None


class PodSpecOverride(PodSpecPatch):
    target_jobs: list[TargetJob]


class TrainJobSpec(ApiModel):
    runtime_ref: RuntimeRef
    initializer: Initializer | None = None
    trainer: Trainer | None = None
    runtime_patches: list[RuntimePatch] | None = None
    suspend: bool | None = None
    active_deadline_seconds: int | None = None
    managed_by: str | None = None
    # Earlier v1alpha1 fields, turned into runtimePatches by set_defaults.
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    pod_spec_overrides: list[PodSpecOverride] | None = None
    pod_template_overrides: list[PodTemplateOverride] | None = None


class JobStatus(ApiModel):
    name: str
    ready: NonNegInt32 | None = None
    succeeded: NonNegInt32 | None = None
    failed: NonNegInt32 | None = None
    active: NonNegInt32 | None = None
    suspended: NonNegInt32 | None = None


class TrainJobStatus(ApiModel):
    conditions: list[Condition] | None = None
    jobs_status: list[JobStatus] | None = None
    trainer_status: dict[str, Any] | None = None


class TrainJob(Resource):
    """trainer.kubeflow.org/v1alpha1 TrainJob."""

    spec: TrainJobSpec
    status: TrainJobStatus | None = None
    _converted: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        return is_dns1035_label(name)  # the JobSet's name too, and its pods' subdomain

    def set_defaults(self) -> None:
        spec = self.spec
        if spec.runtime_ref.api_group is None:
            spec.runtime_ref.api_group = GROUP
        if spec.runtime_ref.kind is None:
            spec.runtime_ref.kind = "ClusterTrainingRuntime"
        if spec.suspend is None:
            spec.suspend = False
        if spec.managed_by is None:
            spec.managed_by = CONTROLLER_NAME
        if spec.trainer is not None and spec.trainer.num_proc_per_node in NUM_PROC_WORDS:
            # v2.3 stores an integer (clients parse it as one); unset is upstream's auto.
            self._converted.append(f"spec.trainer.numProcPerNode {spec.trainer.num_proc_per_node!r}")
            spec.trainer.num_proc_per_node = None
        self._convert_old_fields()

    def _convert_old_fields(self) -> None:
        spec = self.spec
        patches = list(spec.runtime_patches or [])
        if spec.labels or spec.annotations:
            self._converted.append("spec.labels/spec.annotations")
            patches.append(RuntimePatch(manager=f"{GROUP}/spec-labels", trainingRuntimeSpec=TrainingRuntimeSpecPatch(
                template=JobSetTemplatePatch(metadata=ObjectMeta(labels=spec.labels, annotations=spec.annotations)))))
        overrides: list[tuple[str, PodTemplateOverride]] = []
        for i, old in enumerate(spec.pod_spec_overrides or []):
            pod = PodSpecPatch.model_validate(old.model_dump(by_alias=True, exclude_none=True, exclude={"target_jobs"}))
            overrides.append((f"podSpecOverrides-{i}", PodTemplateOverride(targetJobs=old.target_jobs, spec=pod)))
        overrides += [(f"podTemplateOverrides-{i}", o) for i, o in enumerate(spec.pod_template_overrides or [])]
        for manager, override in overrides:
            self._converted.append("spec." + manager.split("-")[0])
            pod = PodTemplatePatch(metadata=override.metadata, spec=override.spec)
            rjobs = [ReplicatedJobPatch(name=t.name, template=JobTemplatePatch(spec=JobSpecPatch(template=pod)))
                     for t in override.target_jobs]
            patches.append(RuntimePatch(manager=f"{GROUP}/{manager}", trainingRuntimeSpec=TrainingRuntimeSpecPatch(
                template=JobSetTemplatePatch(spec=JobSetSpecPatch(replicatedJobs=rjobs)))))
        spec.labels = spec.annotations = spec.pod_spec_overrides = spec.pod_template_overrides = None
        spec.runtime_patches = patches or None

    def admission_warnings(self) -> list[str]:
        warnings = []
        for field in dict.fromkeys(self._converted):
            if field.startswith("spec.trainer.numProcPerNode"):
                warnings.append(f"{field} is stored unset (v2.3 takes an integer; unset is auto: the GPUs per node, "
                                "else its CPU limit)")
            else:
                warnings.append(f"{field} is stored as spec.runtimePatches (the v2.2+ form)")
        return warnings

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec
        ref = spec.runtime_ref
        if not ref.name:
            errs.append(FieldError.invalid("spec.runtimeRef.name", ref.name, "should be at least 1 chars long"))
        if ref.api_group != GROUP or ref.kind not in ("TrainingRuntime", "ClusterTrainingRuntime"):
            errs.append(FieldError.invalid("spec.runtimeRef", {"apiGroup": ref.api_group, "kind": ref.kind},
                                           f"the specified runtime is not supported: {ref.kind}.{ref.api_group}"))
        if spec.active_deadline_seconds is not None and spec.active_deadline_seconds < 1:
            errs.append(FieldError.invalid("spec.activeDeadlineSeconds", spec.active_deadline_seconds,
                                           "should be greater than or equal to 1"))
        if spec.managed_by not in _MANAGERS:
            errs.append(FieldError.invalid("spec.managedBy", spec.managed_by,
                                           f"ManagedBy must be {CONTROLLER_NAME} or {MULTIKUEUE} if set"))
        trainer = spec.trainer
        if trainer is not None:
            if trainer.num_nodes is not None and trainer.num_nodes < 1:
                errs.append(FieldError.invalid("spec.trainer.numNodes", trainer.num_nodes,
                                               "should be greater than or equal to 1"))
            errs.extend(_check_num_proc("spec.trainer.numProcPerNode", trainer.num_proc_per_node))
            for i, env in enumerate(trainer.env or []):
                errs.extend(env.check(join_path("spec.trainer.env", i)))
            if trainer.resources_per_node is not None:
                errs.extend(trainer.resources_per_node.check("spec.trainer.resourcesPerNode"))
            for field in ("command", "args", "env"):
                if len(getattr(trainer, field) or []) > 128:
                    errs.append(FieldError(f"spec.trainer.{field}", "TooMany", "must have at most 128 items"))
        for step in ("dataset", "model"):
            source = getattr(spec.initializer, step) if spec.initializer else None
            uri = source.storage_uri if source else None
            if uri and not _URI.fullmatch(uri):
                errs.append(FieldError.invalid(f"spec.initializer.{step}.storageUri", uri,
                                               "storageUri may be empty, or it must be a valid URI (scheme://...)"))
        managers = [p.manager for p in spec.runtime_patches or []]
        for i, manager in enumerate(managers):
            if not manager:
                errs.append(FieldError.invalid(join_path("spec.runtimePatches", i, "manager"), manager,
                                               "should be at least 1 chars long"))
            elif manager in managers[:i]:
                errs.append(FieldError.duplicate(join_path("spec.runtimePatches", i), {"manager": manager}))
        if len(managers) > 16:
            errs.append(FieldError("spec.runtimePatches", "TooMany", "must have at most 16 items"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """The CRD's ``self == oldSelf`` fields; ``suspend`` (and patches' contents) may change."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        errs = []
        for field in ("runtimeRef", "trainer", "initializer", "managedBy", "activeDeadlineSeconds"):
            if old_spec.get(field) != new_spec.get(field):
                errs.append(FieldError.invalid(join_path("spec", field), new_spec.get(field), "field is immutable"))
        return errs


def _check_num_proc(path: str, value: int | str | None) -> list[FieldError]:
    if isinstance(value, str) and value not in NUM_PROC_WORDS:
        return [FieldError.invalid(path, value, f"must have an int value or [{' '.join(NUM_PROC_WORDS)}]")]
    if isinstance(value, int) and value < 1:
        return [FieldError.invalid(path, value, "should be greater than or equal to 1")]
    return []


def _moved(err: FieldError, path: str) -> FieldError:
    return FieldError(path, err.type, err.detail, err.value, err.supported)


# --- checks against the runtime -------------------------------------------------------------------

Lookup = Callable[[str, str, str], "dict[str, Any] | None"]


def runtime_of(trainjob: dict[str, Any], lookup: Lookup) -> dict[str, Any] | None:
    """The runtime a TrainJob names, as stored, or None."""
    ref = trainjob["spec"]["runtimeRef"]
    namespace = trainjob["metadata"].get("namespace") or "default"
    if ref.get("kind") == "TrainingRuntime":
        return lookup("TrainingRuntime", namespace, ref["name"])
    return lookup("ClusterTrainingRuntime", "", ref["name"])


def runtime_errors(trainjob: dict[str, Any], lookup: Lookup) -> list[FieldError]:
    """Trainer's TrainJob webhook: the runtime must exist, and each plugin's rules against it."""
    spec = trainjob["spec"]
    ref = spec["runtimeRef"]
    runtime = runtime_of(trainjob, lookup)
    if runtime is None:
        kind = ref.get("kind") or "ClusterTrainingRuntime"
        plural = kind.lower() + "s"
        return [FieldError.invalid("spec.runtimeRef", ref,
                                   f'{plural}.{GROUP} "{ref["name"]}" not found: specified '
                                   f"{kind[0].lower() + kind[1:]} must be created before the TrainJob is created")]
    framework = MLPolicy.model_validate(runtime["spec"].get("mlPolicy") or {}).framework()
    trainer = spec.get("trainer") or {}
    errs: list[FieldError] = []
    env = trainer.get("env") or []
    if framework == "torch":
        given = sorted({e["name"] for e in env if e.get("name") in TORCH_RESERVED_ENV})
        if given:
            errs.append(FieldError.invalid("spec.trainer.env", env, "must not have reserved envs, invalid envs "
                                           f"configured: [{' '.join(given)}]"))
    elif framework == "xgboost":
        errs += [FieldError.forbidden(join_path("spec.trainer.env", i), f"{e['name']} is reserved for the XGBoost "
                                      "runtime") for i, e in enumerate(env) if e.get("name") in XGBOOST_RESERVED_ENV]
    return errs
