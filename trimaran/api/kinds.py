"""The registry of kinds: which models exist and every name a user may call them by.

Built-in kinds register themselves below; later packages (Katib's Experiment and Trial,
KServe's InferenceService, ...) call `register` with their own `KindInfo`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from trimaran.api import printers
from trimaran.api.batch import Job
from trimaran.api.core import ConfigMap, Namespace, PersistentVolumeClaim, Pod, Secret
from trimaran.api.meta import Resource
from trimaran.api.printers import AGE, PrinterColumn
from trimaran.api.serving import API_VERSION as KSERVE_V1BETA1
from trimaran.api.serving import InferenceService
from trimaran.api.training import API_VERSION as KUBEFLOW_V1
from trimaran.api.training import MPI_API_VERSION as MPI_V2BETA1
from trimaran.api.training import MPIJOB, PYTORCHJOB, TFJOB, MPIJob, MPIJobV2Beta1, PyTorchJob, TFJob
from trimaran.api.tuning import API_VERSION as KATIB_V1BETA1
from trimaran.api.tuning import Experiment, Suggestion, Trial

__all__ = ["KindInfo", "PrinterColumn", "Scale", "UnknownKindError", "all_kinds", "for_object", "lookup", "register"]


class UnknownKindError(LookupError):
    """No registered kind matches; the message is kubectl's."""


@dataclass(frozen=True)
class Scale:
    """The ``scale`` subresource of a CRD: where the replica count is read and written."""

    spec_replicas_path: str  # ".spec.pytorchReplicaSpecs.Worker.replicas"
    status_replicas_path: str
    label_selector_path: str = ""


_CONDITION_STATE = (PrinterColumn("State", json_path=".status.conditions[-1:].type"), AGE)
_KATIB_STATE = (PrinterColumn("Type", json_path=".status.conditions[-1:].type"),
                PrinterColumn("Status", json_path=".status.conditions[-1:].status"))


def _worker_scale(replica_specs: str) -> Scale:
    return Scale(f".spec.{replica_specs}.Worker.replicas", ".status.replicaStatuses.Worker.active",
                 ".status.replicaStatuses.Worker.selector")


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


for _info in (
    KindInfo("Pod", "v1", "", "v1", "pods", ("po",), True, Pod, ("all",), printers.POD),
    KindInfo("ConfigMap", "v1", "", "v1", "configmaps", ("cm",), True, ConfigMap,
             printer_columns=printers.CONFIGMAP, status_subresource=False),
    KindInfo("Secret", "v1", "", "v1", "secrets", (), True, Secret, printer_columns=printers.SECRET,
             status_subresource=False),
    KindInfo("Namespace", "v1", "", "v1", "namespaces", ("ns",), False, Namespace,
             printer_columns=printers.NAMESPACE),
    KindInfo("PersistentVolumeClaim", "v1", "", "v1", "persistentvolumeclaims", ("pvc",), True, PersistentVolumeClaim,
             printer_columns=printers.PVC),
    KindInfo("Job", "batch/v1", "batch", "v1", "jobs", (), True, Job, ("all",), printers.JOB),
    KindInfo(TFJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", TFJOB.plural, (), True, TFJob,
             printer_columns=_CONDITION_STATE),
    KindInfo(PYTORCHJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", PYTORCHJOB.plural, (), True, PyTorchJob,
             printer_columns=_CONDITION_STATE, scale=_worker_scale("pytorchReplicaSpecs")),
    # Both MPIJob versions are one kind here (one CRD name on a cluster): `mpijobs` finds v1 first.
    KindInfo(MPIJOB.kind, KUBEFLOW_V1, "kubeflow.org", "v1", MPIJOB.plural, (), True, MPIJob,
             printer_columns=(AGE, _CONDITION_STATE[0])),
    KindInfo(MPIJOB.kind, MPI_V2BETA1, "kubeflow.org", "v2beta1", MPIJOB.plural, (), True, MPIJobV2Beta1),
    KindInfo("Experiment", KATIB_V1BETA1, "kubeflow.org", "v1beta1", "experiments", ("exp",), True, Experiment,
             ("all", "kubeflow", "katib"), (*_KATIB_STATE, AGE)),
    KindInfo("Trial", KATIB_V1BETA1, "kubeflow.org", "v1beta1", "trials", (), True, Trial,
             ("all", "kubeflow", "katib"), (*_KATIB_STATE, AGE)),
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
                 AGE)),
):
    register(_info)
