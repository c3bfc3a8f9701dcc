"""The well-known label keys of the operators whose kinds Trimaran serves, written once.

The kinds' modules (``training``, ``tuning``, ``jobset``, ``trainer``) and every reader of pods and
trials (controllers, the CLI, the SDK, the dashboard) take them from here. Plain strings, no models:
a client that only reads labels does not load pydantic.
"""

from __future__ import annotations

__all__ = [
    "CONTROLLER_REVISION_HASH_LABEL", "ENDPOINTSLICE_MANAGED_BY_LABEL", "EXPERIMENT_LABEL", "HEADLESS_SERVICE_LABEL",
    "JOB_NAME_LABEL", "JOB_ROLE_LABEL", "OPERATOR_NAME_LABEL", "POD_INDEX_LABEL", "REPLICATED_JOB_NAME_KEY",
    "REPLICA_INDEX_LABEL", "REPLICA_TYPE_LABEL", "REVISION_HASH_LABEL", "SERVICE_NAME_LABEL", "SKIP_MIRROR_LABEL",
    "STATEFULSET_POD_NAME_LABEL", "TRAINJOB_NAME_LABEL", "TRIAL_LABEL",
]

# The training operator's, on every pod of a job (v1 kinds, and MPIJob v2beta1).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

# Katib's, on trials and their jobs' pods.
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
TRIAL_LABEL = "katib.kubeflow.org/trial"

# JobSet's, on every Job and pod of a replicated job; Trainer's, on a TrainJob's JobSet and pods.
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
TRAINJOB_NAME_LABEL = "trainer.kubeflow.org/trainjob-name"

# kube-controller-manager's, on the pods and ControllerRevisions of StatefulSets and DaemonSets.
CONTROLLER_REVISION_HASH_LABEL = "controller-revision-hash"  # a pod's revision (a DaemonSet's revisions too)
REVISION_HASH_LABEL = "controller.kubernetes.io/hash"  # a StatefulSet's ControllerRevision's hash
STATEFULSET_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"

# Kubernetes' own, on the EndpointSlices of a Service.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINTSLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
HEADLESS_SERVICE_LABEL = "service.kubernetes.io/headless"
# On Endpoints that must not be mirrored into slices (kube-apiserver's own, of `kubernetes`).
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"
