"""The bootstrap policy: the ClusterRoles and ClusterRoleBindings kube-apiserver makes at start
(plugin/pkg/auth/authorizer/rbac/bootstrappolicy, its ``testdata/cluster-roles.yaml``), those a
user meets: ``cluster-admin``, the aggregated ``admin``/``edit``/``view`` with their
``system:aggregate-to-*`` parts, ``system:basic-user``, ``system:discovery``,
``system:public-info-viewer`` and ``system:monitoring``.

Beyond upstream's, what a cluster with Kubeflow installed has: metrics-server's
``system:aggregated-metrics-reader``, and ``trimaran:aggregate-to-{view,edit,admin}`` for the
custom kinds served here (as Kubeflow's manifests ship ``kubeflow-*-edit`` roles aggregated into
the defaults), built from the kind registry.
"""

from __future__ import annotations

from typing import Any

from trimaran.api import kinds
from trimaran.api.rbac import AGGREGATE_LABEL, API_GROUP, API_VERSION

__all__ = ["AUTOUPDATE", "BOOTSTRAP_LABELS", "MASTERS", "OBSERVATIONS", "READ", "WRITE", "bootstrap_objects",
           "cluster_role"]

READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]
MASTERS = "system:masters"
AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
# Katib's observation logs (its database, served by server/katib and /trimaran/v1): deleting them
# is an administrator's act, authorised as ``delete`` on this subresource of trials.
OBSERVATIONS = "trials/observations"


def _rule(verbs: list[str], groups: list[str], resources: list[str]) -> dict[str, Any]:
    return {"verbs": verbs, "apiGroups": groups, "resources": resources}


def _urls(verbs: list[str], urls: list[str]) -> dict[str, Any]:
    return {"verbs": verbs, "nonResourceURLs": urls}


def cluster_role(name: str, rules: list[dict[str, Any]] | None, labels: dict[str, str] | None = None,
                 aggregate: str | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "ClusterRole",
                            "metadata": {"name": name, "annotations": dict(AUTOUPDATE),
                                         "labels": {**BOOTSTRAP_LABELS, **(labels or {})}}}
    if aggregate is not None:
        selector = {"matchLabels": {f"{AGGREGATE_LABEL}-{aggregate}": "true"}}
        role["aggregationRule"] = {"clusterRoleSelectors": [selector]}
    role["rules"] = rules or []
    return role


def _to(*roles: str) -> dict[str, str]:
    return {f"{AGGREGATE_LABEL}-{r}": "true" for r in roles}


def _binding(name: str, role: str, groups: list[str]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "annotations": dict(AUTOUPDATE), "labels": dict(BOOTSTRAP_LABELS)},
            "roleRef": {"apiGroup": API_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "Group", "apiGroup": API_GROUP, "name": g} for g in groups]}


_AGGREGATE_TO_VIEW = [
    _rule(READ, [""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
                       "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
                       "services/status"]),
    _rule(READ, [""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                       "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]),
    _rule(READ, [""], ["namespaces"]),
    _rule(READ, ["discovery.k8s.io"], ["endpointslices"]),
    _rule(READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                           "deployments/status", "replicasets", "replicasets/scale", "replicasets/status",
                           "statefulsets", "statefulsets/scale", "statefulsets/status"]),
    _rule(READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
    _rule(READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
    _rule(READ, ["extensions"], ["daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                                 "deployments/status", "ingresses", "ingresses/status", "networkpolicies",
                                 "replicasets", "replicasets/scale", "replicasets/status",
                                 "replicationcontrollers/scale"]),
    _rule(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
    _rule(READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
]

_AGGREGATE_TO_EDIT = [
    _rule(READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"]),
    _rule(["impersonate"], [""], ["serviceaccounts"]),
    _rule(WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
    _rule(["create"], [""], ["pods/eviction"]),
    _rule(WRITE, [""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                        "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"]),
    _rule(["create"], [""], ["serviceaccounts/token"]),
    _rule(WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
                            "replicasets/scale", "statefulsets", "statefulsets/scale"]),
    _rule(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
    _rule(WRITE, ["batch"], ["cronjobs", "jobs"]),
    _rule(WRITE, ["extensions"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                  "ingresses", "networkpolicies", "replicasets", "replicasets/scale",
                                  "replicationcontrollers/scale"]),
    _rule(WRITE, ["policy"], ["poddisruptionbudgets"]),
    _rule(WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
    _rule(READ + WRITE, ["coordination.k8s.io"], ["leases"]),
]

_AGGREGATE_TO_ADMIN = [
    _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
    _rule(READ + WRITE, [API_GROUP], ["rolebindings", "roles"]),
]

_DISCOVERY = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
              "/version", "/version/"]
_PUBLIC_INFO = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_MONITORING = ["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"]


def _custom_kinds() -> dict[str, list[dict[str, Any]]]:
    """view/edit/admin rules for the custom (non-Kubernetes) kinds served here, one rule per group."""
    by_group: dict[str, list[str]] = {}
    scaled: dict[str, list[str]] = {}
    for info in kinds.all_kinds():
        if info.builtin or not info.namespaced:
            continue
        plurals = by_group.setdefault(info.group, [])
        for plural in (info.plural, f"{info.plural}/status"):
            if plural not in plurals:
                plurals.append(plural)
        if info.scale is not None and f"{info.plural}/scale" not in scaled.setdefault(info.group, []):
            scaled[info.group].append(f"{info.plural}/scale")
    view = [_rule(READ, [g], sorted(p + scaled.get(g, []))) for g, p in sorted(by_group.items())]
    edit = [_rule(WRITE, [g], sorted([p for p in ps if not p.endswith("/status")] + scaled.get(g, [])))
            for g, ps in sorted(by_group.items())]
    admin = [_rule(["delete"], ["kubeflow.org"], [OBSERVATIONS])]
    return {"view": view, "edit": edit, "admin": admin}


def bootstrap_objects() -> list[dict[str, Any]]:
    """Every bootstrap ClusterRole and ClusterRoleBinding, aggregated roles with empty rules (the
    aggregation controller fills them)."""
    custom = _custom_kinds()
    roles = [
        cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])]),
        cluster_role("admin", None, aggregate="admin"),
        cluster_role("edit", None, _to("admin"), aggregate="edit"),
        cluster_role("view", None, _to("edit"), aggregate="view"),
        cluster_role("system:aggregate-to-admin", _AGGREGATE_TO_ADMIN, _to("admin")),
        cluster_role("system:aggregate-to-edit", _AGGREGATE_TO_EDIT, _to("edit")),
        cluster_role("system:aggregate-to-view", _AGGREGATE_TO_VIEW, _to("view")),
        cluster_role("system:basic-user", [
            _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"])]),
        cluster_role("system:discovery", [_urls(["get"], _DISCOVERY)]),
        cluster_role("system:public-info-viewer", [_urls(["get"], _PUBLIC_INFO)]),
        cluster_role("system:monitoring", [_urls(["get"], _MONITORING)]),
        cluster_role("system:aggregated-metrics-reader", [_rule(READ, ["metrics.k8s.io"], ["pods", "nodes"])],
                     _to("view", "edit", "admin")),
        cluster_role("trimaran:aggregate-to-view", custom["view"], _to("view")),
        cluster_role("trimaran:aggregate-to-edit", custom["edit"], _to("edit")),
        cluster_role("trimaran:aggregate-to-admin", custom["admin"], _to("admin")),
    ]
    bindings = [
        _binding("cluster-admin", "cluster-admin", [MASTERS]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding("system:public-info-viewer", "system:public-info-viewer",
                 ["system:authenticated", "system:unauthenticated"]),
        _binding("system:monitoring", "system:monitoring", ["system:monitoring"]),
    ]
    return roles + bindings
