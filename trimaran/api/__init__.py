"""Trimaran's API: resource kinds as pydantic models, the kind registry, and the manifest loader.

Objects travel through Trimaran as plain dicts (``{"apiVersion", "kind", "metadata", "spec",
"status"}``); the models here parse, default and check them::

    from trimaran.api import load_and_validate, ManifestError

    try:
        for manifest in load_and_validate("job.yaml"):
            print(manifest.object["metadata"]["name"], manifest.warnings)
    except ManifestError as exc:
        print(exc)  # one located line per problem

Names are imported lazily (PEP 562): a client that only reads manifests
(``trimaran.api.manifests``) does not load pydantic and every kind's model, a quarter of a
second of a CLI command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trimaran._lazy import lazy_exports

_EXPORTS = {
    "batch": [
        "BatchJobStatus", "Job", "JobSpec", "format_indexes", "parse_index_ranges", "parse_indexes"
    ],
    "core": [
        "Affinity", "ConfigMap", "Container", "ContainerPort", "ContainerState", "ContainerStatus", "EnvVar",
        "EnvVarSource", "Namespace", "NodeAffinity", "NodeSelector", "NodeSelectorRequirement",
        "NodeSelectorTerm", "PersistentVolumeClaim", "Pod", "PodSpec", "PodStatus", "PodTemplateSpec",
        "Quantity", "ResourceRequirements", "Secret", "ServiceAccount", "Toleration", "Volume", "VolumeMount",
        "is_extended_resource", "parse_cpu", "parse_memory", "parse_quantity"
    ],
    "errors": [
        "FieldError", "ManifestError"
    ],
    "kinds": [
        "KindInfo", "UnknownKindError", "all_kinds", "for_object", "lookup", "register"
    ],
    "manifests": [
        "Manifest", "load_manifests"
    ],
    "loader": [
        "ValidationResult", "load_and_validate", "validate"
    ],
    "meta": [
        "Condition", "LabelSelector", "ObjectMeta", "OwnerReference", "Resource", "is_dns1035_label",
        "is_dns1123_label", "is_dns1123_subdomain", "is_qualified_name", "is_valid_label_value"
    ],
    "training": [
        "JAXJOB", "JOB_NAME_LABEL", "JOB_ROLE_LABEL", "MPI_API_VERSION", "MPIJOB", "OPERATOR_NAME_LABEL",
        "PADDLEJOB", "PYTORCHJOB", "REPLICA_INDEX_LABEL", "REPLICA_TYPE_LABEL", "TFJOB", "XGBOOSTJOB",
        "ElasticPolicy", "Framework", "JAXJob", "JobStatus", "KubeflowJob", "MPIJob", "MPIJobV2Beta1", "PaddleJob",
        "PyTorchJob", "ReplicaSpec", "ReplicaStatus", "RunPolicy", "TFJob", "XGBoostJob"
    ],
    "tuning": [
        "ALGORITHMS", "DEFAULT_JOB_FAILURE_CONDITION", "DEFAULT_JOB_SUCCESS_CONDITION",
        "DEFAULT_KUBEFLOW_JOB_FAILURE_CONDITION", "DEFAULT_KUBEFLOW_JOB_PRIMARY_POD_LABELS",
        "DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION", "DEFAULT_METRICS_FILE", "DEFAULT_METRICS_FILTER",
        "DEFAULT_TFEVENT_DIR", "EARLY_STOPPING_ALGORITHMS", "EXPERIMENT_LABEL", "TRIAL_KINDS", "TRIAL_LABEL",
        "Experiment", "ExperimentSpec", "ExperimentStatus", "MetricsCollectorSpec", "ObjectiveSpec",
        "ParameterSpec", "Suggestion", "SuggestionSpec", "SuggestionStatus", "Trial", "TrialSpec",
        "TrialStatus", "TrialTemplate", "TrialTemplateError", "check_trial_spec", "is_metadata_reference",
        "resolve_metadata_reference", "substitute_trial_template", "template_parameter_names",
        "trial_parameter_refs", "trial_parameter_values"
    ],
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from trimaran.api.batch import BatchJobStatus, Job, JobSpec, format_indexes, parse_index_ranges, parse_indexes
    from trimaran.api.core import (
        Affinity,
        ConfigMap,
        Container,
        ContainerPort,
        ContainerState,
        ContainerStatus,
        EnvVar,
        EnvVarSource,
        Namespace,
        NodeAffinity,
        NodeSelector,
        NodeSelectorRequirement,
        NodeSelectorTerm,
        PersistentVolumeClaim,
        Pod,
        PodSpec,
        PodStatus,
        PodTemplateSpec,
        Quantity,
        ResourceRequirements,
        Secret,
        ServiceAccount,
        Toleration,
        Volume,
        VolumeMount,
        is_extended_resource,
        parse_cpu,
        parse_memory,
        parse_quantity,
    )
    from trimaran.api.errors import FieldError, ManifestError
    from trimaran.api.kinds import KindInfo, UnknownKindError, all_kinds, for_object, lookup, register
    from trimaran.api.loader import ValidationResult, load_and_validate, validate
    from trimaran.api.manifests import Manifest, load_manifests
    from trimaran.api.meta import (
        Condition,
        LabelSelector,
        ObjectMeta,
        OwnerReference,
        Resource,
        is_dns1035_label,
        is_dns1123_label,
        is_dns1123_subdomain,
        is_qualified_name,
        is_valid_label_value,
    )
    from trimaran.api.training import (
        JAXJOB,
        JOB_NAME_LABEL,
        JOB_ROLE_LABEL,
        MPI_API_VERSION,
        MPIJOB,
        OPERATOR_NAME_LABEL,
        PADDLEJOB,
        PYTORCHJOB,
        REPLICA_INDEX_LABEL,
        REPLICA_TYPE_LABEL,
        TFJOB,
        XGBOOSTJOB,
        ElasticPolicy,
        Framework,
        JAXJob,
        JobStatus,
        KubeflowJob,
        MPIJob,
        MPIJobV2Beta1,
        PaddleJob,
        PyTorchJob,
        ReplicaSpec,
        ReplicaStatus,
        RunPolicy,
        TFJob,
        XGBoostJob,
    )
    from trimaran.api.tuning import (
        ALGORITHMS,
        DEFAULT_JOB_FAILURE_CONDITION,
        DEFAULT_JOB_SUCCESS_CONDITION,
        DEFAULT_KUBEFLOW_JOB_FAILURE_CONDITION,
        DEFAULT_KUBEFLOW_JOB_PRIMARY_POD_LABELS,
        DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION,
        DEFAULT_METRICS_FILE,
        DEFAULT_METRICS_FILTER,
        DEFAULT_TFEVENT_DIR,
        EARLY_STOPPING_ALGORITHMS,
        EXPERIMENT_LABEL,
        TRIAL_KINDS,
        TRIAL_LABEL,
        Experiment,
        ExperimentSpec,
        ExperimentStatus,
        MetricsCollectorSpec,
        ObjectiveSpec,
        ParameterSpec,
        Suggestion,
        SuggestionSpec,
        SuggestionStatus,
        Trial,
        TrialSpec,
        TrialStatus,
        TrialTemplate,
        TrialTemplateError,
        check_trial_spec,
        is_metadata_reference,
        resolve_metadata_reference,
        substitute_trial_template,
        template_parameter_names,
        trial_parameter_refs,
        trial_parameter_values,
    )

