"""Discovery (``/version``, ``/api``, ``/apis``, ``/apis/G/V``) and Trimaran's own (read-only)
``CustomResourceDefinition`` objects, all derived from the kinds the API serves.

Legacy (non-aggregated) discovery only: client-go reads it when a server answers plain JSON, and
it is what every kubectl and client version understands.
"""

from __future__ import annotations

import platform
from typing import Any

import trimaran
from trimaran.api.authorization import REVIEW_KINDS
from trimaran.api.crd import CRD_INFO, is_custom
from trimaran.api.kinds import KindInfo
from trimaran.server.kube import metrics
from trimaran.server.kube.openapi import kind_schema

__all__ = ["api_group", "api_group_list", "api_resource_list", "api_versions", "crd_objects", "version_info",
           "CRD_INFO"]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
READ_VERBS = ["get", "list", "watch"]
# The version of the Kubernetes API these shapes follow; kubectl warns past one minor of skew.
KUBE_MAJOR, KUBE_MINOR = "1", "32"
# Each group's preferred version, as a cluster with Kubeflow installed prefers it.
_PREFERRED = {"kubeflow.org": "v1"}


def version_info() -> dict[str, str]:
    git_version = f"v{KUBE_MAJOR}.{KUBE_MINOR}.0-trimaran.{trimaran.__version__}"
    return {"major": KUBE_MAJOR, "minor": KUBE_MINOR, "gitVersion": git_version,
            "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "",
            "compiler": "python", "platform": f"{platform.system().lower()}/{platform.machine()}"}


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _groups(served: list[KindInfo]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for info in served:
        if info.group:
            versions = groups.setdefault(info.group, [])
            if info.version not in versions:
                versions.append(info.version)
    return groups


def api_group(group: str, versions: list[str]) -> dict[str, Any]:
    preferred = _PREFERRED.get(group) if _PREFERRED.get(group) in versions else versions[0]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred}}


def api_group_list(served: list[KindInfo]) -> dict[str, Any]:
    """``/apis``: the groups of the served kinds, then metrics.k8s.io (``metrics.py``) and the review
    groups (``server/rbac/reviews.py``), which are served beside the registry."""
    groups = [api_group(g, vs) for g, vs in _groups(served).items()]
    groups.append(metrics.api_group())
    groups += [api_group(g, ["v1"]) for g in dict.fromkeys(r.group for r in REVIEW_KINDS)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group: str, version: str, served: list[KindInfo]) -> dict[str, Any] | None:
    """The ``APIResourceList`` of one group version, or None when nothing is served there."""
    resources: list[dict[str, Any]] = []
    for info in served:
        if info.group != group or info.version != version:
            continue
        read_only = info.model is None
        entry: dict[str, Any] = {"name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
                                 "kind": info.kind, "verbs": READ_VERBS if read_only else VERBS}
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.categories:
            entry["categories"] = list(info.categories)
        resources.append(entry)
        if info.status_subresource and not read_only:
            resources.append({"name": f"{info.plural}/status", "singularName": "", "namespaced": info.namespaced,
                              "kind": info.kind, "verbs": ["get", "patch", "update"]})
        if info.scale is not None:
            resources.append({"name": f"{info.plural}/scale", "singularName": "", "namespaced": info.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
        if info.kind == "ServiceAccount":  # TokenRequest, served by rbac.reviews
            resources.append({"name": "serviceaccounts/token", "singularName": "", "namespaced": True,
                              "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                              "verbs": ["create"]})
        if info.kind == "Pod":
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                              "verbs": ["get"]})
            resources.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                              "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    if not resources:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def crd_objects(served: list[KindInfo], created: str) -> list[dict[str, Any]]:
    """One ``CustomResourceDefinition`` per custom (non-core) kind of Trimaran's own, its versions
    merged (users' CRDs are stored objects: ``server/kube/crd.py``)."""
    by_name: dict[str, dict[str, Any]] = {}
    for info in served:
        if info.builtin or info.model is None or is_custom(info):
            continue
        name = f"{info.plural}.{info.group}"
        crd = by_name.get(name)
        if crd is None:
            names: dict[str, Any] = {"plural": info.plural, "singular": info.singular, "kind": info.kind,
                                     "listKind": info.list_kind}
            if info.short_names:
                names["shortNames"] = list(info.short_names)
            if info.categories:
                names["categories"] = list(info.categories)
            crd = by_name[name] = {
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name, "uid": f"trimaran-crd-{name}", "resourceVersion": "1",
                             "generation": 1, "creationTimestamp": created},
                "spec": {"group": info.group, "names": names,
                         "scope": "Namespaced" if info.namespaced else "Cluster", "versions": []},
                "status": {"acceptedNames": names, "storedVersions": [],
                           "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                                           "message": "the initial names have been accepted",
                                           "lastTransitionTime": created}]}}
        version: dict[str, Any] = {"name": info.version, "served": True, "storage": not crd["spec"]["versions"],
                                   "schema": {"openAPIV3Schema": kind_schema(info, inline=True)}}
        subresources: dict[str, Any] = {}
        if info.status_subresource:
            subresources["status"] = {}
        if info.scale is not None:
            subresources["scale"] = {"specReplicasPath": info.scale.spec_replicas_path,
                                     "statusReplicasPath": info.scale.status_replicas_path,
                                     "labelSelectorPath": info.scale.label_selector_path}
        if subresources:
            version["subresources"] = subresources
        columns = [{"name": c.name, "type": c.type, "jsonPath": c.json_path, **({"priority": c.priority}
                    if c.priority else {})} for c in info.printer_columns if c.json_path]
        if columns:
            version["additionalPrinterColumns"] = columns
        crd["spec"]["versions"].append(version)
        if version["storage"]:
            crd["status"]["storedVersions"].append(info.version)
    return list(by_name.values())
