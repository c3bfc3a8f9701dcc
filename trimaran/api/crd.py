"""CustomResourceDefinitions created by users (``apiextensions.k8s.io/v1``), as apiextensions-apiserver
reads them: the CRD's own checks (names, versions, structural schemas), and for the objects of each
version a model that prunes, defaults and validates by the version's OpenAPI v3 schema.

Pure: no store, no server. The API server registers `kind_infos(crd)` in the kind registry when a
CRD is written, so a user's kind is served as every registered kind is.

The schema walk is our own rather than `jsonschema`'s: kube-apiserver's answers are kube-openapi's
words wrapped in field errors (``spec.replicas: Invalid value: "string": spec.replicas in body must
be of type integer: "string"``), and pruning, defaulting, ``nullable`` and the ``x-kubernetes-*``
extensions are not JSON Schema's; mapping a library's errors back to those words would be longer
than the walk itself.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import json
import re
from datetime import date, datetime
from typing import Any, ClassVar

from pydantic import PrivateAttr

from trimaran.api.celrules import has_rules, rule_definition_errors, rule_errors
from trimaran.api.errors import FieldError, join_path
from trimaran.api.kinds import KUBERNETES_GROUPS, KindInfo, Scale, all_kinds, register
from trimaran.api.meta import Resource, is_dns1035_label, is_dns1123_subdomain
from trimaran.api.printers import PrinterColumn

__all__ = ["CRD_INFO", "CRD_KIND", "CustomResource", "CustomResourceDefinition", "crd_status", "default",
           "is_custom", "kind_infos", "prune", "published_schema", "schema_errors", "served_as",
           "structural_errors", "version_priority"]

CRD_KIND = "CustomResourceDefinition"
GROUP = "apiextensions.k8s.io"
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
_COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")
_SCHEMA_TYPES = ("array", "boolean", "integer", "number", "object", "string")
# Keywords a structural schema may hold (apiextensions' JSONSchemaProps); others are refused.
_KEYWORDS = frozenset({
    "type", "format", "title", "description", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "multipleOf",
    "enum", "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "nullable", "example", "externalDocs", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations"})


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value, as kube-openapi names it in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _is_type(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    if wanted == "integer" and actual == "number":
        return float(value).is_integer()  # 2.0 is an integer to Go's JSON decoder
    return actual == wanted or (wanted == "number" and actual == "integer")


_DURATION = re.compile(r"-?([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+|0")


def _valid_format(value: str, fmt: str) -> bool:
    """Whether ``value`` is a string of kube-openapi's ``format`` (formats it does not check pass)."""
    try:
        if fmt == "date-time":
            datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
            return "T" in value.upper()
        if fmt == "date":
            return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is not None and bool(date.fromisoformat(value))
        if fmt == "uuid":
            return re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", value) is not None
        if fmt == "byte":
            base64.b64decode(value, validate=True)
            return True
        if fmt == "ipv4":
            return isinstance(ipaddress.ip_address(value), ipaddress.IPv4Address)
        if fmt == "ipv6":
            return isinstance(ipaddress.ip_address(value), ipaddress.IPv6Address)
        if fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
            return "/" in value
        if fmt == "duration":
            return _DURATION.fullmatch(value) is not None
    except ValueError:
        return False
    return True


def _number_text(value: float) -> str:
    """A bound as Go's %v prints it (10, 0.5)."""
    return str(int(value)) if float(value).is_integer() else repr(value)


# Structural schemas ---------------------------------------------------------------------------

def structural_errors(schema: Any, path: str, level: str = "root") -> list[FieldError]:
    """What makes ``schema`` not structural, with apiextensions' words: every specified field and
    array item has a type, the root is an object, arrays have items, ``properties`` and
    ``additionalProperties`` exclude each other. ``level``: root, field or item."""
    if not isinstance(schema, dict):
        return [FieldError.invalid(path, schema, "must be an object")]
    errs: list[FieldError] = []
    for key in schema:
        if key not in _KEYWORDS:
            errs.append(FieldError.forbidden(f"{path}.{key}", "must not be specified in a structural schema"
                                             if not key.startswith("$") else f"{key} is not supported"))
    kind = schema.get("type", "")
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    embedded = schema.get("x-kubernetes-embedded-resource") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    if preserve is False:
        errs.append(FieldError.invalid(f"{path}.x-kubernetes-preserve-unknown-fields", False,
                                       "must be true or undefined"))
    if not kind and not int_or_string and not (preserve is True and level != "root"):
        where = {"root": "at the root", "field": "for specified object fields",
                 "item": "for specified array items"}[level]
        errs.append(FieldError.required(f"{path}.type", f"must not be empty {where}"))
    elif kind and kind not in _SCHEMA_TYPES:
        errs.append(FieldError.not_supported(f"{path}.type", kind, _SCHEMA_TYPES))
    if level == "root" and kind and kind != "object":
        errs.append(FieldError.invalid(f"{path}.type", kind, "must be object at the root"))
    if int_or_string and kind:
        errs.append(FieldError.invalid(f"{path}.type", kind, "must be empty if x-kubernetes-int-or-string is true"))
    if embedded and kind != "object":
        errs.append(FieldError.invalid(f"{path}.type", kind,
                                       "must be object if x-kubernetes-embedded-resource is true"))
    if kind == "array" and "items" not in schema:
        errs.append(FieldError.required(f"{path}.items", "must be specified"))
    if "items" in schema:
        if isinstance(schema["items"], list):
            errs.append(FieldError.forbidden(f"{path}.items", "items must be a schema object and not an array"))
        else:
            errs.extend(structural_errors(schema["items"], f"{path}.items", "item"))
    properties = schema.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            errs.append(FieldError.invalid(f"{path}.properties", properties, "must be an object"))
        else:
            if kind and kind != "object":
                errs.append(FieldError.invalid(f"{path}.properties", "object",
                                               f'must only have "properties" if type is "object", not "{kind}"'))
            for name, sub in properties.items():
                errs.extend(structural_errors(sub, f"{path}.properties[{name}]", "field"))
    extra = schema.get("additionalProperties")
    if extra is not None and extra is not True:
        if properties:
            errs.append(FieldError.forbidden(f"{path}.additionalProperties",
                                             "additionalProperties and properties are mutual exclusive"))
        if isinstance(extra, dict):
            errs.extend(structural_errors(extra, f"{path}.additionalProperties", "field"))
        elif extra is not False:
            errs.append(FieldError.invalid(f"{path}.additionalProperties", extra, "must be a schema or a boolean"))
    required = schema.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        errs.append(FieldError.invalid(f"{path}.required", required, "must be a list of field names"))
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            errs.append(FieldError.invalid(f"{path}.pattern", pattern, f"must be a valid regular expression, "
                                           f"but isn't: {exc}"))
    if level == "root" and isinstance(properties, dict) and isinstance(properties.get("metadata"), dict):
        meta = properties["metadata"]
        if set(meta) - {"type", "description"} or set(meta.get("properties") or {}) - {"name", "generateName"}:
            errs.append(FieldError.forbidden(f"{path}.properties[metadata]", "must not specify anything other than "
                                             "name and generateName, but metadata is implicitly specified"))
    if "x-kubernetes-validations" in schema:
        errs.extend(rule_definition_errors(schema["x-kubernetes-validations"], f"{path}.x-kubernetes-validations"))
    if "default" in schema and not errs:
        # A default must itself be valid by the schema it defaults (apiextensions checks it too).
        errs.extend(schema_errors(copy.deepcopy(schema["default"]), schema, f"{path}.default"))
    return errs


# Objects: pruning, defaulting, validation --------------------------------------------------

def prune(value: Any, schema: dict[str, Any], path: str, pruned: list[str], root: bool = False) -> None:
    """Drop in place the fields ``schema`` does not specify (unless it preserves unknown fields),
    recording each dropped field's path."""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = schema.get("x-kubernetes-embedded-resource") is True
        for key in list(value):
            if key in properties:
                prune(value[key], properties[key], join_path(path, key), pruned)
            elif isinstance(extra, dict):
                prune(value[key], extra, join_path(path, key), pruned)
            elif (root or embedded) and key in _ROOT_FIELDS:
                continue
            elif not preserve and extra is not True:
                pruned.append(join_path(path, key))
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            prune(item, schema["items"], join_path(path, i), pruned)


def default(value: Any, schema: dict[str, Any]) -> None:
    """Fill in place the defaults ``schema`` declares where a field is absent (or null and not
    nullable), then go on into what is there, as apiextensions' structural defaulting does."""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if isinstance(sub, dict) and "default" in sub and (
                    key not in value or (value[key] is None and not sub.get("nullable"))):
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            sub = properties.get(key, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                default(item, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            default(item, schema["items"])


def schema_errors(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    """``value`` checked against ``schema``, in kube-apiserver's words for a custom resource."""
    if not isinstance(schema, dict):
        return []
    if value is None:
        if schema.get("nullable") or schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("type"):
            return []
    wanted = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if _json_type(value) not in ("integer", "string"):
            return [FieldError.invalid(path, _json_type(value), f"{path} in body must be of type integer-or-string: "
                                       f'"{_json_type(value)}"'), ]
    elif wanted and not _is_type(value, wanted):
        return [FieldError.invalid(path, _json_type(value), f'{path} in body must be of type {wanted}: '
                                   f'"{_json_type(value)}"')]
    errs: list[FieldError] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        errs.append(FieldError.not_supported(path, value, [e if isinstance(e, str) else json.dumps(e) for e in enum]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            low, exclusive = schema["minimum"], schema.get("exclusiveMinimum") is True
            if value < low or (exclusive and value == low):
                errs.append(FieldError.invalid(path, value, f"{path} in body should be greater than "
                                               f"{'' if exclusive else 'or equal to '}{_number_text(low)}"))
        if "maximum" in schema:
            high, exclusive = schema["maximum"], schema.get("exclusiveMaximum") is True
            if value > high or (exclusive and value == high):
                errs.append(FieldError.invalid(path, value, f"{path} in body should be less than "
                                               f"{'' if exclusive else 'or equal to '}{_number_text(high)}"))
        factor = schema.get("multipleOf")
        if isinstance(factor, (int, float)) and factor > 0 and (value / factor) % 1:
            errs.append(FieldError.invalid(path, value, f"{path} in body should be a multiple of "
                                           f"{_number_text(factor)}"))
    if isinstance(value, str):
        fmt = schema.get("format")
        if isinstance(fmt, str) and not _valid_format(value, fmt):
            errs.append(FieldError.invalid(path, value, f'{path} in body must be of type {fmt}: "{value}"'))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(FieldError.too_long(path, schema["maxLength"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(FieldError.invalid(path, value, f"{path} in body should be at least {schema['minLength']} "
                                           "chars long"))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not re.search(pattern, value):
            errs.append(FieldError.invalid(path, value, f"{path} in body should match '{pattern}'"))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(FieldError.invalid(path, len(value), f"{path} in body should have at most "
                                           f"{schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(FieldError.invalid(path, len(value), f"{path} in body should have at least "
                                           f"{schema['minItems']} items"))
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(value):
            errs.append(FieldError.invalid(path, value, f"{path} in body shouldn't contain duplicates"))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                errs.extend(schema_errors(item, items, join_path(path, i)))
        errs.extend(_list_type_errors(value, schema, path))
    if isinstance(value, dict):
        for name in schema.get("required") or []:
            if name not in value:
                errs.append(FieldError.required(join_path(path, name)))
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                errs.extend(schema_errors(item, properties[key], join_path(path, key)))
            elif isinstance(extra, dict):
                errs.extend(schema_errors(item, extra, join_path(path, key)))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(FieldError.invalid(path, len(value), f"{path} in body should have at most "
                                           f"{schema['maxProperties']} properties"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errs.append(FieldError.invalid(path, len(value), f"{path} in body should have at least "
                                           f"{schema['minProperties']} properties"))
    return errs + _composite_errors(value, schema, path)


def _list_type_errors(value: list[Any], schema: dict[str, Any], path: str) -> list[FieldError]:
    """``x-kubernetes-list-type``: a set's items, and a map's items' keys, appear once."""
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if list_type not in ("set", "map"):
        return []
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        if list_type == "map" and not isinstance(item, dict):
            continue
        key = item if list_type == "set" else {k: item.get(k) for k in keys}
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            errs.append(FieldError.duplicate(join_path(path, i), key))
        seen.add(text)
    return errs


def _closest(branches: list[list[FieldError]]) -> list[FieldError]:
    """The failed branch that matched best (kube-openapi counts the checks that passed): one whose
    type fits before one whose does not, then the fewest errors."""
    return min(branches, key=lambda errs: (any("must be of type" in e.detail for e in errs), len(errs)))


def _composite(path: str, message: str) -> FieldError:
    # kube-openapi's composite errors are not field errors: apiextensions reports them at the root.
    return FieldError.invalid("<nil>", "", f"{json.dumps(path or '.')} {message}")


def _composite_errors(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    """allOf, anyOf, oneOf and not, as kube-openapi words them (with the closest branch's errors)."""
    errs: list[FieldError] = []
    all_of = [schema_errors(value, option, path) for option in schema.get("allOf") or []]
    if any(all_of):
        errs.extend(e for branch in all_of for e in branch)
        none = ". None validated" if all(all_of) else ""
        errs.append(_composite(path, f"must validate all the schemas (allOf){none}"))
    any_of = [schema_errors(value, option, path) for option in schema.get("anyOf") or []]
    if any_of and all(any_of):
        errs.append(_composite(path, "must validate at least one schema (anyOf)"))
        errs.extend(_closest(any_of))
    one_of = [schema_errors(value, option, path) for option in schema.get("oneOf") or []]
    valid = sum(1 for branch in one_of if not branch)
    if one_of and valid != 1:
        found = "Found none valid" if not valid else f"Found {valid} valid alternatives"
        errs.append(_composite(path, f"must validate one and only one schema (oneOf). {found}"))
        if not valid:
            errs.extend(_closest(one_of))
    if isinstance(schema.get("not"), dict) and not schema_errors(value, schema["not"], path):
        errs.append(_composite(path, "must not validate the schema (not)"))
    return errs


class CustomResource(Resource):
    """An object of a user's custom kind: metadata parsed as every object's, the rest kept as sent
    and checked against its version's schema. `kind_infos` makes one subclass per served version."""

    openapi_v3_schema: ClassVar[dict[str, Any]] = {}
    storage_api_version: ClassVar[str] = ""  # objects of every version are stored in this one
    deprecation_warning: ClassVar[str] = ""  # a deprecated version's warning, sent with each write
    has_rules: ClassVar[bool] = False  # x-kubernetes-validations somewhere in the schema
    storage_schema: ClassVar[dict[str, Any]] = {}  # the storage version's: what is stored and read is coerced by it
    _body: dict[str, Any] = PrivateAttr(default_factory=dict)
    _pruned: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def model_validate(cls, obj: Any, *, strict: bool | None = None, from_attributes: bool | None = None,
                       context: Any = None, **kwargs: Any) -> CustomResource:
        if not isinstance(obj, dict):
            return super().model_validate(obj, strict=strict)
        model = super().model_validate({k: obj[k] for k in _ROOT_FIELDS if k in obj}, strict=strict)
        body = copy.deepcopy({k: v for k, v in obj.items() if k not in _ROOT_FIELDS})
        pruned: list[str] = []
        prune(body, cls.openapi_v3_schema, "", pruned, root=True)
        model._body, model._pruned = body, pruned
        return model

    def set_defaults(self) -> None:
        default(self._body, self.openapi_v3_schema)

    def admission_warnings(self) -> list[str]:
        deprecated = [self.deprecation_warning] if self.deprecation_warning else []
        return [f'unknown field "{path}"' for path in self._pruned] + deprecated

    def check(self) -> list[FieldError]:
        errs = super().check()
        for key, value in self._body.items():
            sub = (self.openapi_v3_schema.get("properties") or {}).get(key)
            if sub is not None:
                errs.extend(schema_errors(value, sub, key))
        for name in self.openapi_v3_schema.get("required") or []:
            if name not in self._body and name not in _ROOT_FIELDS:
                errs.append(FieldError.required(name))
        if self.has_rules and not errs:  # as apiextensions: the rules see an object of the right shape
            errs.extend(rule_errors(self._rule_view(self.to_dict()), self.openapi_v3_schema, ""))
        return errs

    @staticmethod
    def _rule_view(obj: dict[str, Any]) -> dict[str, Any]:
        """The object as CEL rules at the root see it: metadata's name and generateName only."""
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in ("name", "generateName")}
        return {**obj, "metadata": meta}

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        if not cls.has_rules:
            return []
        return rule_errors(cls._rule_view(new), cls.openapi_v3_schema, "", cls._rule_view(old), transitions_only=True)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: in the storage version, pruned by its schema where this version's differs."""
        body = copy.deepcopy(self._body)
        if self.storage_schema is not self.openapi_v3_schema:
            prune(body, self.storage_schema, "", [], root=True)
        return {**super().to_dict(), "apiVersion": self.storage_api_version, **body}


def served_as(info: KindInfo, obj: dict[str, Any]) -> dict[str, Any]:
    """A user's object as the version ``info`` serves it, read from the store: pruned and defaulted
    by the storage version's schema, as apiextensions reads from etcd (a field the CRD dropped goes,
    a default it added shows on older objects), then, as conversion None converts, with the served
    version's ``apiVersion``. Other kinds' objects are returned unchanged."""
    if not is_custom(info) or obj.get("kind") != info.kind:
        return obj
    model: type[CustomResource] = info.model  # type: ignore[assignment]
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    if _would_change(body, model.storage_schema, root=True):  # rarely: the CRD changed since the write
        obj = {**{k: v for k, v in obj.items() if k in _ROOT_FIELDS}, **_coerced(body, model.storage_schema)}
    return obj if obj.get("apiVersion") == info.api_version else {**obj, "apiVersion": info.api_version}


def _would_change(value: Any, schema: Any, root: bool = False) -> bool:
    """Whether `prune` or `default` would change ``value``: a read-only walk, so that reading an
    object costs no copy of it."""
    if not isinstance(schema, dict):
        return False
    if isinstance(value, list):
        items = schema.get("items")
        return isinstance(items, dict) and any(_would_change(item, items) for item in value)
    if not isinstance(value, dict):
        return False
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, sub in properties.items():
        if isinstance(sub, dict) and "default" in sub and (
                key not in value or (value[key] is None and not sub.get("nullable"))):
            return True
    keeps = schema.get("x-kubernetes-preserve-unknown-fields") is True or extra is True
    open_root = root or schema.get("x-kubernetes-embedded-resource") is True
    for key, item in value.items():
        sub = properties.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None:
            if _would_change(item, sub):
                return True
        elif not keeps and not (open_root and key in _ROOT_FIELDS):
            return True
    return False


def _coerced(body: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``body`` (an object less its apiVersion, kind and metadata) pruned and defaulted by ``schema``."""
    out = copy.deepcopy(body)
    prune(out, schema, "", [], root=True)
    default(out, schema)
    return out


def is_custom(info: KindInfo) -> bool:
    """Whether ``info`` is a user's kind, registered from a CRD (not one of Trimaran's own)."""
    return isinstance(info.model, type) and issubclass(info.model, CustomResource)


# The CRD itself --------------------------------------------------------------------------------

def _storage_errors(versions: list[Any]) -> list[FieldError]:
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage") is True]
    if len(storage) != 1:
        return [FieldError.invalid("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                   "must have exactly one version marked as storage version")]
    return []


def _scale_errors(scale: Any, path: str) -> list[FieldError]:
    if not isinstance(scale, dict):
        return [FieldError.invalid(path, scale, "must be an object")]
    errs: list[FieldError] = []
    spec_path = scale.get("specReplicasPath")
    if not spec_path:
        errs.append(FieldError.required(f"{path}.specReplicasPath", ""))
    elif not str(spec_path).startswith(".spec."):
        errs.append(FieldError.invalid(f"{path}.specReplicasPath", spec_path, "should be a json path under .spec"))
    status_path = scale.get("statusReplicasPath")
    if not status_path:
        errs.append(FieldError.required(f"{path}.statusReplicasPath", ""))
    elif not str(status_path).startswith(".status."):
        errs.append(FieldError.invalid(f"{path}.statusReplicasPath", status_path,
                                       "should be a json path under .status"))
    selector = scale.get("labelSelectorPath")
    if selector and not (str(selector).startswith(".spec.") or str(selector).startswith(".status.")):
        errs.append(FieldError.invalid(f"{path}.labelSelectorPath", selector,
                                       "should be a json path under either .spec or .status"))
    return errs


def _version_errors(version: Any, path: str) -> list[FieldError]:
    if not isinstance(version, dict):
        return [FieldError.invalid(path, version, "must be an object")]
    errs: list[FieldError] = []
    name = version.get("name")
    if not name:
        errs.append(FieldError.required(f"{path}.name"))
    else:
        errs.extend(FieldError.invalid(f"{path}.name", name, p) for p in is_dns1035_label(str(name)))
    for flag in ("served", "storage"):
        if not isinstance(version.get(flag), bool):
            errs.append(FieldError.required(f"{path}.{flag}"))
    schema = (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version.get("schema"), dict) \
        else None
    if schema is None:
        errs.append(FieldError.required(f"{path}.schema.openAPIV3Schema", "schemas are required"))
    else:
        errs.extend(structural_errors(schema, f"{path}.schema.openAPIV3Schema"))
    subresources = version.get("subresources") or {}
    if "scale" in subresources:
        errs.extend(_scale_errors(subresources["scale"], f"{path}.subresources.scale"))
    for i, column in enumerate(version.get("additionalPrinterColumns") or []):
        where = f"{path}.additionalPrinterColumns[{i}]"
        if not isinstance(column, dict):
            errs.append(FieldError.invalid(where, column, "must be an object"))
            continue
        if not column.get("name"):
            errs.append(FieldError.required(f"{where}.name"))
        if column.get("type") not in _COLUMN_TYPES:
            errs.append(FieldError.not_supported(f"{where}.type", column.get("type"), _COLUMN_TYPES))
        if not column.get("jsonPath"):
            errs.append(FieldError.required(f"{where}.jsonPath"))
    return errs


def _names_errors(names: Any) -> list[FieldError]:
    if not isinstance(names, dict):
        return [FieldError.required("spec.names")]
    errs: list[FieldError] = []
    for field in ("plural", "kind"):
        if not names.get(field):
            errs.append(FieldError.required(f"spec.names.{field}"))
    for field in ("plural", "singular"):
        value = names.get(field)
        if value:
            errs.extend(FieldError.invalid(f"spec.names.{field}", value, p) for p in is_dns1035_label(str(value)))
    kind = names.get("kind")
    if kind and not re.fullmatch(r"[A-Za-z][-A-Za-z0-9]*", str(kind)):
        errs.append(FieldError.invalid("spec.names.kind", kind, "may have mixed case, but should otherwise match: "
                                       "[a-z]([-a-z0-9]*[a-z0-9])?"))
    for i, short in enumerate(names.get("shortNames") or []):
        errs.extend(FieldError.invalid(f"spec.names.shortNames[{i}]", short, p) for p in is_dns1035_label(str(short)))
    return errs


# The fields of a CRD's spec apiextensions decodes (typed there: anything else is an unknown field).
_SPEC_FIELDS: dict[str, Any] = {
    "group": None, "scope": None, "preserveUnknownFields": None,
    "names": {"plural": None, "singular": None, "shortNames": None, "kind": None, "listKind": None,
              "categories": None},
    "conversion": {"strategy": None, "webhook": None},
    "versions": [{"name": None, "served": None, "storage": None, "deprecated": None, "deprecationWarning": None,
                  "schema": {"openAPIV3Schema": None}, "selectableFields": None,
                  "subresources": {"status": None, "scale": {"specReplicasPath": None, "statusReplicasPath": None,
                                                             "labelSelectorPath": None}},
                  "additionalPrinterColumns": [{"name": None, "type": None, "format": None, "description": None,
                                                "priority": None, "jsonPath": None}]}],
}


def _unknown_fields(value: Any, known: Any, path: str, out: list[str]) -> None:
    if isinstance(known, list) and isinstance(value, list):
        for i, item in enumerate(value):
            _unknown_fields(item, known[0], join_path(path, i), out)
    elif isinstance(known, dict) and isinstance(value, dict):
        for key, item in value.items():
            if key not in known:
                out.append(join_path(path, key))
            else:
                _unknown_fields(item, known[key], join_path(path, key), out)


class CustomResourceDefinition(Resource):
    """``apiextensions.k8s.io/v1`` CustomResourceDefinition: its spec is kept as sent, checked with
    apiextensions' rules and words."""

    spec: dict[str, Any] = {}
    status: dict[str, Any] | None = None

    def set_defaults(self) -> None:
        names = self.spec.get("names")
        if isinstance(names, dict) and isinstance(names.get("kind"), str):
            names.setdefault("singular", names["kind"].lower())
            names.setdefault("listKind", names["kind"] + "List")
        conversion = self.spec.setdefault("conversion", {})
        if isinstance(conversion, dict):
            conversion.setdefault("strategy", "None")

    def admission_warnings(self) -> list[str]:
        unknown: list[str] = []
        _unknown_fields(self.spec, _SPEC_FIELDS, "spec", unknown)
        return [f'unknown field "{path}"' for path in unknown]

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec
        if spec.get("preserveUnknownFields") is True:
            errs.append(FieldError.invalid("spec.preserveUnknownFields", True, "cannot set to true, set "
                                           "x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema "
                                           "instead"))
        group = spec.get("group")
        names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
        if not group:
            errs.append(FieldError.required("spec.group"))
        else:
            errs.extend(FieldError.invalid("spec.group", group, p) for p in is_dns1123_subdomain(str(group)))
            if "." not in str(group):
                errs.append(FieldError.invalid("spec.group", group, "should be a domain with at least one dot"))
        if isinstance(group, str) and _protected(group) and \
                not (self.metadata.annotations or {}).get(_APPROVAL):
            errs.append(FieldError.required(f"metadata.annotations[{_APPROVAL}]", f'protected groups must have '
                                            f'approval annotation "{_APPROVAL}", see '
                                            "https://github.com/kubernetes/enhancements/pull/1111"))
        name = self.metadata.name or ""
        if names.get("plural") and group and name != f"{names['plural']}.{group}":
            errs.append(FieldError.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
        scope = spec.get("scope")
        if not scope:
            errs.append(FieldError.required("spec.scope"))
        elif scope not in ("Cluster", "Namespaced"):
            errs.append(FieldError.not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
        errs.extend(_names_errors(spec.get("names")))
        versions = spec.get("versions")
        if not isinstance(versions, list) or not versions:
            errs.append(FieldError.invalid("spec.versions", versions, "must have exactly one version marked as "
                                           "storage version"))
            return errs
        seen: set[str] = set()
        for i, version in enumerate(versions):
            errs.extend(_version_errors(version, f"spec.versions[{i}]"))
            vname = version.get("name") if isinstance(version, dict) else None
            if vname in seen:
                errs.append(FieldError.duplicate(f"spec.versions[{i}].name", vname))
            seen.add(vname)
        errs.extend(_storage_errors(versions))
        strategy = (spec.get("conversion") or {}).get("strategy", "None")
        if strategy == "Webhook":
            errs.append(FieldError.forbidden("spec.conversion.strategy", "conversion webhooks are not supported "
                                             "by Trimaran: use None (versions differ only in apiVersion)"))
        elif strategy != "None":
            errs.append(FieldError.not_supported("spec.conversion.strategy", strategy, ["None", "Webhook"]))
        errs.extend(_registry_conflicts(spec))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        errs: list[FieldError] = []
        for field in ("group", "scope"):
            if old["spec"].get(field) != new["spec"].get(field):
                errs.append(FieldError.invalid(f"spec.{field}", new["spec"].get(field), "field is immutable"))
        stored = (old.get("status") or {}).get("storedVersions") or []
        served = {v.get("name") for v in new["spec"].get("versions") or [] if isinstance(v, dict)}
        for version in stored:
            if version not in served:
                errs.append(FieldError.invalid("status.storedVersions[0]", version,
                                               "must appear in spec.versions"))
        return errs


_APPROVAL = "api-approved.kubernetes.io"


def _protected(group: str) -> bool:
    """Kubernetes' community groups, where a CRD needs the API review's approval annotation."""
    return any(group == root or group.endswith("." + root) for root in ("k8s.io", "kubernetes.io"))


def _registry_conflicts(spec: dict[str, Any]) -> list[FieldError]:
    """A kind the store already keeps under another group (objects are stored by kind), or a
    group's plural Trimaran serves itself."""
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    errs: list[FieldError] = []
    if spec.get("group") in KUBERNETES_GROUPS:
        return [FieldError.forbidden("spec.group", f"{spec['group']} is one of Kubernetes' own API groups, which "
                                     "Trimaran serves itself")]
    for info in all_kinds():
        if is_custom(info) and info.group == spec.get("group"):
            continue
        if info.group == spec.get("group") and info.plural == names.get("plural"):
            errs.append(FieldError.forbidden("metadata.name", f"{info.plural}.{info.group} is Trimaran's own "
                                             "CustomResourceDefinition, which is read-only"))
            break
        if info.kind == names.get("kind"):
            where = info.api_version
            errs.append(FieldError.invalid("spec.names.kind", names.get("kind"),
                                           f"the kind is already served by {where}, and Trimaran stores objects "
                                           "by kind: choose another kind"))
            break
    return errs


def _with_root_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The version's schema as OpenAPI publishes it: apiVersion, kind and metadata described."""
    out = copy.deepcopy(schema)
    properties = out.setdefault("properties", {})
    properties.setdefault("apiVersion", {
        "type": "string", "description": "APIVersion defines the versioned schema of this representation of an "
        "object. Servers should convert recognized schemas to the latest internal value, and may reject "
        "unrecognized values."})
    properties.setdefault("kind", {
        "type": "string", "description": "Kind is a string value representing the REST resource this object "
        "represents. Servers may infer this from the endpoint the client submits requests to. In CamelCase."})
    properties["metadata"] = {"type": "object", "description": "Standard object's metadata.",
                              **{k: v for k, v in (properties.get("metadata") or {}).items() if k != "type"}}
    return out


_KUBE_VERSION = re.compile(r"v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?")


def version_priority(name: str) -> tuple[int, int, int, str]:
    """A sort key putting versions in Kubernetes' order (v2, v1, v1beta2, v1beta1, v1alpha1, then
    others by name), as discovery lists a group's versions and picks its preferred one."""
    match = _KUBE_VERSION.fullmatch(name)
    if match is None:
        return (3, 0, 0, name)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0), "")


def _deprecation(version: dict[str, Any], spec: dict[str, Any]) -> str:
    """apiextensions' warning for a write in a deprecated version: its own, or one naming the next
    served version that is not deprecated."""
    if not version.get("deprecated"):
        return ""
    if version.get("deprecationWarning"):
        return str(version["deprecationWarning"])
    kind, group = spec["names"]["kind"], spec["group"]
    message = f"{group}/{version['name']} {kind} is deprecated"
    newer = sorted((v["name"] for v in spec["versions"] if v.get("served") and not v.get("deprecated")
                    and version_priority(v["name"]) < version_priority(version["name"])), key=version_priority)
    return f"{message}; use {group}/{newer[0]} {kind}" if newer else message


def kind_infos(crd: dict[str, Any]) -> list[KindInfo]:
    """One registry entry per served version of a stored (valid) CRD, in Kubernetes' version order
    (the first is the group's preferred version, which short names find)."""
    spec = crd["spec"]
    names = spec["names"]
    group = spec["group"]
    infos: list[KindInfo] = []
    versions = sorted((v for v in spec["versions"] if v.get("served")), key=lambda v: version_priority(v["name"]))
    storage = next(v for v in spec["versions"] if v.get("storage"))
    storage_schema = storage["schema"]["openAPIV3Schema"]
    for version in versions:
        schema = version["schema"]["openAPIV3Schema"]
        warning = _deprecation(version, spec)
        model = type(f"{names['kind']}_{version['name']}", (CustomResource,),
                     {"openapi_v3_schema": schema, "storage_api_version": f"{group}/{storage['name']}",
                      "deprecation_warning": warning, "has_rules": has_rules(schema),
                      "storage_schema": storage_schema,
                      "__module__": __name__})
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        columns = tuple(PrinterColumn(c["name"], c["type"], c["jsonPath"], int(c.get("priority") or 0),
                                      c.get("description") or "")
                        for c in version.get("additionalPrinterColumns") or [])
        infos.append(KindInfo(
            names["kind"], f"{group}/{version['name']}", group, version["name"], names["plural"],
            tuple(names.get("shortNames") or ()), spec["scope"] == "Namespaced", model,
            tuple(names.get("categories") or ()), columns, "status" in subresources,
            Scale(scale["specReplicasPath"], scale["statusReplicasPath"], scale.get("labelSelectorPath") or "")
            if scale else None))
    return infos


def published_schema(info: KindInfo) -> dict[str, Any]:
    """The OpenAPI v3 schema a user's kind is described by (``kubectl explain``)."""
    return _with_root_fields(info.model.openapi_v3_schema)  # type: ignore[attr-defined]


def crd_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    """The status apiextensions' controllers converge to at once here: names accepted, established,
    and the storage version added to ``storedVersions``."""
    spec = crd["spec"]
    previous = crd.get("status") or {}
    stored = list(previous.get("storedVersions") or [])
    for version in spec["versions"]:
        if version.get("storage") and version["name"] not in stored:
            stored.append(version["name"])
    old = {c.get("type"): c for c in previous.get("conditions") or []}

    def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
        since = old[kind]["lastTransitionTime"] if old.get(kind, {}).get("status") == "True" else now
        return {"type": kind, "status": "True", "lastTransitionTime": since, "reason": reason, "message": message}

    return {"conditions": [condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                           condition("Established", "InitialNamesAccepted", "the initial names have been accepted")],
            "acceptedNames": copy.deepcopy(spec["names"]), "storedVersions": stored}


CRD_INFO = register(KindInfo(CRD_KIND, f"{GROUP}/v1", GROUP, "v1", "customresourcedefinitions", ("crd", "crds"),
                             False, CustomResourceDefinition,
                             # kube-apiserver's default Table: the timestamp itself, not an age.
                             printer_columns=(PrinterColumn("Created At", "string", ".metadata.creationTimestamp"),)))
