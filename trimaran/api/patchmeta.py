"""How strategic merge patch merges each field of the built-in kinds, by type, as upstream declares it.

kube-apiserver merges a strategic patch by the Go types' ``patchStrategy`` and ``patchMergeKey``
tags, which its OpenAPI publishes as ``x-kubernetes-patch-strategy`` and
``x-kubernetes-patch-merge-key``. A field is found by its place in the type structure, not by its
name: a Service's ``spec.ports`` merge by ``port`` but a container's ``ports`` by
``containerPort``; ``tolerations`` have no strategy, so a patch replaces them whole.

Only the fields that carry a strategy, and the fields that lead to them, are written here: any
other field of a map merges key by key and any other list is replaced (upstream's default).
Custom resources have no such facts (kube-apiserver refuses strategic patches for them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FieldMeta", "NO_META", "TYPES", "field_meta", "kind_type"]


@dataclass(frozen=True)
class FieldMeta:
    """One field's patch facts: the type of its value (of its items for a list), the strategies
    (``merge``, ``retainKeys``, ``replace``) and the merge key of a list of objects."""

    type: str = ""
    strategies: frozenset[str] = frozenset()
    key: str = ""

    @property
    def merge(self) -> bool:
        return "merge" in self.strategies

    @property
    def replace(self) -> bool:
        return "replace" in self.strategies

    @property
    def retain_keys(self) -> bool:
        return "retainKeys" in self.strategies

    def extension(self) -> dict[str, str]:
        """The OpenAPI extensions that publish these facts (empty where there are none)."""
        out = {}
        if self.strategies:
            out["x-kubernetes-patch-strategy"] = ",".join(s for s in ("merge", "retainKeys", "replace")
                                                          if s in self.strategies)
        if self.key:
            out["x-kubernetes-patch-merge-key"] = self.key
        return out


NO_META = FieldMeta()


def _f(type_: str = "", strategy: str = "", key: str = "") -> FieldMeta:
    return FieldMeta(type_, frozenset(s for s in strategy.split(",") if s), key)


_MERGE = "merge"
_CONDITIONS = _f("", _MERGE, "type")
_OBJECT = {"metadata": _f("ObjectMeta")}

# type name -> field -> facts. Types are upstream's Go type names (core/v1, apps/v1, batch/v1,
# autoscaling/v2, policy/v1 and metav1's ObjectMeta).
TYPES: dict[str, dict[str, FieldMeta]] = {
    "ObjectMeta": {"finalizers": _f("", _MERGE), "ownerReferences": _f("", _MERGE, "uid")},
    "Object": _OBJECT,
    # Pods ------------------------------------------------------------------------------------
    "Pod": {**_OBJECT, "spec": _f("PodSpec"), "status": _f("PodStatus")},
    "PodTemplateSpec": {**_OBJECT, "spec": _f("PodSpec")},
    "PodTemplate": {**_OBJECT, "template": _f("PodTemplateSpec")},
    "PodSpec": {
        "volumes": _f("Volume", "merge,retainKeys", "name"),
        "initContainers": _f("Container", _MERGE, "name"),
        "containers": _f("Container", _MERGE, "name"),
        "ephemeralContainers": _f("Container", _MERGE, "name"),
        "imagePullSecrets": _f("", _MERGE, "name"),
        "hostAliases": _f("", _MERGE, "ip"),
        "topologySpreadConstraints": _f("", _MERGE, "topologyKey"),
        "schedulingGates": _f("", _MERGE, "name"),
        "resourceClaims": _f("", "merge,retainKeys", "name"),
    },
    # EphemeralContainerCommon has the same strategies as Container.
    "Container": {
        "ports": _f("", _MERGE, "containerPort"),
        "env": _f("", _MERGE, "name"),
        "volumeMounts": _f("", _MERGE, "mountPath"),
        "volumeDevices": _f("", _MERGE, "devicePath"),
    },
    "PodStatus": {
        "conditions": _CONDITIONS,
        "hostIPs": _f("", _MERGE, "ip"),
        "podIPs": _f("", _MERGE, "ip"),
        "resourceClaimStatuses": _f("", "merge,retainKeys", "name"),
        "containerStatuses": _f("ContainerStatus"),
        "initContainerStatuses": _f("ContainerStatus"),
        "ephemeralContainerStatuses": _f("ContainerStatus"),
    },
    "ContainerStatus": {"volumeMounts": _f("", _MERGE, "mountPath"),
                        "allocatedResourcesStatus": _f("", _MERGE, "name")},
    # Other core kinds ------------------------------------------------------------------------
    "Service": {**_OBJECT, "spec": _f("ServiceSpec"), "status": _f("ConditionsStatus")},
    "ServiceSpec": {"ports": _f("", _MERGE, "port")},
    "ServiceAccount": {**_OBJECT, "secrets": _f("", _MERGE, "name")},
    "Node": {**_OBJECT, "spec": _f("NodeSpec"), "status": _f("NodeStatus")},
    "NodeSpec": {"podCIDRs": _f("", _MERGE)},
    "NodeStatus": {"conditions": _CONDITIONS, "addresses": _f("", _MERGE, "type")},
    "ConditionsStatus": {"conditions": _CONDITIONS},
    "WithConditions": {**_OBJECT, "status": _f("ConditionsStatus")},
    "ComponentStatus": {**_OBJECT, "conditions": _CONDITIONS},
    "ReplicationController": {**_OBJECT, "spec": _f("TemplateSpec"), "status": _f("ConditionsStatus")},
    # apps, batch, autoscaling, policy --------------------------------------------------------
    "TemplateSpec": {"template": _f("PodTemplateSpec")},
    "Workload": {**_OBJECT, "spec": _f("TemplateSpec"), "status": _f("ConditionsStatus")},
    "Deployment": {**_OBJECT, "spec": _f("DeploymentSpec"), "status": _f("ConditionsStatus")},
    "DeploymentSpec": {"template": _f("PodTemplateSpec"), "strategy": _f("", "retainKeys")},
    "CronJob": {**_OBJECT, "spec": _f("CronJobSpec")},
    "CronJobSpec": {"jobTemplate": _f("JobTemplateSpec")},
    "JobTemplateSpec": {**_OBJECT, "spec": _f("TemplateSpec")},
    "PodDisruptionBudget": {**_OBJECT, "spec": _f("PodDisruptionBudgetSpec"), "status": _f("ConditionsStatus")},
    "PodDisruptionBudgetSpec": {"selector": _f("", "replace")},
}

# (group, kind) -> its type. A built-in kind not named here has only ObjectMeta's facts.
_KINDS: dict[tuple[str, str], str] = {
    ("", "Pod"): "Pod",
    ("", "PodTemplate"): "PodTemplate",
    ("", "ReplicationController"): "ReplicationController",
    ("", "Service"): "Service",
    ("", "ServiceAccount"): "ServiceAccount",
    ("", "Node"): "Node",
    ("", "Namespace"): "WithConditions",
    ("", "PersistentVolumeClaim"): "WithConditions",
    ("", "ComponentStatus"): "ComponentStatus",
    ("apps", "Deployment"): "Deployment",
    ("apps", "ReplicaSet"): "Workload",
    ("apps", "DaemonSet"): "Workload",
    ("apps", "StatefulSet"): "Workload",
    ("batch", "Job"): "Workload",
    ("batch", "CronJob"): "CronJob",
    ("autoscaling", "HorizontalPodAutoscaler"): "WithConditions",
    ("policy", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("networking.k8s.io", "ServiceCIDR"): "WithConditions",
}


def kind_type(api_version: str, kind: str) -> str:
    """The type whose facts a built-in kind's object is patched by."""
    group = api_version.rpartition("/")[0]
    if (group, kind) == ("autoscaling", "HorizontalPodAutoscaler") and api_version.endswith("/v1"):
        return "Object"  # autoscaling/v1 has no status.conditions (they live in an annotation)
    return _KINDS.get((group, kind), "Object")


def field_meta(type_name: str, field: str) -> FieldMeta:
    """The facts of ``field`` in ``type_name``; no facts (merge maps, replace lists) when none."""
    return TYPES.get(type_name, {}).get(field, NO_META)

