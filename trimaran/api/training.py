"""Kubeflow training kinds: TFJob, PyTorchJob, XGBoostJob, JAXJob, PaddleJob and MPIJob
(``kubeflow.org/v1``), and the MPI operator's MPIJob (``kubeflow.org/v2beta1``).

Defaulting and validation follow the operator (release-1.9): its ``SetDefaults_*`` functions
and its validating webhooks. One deliberate difference: the operator's webhook sees the object
before the controller defaults it, so it rejects a lower-case ``worker`` key or a Master without
``replicas``; Trimaran defaults first (normalising keys, replicas → 1) and validates the result.

Per-kind facts live in one `Framework` record each (`TFJOB`, `PYTORCHJOB`, `XGBOOSTJOB`, `JAXJOB`,
`PADDLEJOB`, `MPIJOB`), which the
controllers read too: default container and port, replica types, operator label value.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from trimaran.api.core import ContainerPort, PodTemplateSpec, Quantity
from trimaran.api.errors import FieldError, join_path
from trimaran.api.labels import (  # re-exported: the operator's labels on every pod of a job
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from trimaran.api.meta import (
    ApiModel,
    Condition,
    Int32,
    LabelSelector,
    NonNegInt32,
    NonNegInt64,
    Resource,
    is_dns1035_label,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "JAXJOB",
    "JOB_NAME_LABEL",
    "JOB_ROLE_LABEL",
    "MPIJOB",
    "MPI_API_VERSION",
    "OPERATOR_NAME_LABEL",
    "PADDLEJOB",
    "PYTORCHJOB",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "TFJOB",
    "XGBOOSTJOB",
    "ElasticPolicy",
    "Framework",
    "JAXJob",
    "JobStatus",
    "KubeflowJob",
    "MPIJob",
    "MPIJobSpec",
    "MPIJobV2Beta1",
    "MPIJobV2Beta1Spec",
    "PaddleJob",
    "PyTorchJob",
    "PyTorchJobSpec",
    "RDZVConf",
    "ReplicaSpec",
    "ReplicaStatus",
    "RunPolicy",
    "SchedulingPolicy",
    "TFJob",
    "TFJobSpec",
    "XGBoostJob",
]

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
MPI_API_VERSION = f"{GROUP}/v2beta1"  # the MPI operator's MPIJob (kubeflow/mpi-operator)

MANAGED_BY_OPERATOR = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_MPI_OPERATOR = "kubeflow.org/mpi-operator"


@dataclass(frozen=True)
class Framework:
    """What differs between the operator's job kinds."""

    kind: str
    plural: str
    replica_specs_key: str  # the camelCase key under spec, e.g. "tfReplicaSpecs"
    replica_types: tuple[str, ...]  # canonical spelling, the operator's order
    default_container: str  # the container the webhook requires and the port is added to
    port_name: str
    default_port: int
    default_restart_policy: str
    # The webhook requires a container named default_container (MPIJob only reads its exit code).
    requires_default_container: bool = True

    @property
    def operator_name(self) -> str:
        """Value of the ``training.kubeflow.org/operator-name`` pod label, e.g. ``tfjob-controller``."""
        return f"{self.kind.lower()}-controller"


TFJOB = Framework(
    kind="TFJob", plural="tfjobs", replica_specs_key="tfReplicaSpecs",
    replica_types=("PS", "Worker", "Chief", "Master", "Evaluator"),
    default_container="tensorflow", port_name="tfjob-port", default_port=2222, default_restart_policy="Never",
)
PYTORCHJOB = Framework(
    kind="PyTorchJob", plural="pytorchjobs", replica_specs_key="pytorchReplicaSpecs",
    replica_types=("Master", "Worker"),
    default_container="pytorch", port_name="pytorchjob-port", default_port=23456, default_restart_policy="OnFailure",
)
XGBOOSTJOB = Framework(
    kind="XGBoostJob", plural="xgboostjobs", replica_specs_key="xgbReplicaSpecs",
    replica_types=("Master", "Worker"),
    default_container="xgboost", port_name="xgboostjob-port", default_port=9999, default_restart_policy="Never",
)
JAXJOB = Framework(
    kind="JAXJob", plural="jaxjobs", replica_specs_key="jaxReplicaSpecs",
    replica_types=("Worker",),
    default_container="jax", port_name="jaxjob-port", default_port=6666, default_restart_policy="Never",
)
PADDLEJOB = Framework(
    kind="PaddleJob", plural="paddlejobs", replica_specs_key="paddleReplicaSpecs",
    replica_types=("Master", "Worker"),
    default_container="paddle", port_name="master", default_port=36543, default_restart_policy="OnFailure",
)

MPIJOB = Framework(
    kind="MPIJob", plural="mpijobs", replica_specs_key="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"),
    default_container="mpi", port_name="mpi-port", default_port=9999, default_restart_policy="Never",
    requires_default_container=False,
)


class ReplicaSpec(ApiModel):
    """One replica type: how many pods, from which template, restarted how.

    ``restartPolicy`` ExitCode restarts a pod only when its exit code is ≥ 128 (a signal).
    """

    replicas: NonNegInt32 | None = None
    template: PodTemplateSpec
    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode", ""] | None = None


class SchedulingPolicy(ApiModel):
    """Gang-scheduling settings (a PodGroup with at least ``minAvailable`` members)."""

    min_available: Int32 | None = None
    queue: str | None = None
    min_resources: dict[str, Quantity] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: Int32 | None = None


class RunPolicy(ApiModel):
    """Job-wide policies: cleanup, deadlines, retries, suspension."""

    clean_pod_policy: Literal["None", "Running", "All"] | None = None
    ttl_seconds_after_finished: NonNegInt32 | None = None
    active_deadline_seconds: NonNegInt64 | None = None
    backoff_limit: NonNegInt32 | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class ReplicaStatus(ApiModel):
    """Pod counts of one replica type."""

    active: NonNegInt32 | None = None
    succeeded: NonNegInt32 | None = None
    failed: NonNegInt32 | None = None
    label_selector: LabelSelector | None = None
    selector: str | None = None


class JobStatus(ApiModel):
    """Status shared by the operator's kinds."""

    conditions: list[Condition] | None = None
    replica_statuses: dict[str, ReplicaStatus] | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None


class KubeflowJobSpec(ApiModel):
    """What every operator kind's spec has; subclasses add the replica-spec map."""

    run_policy: RunPolicy = Field(default_factory=RunPolicy)

    #: Python attribute holding the replica-spec map in the subclass.
    replica_specs_attr: ClassVar[str]


class KubeflowJob(Resource):
    """Behaviour shared by TFJob and PyTorchJob: defaulting, validation, replica access."""

    framework: ClassVar[Framework]
    #: runPolicy.managedBy values the operator accepts: itself, or MultiKueue (then it stays away).
    managed_by_values: ClassVar[tuple[str, ...]] = (MANAGED_BY_OPERATOR, MANAGED_BY_MULTIKUEUE)

    spec: KubeflowJobSpec
    status: JobStatus | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """The operator requires a DNS-1035 label: pod and service names derive from it."""
        return is_dns1035_label(name)

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        """The replica-spec map (``tfReplicaSpecs`` / ``pytorchReplicaSpecs``)."""
        specs: dict[str, ReplicaSpec] = getattr(self.spec, self.spec.replica_specs_attr)
        return specs

    def total_replicas(self) -> int:
        """Sum of replicas over all types (after defaulting)."""
        return sum(s.replicas or 0 for s in self.replica_specs.values())

    def set_defaults(self) -> None:
        """The operator's ``SetDefaults_<Kind>`` (release-1.9)."""
        fw = type(self).framework
        run_policy = self.spec.run_policy
        if run_policy.clean_pod_policy is None:
            run_policy.clean_pod_policy = "None"
        if run_policy.suspend is None:
            run_policy.suspend = False  # the CRD schema's default
        setattr(self.spec, self.spec.replica_specs_attr, _canonical_keys(self.replica_specs, fw.replica_types))
        for spec in self.replica_specs.values():
            if spec.replicas is None:
                spec.replicas = 1
            if not spec.restart_policy:
                spec.restart_policy = fw.default_restart_policy  # type: ignore[assignment]
            _add_default_port(spec.template, fw)

    def check(self) -> list[FieldError]:
        """The operator webhook's rules, plus Kubernetes' own pod-template rules."""
        fw = type(self).framework
        errs = super().check()
        base = join_path("spec", fw.replica_specs_key)
        specs = self.replica_specs
        if not specs:
            errs.append(FieldError.required(base, "must be required"))
        lowered = {t.lower(): t for t in fw.replica_types}
        for rtype, spec in specs.items():
            role_path = join_path(base, rtype)
            if rtype not in fw.replica_types:
                canonical = lowered.get(rtype.lower())
                if canonical is not None:
                    # Both "worker" and "Worker" given: defaulting could not merge them.
                    errs.append(FieldError.duplicate(role_path, canonical))
                else:
                    errs.append(FieldError.not_supported(role_path, rtype, sorted(fw.replica_types)))
            containers_path = join_path(role_path, "template", "spec", "containers")
            containers = spec.template.spec.containers
            if (fw.requires_default_container and containers
                    and not any(c.name == fw.default_container for c in containers)):
                errs.append(FieldError.required(
                    containers_path, f"must have at least one container with name {fw.default_container}"))
            errs.extend(spec.template.check(join_path(role_path, "template"), require_image=True))
        managed_by = self.spec.run_policy.managed_by
        if managed_by is not None and managed_by not in self.managed_by_values:
            errs.append(FieldError.not_supported("spec.runPolicy.managedBy", managed_by, self.managed_by_values))
        return errs

    def unknown_field_hint(self, path: str) -> str | None:
        """Older v1 manifests put run-policy fields directly under spec; the operator ignores them there."""
        prefix, _, name = path.partition(".")
        if prefix == "spec" and name in {f.alias for f in RunPolicy.model_fields.values()}:
            return f'did you mean "spec.runPolicy.{name}"? It is ignored where it is'
        return None


def _canonical_keys(specs: dict[str, ReplicaSpec], replica_types: tuple[str, ...]) -> dict[str, ReplicaSpec]:
    """Rename ``worker``/``WORKER`` to ``Worker`` (keeping order), unless ``Worker`` is also given."""
    canonical = {t.lower(): t for t in replica_types}
    out: dict[str, ReplicaSpec] = {}
    for key, spec in specs.items():
        target = canonical.get(key.lower(), key)
        if target != key and target in specs:
            target = key  # left for check() to report as a duplicate
        out[target] = spec
    return out


def _add_default_port(template: PodTemplateSpec, fw: Framework) -> None:
    """Add the kind's named port to its default container (or the first) when missing."""
    containers = template.spec.containers
    if not containers:
        return
    container = next((c for c in containers if c.name == fw.default_container), containers[0])
    if not any(p.name == fw.port_name for p in container.ports or []):
        container.ports = [*(container.ports or []),
                           ContainerPort.model_validate({"name": fw.port_name, "containerPort": fw.default_port})]


# --- TFJob ------------------------------------------------------------------------------------


class TFJobSpec(KubeflowJobSpec):
    """TFJob spec. ``successPolicy: AllWorkers`` waits for every worker, not just worker 0."""

    replica_specs_attr = "tf_replica_specs"

    success_policy: Literal["", "AllWorkers"] | None = None
    tf_replica_specs: dict[str, ReplicaSpec]
    enable_dynamic_worker: bool | None = None


class TFJob(KubeflowJob):
    """kubeflow.org/v1 TFJob: replicas of PS, Worker, Chief/Master, Evaluator, wired by TF_CONFIG."""

    framework = TFJOB

    spec: TFJobSpec

    def set_defaults(self) -> None:
        """Shared defaults, and successPolicy "" (the default policy)."""
        super().set_defaults()
        if self.spec.success_policy is None:
            self.spec.success_policy = ""

    def check(self) -> list[FieldError]:
        """Shared rules, and at most one Chief or Master."""
        errs = super().check()
        if sum(1 for t in self.replica_specs if t in ("Chief", "Master")) > 1:
            errs.append(FieldError.forbidden("spec.tfReplicaSpecs", "must not have more than 1 Chief or Master role"))
        return errs


# --- PyTorchJob -------------------------------------------------------------------------------


class RDZVConf(ApiModel):
    """One ``key=value`` of the torchrun rendezvous configuration."""

    key: str | None = None
    value: str | None = None


class ElasticPolicy(ApiModel):
    """torchrun elastic settings: node count range, rendezvous, restarts, autoscaling metrics."""

    min_replicas: NonNegInt32 | None = None
    max_replicas: NonNegInt32 | None = None
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzv_port: Int32 | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RDZVConf] | None = None
    standalone: bool | None = None
    n_proc_per_node: Int32 | None = None
    max_restarts: NonNegInt32 | None = None
    metrics: list[dict[str, Any]] | None = None


_NPROC = re.compile(r"auto|cpu|gpu|[1-9][0-9]*")


class PyTorchJobSpec(KubeflowJobSpec):
    """PyTorchJob spec. ``nprocPerNode`` is a string: ``auto``, ``cpu``, ``gpu`` or a count."""

    replica_specs_attr = "pytorch_replica_specs"

    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = None
    pytorch_replica_specs: dict[str, ReplicaSpec]


class PyTorchJob(KubeflowJob):
    """kubeflow.org/v1 PyTorchJob: one Master and Workers (or elastic Workers) for torch.distributed."""

    framework = PYTORCHJOB

    spec: PyTorchJobSpec

    def set_defaults(self) -> None:
        """Shared defaults; nprocPerNode "auto"; elastic min/max filled from each other or Worker replicas."""
        super().set_defaults()
        elastic = self.spec.elastic_policy
        if self.spec.nproc_per_node is None and (elastic is None or elastic.n_proc_per_node is None):
            self.spec.nproc_per_node = "auto"
        if elastic is None:
            return
        if elastic.min_replicas is None and elastic.max_replicas is not None:
            elastic.min_replicas = elastic.max_replicas
        elif elastic.max_replicas is None and elastic.min_replicas is not None:
            elastic.max_replicas = elastic.min_replicas
        elif elastic.min_replicas is None and "Worker" in self.replica_specs:
            elastic.min_replicas = elastic.max_replicas = self.replica_specs["Worker"].replicas

    def check(self) -> list[FieldError]:
        """Shared rules; Master replicas exactly 1; elastic needs Worker; one nproc setting."""
        errs = super().check()
        master = self.replica_specs.get("Master")
        if master is not None and master.replicas != 1:
            errs.append(FieldError.forbidden("spec.pytorchReplicaSpecs.Master.replicas", "must be 1"))
        elastic = self.spec.elastic_policy
        if elastic is not None:
            if "Worker" not in self.replica_specs:
                errs.append(FieldError.required(
                    "spec.pytorchReplicaSpecs.Worker", "must be specified when elasticPolicy is set"))
            if elastic.n_proc_per_node is not None and self.spec.nproc_per_node is not None:
                errs.append(FieldError.forbidden(
                    "spec.elasticPolicy.nProcPerNode", "must not be used with spec.nprocPerNode"))
            errs += _elastic_bounds(elastic, self.replica_specs.get("Worker"))
            if elastic.rdzv_port is not None and not 1 <= elastic.rdzv_port <= 65535:
                errs.append(FieldError.invalid("spec.elasticPolicy.rdzvPort", elastic.rdzv_port,
                                               "must be between 1 and 65535, inclusive"))
        nproc = self.spec.nproc_per_node
        if nproc is not None and not _NPROC.fullmatch(nproc):
            errs.append(FieldError.invalid(
                "spec.nprocPerNode", nproc, 'must be "auto", "cpu", "gpu" or a positive integer'))
        return errs

    def admission_warnings(self) -> list[str]:
        """The webhook's deprecation warning for elasticPolicy.nProcPerNode."""
        elastic = self.spec.elastic_policy
        if elastic is not None and elastic.n_proc_per_node is not None:
            return ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]
        return []


def _elastic_bounds(elastic: ElasticPolicy, worker: ReplicaSpec | None) -> list[FieldError]:
    """min/maxReplicas in the words of the HorizontalPodAutoscaler they become upstream, and the
    Worker count (what the scale subresource writes) within them: torchrun's PET_NNODES=min:max
    would never let a worker outside that range join."""
    low, high = elastic.min_replicas, elastic.max_replicas
    errs = []
    if low is not None and low < 1:
        errs.append(FieldError.invalid("spec.elasticPolicy.minReplicas", low, "must be greater than or equal to 1"))
    if high is not None and high < 1:
        errs.append(FieldError.invalid("spec.elasticPolicy.maxReplicas", high, "must be greater than 0"))
    if low is not None and high is not None and low > high:
        errs.append(FieldError.invalid("spec.elasticPolicy.maxReplicas", high,
                                       "must be greater than or equal to `minReplicas`"))
    elif worker is not None and low is not None and high is not None and not low <= (worker.replicas or 0) <= high:
        errs.append(FieldError.invalid("spec.pytorchReplicaSpecs.Worker.replicas", worker.replicas or 0,
                                       f"must be between elasticPolicy.minReplicas ({low}) and "
                                       f"elasticPolicy.maxReplicas ({high})"))
    return errs


# --- XGBoostJob, JAXJob, PaddleJob ------------------------------------------------------------


class XGBoostJobSpec(KubeflowJobSpec):
    """XGBoostJob spec: exactly one Master (the rabit tracker's host) and Workers."""

    replica_specs_attr = "xgb_replica_specs"

    xgb_replica_specs: dict[str, ReplicaSpec]


class XGBoostJob(KubeflowJob):
    """kubeflow.org/v1 XGBoostJob: a Master and Workers wired by MASTER_*/WORKER_* variables."""

    framework = XGBOOSTJOB

    spec: XGBoostJobSpec

    def check(self) -> list[FieldError]:
        """Shared rules; the webhook's Master rules: present, and exactly 1 replica."""
        errs = super().check()
        base = "spec.xgbReplicaSpecs"
        master = self.replica_specs.get("Master")
        if self.replica_specs and master is None:
            errs.append(FieldError.required(join_path(base, "Master"), "must be present"))
        elif master is not None and master.replicas != 1:
            errs.append(FieldError.forbidden(join_path(base, "Master", "replicas"), "must be 1"))
        return errs


class JAXJobSpec(KubeflowJobSpec):
    """JAXJob spec: Workers only; worker 0 hosts the coordinator."""

    replica_specs_attr = "jax_replica_specs"

    jax_replica_specs: dict[str, ReplicaSpec]


class JAXJob(KubeflowJob):
    """kubeflow.org/v1 JAXJob: Workers running ``jax.distributed`` (COORDINATOR_*, NUM_PROCESSES,
    PROCESS_ID)."""

    framework = JAXJOB

    spec: JAXJobSpec


class PaddleElasticPolicy(ApiModel):
    """PaddleJob's elastic settings (accepted and stored; the workers' count is not changed here)."""

    min_replicas: NonNegInt32 | None = None
    max_replicas: NonNegInt32 | None = None
    max_restarts: NonNegInt32 | None = None
    metrics: list[dict[str, Any]] | None = None


class PaddleJobSpec(KubeflowJobSpec):
    """PaddleJob spec: Workers only (collective mode) or a Master too (parameter-server mode)."""

    replica_specs_attr = "paddle_replica_specs"

    elastic_policy: PaddleElasticPolicy | None = None
    paddle_replica_specs: dict[str, ReplicaSpec]


class PaddleJob(KubeflowJob):
    """kubeflow.org/v1 PaddleJob: ``paddle.distributed.launch`` replicas wired by PADDLE_* variables."""

    framework = PADDLEJOB

    spec: PaddleJobSpec


# --- MPIJob -----------------------------------------------------------------------------------


class MPIJobSpec(KubeflowJobSpec):
    """MPIJob spec (training operator v1). ``slotsPerWorker`` is each worker's slot count in the
    hostfile; ``mainContainer`` the worker container the launcher execs into; ``cleanPodPolicy``
    here is the deprecated copy of ``runPolicy.cleanPodPolicy`` (used when that one is unset)."""

    replica_specs_attr = "mpi_replica_specs"

    slots_per_worker: Int32 | None = None
    main_container: str | None = None
    clean_pod_policy: Literal["None", "Running", "All"] | None = None
    mpi_replica_specs: dict[str, ReplicaSpec]


class _MPIJobBase(KubeflowJob):
    """What both MPIJob versions share: exactly one Launcher, Workers defaulting to 0 replicas."""

    framework = MPIJOB

    def default_restart_policy(self, rtype: str) -> str:
        return MPIJOB.default_restart_policy

    def set_defaults(self) -> None:
        """The operator's ``SetDefaults_MPIJob``: Launcher replicas 1, Worker 0, restart policy per
        type, cleanPodPolicy None, slotsPerWorker 1. No port is added (workers are exec'd into)."""
        run_policy = self.spec.run_policy
        if run_policy.clean_pod_policy is None:
            run_policy.clean_pod_policy = "None"
        if run_policy.suspend is None:
            run_policy.suspend = False
        setattr(self.spec, self.spec.replica_specs_attr, _canonical_keys(self.replica_specs, MPIJOB.replica_types))
        for rtype, spec in self.replica_specs.items():
            if spec.replicas is None:
                spec.replicas = 0 if rtype == "Worker" else 1
            if not spec.restart_policy:
                spec.restart_policy = self.default_restart_policy(rtype)  # type: ignore[assignment]
        if self.spec.slots_per_worker is None:  # type: ignore[attr-defined]
            self.spec.slots_per_worker = 1  # type: ignore[attr-defined]

    def check(self) -> list[FieldError]:
        """Shared rules; a Launcher is required and has exactly 1 replica; slotsPerWorker ≥ 1."""
        errs = super().check()
        base = "spec.mpiReplicaSpecs"
        launcher = self.replica_specs.get("Launcher")
        if self.replica_specs and launcher is None:
            errs.append(FieldError.required(join_path(base, "Launcher"), "must have Launcher replica spec"))
        elif launcher is not None and launcher.replicas != 1:
            errs.append(FieldError.invalid(join_path(base, "Launcher", "replicas"), launcher.replicas, "must be 1"))
        slots = self.spec.slots_per_worker  # type: ignore[attr-defined]
        if slots is not None and slots < 1:
            errs.append(FieldError.invalid("spec.slotsPerWorker", slots, "must be greater than or equal to 1"))
        return errs


class MPIJob(_MPIJobBase):
    """kubeflow.org/v1 MPIJob (training operator): a Launcher running ``mpirun`` that reaches its
    Workers through ``kubectl exec`` (locally: Trimaran's exec agent, see controllers/training/mpi.py)."""

    spec: MPIJobSpec

    def set_defaults(self) -> None:
        """Shared defaults; the deprecated top-level cleanPodPolicy fills runPolicy's when that is unset."""
        if self.spec.run_policy.clean_pod_policy is None and self.spec.clean_pod_policy is not None:
            self.spec.run_policy.clean_pod_policy = self.spec.clean_pod_policy
        super().set_defaults()


class MPIJobV2Beta1Spec(KubeflowJobSpec):
    """MPIJob spec of the MPI operator (``kubeflow.org/v2beta1``).

    ``runLauncherAsWorker`` lists the launcher in the hostfile too; ``launcherCreationPolicy``
    ``WaitForWorkersReady`` creates the launcher once every worker runs; ``mpiImplementation``
    chooses the hostfile format and environment (OpenMPI, Intel MPI, MPICH).
    """

    replica_specs_attr = "mpi_replica_specs"

    slots_per_worker: Int32 | None = None
    run_launcher_as_worker: bool | None = None
    ssh_auth_mount_path: str | None = None
    launcher_creation_policy: Literal["AtStartup", "WaitForWorkersReady"] | None = None
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] | None = None
    mpi_replica_specs: dict[str, ReplicaSpec]


class MPIJobV2Beta1(_MPIJobBase):
    """kubeflow.org/v2beta1 MPIJob (kubeflow/mpi-operator): Launcher and Workers, reached over ssh
    on a cluster (locally: Trimaran's exec agent). Only Never and OnFailure restart a replica."""

    managed_by_values = (MANAGED_BY_MPI_OPERATOR, MANAGED_BY_MULTIKUEUE)

    spec: MPIJobV2Beta1Spec

    def default_restart_policy(self, rtype: str) -> str:
        return "OnFailure" if rtype == "Launcher" else "Never"

    def set_defaults(self) -> None:
        """Shared defaults, Launcher restartPolicy OnFailure, and the CRD's defaults."""
        super().set_defaults()
        spec = self.spec
        if spec.run_launcher_as_worker is None:
            spec.run_launcher_as_worker = False
        if spec.ssh_auth_mount_path is None:
            spec.ssh_auth_mount_path = "/root/.ssh"
        if spec.launcher_creation_policy is None:
            spec.launcher_creation_policy = "AtStartup"
        if spec.mpi_implementation is None:
            spec.mpi_implementation = "OpenMPI"

    def check(self) -> list[FieldError]:
        """Shared rules; the launcher is a batch/v1 Job, so only Never and OnFailure restart policies."""
        errs = super().check()
        for rtype, spec in self.replica_specs.items():
            if spec.restart_policy not in ("Never", "OnFailure"):
                errs.append(FieldError.not_supported(join_path("spec.mpiReplicaSpecs", rtype, "restartPolicy"),
                                                     spec.restart_policy, ("Never", "OnFailure")))
        return errs
