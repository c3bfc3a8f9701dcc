"""The registry of kinds: which models exist and every name a user may call them by.

Built-in kinds register themselves below; later packages (Katib's Experiment and Trial,
KServe's InferenceService, ...) call `register` with their own `KindInfo`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trimaran.api import printers
from trimaran.api.apiregistration import API_VERSION as APIREGISTRATION_V1
from trimaran.api.apiregistration import APISERVICE_COLUMNS, APIService
from trimaran.api.apps import (
    APPS_V1,
    CONTROLLERREVISION_COLUMNS,
    DAEMONSET_COLUMNS,
    DEPLOYMENT_COLUMNS,
    ENDPOINTS_COLUMNS,
    REPLICASET_COLUMNS,
    REPLICATIONCONTROLLER_COLUMNS,
    SERVICE_COLUMNS,
    STATEFULSET_COLUMNS,
    ControllerRevision,
    DaemonSet,
    Deployment,
    Endpoints,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
)
from trimaran.api.autoscaling import API_VERSION as AUTOSCALING_V2
from trimaran.api.autoscaling import API_VERSION_V1 as AUTOSCALING_V1
from trimaran.api.autoscaling import HPA_COLUMNS, HorizontalPodAutoscaler, HorizontalPodAutoscalerV1
from trimaran.api.batch import Job
from trimaran.api.coordination import API_VERSION as COORDINATION_V1
from trimaran.api.coordination import LEASE_COLUMNS, Lease
from trimaran.api.core import ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, Secret, ServiceAccount
from trimaran.api.cronjob import API_VERSION as CRONJOB_V1
from trimaran.api.cronjob import CRONJOB_COLUMNS, CronJob
from trimaran.api.discovery import API_VERSION as DISCOVERY_V1
from trimaran.api.discovery import ENDPOINTSLICE_COLUMNS, EndpointSlice
from trimaran.api.errors import FieldError
from trimaran.api.inferencegraph import API_VERSION as KSERVE_V1ALPHA1
from trimaran.api.inferencegraph import InferenceGraph
from trimaran.api.ingress import API_VERSION as INGRESS_V1
from trimaran.api.ingress import INGRESS_COLUMNS, INGRESSCLASS_COLUMNS, Ingress, IngressClass
from trimaran.api.jobset import API_VERSION as JOBSET_V1ALPHA2
from trimaran.api.jobset import JOBSET_NAME_KEY, JobSet
from trimaran.api.meta import Resource
from trimaran.api.monitoring import API_VERSION as MONITORING_V1
from trimaran.api.monitoring import PodMonitor, ServiceMonitor
from trimaran.api.networking import API_VERSION as NETWORKING_V1
from trimaran.api.networking import NETWORKPOLICY_COLUMNS, NetworkPolicy, format_selector
from trimaran.api.pipelines import (
    KFP_API_VERSION,
    TRIMARAN_API_VERSION,
    Pipeline,
    PipelineExperiment,
    PipelineVersion,
    RecurringRun,
    Run,
    run_reference_errors,
)
from trimaran.api.policy import API_VERSION as POLICY_V1
from trimaran.api.policy import PDB_COLUMNS, PodDisruptionBudget
from trimaran.api.printers import AGE, PrinterColumn
from trimaran.api.quota import LIMITRANGE_COLUMNS, QUOTA_COLUMNS, LimitRange, ResourceQuota
from trimaran.api.rbac import API_VERSION as RBAC_V1
from trimaran.api.rbac import BINDING_COLUMNS, ROLE_COLUMNS, ClusterRole, ClusterRoleBinding, Role, RoleBinding
from trimaran.api.scheduling import API_VERSION as SCHEDULING_V1
from trimaran.api.scheduling import PRIORITYCLASS_COLUMNS, PriorityClass
from trimaran.api.seldon import API_VERSIONS as SELDON_VERSIONS
from trimaran.api.seldon import SeldonDeployment
from trimaran.api.serving import API_VERSION as KSERVE_V1BETA1
from trimaran.api.serving import InferenceService
from trimaran.api.trainer import API_VERSION as TRAINER_V1ALPHA1
from trimaran.api.trainer import ClusterTrainingRuntime, TrainingRuntime, TrainJob, runtime_errors
from trimaran.api.training import API_VERSION as KUBEFLOW_V1
from trimaran.api.training import (
    JAXJOB,
    MPIJOB,
    PADDLEJOB,
    PYTORCHJOB,
    TFJOB,
    XGBOOSTJOB,
    JAXJob,
    MPIJob,
    MPIJobV2Beta1,
    PaddleJob,
    PyTorchJob,
    TFJob,
    XGBoostJob,
)
from trimaran.api.training import MPI_API_VERSION as MPI_V2BETA1
from trimaran.api.tuning import API_VERSION as KATIB_V1BETA1
from trimaran.api.tuning import Experiment, Suggestion, Trial

__all__ = ["KindInfo", "PodTemplate", "PrinterColumn", "Scale", "UnknownKindError", "all_kinds", "for_object",
           "lookup", "register", "unregister"]


class UnknownKindError(LookupError):
    """No registered kind matches; the message is kubectl's."""


def read_path(obj: dict[str, Any], path: str) -> Any:
    """The value at a dotted field path such as ``.spec.replicas`` (a subresource's path), or None."""
    value: Any = obj
    for part in path.strip(".").split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


@dataclass(frozen=True)
class Scale:
    """The ``scale`` subresource: where the replica count is read and written, and the selector of
    the pods it counts (a CRD's string at ``label_selector_path``, or a built-in kind's
    ``spec.selector``, a LabelSelector or an RC's map, which the Scale gives as a string)."""

    spec_replicas_path: str  # ".spec.pytorchReplicaSpecs.Worker.replicas"
    status_replicas_path: str
    label_selector_path: str = ""

    def selector(self, obj: dict[str, Any]) -> str | None:
        """The Scale's ``status.selector`` for ``obj``: None where the kind names none."""
        if not self.label_selector_path:
            return None
        value = read_path(obj, self.label_selector_path)
        if not isinstance(value, dict):
            return value
        if value.keys() <= {"matchLabels", "matchExpressions"}:
            return "" if not value else format_selector(value)
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))


_CONDITION_STATE = (PrinterColumn("State", json_path=".status.conditions[-1:].type"), AGE)
_KATIB_STATE = (PrinterColumn("Type", json_path=".status.conditions[-1:].type"),
                PrinterColumn("Status", json_path=".status.conditions[-1:].status"))

# Beyond Katib's CRD columns, for `get experiments -o wide`: how far the search is and who leads.
_EXPERIMENT_WIDE = (
    PrinterColumn("Algorithm", json_path=".spec.algorithm.algorithmName", priority=1),
    PrinterColumn("Trials", "integer", ".status.trials", priority=1),
    PrinterColumn("Succeeded", "integer", ".status.trialsSucceeded", priority=1),
    PrinterColumn("Running", "integer", ".status.trialsRunning", priority=1),
    PrinterColumn("Best Trial", json_path=".status.currentOptimalTrial.bestTrialName", priority=1),
)


def _worker_scale(replica_specs: str) -> Scale:
    return Scale(f".spec.{replica_specs}.Worker.replicas", ".status.replicaStatuses.Worker.active",
                 ".status.replicaStatuses.Worker.selector")


@dataclass(frozen=True)
class PodTemplate:
    """A pod an object of a kind stands for: the Pod itself, or a template its controller stamps pods from."""

    path: str  # where it sits in the object: "" for a Pod, "spec.pytorchReplicaSpecs.Worker.template"
    metadata: dict[str, Any]
    spec: dict[str, Any]
    spec_path: str = "spec"  # where ``spec`` sits: "spec.pytorchReplicaSpecs.Worker.template.spec"


PodTemplates = Callable[[dict[str, Any]], Iterator[PodTemplate]]
# Checks of a new object against others it names (a TrainJob's runtime), given a lookup of stored
# objects by kind, namespace and name (None when absent).
References = Callable[[dict[str, Any], Callable[[str, str, str], "dict[str, Any] | None"]], list[FieldError]]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _template(path: str, template: Any) -> Iterator[PodTemplate]:
    template = _mapping(template)
    if "spec" in template:
        yield PodTemplate(path, _mapping(template.get("metadata")), _mapping(template["spec"]), f"{path}.spec")


def _pod_itself(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    yield PodTemplate("", _mapping(obj.get("metadata")), _mapping(obj.get("spec")))


def _job_template(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    yield from _template("spec.template", _mapping(obj.get("spec")).get("template"))


def _replica_templates(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """The Kubeflow training kinds: one template per replica type, under ``spec.<x>ReplicaSpecs``."""
    for key, specs in _mapping(obj.get("spec")).items():
        if key.endswith("ReplicaSpecs"):
            for rtype, replica in _mapping(specs).items():
                yield from _template(f"spec.{key}.{rtype}.template", _mapping(replica).get("template"))


def _embedded_job(*path: str) -> PodTemplates:
    """A kind that carries a whole job manifest (a Katib trial template): that job's templates."""
    def templates(obj: dict[str, Any]) -> Iterator[PodTemplate]:
        job: Any = obj
        for key in path:
            job = _mapping(job).get(key)
        job = _mapping(job)
        info = _by_object.get((str(job.get("apiVersion")), str(job.get("kind"))))
        if info is not None and info.pod_templates is not None:
            for inner in info.pod_templates(job):
                prefix = ".".join(path)
                yield PodTemplate(f"{prefix}.{inner.path}", inner.metadata, inner.spec, f"{prefix}.{inner.spec_path}")
    return templates


def _replicated_job_templates(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """A JobSet: each replicatedJob's Job template's pod template."""
    for i, rjob in enumerate(_mapping(obj.get("spec")).get("replicatedJobs") or []):
        job_spec = _mapping(_mapping(_mapping(rjob).get("template")).get("spec"))
        yield from _template(f"spec.replicatedJobs[{i}].template.spec.template", job_spec.get("template"))


_SERVING_COMPONENTS = ("predictor", "transformer", "explainer")
_MODEL_KEYS = ("model", "sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "onnx", "triton",
               "huggingface", "pmml", "paddle")


def _seldon_components(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """A SeldonDeployment: each predictor's componentSpecs."""
    for i, predictor in enumerate(_mapping(obj.get("spec")).get("predictors") or []):
        for j, component in enumerate(_mapping(predictor).get("componentSpecs") or []):
            yield from _template(f"spec.predictors[{i}].componentSpecs[{j}]", component)


def _runtime_templates(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """A training runtime: its JobSet template's pods."""
    template = _mapping(_mapping(obj.get("spec")).get("template"))
    for inner in _replicated_job_templates(template):
        yield PodTemplate("spec.template." + inner.path, inner.metadata, inner.spec, "spec.template." + inner.spec_path)


def _serving_components(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """KServe's components are pod specs, with the model server a container of its own."""
    for component in _SERVING_COMPONENTS:
        spec = _mapping(_mapping(obj.get("spec")).get(component))
        if not spec:
            continue
        containers = list(spec.get("containers") or [])
        containers += [{**_mapping(spec[key]), "name": "kserve-container"} for key in _MODEL_KEYS if spec.get(key)]
        yield PodTemplate(f"spec.{component}", _mapping(obj.get("metadata")), {**spec, "containers": containers},
                          f"spec.{component}")


#: Kubernetes' own API groups among those served here; every other group is a custom resource's.
KUBERNETES_GROUPS = frozenset({"", "apps", "batch", "autoscaling", "coordination.k8s.io", "networking.k8s.io",
                               "policy", "apiextensions.k8s.io", "discovery.k8s.io", "rbac.authorization.k8s.io",
                               "apiregistration.k8s.io"})


@dataclass(frozen=True)
class KindInfo:
    """Everything the rest of Trimaran needs to know about a kind."""

    kind: str
    api_version: str  # "v1", "batch/v1", "kubeflow.org/v1"
    group: str  # "" for the core group
    version: str
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    model: type[Resource]
    categories: tuple[str, ...] = ()
    # kubectl's columns; none means Name and Age, as for a CRD that declares none.
    printer_columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = True
    scale: Scale | None = None
    # The pods an object stands for, checked at admission (Pod Security): none for kinds without.
    pod_templates: PodTemplates | None = None
    references: References | None = None
    # A label every pod of an object carries with the object's name as its value, where its pods
    # come from child Jobs rather than being owned by it (a JobSet's, and a TrainJob's JobSet's).
    pods_label: str | None = None
    # A delete that ends at once answers with the deleted object rather than a Status (the
    # registry's ReturnDeletedObject: Pods, Services, ServiceAccounts, PersistentVolumeClaims,
    # ResourceQuotas and PodTemplates among the built-in kinds, as upstream's OpenAPI says).
    returns_deleted: bool = False

    @property
    def builtin(self) -> bool:
        """A kind of Kubernetes' own API groups (served by kube-apiserver itself: strategic merge
        patch, types decoded without apiVersion/kind, no CustomResourceDefinition), not a CRD's."""
        return self.group in KUBERNETES_GROUPS

    @property
    def singular(self) -> str:
        """The lower-case kind, which kubectl accepts as a resource name."""
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def columns(self) -> tuple[PrinterColumn, ...]:
        """The Table columns after Name, as kube-apiserver builds them."""
        return self.printer_columns or (AGE,)

    def names(self) -> list[str]:
        """Every (lower-case) name `lookup` resolves to this kind."""
        base = [self.singular, self.plural, *self.short_names]
        qualified = []
        if self.group:
            for name in (self.singular, self.plural):
                qualified += [f"{name}.{self.group}", f"{name}.{self.version}.{self.group}"]
        return list(dict.fromkeys(n.lower() for n in base + qualified))


_by_object: dict[tuple[str, str], KindInfo] = {}
_by_name: dict[str, list[KindInfo]] = {}


def register(info: KindInfo) -> KindInfo:
    """Add a kind. When two versions share a name, the one registered first wins `lookup`
    (qualify the name with its version to reach the other). Registering the same info again
    is a no-op; a different info for the same apiVersion/kind is an error.
    """
    key = (info.api_version, info.kind)
    existing = _by_object.get(key)
    if existing is not None:
        if existing == info:
            return existing
        raise ValueError(f"kind {info.kind!r} in {info.api_version!r} is already registered")
    _by_object[key] = info
    for name in info.names():
        _by_name.setdefault(name, []).append(info)
    return info


def unregister(info: KindInfo) -> None:
    """Remove a kind registered at run time (a user's CustomResourceDefinition, deleted or changed)."""
    if _by_object.get((info.api_version, info.kind)) != info:
        return
    del _by_object[(info.api_version, info.kind)]
    for name in info.names():
        left = [i for i in _by_name.get(name, []) if i != info]
        if left:
            _by_name[name] = left
        else:
            _by_name.pop(name, None)


def lookup(name: str) -> KindInfo:
    """Resolve what a user typed: ``TFJob``, ``tfjob``, ``tfjobs``, ``tfjobs.kubeflow.org``,
    ``jobs.batch``, ``po``, ``cm``, ``ns``, ... (case-insensitive).
    """
    matches = _by_name.get(name.lower())
    if not matches:
        raise UnknownKindError(f'the server doesn\'t have a resource type "{name}"' + _suggestion(name.lower()))
    return matches[0]


def _suggestion(word: str) -> str:
    close = difflib.get_close_matches(word, list(_by_name), n=1, cutoff=0.75)
    return f'; did you mean "{close[0]}"?' if close else ""


def _served_kinds() -> str:
    by_version: dict[str, list[str]] = {}
    for info in _by_object.values():
        by_version.setdefault(info.api_version, []).append(info.kind)
    return "; ".join(f"{version}: {', '.join(names)}" for version, names in by_version.items())


def for_object(api_version: str, kind: str) -> KindInfo:
    """The kind of a manifest, by its exact ``apiVersion`` and ``kind``."""
    info = _by_object.get((api_version, kind))
    if info is not None:
        return info
    message = f'no matches for kind "{kind}" in version "{api_version}"'
    known = [i.api_version for i in _by_object.values() if i.kind == kind]
    if known:
        message += f" (known versions: {', '.join(known)})"
    else:
        kind_names = {i.kind.lower(): i.kind for i in _by_object.values()}
        close = difflib.get_close_matches(kind.lower(), list(kind_names), n=1, cutoff=0.75)
        message += f'; did you mean "{kind_names[close[0]]}"?' if close else "."
        message += f" Trimaran runs these kinds: {_served_kinds()}"
    raise UnknownKindError(message)


def all_kinds() -> list[KindInfo]:
    """Registered kinds, in registration order."""
    return list(_by_object.values())


def jobset_backed_kinds() -> tuple[str, ...]:
    """Kinds whose pods are their child Jobs' and carry the object's name in ``pods_label``."""
    return tuple(dict.fromkeys(k.kind for k in _by_object.values() if k.pods_label))


def pods_label_of(kind: str) -> str | None:
    """The ``pods_label`` of a kind, by its exact name; None for a kind that has none or is unknown."""
    return next((k.pods_label for k in _by_object.values() if k.kind == kind and k.pods_label), None)


def kubeflow_job_kinds() -> tuple[str, ...]:
    """The Kubeflow training kinds (their pods come from ``spec.*ReplicaSpecs``), in registration order."""
    return tuple(dict.fromkeys(k.kind for k in _by_object.values() if k.pod_templates is _replica_templates))


for _info in (
    KindInfo("Pod", "v1", "", "v1", "pods", ("po",), True, Pod, ("all",), printers.POD, pod_templates=_pod_itself,
             returns_deleted=True),
    KindInfo("ConfigMap", "v1", "", "v1", "configmaps", ("cm",), True, ConfigMap,
             printer_columns=printers.CONFIGMAP, status_subresource=False),
    KindInfo("Secret", "v1", "", "v1", "secrets", (), True, Secret, printer_columns=printers.SECRET,
             status_subresource=False),
    KindInfo("ServiceAccount", "v1", "", "v1", "serviceaccounts", ("sa",), True, ServiceAccount,
             printer_columns=(PrinterColumn("Secrets", "integer", value=lambda o: len(o.get("secrets") or [])), AGE),
             status_subresource=False, returns_deleted=True),
    KindInfo("Namespace", "v1", "", "v1", "namespaces", ("ns",), False, Namespace,
             printer_columns=printers.NAMESPACE),
    KindInfo("Node", "v1", "", "v1", "nodes", ("no",), False, Node, printer_columns=printers.NODE),
    KindInfo("Lease", COORDINATION_V1, "coordination.k8s.io", "v1", "leases", (), True, Lease,
             printer_columns=LEASE_COLUMNS, status_subresource=False),
    KindInfo("PersistentVolumeClaim", "v1", "", "v1", "persistentvolumeclaims", ("pvc",), True, PersistentVolumeClaim,
             printer_columns=printers.PVC, returns_deleted=True),
    KindInfo("Job", "batch/v1", "batch", "v1", "jobs", (), True, Job, ("all",), printers.JOB,
             pod_templates=_job_template),
    KindInfo("JobSet", JOBSET_V1ALPHA2, "jobset.x-k8s.io", "v1alpha2", "jobsets", (), True, JobSet,
             printer_columns=(
                 PrinterColumn("TerminalState", json_path=".status.terminalState"),
                 PrinterColumn("Restarts", json_path=".status.restarts"),
                 PrinterColumn("Completed", json_path=".status.conditions[?(@.type=='Completed')].status"),
                 PrinterColumn("Suspended", json_path=".spec.suspend"),
                 AGE), pod_templates=_replicated_job_templates, pods_label=JOBSET_NAME_KEY),
    KindInfo("TrainJob", TRAINER_V1ALPHA1, "trainer.kubeflow.org", "v1alpha1", "trainjobs", (), True, TrainJob,
             printer_columns=_CONDITION_STATE, references=runtime_errors, pods_label=JOBSET_NAME_KEY),
    KindInfo("TrainingRuntime", TRAINER_V1ALPHA1, "trainer.kubeflow.org", "v1alpha1", "trainingruntimes", (), True,
             TrainingRuntime, status_subresource=False, pod_templates=_runtime_templates),
    KindInfo("ClusterTrainingRuntime", TRAINER_V1ALPHA1, "trainer.kubeflow.org", "v1alpha1",
             "clustertrainingruntimes", (), False, ClusterTrainingRuntime, status_subresource=False),
    KindInfo(TFJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", TFJOB.plural, (), True, TFJob,
             printer_columns=_CONDITION_STATE, pod_templates=_replica_templates),
    KindInfo(PYTORCHJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", PYTORCHJOB.plural, (), True, PyTorchJob,
             printer_columns=_CONDITION_STATE, scale=_worker_scale("pytorchReplicaSpecs"),
             pod_templates=_replica_templates),
    KindInfo(XGBOOSTJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", XGBOOSTJOB.plural, (), True, XGBoostJob,
             printer_columns=_CONDITION_STATE, pod_templates=_replica_templates),
    KindInfo(JAXJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", JAXJOB.plural, (), True, JAXJob,
             printer_columns=_CONDITION_STATE, scale=_worker_scale("jaxReplicaSpecs"),
             pod_templates=_replica_templates),
    KindInfo(PADDLEJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", PADDLEJOB.plural, (), True, PaddleJob,
             printer_columns=_CONDITION_STATE, scale=_worker_scale("paddleReplicaSpecs"),
             pod_templates=_replica_templates),
    # Both MPIJob versions are one kind here (one CRD name on a cluster): `mpijobs` finds v1 first.
    KindInfo(MPIJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", MPIJOB.plural, (), True, MPIJob,
             printer_columns=(AGE, _CONDITION_STATE[0]), pod_templates=_replica_templates),
    KindInfo(MPIJOB.kind, MPI_V2BETA1, "kubeflow.org", "v2beta1", MPIJOB.plural, (), True, MPIJobV2Beta1,
             pod_templates=_replica_templates),
    KindInfo("Experiment", KATIB_V1BETA1, "kubeflow.org", "v1beta1", "experiments", ("exp",), True, Experiment,
             ("all", "kubeflow", "katib"), (*_KATIB_STATE, AGE, *_EXPERIMENT_WIDE),
             pod_templates=_embedded_job("spec", "trialTemplate", "trialSpec")),
    KindInfo("Trial", KATIB_V1BETA1, "kubeflow.org", "v1beta1", "trials", (), True, Trial,
             ("all", "kubeflow", "katib"), (*_KATIB_STATE, AGE), pod_templates=_embedded_job("spec", "runSpec")),
    KindInfo("Suggestion", KATIB_V1BETA1, "kubeflow.org", "v1beta1", "suggestions", (), True, Suggestion,
             ("all", "kubeflow", "katib"),
             (*_KATIB_STATE, PrinterColumn("Requested", json_path=".spec.requests"),
              PrinterColumn("Assigned", json_path=".status.suggestionCount"), AGE)),
    KindInfo("InferenceService", KSERVE_V1BETA1, "serving.kserve.io", "v1beta1", "inferenceservices", ("isvc",), True,
             InferenceService, printer_columns=(
                 PrinterColumn("URL", json_path=".status.url"),
                 PrinterColumn("Ready", json_path=".status.conditions[?(@.type=='Ready')].status"),
                 PrinterColumn("Prev", "integer", ".status.components.predictor.traffic[?(@.tag=='prev')].percent"),
                 PrinterColumn("Latest", "integer",
                               ".status.components.predictor.traffic[?(@.latestRevision==true)].percent"),
                 PrinterColumn("PrevRolledoutRevision",
                               json_path=".status.components.predictor.traffic[?(@.tag=='prev')].revisionName"),
                 PrinterColumn("LatestReadyRevision",
                               json_path=".status.components.predictor.traffic[?(@.latestRevision==true)].revisionName"),
                 AGE), pod_templates=_serving_components),
    KindInfo("InferenceGraph", KSERVE_V1ALPHA1, "serving.kserve.io", "v1alpha1", "inferencegraphs", ("ig",), True,
             InferenceGraph, printer_columns=(
                 PrinterColumn("URL", json_path=".status.url"),
                 PrinterColumn("Ready", json_path=".status.conditions[?(@.type=='Ready')].status"), AGE)),
    KindInfo("Deployment", APPS_V1, "apps", "v1", "deployments", ("deploy",), True, Deployment, ("all",),
             DEPLOYMENT_COLUMNS, scale=Scale(".spec.replicas", ".status.replicas", ".status.selector"),
             pod_templates=_job_template),
    KindInfo("Service", "v1", "", "v1", "services", ("svc",), True, Service, ("all",), SERVICE_COLUMNS,
             returns_deleted=True),
    KindInfo("HorizontalPodAutoscaler", AUTOSCALING_V2, "autoscaling", "v2", "horizontalpodautoscalers", ("hpa",),
             True, HorizontalPodAutoscaler, ("all",), HPA_COLUMNS),
    # v2 first: `hpa` finds it, and discovery prefers it, as kube-apiserver does.
    KindInfo("HorizontalPodAutoscaler", AUTOSCALING_V1, "autoscaling", "v1", "horizontalpodautoscalers", ("hpa",),
             True, HorizontalPodAutoscalerV1, ("all",), HPA_COLUMNS),
    KindInfo("ReplicaSet", APPS_V1, "apps", "v1", "replicasets", ("rs",), True, ReplicaSet, ("all",),
             REPLICASET_COLUMNS),
    KindInfo("ReplicationController", "v1", "", "v1", "replicationcontrollers", ("rc",), True, ReplicationController,
             ("all",), REPLICATIONCONTROLLER_COLUMNS,
             scale=Scale(".spec.replicas", ".status.replicas", ".spec.selector"),
             pod_templates=_job_template),
    KindInfo("DaemonSet", APPS_V1, "apps", "v1", "daemonsets", ("ds",), True, DaemonSet, ("all",),
             DAEMONSET_COLUMNS, pod_templates=_job_template),
    KindInfo("StatefulSet", APPS_V1, "apps", "v1", "statefulsets", ("sts",), True, StatefulSet, ("all",),
             STATEFULSET_COLUMNS, scale=Scale(".spec.replicas", ".status.replicas", ".spec.selector"),
             pod_templates=_job_template),
    KindInfo("ControllerRevision", APPS_V1, "apps", "v1", "controllerrevisions", (), True, ControllerRevision,
             printer_columns=CONTROLLERREVISION_COLUMNS, status_subresource=False),
    KindInfo("Endpoints", "v1", "", "v1", "endpoints", ("ep",), True, Endpoints, printer_columns=ENDPOINTS_COLUMNS,
             status_subresource=False),
    KindInfo("NetworkPolicy", NETWORKING_V1, "networking.k8s.io", "v1", "networkpolicies", ("netpol",), True,
             NetworkPolicy, printer_columns=NETWORKPOLICY_COLUMNS, status_subresource=False),
    KindInfo("ServiceMonitor", MONITORING_V1, "monitoring.coreos.com", "v1", "servicemonitors", ("smon",), True,
             ServiceMonitor, ("prometheus-operator",), status_subresource=False),
    KindInfo("PodMonitor", MONITORING_V1, "monitoring.coreos.com", "v1", "podmonitors", ("pmon",), True,
             PodMonitor, ("prometheus-operator",), status_subresource=False),
    KindInfo("Pipeline", KFP_API_VERSION, "pipelines.kubeflow.org", "v2beta1", "pipelines", (), True, Pipeline,
             ("kubeflow",), status_subresource=False),
    KindInfo("PipelineVersion", KFP_API_VERSION, "pipelines.kubeflow.org", "v2beta1", "pipelineversions", (), True,
             PipelineVersion, ("kubeflow",), (PrinterColumn("Pipeline", json_path=".spec.pipelineName"), AGE),
             status_subresource=False),
    KindInfo("PipelineExperiment", TRIMARAN_API_VERSION, "pipelines.trimaran.io", "v1", "pipelineexperiments",
             ("pexp",), True, PipelineExperiment, ("kubeflow",), status_subresource=False),
    KindInfo("Run", TRIMARAN_API_VERSION, "pipelines.trimaran.io", "v1", "runs", (), True, Run, ("all", "kubeflow"),
             (PrinterColumn("Display Name", json_path=".spec.displayName"),
              PrinterColumn("State", json_path=".status.state"),
              PrinterColumn("Started", "date", ".status.startedAt"),
              PrinterColumn("Experiment", json_path=".spec.experiment", priority=1),
              PrinterColumn("Message", json_path=".status.message", priority=1), AGE),
             references=run_reference_errors),
    KindInfo("RecurringRun", TRIMARAN_API_VERSION, "pipelines.trimaran.io", "v1", "recurringruns", (), True,
             RecurringRun, ("kubeflow",),
             (PrinterColumn("Mode", json_path=".spec.mode"),
              PrinterColumn("Cron", json_path=".spec.trigger.cronSchedule.cron"),
              PrinterColumn("Interval", "integer", ".spec.trigger.periodicSchedule.intervalSecond"),
              PrinterColumn("Last Run", "date", ".status.lastRunTime"), AGE),
             references=run_reference_errors),
):
    register(_info)

# Seldon's three versions are one CRD on a cluster: `sdep` finds v1 first.
for _version in SELDON_VERSIONS:
    register(KindInfo("SeldonDeployment", _version, _version.split("/")[0], _version.split("/")[1],
                      "seldondeployments", ("sdep",), True, SeldonDeployment, printer_columns=(
                          PrinterColumn("State", json_path=".status.state"),
                          PrinterColumn("Address", json_path=".status.address.url", priority=1), AGE),
                      scale=Scale(".spec.replicas", ".status.replicas", ".status.selector"),
                      pod_templates=_seldon_components))


def _cronjob_template(obj: dict[str, Any]) -> Iterator[PodTemplate]:
    """A CronJob: its Job template's pod template."""
    job = _mapping(_mapping(_mapping(obj.get("spec")).get("jobTemplate")).get("spec"))
    yield from _template("spec.jobTemplate.spec.template", job.get("template"))


register(KindInfo("CronJob", CRONJOB_V1, "batch", "v1", "cronjobs", ("cj",), True, CronJob, ("all",), CRONJOB_COLUMNS,
                  pod_templates=_cronjob_template))
register(KindInfo("EndpointSlice", DISCOVERY_V1, "discovery.k8s.io", "v1", "endpointslices", (), True, EndpointSlice,
                  printer_columns=ENDPOINTSLICE_COLUMNS, status_subresource=False))
register(KindInfo("PodDisruptionBudget", POLICY_V1, "policy", "v1", "poddisruptionbudgets", ("pdb",), True,
                  PodDisruptionBudget, printer_columns=PDB_COLUMNS))
# Quotas, limits and priorities (api/quota.py, api/scheduling.py; admission in controllers/quota.py).
KUBERNETES_GROUPS = KUBERNETES_GROUPS | {"scheduling.k8s.io"}
for _info in (
    KindInfo("ResourceQuota", "v1", "", "v1", "resourcequotas", ("quota",), True, ResourceQuota,
             printer_columns=QUOTA_COLUMNS),
    KindInfo("LimitRange", "v1", "", "v1", "limitranges", ("limits",), True, LimitRange,
             printer_columns=LIMITRANGE_COLUMNS, status_subresource=False),
    KindInfo("PriorityClass", SCHEDULING_V1, "scheduling.k8s.io", "v1", "priorityclasses", ("pc",), False,
             PriorityClass, printer_columns=PRIORITYCLASS_COLUMNS, status_subresource=False),
):
    register(_info)

# RBAC (rbac.authorization.k8s.io/v1): evaluated by trimaran.server.rbac.
for _info in (
    KindInfo("Role", RBAC_V1, "rbac.authorization.k8s.io", "v1", "roles", (), True, Role,
             printer_columns=ROLE_COLUMNS, status_subresource=False),
    KindInfo("ClusterRole", RBAC_V1, "rbac.authorization.k8s.io", "v1", "clusterroles", (), False, ClusterRole,
             printer_columns=ROLE_COLUMNS, status_subresource=False),
    KindInfo("RoleBinding", RBAC_V1, "rbac.authorization.k8s.io", "v1", "rolebindings", (), True, RoleBinding,
             printer_columns=BINDING_COLUMNS, status_subresource=False),
    KindInfo("ClusterRoleBinding", RBAC_V1, "rbac.authorization.k8s.io", "v1", "clusterrolebindings", (), False,
             ClusterRoleBinding, printer_columns=BINDING_COLUMNS, status_subresource=False),
):
    register(_info)

register(KindInfo("Ingress", INGRESS_V1, "networking.k8s.io", "v1", "ingresses", ("ing",), True, Ingress,
                  printer_columns=INGRESS_COLUMNS))
register(KindInfo("IngressClass", INGRESS_V1, "networking.k8s.io", "v1", "ingressclasses", (), False, IngressClass,
                  printer_columns=INGRESSCLASS_COLUMNS, status_subresource=False))
register(KindInfo("APIService", APIREGISTRATION_V1, "apiregistration.k8s.io", "v1", "apiservices", (), False,
                  APIService, printer_columns=APISERVICE_COLUMNS))
