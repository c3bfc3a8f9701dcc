"""Object metadata, conditions, the base of every kind, and Kubernetes' name rules.

The name checks return a list of messages (empty when the value is fine), worded as
k8s.io/apimachinery words them, because users paste those messages into search engines.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from trimaran.api.errors import FieldError, join_path

__all__ = [
    "DEFAULT_REPLICAS",
    "INT32_MAX",
    "ApiModel",
    "Condition",
    "Int32",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NonNegInt32",
    "NonNegInt64",
    "ObjectMeta",
    "OwnerReference",
    "Resource",
    "check_labels",
    "check_selector_values",
    "check_qualified_name",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_qualified_name",
    "is_valid_label_value",
    "pod_hostname",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
NonNegInt32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
NonNegInt64 = Annotated[int, Field(ge=0, le=INT64_MAX)]


class ApiModel(BaseModel):
    """Base of all API models.

    Fields are snake_case in Python and camelCase in manifests; only the camelCase spelling is
    accepted on input, as Kubernetes does. Validation is strict (``replicas: "2"`` is rejected,
    as the API server rejects it). Unknown keys are kept aside in ``model_extra`` so the loader
    can warn about them, and the schema is built on first use to keep ``import`` cheap.
    """

    model_config = ConfigDict(alias_generator=to_camel, strict=True, extra="allow", defer_build=True)

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: camelCase keys, unset fields left out, JSON-compatible values."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- name rules -------------------------------------------------------------------------------

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_MAX = 63
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
ANNOTATIONS_MAX_BYTES = 256 * 1024

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"

_DNS1123_LABEL = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL = re.compile(_DNS1035_LABEL_FMT)
_QUALIFIED_NAME = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {shown}, regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    """RFC 1123 label: namespace, container, volume names. Empty list when valid."""
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(_max_len(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character",
            _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    """RFC 1123 subdomain: the name rule of most kinds (Pod, ConfigMap, Job, ...)."""
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(_max_len(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character",
            _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    """RFC 1035 label: what the training operator requires of TFJob/PyTorchJob names."""
    errs = []
    if len(value) > DNS1035_LABEL_MAX:
        errs.append(_max_len(DNS1035_LABEL_MAX))
    if not _DNS1035_LABEL.fullmatch(value):
        errs.append(_regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character",
            _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


DEFAULT_REPLICAS = 1


def replica_count(spec: Mapping[str, Any]) -> int:
    """A spec's ``replicas`` (a Deployment's, a replica spec's, a replicated job's): the API defaults
    an omitted count to 1 for every kind that has one, and objects made before a default existed
    read the same."""
    return int(spec.get("replicas", DEFAULT_REPLICAS))


def pod_hostname(name: str) -> str:
    """The hostname of a pod named ``name``, as the kubelet makes it: at most 63 characters, and a
    cut that leaves a '-' or '.' at the end loses it (``sethostname`` and DNS refuse such a label)."""
    return name[:DNS1123_LABEL_MAX].rstrip("-.")


def is_qualified_name(value: str) -> list[str]:
    """A label or annotation key, or a resource name: ``[prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name " + _regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character", _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part " + _max_len(QUALIFIED_NAME_MAX))
    if name and not _QUALIFIED_NAME.fullmatch(name):
        errs.append("name part " + _regex_error(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character", _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """A label value: empty, or up to 63 alphanumerics with '-', '_', '.' inside."""
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(_max_len(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character",
            _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def check_qualified_name(path: str, value: str) -> list[FieldError]:
    """Field errors for a key that must be a qualified name."""
    return [FieldError.invalid(path, value, m) for m in is_qualified_name(value)]


def check_labels(path: str, labels: dict[str, str] | None) -> list[FieldError]:
    """Field errors for a label map (metadata.labels, nodeSelector, matchLabels)."""
    errs: list[FieldError] = []
    for key, value in (labels or {}).items():
        errs.extend(check_qualified_name(path, key))
        errs.extend(FieldError.invalid(path, value, m) for m in is_valid_label_value(value))
    return errs


def _check_name(path: str, value: str, rule: Callable[[str], list[str]]) -> list[FieldError]:
    messages = rule(value)
    return [FieldError.invalid(path, value, "; ".join(messages))] if messages else []


# --- metadata ---------------------------------------------------------------------------------


class OwnerReference(ApiModel):
    """Points at the object that owns this one; deleting the owner deletes the owned."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(ApiModel):
    """``metadata`` of every object. Timestamps are RFC 3339 strings, as on the wire."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    # Known Kubernetes fields Trimaran does not use; declared so they are not "unknown".
    managed_fields: list[Any] | None = None
    self_link: str | None = None

    def check(
        self,
        path: str = "metadata",
        name_rule: Callable[[str], list[str]] | None = is_dns1123_subdomain,
    ) -> list[FieldError]:
        """Validate names, labels and annotations. `name_rule` None: the name is optional
        (pod templates); otherwise a name or generateName is required and must pass the rule.
        """
        errs: list[FieldError] = []
        if name_rule is not None:
            if self.name:
                errs.extend(_check_name(join_path(path, "name"), self.name, name_rule))
            elif not self.generate_name:
                errs.append(FieldError.required(join_path(path, "name"), "name or generateName is required"))
        if self.namespace:
            errs.extend(_check_name(join_path(path, "namespace"), self.namespace, is_dns1123_label))
        errs.extend(check_labels(join_path(path, "labels"), self.labels))
        annotations = self.annotations or {}
        for key in annotations:
            errs.extend(check_qualified_name(join_path(path, "annotations"), key))
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            errs.append(FieldError.forbidden(
                join_path(path, "annotations"), f"may not have more than {ANNOTATIONS_MAX_BYTES} bytes in total"))
        for i, ref in enumerate(self.owner_references or []):
            if not ref.uid:
                errs.append(FieldError.invalid(
                    join_path(path, "ownerReferences", i, "uid"), ref.uid, "uid must not be empty"))
        return errs


class Condition(ApiModel):
    """A status condition. The union of the training operator's JobCondition, batch/v1's
    JobCondition, core PodCondition and metav1.Condition, so one model reads them all.
    """

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_update_time: str | None = None
    last_transition_time: str | None = None
    last_probe_time: str | None = None
    observed_generation: int | None = None


def check_selector_values(path: str, operator: str, values: list[str] | None) -> list[FieldError]:
    """The values a selector operator needs: some for In/NotIn, none for (Does)Exist(s), one
    integer for Gt/Lt (node selectors only)."""
    if operator in ("In", "NotIn") and not values:
        return [FieldError.required(path, "must be specified when `operator` is 'In' or 'NotIn'")]
    if operator in ("Exists", "DoesNotExist") and values:
        return [FieldError.forbidden(path, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]
    if operator in ("Gt", "Lt"):
        if not values or len(values) != 1:
            return [FieldError.required(path, "must be specified single value when `operator` is 'Lt' or 'Gt'")]
        if not re.fullmatch(r"[+-]?[0-9]+", values[0]):
            return [FieldError.invalid(join_path(path, 0), values[0], "must be an integer")]
    return []


class LabelSelectorRequirement(ApiModel):
    """``key operator values`` in a label selector."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(ApiModel):
    """Selects objects by labels: all ``matchLabels`` and all ``matchExpressions`` must hold."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None

    def check(self, path: str) -> list[FieldError]:
        """Label syntax, and values present exactly when the operator needs them."""
        errs = check_labels(join_path(path, "matchLabels"), self.match_labels)
        for i, req in enumerate(self.match_expressions or []):
            p = join_path(path, "matchExpressions", i)
            errs.extend(check_qualified_name(join_path(p, "key"), req.key))
            errs.extend(check_selector_values(join_path(p, "values"), req.operator, req.values))
        return errs


class Resource(ApiModel):
    """Base of every top-level kind: ``apiVersion``, ``kind``, ``metadata``.

    Subclasses add ``spec``/``status`` and override the hooks below; the loader calls them in
    the API server's order: parse, `set_defaults`, `check`.
    """

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """What is wrong with `name` under this kind's naming rule (most kinds: DNS-1123 subdomain)."""
        return is_dns1123_subdomain(name)

    def set_defaults(self) -> None:
        """Fill unset fields as the API server (or the kind's operator) would."""

    def check(self) -> list[FieldError]:
        """All semantic problems (what a webhook or the API server's validation would reject)."""
        return self.metadata.check("metadata", self.name_errors)

    def admission_warnings(self) -> list[str]:
        """Warnings the API would return with an accepted object (deprecated fields, say)."""
        return []

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """What an update from stored ``old`` to validated ``new`` may not change (a webhook's rule)."""
        return []

    def unknown_field_hint(self, path: str) -> str | None:
        """A hint for an unknown field at `path` that users commonly misplace, or None."""
        return None
