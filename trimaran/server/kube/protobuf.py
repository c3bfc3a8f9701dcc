"""Request bodies in Kubernetes' protobuf encoding, for the core kinds kubectl's generators send.

``kubectl create namespace|configmap|secret|serviceaccount|deployment|job|cronjob|service|pdb NAME``,
``kubectl run``, ``kubectl expose`` and ``kubectl autoscale`` build typed objects and send them as
``application/vnd.kubernetes.protobuf``: the magic ``k8s\\0``, then a ``runtime.Unknown`` holding the
TypeMeta and the object's own message. The messages below are the subset of k8s.io/api core/v1,
apps/v1, batch/v1, autoscaling/v1, policy/v1 and apimachinery meta/v1 those commands fill in, with upstream's
field numbers, declared as descriptors and parsed by the protobuf library; the result is the
object's JSON form, which the API then admits like any other body. A field outside that subset
that carries a value (``kubectl run --overrides`` can set any) is refused rather than dropped; Go
writes its empty structs (a status, a creation time) whatever the client set, so those pass. Other
kinds in protobuf stay a 415, as for custom resources on a cluster, and kubectl's ``-f`` path sends
JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError

from trimaran._varint import read_varint

__all__ = ["MEDIA_TYPE", "ProtobufError", "decode"]

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_PACKAGE = "trimaran.k8s"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_INT32 = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
_INT64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message -> (json name, number, type, repeated); a type is a scalar, a message name, or
# ("map", value type) for map<string, value>.
_SCHEMA: dict[str, list[tuple[str, int, Any, bool]]] = {
    "Unknown": [("typeMeta", 1, "TypeMeta", False), ("raw", 2, _BYTES, False),
                ("contentEncoding", 3, _STRING, False), ("contentType", 4, _STRING, False)],
    "TypeMeta": [("apiVersion", 1, _STRING, False), ("kind", 2, _STRING, False)],
    "ObjectMeta": [("name", 1, _STRING, False), ("generateName", 2, _STRING, False),
                   ("namespace", 3, _STRING, False), ("labels", 11, ("map", _STRING), False),
                   ("annotations", 12, ("map", _STRING), False), ("ownerReferences", 13, "OwnerReference", True),
                   ("finalizers", 14, _STRING, True)],
    "Namespace": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "NamespaceSpec", False)],
    "NamespaceSpec": [("finalizers", 1, _STRING, True)],
    "ConfigMap": [("metadata", 1, "ObjectMeta", False), ("data", 2, ("map", _STRING), False),
                  ("binaryData", 3, ("map", _BYTES), False), ("immutable", 4, _BOOL, False)],
    "Secret": [("metadata", 1, "ObjectMeta", False), ("data", 2, ("map", _BYTES), False),
               ("type", 3, _STRING, False), ("stringData", 4, ("map", _STRING), False),
               ("immutable", 5, _BOOL, False)],
    "ServiceAccount": [("metadata", 1, "ObjectMeta", False), ("secrets", 2, "ObjectReference", True),
                       ("imagePullSecrets", 3, "LocalObjectReference", True),
                       ("automountServiceAccountToken", 4, _BOOL, False)],
    "ObjectReference": [("kind", 1, _STRING, False), ("namespace", 2, _STRING, False),
                        ("name", 3, _STRING, False), ("uid", 4, _STRING, False), ("apiVersion", 5, _STRING, False),
                        ("resourceVersion", 6, _STRING, False), ("fieldPath", 7, _STRING, False)],
    "LocalObjectReference": [("name", 1, _STRING, False)],
    # autoscaling/v1, which `kubectl autoscale` sends.
    "HorizontalPodAutoscaler": [("metadata", 1, "ObjectMeta", False),
                                ("spec", 2, "HorizontalPodAutoscalerSpec", False)],
    "HorizontalPodAutoscalerSpec": [("scaleTargetRef", 1, "CrossVersionObjectReference", False),
                                    ("minReplicas", 2, _INT32, False), ("maxReplicas", 3, _INT32, False),
                                    ("targetCPUUtilizationPercentage", 4, _INT32, False)],
    "CrossVersionObjectReference": [("kind", 1, _STRING, False), ("name", 2, _STRING, False),
                                    ("apiVersion", 3, _STRING, False)],
    # apps/v1, batch/v1 and core/v1, as `kubectl create deployment|job`, `kubectl create service` and
    # `kubectl expose` fill them in (a job --from a CronJob carries its owner reference).
    "Deployment": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "DeploymentSpec", False)],
    "DeploymentSpec": [("replicas", 1, _INT32, False), ("selector", 2, "LabelSelector", False),
                       ("template", 3, "PodTemplateSpec", False), ("minReadySeconds", 5, _INT32, False),
                       ("revisionHistoryLimit", 6, _INT32, False), ("paused", 7, _BOOL, False),
                       ("progressDeadlineSeconds", 9, _INT32, False)],
    "Job": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "JobSpec", False)],
    "JobSpec": [("parallelism", 1, _INT32, False), ("completions", 2, _INT32, False),
                ("activeDeadlineSeconds", 3, _INT64, False), ("selector", 4, "LabelSelector", False),
                ("manualSelector", 5, _BOOL, False), ("template", 6, "PodTemplateSpec", False),
                ("backoffLimit", 7, _INT32, False), ("ttlSecondsAfterFinished", 8, _INT32, False),
                ("completionMode", 9, _STRING, False), ("suspend", 10, _BOOL, False)],
    "LabelSelector": [("matchLabels", 1, ("map", _STRING), False),
                      ("matchExpressions", 2, "LabelSelectorRequirement", True)],
    "LabelSelectorRequirement": [("key", 1, _STRING, False), ("operator", 2, _STRING, False),
                                 ("values", 3, _STRING, True)],
    "PodTemplateSpec": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "PodSpec", False)],
    "PodSpec": [("containers", 2, "Container", True), ("restartPolicy", 3, _STRING, False),
                ("terminationGracePeriodSeconds", 4, _INT64, False), ("dnsPolicy", 6, _STRING, False),
                ("nodeSelector", 7, ("map", _STRING), False), ("serviceAccountName", 8, _STRING, False),
                ("initContainers", 20, "Container", True)],
    "Container": [("name", 1, _STRING, False), ("image", 2, _STRING, False), ("command", 3, _STRING, True),
                  ("args", 4, _STRING, True), ("workingDir", 5, _STRING, False),
                  ("ports", 6, "ContainerPort", True), ("env", 7, "EnvVar", True),
                  ("terminationMessagePath", 13, _STRING, False), ("imagePullPolicy", 14, _STRING, False),
                  ("stdin", 16, _BOOL, False), ("stdinOnce", 17, _BOOL, False), ("tty", 18, _BOOL, False),
                  ("terminationMessagePolicy", 20, _STRING, False)],
    "ContainerPort": [("name", 1, _STRING, False), ("hostPort", 2, _INT32, False),
                      ("containerPort", 3, _INT32, False), ("protocol", 4, _STRING, False)],
    "EnvVar": [("name", 1, _STRING, False), ("value", 2, _STRING, False)],
    "Service": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "ServiceSpec", False)],
    "Pod": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "PodSpec", False)],
    "ServiceSpec": [("ports", 1, "ServicePort", True), ("selector", 2, ("map", _STRING), False),
                    ("clusterIP", 3, _STRING, False), ("type", 4, _STRING, False),
                    ("externalIPs", 5, _STRING, True), ("sessionAffinity", 7, _STRING, False),
                    ("externalName", 10, _STRING, False)],
    "ServicePort": [("name", 1, _STRING, False), ("protocol", 2, _STRING, False), ("port", 3, _INT32, False),
                    ("targetPort", 4, "IntOrString", False), ("nodePort", 5, _INT32, False),
                    ("appProtocol", 6, _STRING, False)],
    "IntOrString": [("type", 1, _INT64, False), ("intVal", 2, _INT32, False), ("strVal", 3, _STRING, False)],
    "OwnerReference": [("kind", 1, _STRING, False), ("name", 3, _STRING, False), ("uid", 4, _STRING, False),
                       ("apiVersion", 5, _STRING, False), ("controller", 6, _BOOL, False),
                       ("blockOwnerDeletion", 7, _BOOL, False)],
    # `kubectl create priorityclass` and `kubectl create quota`; a Quantity is a message of its string.
    "PriorityClass": [("metadata", 1, "ObjectMeta", False), ("value", 2, _INT32, False),
                      ("globalDefault", 3, _BOOL, False), ("description", 4, _STRING, False),
                      ("preemptionPolicy", 5, _STRING, False)],
    "ResourceQuota": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "ResourceQuotaSpec", False)],
    "ResourceQuotaSpec": [("hard", 1, ("map", "Quantity"), False), ("scopes", 2, _STRING, True)],
    "Quantity": [("string", 1, _STRING, False)],
    # rbac.authorization.k8s.io/v1 (`kubectl create role|clusterrole|rolebinding|clusterrolebinding`),
    # authorization.k8s.io/v1 (`kubectl auth can-i`) and authentication.k8s.io/v1 (`kubectl auth
    # whoami`, `kubectl create token`).
    "PolicyRule": [("verbs", 1, _STRING, True), ("apiGroups", 2, _STRING, True), ("resources", 3, _STRING, True),
                   ("resourceNames", 4, _STRING, True), ("nonResourceURLs", 5, _STRING, True)],
    "AggregationRule": [("clusterRoleSelectors", 1, "LabelSelector", True)],
    "Role": [("metadata", 1, "ObjectMeta", False), ("rules", 2, "PolicyRule", True)],
    "ClusterRole": [("metadata", 1, "ObjectMeta", False), ("rules", 2, "PolicyRule", True),
                    ("aggregationRule", 3, "AggregationRule", False)],
    "Subject": [("kind", 1, _STRING, False), ("apiGroup", 2, _STRING, False), ("name", 3, _STRING, False),
                ("namespace", 4, _STRING, False)],
    "RoleRef": [("apiGroup", 1, _STRING, False), ("kind", 2, _STRING, False), ("name", 3, _STRING, False)],
    "RoleBinding": [("metadata", 1, "ObjectMeta", False), ("subjects", 2, "Subject", True),
                    ("roleRef", 3, "RoleRef", False)],
    "ResourceAttributes": [("namespace", 1, _STRING, False), ("verb", 2, _STRING, False),
                           ("group", 3, _STRING, False),
                           ("version", 4, _STRING, False), ("resource", 5, _STRING, False),
                           ("subresource", 6, _STRING, False), ("name", 7, _STRING, False)],
    "NonResourceAttributes": [("path", 1, _STRING, False), ("verb", 2, _STRING, False)],
    "SelfSubjectAccessReview": [("metadata", 1, "ObjectMeta", False),
                                ("spec", 2, "SelfSubjectAccessReviewSpec", False)],
    "SelfSubjectAccessReviewSpec": [("resourceAttributes", 1, "ResourceAttributes", False),
                                    ("nonResourceAttributes", 2, "NonResourceAttributes", False)],
    "SubjectAccessReview": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "SubjectAccessReviewSpec", False)],
    "SubjectAccessReviewSpec": [("resourceAttributes", 1, "ResourceAttributes", False),
                                ("nonResourceAttributes", 2, "NonResourceAttributes", False),
                                ("user", 3, _STRING, False), ("groups", 4, _STRING, True), ("uid", 6, _STRING, False)],
    "SelfSubjectRulesReview": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "SelfSubjectRulesReviewSpec", False)],
    "SelfSubjectRulesReviewSpec": [("namespace", 1, _STRING, False)],
    "SelfSubjectReview": [("metadata", 1, "ObjectMeta", False)],
    "TokenRequest": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "TokenRequestSpec", False)],
    "TokenRequestSpec": [("audiences", 1, _STRING, True), ("boundObjectRef", 3, "BoundObjectReference", False),
                         ("expirationSeconds", 4, _INT64, False)],
    "BoundObjectReference": [("kind", 1, _STRING, False), ("apiVersion", 2, _STRING, False),
                             ("name", 3, _STRING, False), ("uid", 4, _STRING, False)],
}
# batch/v1 CronJob and policy/v1 PodDisruptionBudget, as `kubectl create cronjob|poddisruptionbudget` fill them in.
_SCHEMA.update({
    "CronJob": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "CronJobSpec", False)],
    "CronJobSpec": [("schedule", 1, _STRING, False), ("startingDeadlineSeconds", 2, _INT64, False),
                    ("concurrencyPolicy", 3, _STRING, False), ("suspend", 4, _BOOL, False),
                    ("jobTemplate", 5, "JobTemplateSpec", False), ("successfulJobsHistoryLimit", 6, _INT32, False),
                    ("failedJobsHistoryLimit", 7, _INT32, False), ("timeZone", 8, _STRING, False)],
    "JobTemplateSpec": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "JobSpec", False)],
    "PodDisruptionBudget": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "PodDisruptionBudgetSpec", False)],
    "PodDisruptionBudgetSpec": [("minAvailable", 1, "IntOrString", False), ("selector", 2, "LabelSelector", False),
                                ("maxUnavailable", 3, "IntOrString", False),
                                ("unhealthyPodEvictionPolicy", 4, _STRING, False)],
})
# The rest of a pod template a Job made by `kubectl create job --from=cronjob/X` carries (the CronJob's
# whole template): volumes, resources, env from references, security contexts, tolerations.
_STR, _Q = _STRING, "Quantity"
_SCHEMA["PodSpec"] += [
    ("volumes", 1, "Volume", True), ("activeDeadlineSeconds", 5, _INT64, False), ("nodeName", 10, _STR, False),
    ("hostNetwork", 11, _BOOL, False), ("securityContext", 14, "PodSecurityContext", False),
    ("imagePullSecrets", 15, "LocalObjectReference", True), ("hostname", 16, _STR, False),
    ("subdomain", 17, _STR, False), ("schedulerName", 19, _STR, False),
    ("automountServiceAccountToken", 21, _BOOL, False), ("tolerations", 22, "Toleration", True),
    ("priorityClassName", 24, _STR, False), ("enableServiceLinks", 30, _BOOL, False)]
_SCHEMA["Container"] += [
    ("resources", 8, "ResourceRequirements", False), ("volumeMounts", 9, "VolumeMount", True),
    ("securityContext", 15, "SecurityContext", False), ("envFrom", 19, "EnvFromSource", True)]
_SCHEMA["EnvVar"] += [("valueFrom", 3, "EnvVarSource", False)]
_SCHEMA.update({
    "Quantity": [("string", 1, _STR, False)],
    "ResourceRequirements": [("limits", 1, ("map", _Q), False), ("requests", 2, ("map", _Q), False)],
    "VolumeMount": [("name", 1, _STR, False), ("readOnly", 2, _BOOL, False), ("mountPath", 3, _STR, False),
                    ("subPath", 4, _STR, False), ("mountPropagation", 5, _STR, False),
                    ("subPathExpr", 6, _STR, False)],
    "Volume": [("name", 1, _STR, False), ("volumeSource", 2, "VolumeSource", False)],
    "VolumeSource": [("hostPath", 1, "HostPathVolumeSource", False), ("emptyDir", 2, "EmptyDirVolumeSource", False),
                     ("secret", 6, "SecretVolumeSource", False),
                     ("persistentVolumeClaim", 10, "PersistentVolumeClaimVolumeSource", False),
                     ("configMap", 19, "ConfigMapVolumeSource", False), ("csi", 28, "CSIVolumeSource", False)],
    "HostPathVolumeSource": [("path", 1, _STR, False), ("type", 2, _STR, False)],
    "EmptyDirVolumeSource": [("medium", 1, _STR, False), ("sizeLimit", 2, _Q, False)],
    "SecretVolumeSource": [("secretName", 1, _STR, False), ("items", 2, "KeyToPath", True),
                           ("defaultMode", 3, _INT32, False), ("optional", 4, _BOOL, False)],
    "ConfigMapVolumeSource": [("localObjectReference", 1, "LocalObjectReference", False),
                              ("items", 2, "KeyToPath", True), ("defaultMode", 3, _INT32, False),
                              ("optional", 4, _BOOL, False)],
    "KeyToPath": [("key", 1, _STR, False), ("path", 2, _STR, False), ("mode", 3, _INT32, False)],
    "PersistentVolumeClaimVolumeSource": [("claimName", 1, _STR, False), ("readOnly", 2, _BOOL, False)],
    "CSIVolumeSource": [("driver", 1, _STR, False), ("readOnly", 2, _BOOL, False), ("fsType", 3, _STR, False),
                        ("volumeAttributes", 4, ("map", _STR), False),
                        ("nodePublishSecretRef", 5, "LocalObjectReference", False)],
    "EnvVarSource": [("fieldRef", 1, "ObjectFieldSelector", False),
                     ("resourceFieldRef", 2, "ResourceFieldSelector", False),
                     ("configMapKeyRef", 3, "ConfigMapKeySelector", False),
                     ("secretKeyRef", 4, "SecretKeySelector", False)],
    "ObjectFieldSelector": [("apiVersion", 1, _STR, False), ("fieldPath", 2, _STR, False)],
    "ResourceFieldSelector": [("containerName", 1, _STR, False), ("resource", 2, _STR, False),
                              ("divisor", 3, _Q, False)],
    "ConfigMapKeySelector": [("localObjectReference", 1, "LocalObjectReference", False), ("key", 2, _STR, False),
                             ("optional", 3, _BOOL, False)],
    "SecretKeySelector": [("localObjectReference", 1, "LocalObjectReference", False), ("key", 2, _STR, False),
                          ("optional", 3, _BOOL, False)],
    "EnvFromSource": [("prefix", 1, _STR, False), ("configMapRef", 2, "ConfigMapEnvSource", False),
                      ("secretRef", 3, "SecretEnvSource", False)],
    "ConfigMapEnvSource": [("localObjectReference", 1, "LocalObjectReference", False), ("optional", 2, _BOOL, False)],
    "SecretEnvSource": [("localObjectReference", 1, "LocalObjectReference", False), ("optional", 2, _BOOL, False)],
    "Toleration": [("key", 1, _STR, False), ("operator", 2, _STR, False), ("value", 3, _STR, False),
                   ("effect", 4, _STR, False), ("tolerationSeconds", 5, _INT64, False)],
    "SecurityContext": [("capabilities", 1, "Capabilities", False), ("privileged", 2, _BOOL, False),
                        ("runAsUser", 4, _INT64, False), ("runAsNonRoot", 5, _BOOL, False),
                        ("readOnlyRootFilesystem", 6, _BOOL, False), ("allowPrivilegeEscalation", 7, _BOOL, False),
                        ("runAsGroup", 8, _INT64, False)],
    "Capabilities": [("add", 1, _STR, True), ("drop", 2, _STR, True)],
    "PodSecurityContext": [("runAsUser", 2, _INT64, False), ("runAsNonRoot", 3, _BOOL, False),
                           ("supplementalGroups", 4, _INT64, True), ("fsGroup", 5, _INT64, False),
                           ("runAsGroup", 6, _INT64, False)],
})
# Go structs embedded in their parent's JSON (`json:",inline"`).
# networking.k8s.io/v1 Ingress, as `kubectl create ingress` fills it in.
_SCHEMA.update({
    "Ingress": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "IngressSpec", False)],
    "IngressSpec": [("defaultBackend", 1, "IngressBackend", False), ("tls", 2, "IngressTLS", True),
                    ("rules", 3, "IngressRule", True), ("ingressClassName", 4, _STRING, False)],
    "IngressBackend": [("resource", 3, "TypedLocalObjectReference", False),
                       ("service", 4, "IngressServiceBackend", False)],
    "TypedLocalObjectReference": [("apiGroup", 1, _STRING, False), ("kind", 2, _STRING, False),
                                  ("name", 3, _STRING, False)],
    "IngressServiceBackend": [("name", 1, _STRING, False), ("port", 2, "ServiceBackendPort", False)],
    "ServiceBackendPort": [("name", 1, _STRING, False), ("number", 2, _INT32, False)],
    "IngressTLS": [("hosts", 1, _STRING, True), ("secretName", 2, _STRING, False)],
    "IngressRule": [("host", 1, _STRING, False), ("ingressRuleValue", 2, "IngressRuleValue", False)],
    "IngressRuleValue": [("http", 1, "HTTPIngressRuleValue", False)],
    "HTTPIngressRuleValue": [("paths", 1, "HTTPIngressPath", True)],
    "HTTPIngressPath": [("path", 1, _STRING, False), ("backend", 2, "IngressBackend", False),
                        ("pathType", 3, _STRING, False)],
})
_INLINE = {("Volume", "volumeSource"), ("IngressRule", "ingressRuleValue")} | {(m, "localObjectReference") for m in (
    "ConfigMapVolumeSource", "ConfigMapKeySelector", "SecretKeySelector", "ConfigMapEnvSource", "SecretEnvSource")}
# Pointers to structs whose presence is the value, empty or not (`emptyDir: {}`).
_EMPTY_IS_A_VALUE = {("VolumeSource", name) for name, *_ in _SCHEMA["VolumeSource"]}
# Go encodes a non-pointer scalar even when it is zero, and its JSON leaves zero out (omitempty):
# zeros are dropped but for these pointer fields, where zero is a value ("0 replicas").
_ZERO_MEANS_ZERO = {("DeploymentSpec", "replicas"), ("JobSpec", "parallelism"), ("JobSpec", "completions"),
                    ("JobSpec", "backoffLimit"), ("JobSpec", "ttlSecondsAfterFinished"),
                    ("HorizontalPodAutoscalerSpec", "minReplicas"), ("CronJobSpec", "startingDeadlineSeconds"),
                    ("CronJobSpec", "successfulJobsHistoryLimit"), ("CronJobSpec", "failedJobsHistoryLimit"),
                    ("PriorityClass", "value")}
_ZERO_MEANS_ZERO |= {
    ("PodSpec", "automountServiceAccountToken"), ("PodSpec", "enableServiceLinks"),
    ("Toleration", "tolerationSeconds"), ("KeyToPath", "mode"),
    *((m, f) for m in ("SecretVolumeSource", "ConfigMapVolumeSource") for f in ("defaultMode", "optional")),
    *((m, "optional") for m in ("ConfigMapKeySelector", "SecretKeySelector", "ConfigMapEnvSource", "SecretEnvSource")),
    *(("SecurityContext", f) for f in ("privileged", "runAsUser", "runAsNonRoot", "readOnlyRootFilesystem",
                                       "allowPrivilegeEscalation", "runAsGroup")),
    *(("PodSecurityContext", f) for f in ("runAsUser", "runAsNonRoot", "fsGroup", "runAsGroup"))}
# The kinds a body may carry: (apiVersion, kind) -> message.
_KINDS = {("v1", kind): kind for kind in ("Namespace", "ConfigMap", "Secret", "ServiceAccount", "Service", "Pod")}
_KINDS["autoscaling/v1", "HorizontalPodAutoscaler"] = "HorizontalPodAutoscaler"
_KINDS["apps/v1", "Deployment"] = "Deployment"
_KINDS["batch/v1", "Job"] = "Job"
_KINDS["batch/v1", "CronJob"] = "CronJob"
_KINDS["policy/v1", "PodDisruptionBudget"] = "PodDisruptionBudget"
_KINDS["v1", "ResourceQuota"] = "ResourceQuota"
_KINDS["scheduling.k8s.io/v1", "PriorityClass"] = "PriorityClass"
for _kind in ("Role", "ClusterRole", "RoleBinding"):
    _KINDS["rbac.authorization.k8s.io/v1", _kind] = _kind
_KINDS["rbac.authorization.k8s.io/v1", "ClusterRoleBinding"] = "RoleBinding"  # the same fields
for _kind in ("SelfSubjectAccessReview", "SubjectAccessReview", "SelfSubjectRulesReview"):
    _KINDS["authorization.k8s.io/v1", _kind] = _kind
_KINDS["authorization.k8s.io/v1", "LocalSubjectAccessReview"] = "SubjectAccessReview"
_KINDS["authentication.k8s.io/v1", "SelfSubjectReview"] = "SelfSubjectReview"
_KINDS["authentication.k8s.io/v1", "TokenRequest"] = "TokenRequest"
_KINDS["networking.k8s.io/v1", "Ingress"] = "Ingress"


class ProtobufError(ValueError):
    """A protobuf body that is malformed or carries a kind not decoded here."""


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="trimaran_k8s_subset.proto", package=_PACKAGE,
                                               syntax="proto2")
    for name, fields in _SCHEMA.items():
        message = proto.message_type.add(name=name)
        for json_name, number, kind, repeated in fields:
            field = message.field.add(name=json_name, json_name=json_name, number=number,
                                      label=_REPEATED if repeated else _OPTIONAL)
            if isinstance(kind, tuple):  # map<string, V>: a repeated nested entry type
                entry = message.nested_type.add(name=f"{json_name[0].upper()}{json_name[1:]}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", json_name="key", number=1, label=_OPTIONAL, type=_STRING)
                value = entry.field.add(name="value", json_name="value", number=2, label=_OPTIONAL)
                if isinstance(kind[1], str):  # a message (a Quantity)
                    value.type, value.type_name = _MESSAGE, f".{_PACKAGE}.{kind[1]}"
                else:
                    value.type = kind[1]
                field.label = _REPEATED
                field.type = _MESSAGE
                field.type_name = f".{_PACKAGE}.{name}.{entry.name}"
            elif isinstance(kind, str):
                field.type = _MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
            else:
                field.type = kind
    return proto


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())
_CLASSES = {name: message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _SCHEMA}


def _to_json(message: Any) -> dict[str, Any]:
    """The fields a client set, in Kubernetes' JSON form (bytes as base64, maps as objects). Go
    encodes every string field, empty ones too: an empty string is a field left out."""
    name = message.DESCRIPTOR.name
    if name == "IntOrString":  # a port by number or by name
        return {"value": message.strVal if message.type == 1 else message.intVal}
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if value == "" or (value is False or (type(value) is int and value == 0)) and (
                (name, field.json_name) not in _ZERO_MEANS_ZERO):
            continue
        if field.message_type is not None and field.message_type.name == "IntOrString":
            out[field.json_name] = _to_json(value)["value"]
        elif field.message_type is not None and field.message_type.name == "Quantity":
            out[field.json_name] = value.string
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry_value = field.message_type.fields_by_name["value"]
            out[field.json_name] = {
                k: base64.b64encode(v).decode() if entry_value.type == _BYTES else
                v.string if entry_value.type == _MESSAGE else v for k, v in value.items()}
        elif field.message_type is not None and field.is_repeated:
            out[field.json_name] = [_to_json(item) for item in value]
        elif (name, field.json_name) in _INLINE:
            out.update(_to_json(value))
        elif field.message_type is not None:
            out[field.json_name] = _to_json(value)
            if not out[field.json_name] and (name, field.json_name) not in _EMPTY_IS_A_VALUE:
                del out[field.json_name]
        elif field.is_repeated:
            out[field.json_name] = list(value)
        elif field.type == _BYTES:
            out[field.json_name] = base64.b64encode(value).decode()
        else:
            out[field.json_name] = value
    return out


_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def _all_zero(data: bytes) -> bool:
    """Whether ``data`` is a message whose every value is zero or empty, as Go writes an empty struct."""
    at = 0
    try:
        while at < len(data):
            key, at = read_varint(data, at)
            wire = key & 7
            if wire == _VARINT:
                value, at = read_varint(data, at)
                if value:
                    return False
            elif wire in (_FIXED64, _FIXED32):
                width = 8 if wire == _FIXED64 else 4
                if len(data) < at + width or any(data[at:at + width]):
                    return False
                at += width
            elif wire == _LENGTH:
                size, at = read_varint(data, at)
                chunk = data[at:at + size]
                if len(chunk) < size or (chunk and not _all_zero(chunk)):
                    return False
                at += size
            else:
                return False
    except (IndexError, ValueError):  # not a message: a string or bytes with content
        return False
    return True


def _undecoded(message: Any, path: str) -> str | None:
    """The path of the first field in ``message`` or below that is outside the schema and holds a value."""
    for field in unknown_fields.UnknownFieldSet(message):
        data = field.data
        empty = not data if field.wire_type != _LENGTH else _all_zero(bytes(data))
        if not empty:
            return f"{path} (field {field.field_number})"
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        for index, item in enumerate(value if field.is_repeated else [value]):
            found = _undecoded(item, f"{path}.{field.json_name}" + (f"[{index}]" if field.is_repeated else ""))
            if found:
                return found
    return None


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body carries, as the JSON body the API would have received."""
    if not body.startswith(_MAGIC):
        raise ProtobufError("a protobuf body starts with the bytes 'k8s\\x00'")
    envelope = _CLASSES["Unknown"]()
    try:
        envelope.ParseFromString(body[len(_MAGIC):])
    except DecodeError as exc:
        raise ProtobufError(f"the protobuf envelope cannot be decoded: {exc}") from None
    if envelope.contentEncoding:
        raise ProtobufError(f'content encoding "{envelope.contentEncoding}" is not supported')
    api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
    message_name = _KINDS.get((api_version, kind))
    if message_name is None:
        raise ProtobufError(f"{kind} ({api_version}) is not accepted in protobuf here; send it as JSON "
                            "(kubectl create -f FILE does)")
    message = _CLASSES[message_name]()
    try:
        message.ParseFromString(envelope.raw)
    except DecodeError as exc:
        raise ProtobufError(f"the {kind} cannot be decoded: {exc}") from None
    undecoded = _undecoded(message, kind)
    if undecoded:
        raise ProtobufError(f"{undecoded} is not read from protobuf here; send the {kind} as JSON "
                            "(kubectl create -f FILE does)")
    return {"apiVersion": api_version, "kind": kind, **_to_json(message)}
