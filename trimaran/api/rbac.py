"""rbac.authorization.k8s.io/v1: Role, ClusterRole, RoleBinding, ClusterRoleBinding.

The kinds as kube-apiserver validates and prints them; what they allow is evaluated by
``trimaran.server.rbac``. Names follow RBAC's path-segment rule (``system:basic-user`` is a valid
name), a binding's ``roleRef`` cannot change (delete and recreate it), and every subject names
its kind, with a namespace for a ServiceAccount.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trimaran.api.apps import selector_matches
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, LabelSelector, Resource
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["AGGREGATE_LABEL", "API_GROUP", "API_VERSION", "BINDING_COLUMNS", "ROLE_COLUMNS", "AggregationRule",
           "ClusterRole", "ClusterRoleBinding", "PolicyRule", "Role", "RoleBinding", "RoleRef", "Subject",
           "aggregated_rules", "subject_strings"]

API_GROUP = "rbac.authorization.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
# The label the default roles aggregate by: ``f"{AGGREGATE_LABEL}-{role}"`` for admin, edit, view.
AGGREGATE_LABEL = f"{API_GROUP}/aggregate-to"


def _path_segment_errors(name: str) -> list[str]:
    """apimachinery's ``ValidatePathSegmentName``, RBAC's naming rule."""
    if name in (".", ".."):
        return [f'may not be \'{name}\'']
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


class PolicyRule(ApiModel):
    """What a rule allows: verbs on resources of API groups (optionally by name), or verbs on
    non-resource URLs (ClusterRoles only)."""

    verbs: list[str] = []
    api_groups: list[str] | None = None
    resources: list[str] | None = None
    resource_names: list[str] | None = None
    # The wire's spelling, which no camel-casing of a Python name gives.
    non_resource_urls: list[str] | None = Field(default=None, alias="nonResourceURLs")

    def check(self, path: str, cluster: bool) -> list[FieldError]:
        # rbac/validation's ValidatePolicyRule, its words.
        errs = []
        if not self.verbs:
            errs.append(FieldError.required(join_path(path, "verbs"), "verbs must contain at least one value"))
        if self.non_resource_urls:
            if not cluster:
                errs.append(FieldError.invalid(join_path(path, "nonResourceURLs"), self.non_resource_urls,
                                               "namespaced rules cannot apply to non-resource URLs"))
            elif self.api_groups or self.resources or self.resource_names:
                errs.append(FieldError.invalid(join_path(path, "nonResourceURLs"), self.non_resource_urls,
                                               "rules cannot apply to both regular resources and non-resource URLs"))
            return errs
        if not self.api_groups:
            errs.append(FieldError.required(join_path(path, "apiGroups"),
                                            "resource rules must supply at least one api group"))
        if not self.resources:
            errs.append(FieldError.required(join_path(path, "resources"),
                                            "resource rules must supply at least one resource"))
        return errs


class AggregationRule(ApiModel):
    cluster_role_selectors: list[LabelSelector] | None = None


class _RoleBase(Resource):
    rules: list[PolicyRule] | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        return _path_segment_errors(name)

    def check(self) -> list[FieldError]:
        errs = super().check()
        cluster = isinstance(self, ClusterRole)
        for i, rule in enumerate(self.rules or []):
            errs += rule.check(join_path("rules", i), cluster)
        return errs


class Role(_RoleBase):
    """A namespace's rules."""


class ClusterRole(_RoleBase):
    """Rules for the whole cluster (or, through a RoleBinding, for one namespace); with an
    ``aggregationRule`` its rules are those of the ClusterRoles its selectors match."""

    aggregation_rule: AggregationRule | None = None

    def check(self) -> list[FieldError]:
        errs = super().check()
        for i, selector in enumerate((self.aggregation_rule.cluster_role_selectors or [])
                                     if self.aggregation_rule else []):
            errs += selector.check(join_path("aggregationRule", "clusterRoleSelectors", i))
        return errs


_SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


class Subject(ApiModel):
    kind: str = ""
    name: str = ""
    namespace: str | None = None
    api_group: str | None = None

    def check(self, path: str) -> list[FieldError]:
        if self.kind not in _SUBJECT_KINDS:
            return [FieldError.not_supported(join_path(path, "kind"), self.kind, _SUBJECT_KINDS)]
        errs = []
        if not self.name:
            errs.append(FieldError.required(join_path(path, "name")))
        if self.kind == "ServiceAccount":
            if self.api_group:
                errs.append(FieldError.not_supported(join_path(path, "apiGroup"), self.api_group, ("",)))
            if not self.namespace:
                errs.append(FieldError.required(join_path(path, "namespace")))
        elif self.api_group != API_GROUP:
            errs.append(FieldError.not_supported(join_path(path, "apiGroup"), self.api_group or "", (API_GROUP,)))
        return errs


class RoleRef(ApiModel):
    api_group: str = ""
    kind: str = ""
    name: str = ""


class _BindingBase(Resource):
    subjects: list[Subject] | None = None
    role_ref: RoleRef = RoleRef()

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        return _path_segment_errors(name)

    def set_defaults(self) -> None:
        # As rbac/v1's defaulting: User and Group subjects get the RBAC group when they name none.
        for subject in self.subjects or []:
            if subject.kind in ("User", "Group") and subject.api_group is None:
                subject.api_group = API_GROUP

    def check(self) -> list[FieldError]:
        errs = super().check()
        kinds = ("ClusterRole",) if isinstance(self, ClusterRoleBinding) else ("Role", "ClusterRole")
        if self.role_ref.api_group != API_GROUP:
            errs.append(FieldError.not_supported("roleRef.apiGroup", self.role_ref.api_group, (API_GROUP,)))
        if self.role_ref.kind not in kinds:
            errs.append(FieldError.not_supported("roleRef.kind", self.role_ref.kind, kinds))
        if not self.role_ref.name:
            errs.append(FieldError.required("roleRef.name"))
        for i, subject in enumerate(self.subjects or []):
            errs += subject.check(join_path("subjects", i))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        if (old.get("roleRef") or {}) != (new.get("roleRef") or {}):
            return [FieldError.invalid("roleRef", new.get("roleRef"), "cannot change roleRef")]
        return []


class RoleBinding(_BindingBase):
    """Grants a Role, or a ClusterRole's rules, in its namespace."""


class ClusterRoleBinding(_BindingBase):
    """Grants a ClusterRole everywhere."""


def subject_strings(obj: dict[str, Any]) -> tuple[str, str, str]:
    """Users, groups and service accounts (``ns/name``) of a binding, as kubectl's wide columns."""
    users, groups, sas = [], [], []
    for subject in obj.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            sas.append(f"{subject['namespace']}/{name}" if subject.get("namespace") else name)
    return ", ".join(users), ", ".join(groups), ", ".join(sas)


def aggregated_rules(role: dict[str, Any], cluster_roles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules of an aggregated ClusterRole: those of every other ClusterRole its selectors match,
    in name order, each rule once (the clusterrole-aggregation controller's result)."""
    selectors = ((role.get("aggregationRule") or {}).get("clusterRoleSelectors")) or []
    rules: list[dict[str, Any]] = []
    for other in sorted(cluster_roles, key=lambda r: r["metadata"]["name"]):
        if other["metadata"]["name"] == role["metadata"]["name"]:
            continue
        labels = other["metadata"].get("labels") or {}
        if any(selector_matches(s, labels) for s in selectors):
            rules += [r for r in other.get("rules") or [] if r not in rules]
    return rules


ROLE_COLUMNS = (PrinterColumn("Created At", "date", value=lambda o: o["metadata"].get("creationTimestamp")),)


def _role_ref(obj: dict[str, Any]) -> str:
    ref = obj.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


BINDING_COLUMNS = (
    PrinterColumn("Role", value=_role_ref), AGE,
    PrinterColumn("Users", priority=1, value=lambda o: subject_strings(o)[0]),
    PrinterColumn("Groups", priority=1, value=lambda o: subject_strings(o)[1]),
    PrinterColumn("ServiceAccounts", priority=1, value=lambda o: subject_strings(o)[2]),
)
