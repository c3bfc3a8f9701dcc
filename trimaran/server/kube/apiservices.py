"""The APIServices of the group versions this server answers: one per group version that discovery
lists (``/api``'s v1, each ``/apis`` group's versions, metrics.k8s.io), named ``<version>.<group>``,
Local (``spec.service`` unset), with kube-aggregator's priorities for Kubernetes' own groups and its
CRD registration's for the rest. `trimaran.controllers.apiservices` keeps them stored."""

from __future__ import annotations

from trimaran.api import kinds
from trimaran.api.apiregistration import API_VERSION, AUTOMANAGED_LABEL, apiservice_name
from trimaran.server.kube import discovery

__all__ = ["local_apiservices"]

# kube-apiserver's apiVersionPriorities: (groupPriorityMinimum, versionPriority) of its own groups.
_PRIORITIES = {
    ("", "v1"): (18000, 1),
    ("apiregistration.k8s.io", "v1"): (18000, 21),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v1"): (17500, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("batch", "v1"): (17400, 15),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("policy", "v1"): (17100, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
    # metrics-server's manifest registers its group so.
    ("metrics.k8s.io", "v1beta1"): (100, 100),
}
# crdregistration_controller: a CRD's group version, below every built-in group.
_CRD_PRIORITY = (1000, 100)


def local_apiservices() -> list[dict]:
    """One APIService per group version served, from the same list ``/apis`` answers with."""
    groups = discovery.api_group_list([*kinds.all_kinds(), discovery.CRD_INFO])["groups"]
    versions = [("", "v1")] + [(g["name"], v["version"]) for g in groups for v in g["versions"]]
    out = []
    for group, version in versions:
        builtin = (group, version) in _PRIORITIES
        group_priority, version_priority = _PRIORITIES.get((group, version), _CRD_PRIORITY)
        out.append({"apiVersion": API_VERSION, "kind": "APIService",
                    "metadata": {"name": apiservice_name(group, version),
                                 "labels": {AUTOMANAGED_LABEL: "onstart" if builtin else "true"}},
                    "spec": {"group": group, "version": version, "groupPriorityMinimum": group_priority,
                             "versionPriority": version_priority}})
    return out
