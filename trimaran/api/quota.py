"""core/v1 ResourceQuota and LimitRange, and the pure parts of their admission, worded as
kube-apiserver's LimitRanger and ResourceQuota plugins word them (``plugin/pkg/admission/limitranger``,
``apiserver/pkg/admission/plugin/resourcequota``, ``pkg/quota/v1/evaluator/core``).

Nothing here reads the store: `trimaran.controllers.quota` finds the namespace's LimitRanges and
quotas and the objects a quota counts, and calls these functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from trimaran.api.core import Quantity
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, Resource, check_qualified_name
from trimaran.api.printers import AGE, PrinterColumn
from trimaran.api.quantity import parse_quantity

__all__ = [
    "LIMITRANGE_COLUMNS",
    "LIMIT_RANGER_ANNOTATION",
    "QUOTA_COLUMNS",
    "AdmissionRefused",
    "LimitRange",
    "ResourceQuota",
    "Usage",
    "apply_limit_ranges",
    "canonical",
    "check_quota",
    "forbidden_message",
    "object_usage",
    "quota_matches",
    "quota_status",
    "sum_usage",
]

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")
QUOTA_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
                "CrossNamespacePodAffinity", "VolumeAttributesClass")
_SCOPE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# The resources a quota on cpu or memory makes every container state (upstream's "validationSet").
_MUST_STATE = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


class AdmissionRefused(Exception):
    """An admission plugin refused a write: kube-apiserver's 403 Forbidden, whose message names the
    object (``pods "p" is forbidden: exceeded quota: ...``). Raised on the API's writes and on the
    pods the controllers create, which meet the same admission."""

    def __init__(self, plural: str, group: str, name: str, reason: str) -> None:
        resource = f"{plural}.{group}" if group else plural
        super().__init__(forbidden_message(resource, name, reason))
        self.plural, self.group, self.name, self.reason = plural, group, name, reason


def forbidden_message(resource: str, name: str, reason: str) -> str:
    """apierrors.NewForbidden's words."""
    return f'{resource} "{name}" is forbidden: {reason}'


# --- quantities --------------------------------------------------------------------------------

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3), ("u", -6), ("n", -9))


def _is_binary(amount: str | int | float) -> bool:
    text = str(amount)
    return text.endswith("i") and text[-2:-1] in "KMGTPE"


def canonical(value: Decimal, binary: bool = False) -> str:
    """A quantity as resource.Quantity's String() prints it: ``500m``, ``2``, ``1Gi``, ``1500M``
    (binary when the amount came in a binary unit and is a whole number of bytes)."""
    if value == 0:
        return "0"
    if binary and value == value.to_integral_value():
        whole = int(value)
        for suffix, unit in _BINARY:
            if whole % unit == 0:
                return f"{whole // unit}{suffix}"
        return str(whole)
    for suffix, exponent in _DECIMAL:
        scaled = value.scaleb(-exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    # Finer than nanounits: upstream rounds up to the nano.
    return f"{math.ceil(value.scaleb(9))}n"


def _show(text: str | int | float) -> str:
    """A stated quantity in its canonical form (``0.5`` → ``500m``, ``1024Mi`` → ``1Gi``); a number
    too, as a controller's pod may carry one its template never had validated."""
    return canonical(parse_quantity(text), _is_binary(text))


def _canonical_list(amounts: dict[str, str]) -> dict[str, str]:
    """A resource list as kube-apiserver stores it: canonical amounts, by name (Go writes a map sorted)."""
    return {name: _show(amounts[name]) for name in sorted(amounts)}


class Usage:
    """Amounts by resource name, keeping whether each came in binary units (for printing)."""

    def __init__(self) -> None:
        self.amounts: dict[str, Decimal] = {}
        self.binary: dict[str, bool] = {}

    def add(self, name: str, amount: Decimal, binary: bool = False) -> None:
        if name not in self.amounts:
            self.binary[name] = binary
        self.amounts[name] = self.amounts.get(name, Decimal(0)) + amount

    def merge(self, other: Usage, sign: int = 1) -> None:
        """Add ``other`` (``sign`` -1: take it away)."""
        for name, amount in other.amounts.items():
            self.add(name, amount * sign, other.binary.get(name, False))

    def text(self, name: str) -> str:
        return canonical(self.amounts.get(name, Decimal(0)), self.binary.get(name, False))


def sum_usage(usages: Iterable[Usage]) -> Usage:
    total = Usage()
    for usage in usages:
        total.merge(usage)
    return total


# --- the kinds ---------------------------------------------------------------------------------


class ScopedResourceSelectorRequirement(ApiModel):
    scope_name: str
    operator: str
    values: list[str] | None = None


class ScopeSelector(ApiModel):
    match_expressions: list[ScopedResourceSelectorRequirement] | None = None


class ResourceQuotaSpec(ApiModel):
    hard: dict[str, Quantity] | None = None
    scopes: list[str] | None = None
    scope_selector: ScopeSelector | None = None


class ResourceQuotaStatus(ApiModel):
    hard: dict[str, Quantity] | None = None
    used: dict[str, Quantity] | None = None


def _key(path: str, name: str) -> str:
    """A map key in a field path as upstream's ``.Key()`` writes it: ``spec.hard[requests.cpu]``."""
    return f"{path}[{name}]"


def _check_amounts(path: str, amounts: Mapping[str, str] | None) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, amount in (amounts or {}).items():
        p = _key(path, name)
        errs += check_qualified_name(p, name)
        if parse_quantity(amount) < 0:
            errs.append(FieldError.invalid(p, amount, "must be greater than or equal to 0"))
    return errs


class ResourceQuota(Resource):
    """core/v1 ResourceQuota: ``spec.hard`` limits per namespace; ``status`` is the quota
    controller's (``hard`` as enforced, ``used`` as counted)."""

    spec: ResourceQuotaSpec | None = None
    status: ResourceQuotaStatus | None = None

    def set_defaults(self) -> None:
        """Amounts stored in their canonical form, as kube-apiserver re-serialises a Quantity (``1000m`` is ``1``)."""
        if self.spec is not None and self.spec.hard:
            self.spec.hard = _canonical_list(self.spec.hard)

    def check(self) -> list[FieldError]:
        """Resource names, non-negative amounts, known scopes and scope operators (ValidateResourceQuota)."""
        errs = super().check()
        spec = self.spec or ResourceQuotaSpec()
        errs += _check_amounts("spec.hard", spec.hard)
        for i, scope in enumerate(spec.scopes or []):
            if scope not in QUOTA_SCOPES:
                errs.append(FieldError.invalid(join_path("spec.scopes", i), scope, "unsupported scope"))
        for i, req in enumerate((spec.scope_selector.match_expressions or []) if spec.scope_selector else []):
            p = join_path("spec.scopeSelector.matchExpressions", i)
            if req.scope_name not in QUOTA_SCOPES:
                errs.append(FieldError.invalid(join_path(p, "scopeName"), req.scope_name, "unsupported scope"))
            if req.operator not in _SCOPE_OPERATORS:
                errs.append(FieldError.not_supported(join_path(p, "operator"), req.operator, _SCOPE_OPERATORS))
            elif req.operator in ("In", "NotIn") and not req.values:
                errs.append(FieldError.required(join_path(p, "values"),
                                                "must be at least one value when `operator` is 'In' or 'NotIn' for "
                                                "scope selector"))
            elif req.operator in ("Exists", "DoesNotExist") and req.values:
                errs.append(FieldError.invalid(join_path(p, "values"), req.values,
                                               "must be no value when `operator` is 'Exist' or 'DoesNotExist' for "
                                               "scope selector"))
        return errs


class LimitRangeItem(ApiModel):
    type: str = ""
    max: dict[str, Quantity] | None = None
    min: dict[str, Quantity] | None = None
    default: dict[str, Quantity] | None = None
    default_request: dict[str, Quantity] | None = None
    max_limit_request_ratio: dict[str, Quantity] | None = None


class LimitRangeSpec(ApiModel):
    limits: list[LimitRangeItem]


def _cmp(a: str, b: str) -> int:
    x, y = parse_quantity(a), parse_quantity(b)
    return (x > y) - (x < y)


class LimitRange(Resource):
    """core/v1 LimitRange: per-namespace defaults and bounds of containers', pods' and claims' resources."""

    spec: LimitRangeSpec | None = None

    def set_defaults(self) -> None:
        """SetDefaults_LimitRangeItem: a Container item's default limit is its max, its default
        request its default limit, else its min."""
        for item in (self.spec.limits if self.spec else []):
            for field in ("max", "min", "default", "default_request", "max_limit_request_ratio"):
                if getattr(item, field):
                    setattr(item, field, _canonical_list(getattr(item, field)))
            if item.type != "Container":
                continue
            default = dict(item.default or {})
            for name, value in (item.max or {}).items():
                default.setdefault(name, value)
            request = dict(item.default_request or {})
            for name, value in {**(item.min or {}), **default}.items():
                request.setdefault(name, value)
            item.default = _canonical_list(default) or None
            item.default_request = _canonical_list(request) or None

    def check(self) -> list[FieldError]:
        """ValidateLimitRange's checks, in its words."""
        errs = super().check()
        if self.spec is None:
            return errs + [FieldError.required("spec.limits")]
        seen: set[str] = set()
        for i, item in enumerate(self.spec.limits):
            p = join_path("spec.limits", i)
            if not item.type:
                errs.append(FieldError.required(join_path(p, "type")))
            elif item.type in seen:
                errs.append(FieldError.duplicate(join_path(p, "type"), item.type))
            seen.add(item.type)
            for field, amounts in (("max", item.max), ("min", item.min), ("default", item.default),
                                   ("defaultRequest", item.default_request),
                                   ("maxLimitRequestRatio", item.max_limit_request_ratio)):
                errs += _check_amounts(join_path(p, field), amounts)
            if item.type == "Pod":
                for field, amounts in (("default", item.default), ("defaultRequest", item.default_request)):
                    if amounts:
                        errs.append(FieldError.forbidden(join_path(p, field), "may not be specified when `type` is "
                                                                              "'Pod'"))
            if item.type == "PersistentVolumeClaim" and "storage" not in (item.min or {}) and \
                    "storage" not in (item.max or {}):
                errs.append(FieldError.required(join_path(p, "limits"), "either minimum or maximum storage value is "
                                                                        "required, but neither was provided"))
            errs += _item_order_errors(p, item)
        return errs


def _item_order_errors(path: str, item: LimitRangeItem) -> list[FieldError]:
    errs: list[FieldError] = []
    low, high = item.min or {}, item.max or {}
    default, request, ratio = item.default or {}, item.default_request or {}, item.max_limit_request_ratio or {}
    for name in sorted({*low, *high, *default, *request, *ratio}):
        if name in low and name in high and _cmp(low[name], high[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "min"), name), low[name],
                                           f"min value {_show(low[name])} is greater than max value "
                                           f"{_show(high[name])}"))
        if name in request and name in low and _cmp(low[name], request[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "defaultRequest"), name), request[name],
                                           f"min value {_show(low[name])} is greater than default request value "
                                           f"{_show(request[name])}"))
        if name in request and name in high and _cmp(request[name], high[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "defaultRequest"), name), request[name],
                                           f"default request value {_show(request[name])} is greater than max value "
                                           f"{_show(high[name])}"))
        if name in request and name in default and _cmp(request[name], default[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "defaultRequest"), name), request[name],
                                           f"default request value {_show(request[name])} is greater than default "
                                           f"limit value {_show(default[name])}"))
        if name in default and name in low and _cmp(low[name], default[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "default"), name), low[name],
                                           f"min value {_show(low[name])} is greater than default value "
                                           f"{_show(default[name])}"))
        if name in default and name in high and _cmp(default[name], high[name]) > 0:
            errs.append(FieldError.invalid(_key(join_path(path, "default"), name), default[name],
                                           f"default value {_show(default[name])} is greater than max value "
                                           f"{_show(high[name])}"))
        if name in ratio and parse_quantity(ratio[name]) < 1:
            errs.append(FieldError.invalid(_key(join_path(path, "maxLimitRequestRatio"), name), ratio[name],
                                           f"ratio {_show(ratio[name])} is less than 1"))
    return errs


# --- LimitRanger -------------------------------------------------------------------------------


def _containers(spec: dict) -> Iterable[tuple[str, dict]]:
    for container in spec.get("containers") or []:
        yield "container", container
    for container in spec.get("initContainers") or []:
        yield "init container", container


def _min_error(kind: str, name: str, enforced: str, requests: dict, limits: dict) -> str | None:
    if name not in requests:
        return f"minimum {name} usage per {kind} is {_show(enforced)}.  No request is specified"
    if _cmp(requests[name], enforced) < 0:
        return f"minimum {name} usage per {kind} is {_show(enforced)}, but request is {_show(requests[name])}"
    if name in limits and _cmp(limits[name], enforced) < 0:
        return f"minimum {name} usage per {kind} is {_show(enforced)}, but limit is {_show(limits[name])}"
    return None


def _max_error(kind: str, name: str, enforced: str, requests: dict, limits: dict) -> str | None:
    if name not in limits:
        return f"maximum {name} usage per {kind} is {_show(enforced)}.  No limit is specified"
    if _cmp(limits[name], enforced) > 0:
        return f"maximum {name} usage per {kind} is {_show(enforced)}, but limit is {_show(limits[name])}"
    if name in requests and _cmp(requests[name], enforced) > 0:
        return f"maximum {name} usage per {kind} is {_show(enforced)}, but request is {_show(requests[name])}"
    return None


def _ratio_error(kind: str, name: str, enforced: str, requests: dict, limits: dict) -> str | None:
    request = parse_quantity(requests[name]) if name in requests else Decimal(0)
    limit = parse_quantity(limits[name]) if name in limits else Decimal(0)
    if request == 0:
        return (f"{name} max limit to request ratio per {kind} is {_show(enforced)}, but no request is specified or "
                f"request is 0")
    if limit == 0:
        return (f"{name} max limit to request ratio per {kind} is {_show(enforced)}, but no limit is specified or "
                f"limit is 0")
    ratio = limit / request
    if ratio > parse_quantity(enforced):
        # Go's %f: six decimals.
        return (f"{name} max limit to request ratio per {kind} is {_show(enforced)}, but provided ratio is "
                f"{float(ratio):f}")
    return None


def _bounds(item: dict, kind: str, requests: dict, limits: dict) -> list[str]:
    # Upstream walks Go maps (in no fixed order); by name here, so a message is the same each time.
    errors = []
    for name, enforced in sorted((item.get("min") or {}).items()):
        errors.append(_min_error(kind, name, enforced, requests, limits))
    for name, enforced in sorted((item.get("max") or {}).items()):
        errors.append(_max_error(kind, name, enforced, requests, limits))
    for name, enforced in sorted((item.get("maxLimitRequestRatio") or {}).items()):
        errors.append(_ratio_error(kind, name, enforced, requests, limits))
    return [e for e in errors if e]


def _summed(lists: list[dict]) -> dict:
    """limitranger's ``sum``: a resource only when every container states it."""
    names = {name for amounts in lists for name in amounts}
    out = {}
    for name in names:
        if all(name in amounts for amounts in lists):
            total = sum((parse_quantity(amounts[name]) for amounts in lists), Decimal(0))
            out[name] = canonical(total, _is_binary(lists[0][name]))
    return out


def _aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate's Error(): one message alone, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _default_pod(pod: dict, limit_range: dict) -> None:
    """mergePodResourceRequirements: the Container item's defaults into every container that lacks
    them, and the annotation saying what was set."""
    defaults: dict[str, dict] = {"requests": {}, "limits": {}}
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if item.get("type") == "Container":
            defaults["requests"].update(item.get("defaultRequest") or {})
            defaults["limits"].update(item.get("default") or {})
    notes = []
    for prefix, container in _containers(pod.get("spec") or {}):
        resources = container["resources"] = dict(container.get("resources") or {})
        limits = resources["limits"] = dict(resources.get("limits") or {})
        requests = resources["requests"] = dict(resources.get("requests") or {})
        set_limits = sorted(name for name in defaults["limits"] if name not in limits)
        set_requests = sorted(name for name in defaults["requests"] if name not in requests)
        for name in set_limits:
            limits[name] = defaults["limits"][name]
        for name in set_requests:
            requests[name] = defaults["requests"][name]
        if not limits:
            del resources["limits"]
        if not requests:
            del resources["requests"]
        if set_requests:
            notes.append(f"{', '.join(set_requests)} request for {prefix} {container.get('name')}")
        if set_limits:
            notes.append(f"{', '.join(set_limits)} limit for {prefix} {container.get('name')}")
    if notes:
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[LIMIT_RANGER_ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _pod_errors(pod: dict, limit_range: dict) -> list[str]:
    spec = pod.get("spec") or {}
    errors: list[str] = []
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if item.get("type") == "Container":
            for _, container in _containers(spec):
                resources = container.get("resources") or {}
                errors += _bounds(item, "Container", resources.get("requests") or {}, resources.get("limits") or {})
        elif item.get("type") == "Pod":
            apps = [c.get("resources") or {} for c in spec.get("containers") or []]
            requests = _summed([r.get("requests") or {} for r in apps])
            limits = _summed([r.get("limits") or {} for r in apps])
            for container in spec.get("initContainers") or []:  # max(sum of containers, any init container)
                resources = container.get("resources") or {}
                for total, own in ((requests, resources.get("requests") or {}),
                                   (limits, resources.get("limits") or {})):
                    for name, amount in own.items():
                        if name not in total or _cmp(amount, total[name]) > 0:
                            total[name] = amount
            errors += _bounds(item, "Pod", requests, limits)
    return errors


def _claim_errors(claim: dict, limit_range: dict) -> list[str]:
    requests = (((claim.get("spec") or {}).get("resources") or {}).get("requests")) or {}
    errors: list[str] = []
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if item.get("type") != "PersistentVolumeClaim":
            continue
        for name, enforced in (item.get("min") or {}).items():
            errors.append(_min_error("PersistentVolumeClaim", name, enforced, requests, {}))
        for name, enforced in (item.get("max") or {}).items():
            if name not in requests:
                errors.append(f"maximum {name} usage per PersistentVolumeClaim is {_show(enforced)}.  No request is "
                              f"specified")
            elif _cmp(requests[name], enforced) > 0:
                errors.append(f"maximum {name} usage per PersistentVolumeClaim is {_show(enforced)}, but request is "
                              f"{_show(requests[name])}")
    return [e for e in errors if e]


def apply_limit_ranges(obj: dict, limit_ranges: list[dict]) -> str | None:
    """LimitRanger on a new Pod (defaults, then bounds) or PersistentVolumeClaim (bounds): ``obj``
    is defaulted in place; returns the refusal (after ``is forbidden: ``) or None. Each LimitRange
    is applied in turn and the first that refuses says why, as upstream."""
    for limit_range in limit_ranges:
        if obj.get("kind") == "Pod":
            _default_pod(obj, limit_range)
            errors = _pod_errors(obj, limit_range)
        else:
            errors = _claim_errors(obj, limit_range)
        if errors:
            return _aggregate(errors)
    return None


# --- quota usage -------------------------------------------------------------------------------


def _is_terminal(pod: dict) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def _add_list(usage: Usage, amounts: Mapping[str, Any], names: Mapping[str, Iterable[str]]) -> None:
    for name, amount in amounts.items():
        value = parse_quantity(amount)
        for key in names.get(name, ()):
            usage.add(key, value, _is_binary(amount))


def _container_usage(container: dict) -> Usage:
    """podComputeUsageHelper for one container: what its requests and limits count against."""
    resources = container.get("resources") or {}
    usage = Usage()
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    request_keys: dict[str, tuple[str, ...]] = {
        name: ((name, f"requests.{name}") if name in ("cpu", "memory", "ephemeral-storage") or
               name.startswith("hugepages-") else (f"requests.{name}",))
        for name in requests}
    _add_list(usage, requests, request_keys)
    _add_list(usage, {k: v for k, v in limits.items() if k in ("cpu", "memory", "ephemeral-storage")},
              {name: (f"limits.{name}",) for name in limits})
    return usage


def _pod_usage(pod: dict) -> Usage:
    """PodUsageFunc: a pod that ended counts nothing; else one pod and its containers' sum, at
    least its largest init container's."""
    usage = Usage()
    if _is_terminal(pod):
        return usage
    usage.add("pods", Decimal(1))
    usage.add("count/pods", Decimal(1))
    spec = pod.get("spec") or {}
    apps = sum_usage(_container_usage(c) for c in spec.get("containers") or [])
    for container in spec.get("initContainers") or []:
        own = _container_usage(container)
        for name, amount in own.amounts.items():
            if amount > apps.amounts.get(name, Decimal(0)):
                apps.amounts[name] = amount
                apps.binary[name] = own.binary[name]
    usage.merge(apps)
    return usage


_LEGACY_COUNTS = {"Service": "services", "ConfigMap": "configmaps", "Secret": "secrets",
                  "ReplicationController": "replicationcontrollers", "ResourceQuota": "resourcequotas"}


def object_usage(obj: dict, plural: str, group: str) -> Usage:
    """What one object counts against a quota (upstream's evaluators): a pod its requests and
    limits, a claim its storage, every object ``count/<plural>[.<group>]``."""
    if obj.get("kind") == "Pod" and not group:
        return _pod_usage(obj)
    usage = Usage()
    usage.add(f"count/{plural}.{group}" if group else f"count/{plural}", Decimal(1))
    kind = obj.get("kind")
    if not group and kind in _LEGACY_COUNTS:
        usage.add(_LEGACY_COUNTS[kind], Decimal(1))
    if not group and kind == "PersistentVolumeClaim":
        usage.add("persistentvolumeclaims", Decimal(1))
        spec = obj.get("spec") or {}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if storage is not None:
            usage.add("requests.storage", parse_quantity(storage), _is_binary(storage))
        if spec.get("storageClassName"):
            prefix = f"{spec['storageClassName']}.storageclass.storage.k8s.io/"
            usage.add(prefix + "persistentvolumeclaims", Decimal(1))
            if storage is not None:
                usage.add(prefix + "requests.storage", parse_quantity(storage), _is_binary(storage))
    if not group and kind == "Service":
        spec = obj.get("spec") or {}
        if spec.get("type") == "LoadBalancer":
            usage.add("services.loadbalancers", Decimal(1))
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            usage.add("services.nodeports", Decimal(len(spec.get("ports") or [])))
    return usage


def _best_effort(pod: dict) -> bool:
    for _, container in _containers(pod.get("spec") or {}):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if any(name in ("cpu", "memory") for name in resources.get(section) or {}):
                return False
    return True


def _scope_holds(pod: dict, scope: str, operator: str, values: list[str] | None) -> bool:
    spec = pod.get("spec") or {}
    if scope == "PriorityClass":
        name = spec.get("priorityClassName") or ""
        if operator == "Exists":
            return bool(name)
        if operator == "DoesNotExist":
            return not name
        return (name in (values or [])) == (operator == "In")
    deadline = spec.get("activeDeadlineSeconds")
    held = {"Terminating": deadline is not None and deadline >= 0,
            "NotTerminating": deadline is None or deadline < 0,
            "BestEffort": _best_effort(pod), "NotBestEffort": not _best_effort(pod),
            "CrossNamespacePodAffinity": False}.get(scope, False)
    return held if operator != "DoesNotExist" else not held


def _selectors(quota: dict) -> list[tuple[str, str, list[str] | None]]:
    spec = quota.get("spec") or {}
    found: list[tuple[str, str, list[str] | None]] = [(s, "Exists", None) for s in spec.get("scopes") or []]
    for req in ((spec.get("scopeSelector") or {}).get("matchExpressions")) or []:
        found.append((req.get("scopeName", ""), req.get("operator", ""), req.get("values")))
    return found


def quota_matches(quota: dict, obj: dict) -> bool:
    """Whether the quota's scopes take in ``obj``: a scoped quota counts pods only, those its every
    scope holds for (upstream's Matches)."""
    selectors = _selectors(quota)
    if not selectors:
        return True
    if obj.get("kind") != "Pod":
        return False
    return all(_scope_holds(obj, *selector) for selector in selectors)


def _hard(quota: dict) -> dict[str, str]:
    return dict((quota.get("spec") or {}).get("hard") or {})


def _missing(pod: dict, required: set[str]) -> str | None:
    """The pod evaluator's Constraints: a quota on cpu or memory needs every container to state it."""
    wanted = required & set(_MUST_STATE)
    if not wanted:
        return None
    missing: dict[str, set[str]] = {}
    for _, container in _containers(pod.get("spec") or {}):
        stated = set(_container_usage(container).amounts)
        for name in wanted - stated:
            missing.setdefault(name, set()).add(container.get("name", ""))
    if not missing:
        return None
    return "must specify " + "; ".join(f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing))


def _pretty(usage: Mapping[str, str]) -> str:
    return ",".join(f"{name}={usage[name]}" for name in sorted(usage))


def check_quota(quota: dict, obj: dict, delta: Usage, used: Usage) -> str | None:
    """ResourceQuota admission of a new ``obj`` against one quota that takes it in: the refusal
    (after ``is forbidden: ``) or None. ``delta`` is what ``obj`` adds, ``used`` the namespace's
    use now, both as `object_usage` counts them."""
    hard = _hard(quota)
    name = quota["metadata"]["name"]
    if obj.get("kind") == "Pod":
        reason = _missing(obj, set(hard))
        if reason:
            return f"failed quota: {name}: {reason}"
    exceeded = [key for key in sorted(hard) if delta.amounts.get(key, Decimal(0)) > 0 and
                used.amounts.get(key, Decimal(0)) + delta.amounts[key] > parse_quantity(hard[key])]
    if not exceeded:
        return None
    return (f"exceeded quota: {name}, requested: {_pretty({k: delta.text(k) for k in exceeded})}, "
            f"used: {_pretty({k: used.text(k) for k in exceeded})}, "
            f"limited: {_pretty({k: _show(hard[k]) for k in exceeded})}")


def quota_status(quota: dict, used: Usage) -> dict[str, dict[str, str]]:
    """The status the quota controller writes: ``hard`` as enforced, ``used`` for each of its resources."""
    hard = _hard(quota)
    return {"hard": {k: _show(v) for k, v in hard.items()}, "used": {k: used.text(k) for k in hard}}


# --- printer columns ---------------------------------------------------------------------------


def _quota_column(limits: bool) -> PrinterColumn:
    def cell(quota: dict) -> str:
        status = quota.get("status") or {}
        hard, used = status.get("hard") or {}, status.get("used") or {}
        parts = [f"{name}: {used.get(name, '0')}/{hard[name]}" for name in sorted(hard)
                 if (name.split(".")[0] == "limits" and "." in name) == limits]
        return ", ".join(parts)
    return PrinterColumn("Limit" if limits else "Request", value=cell)


#: printResourceQuota: NAME AGE REQUEST LIMIT, each "resource: used/hard".
QUOTA_COLUMNS = (AGE, _quota_column(False), _quota_column(True))
#: printLimitRange: NAME CREATED AT (the timestamp itself, not an age).
LIMITRANGE_COLUMNS = (PrinterColumn("Created At", value=lambda o: o["metadata"].get("creationTimestamp", "")),)
