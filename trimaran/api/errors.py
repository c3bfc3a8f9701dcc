"""Field errors worded as the Kubernetes API server words them, and `ManifestError`.

A `FieldError` names one field by its path in the manifest (``spec.tfReplicaSpecs.Worker.replicas``)
and says what is wrong with it, in the same words `kubectl apply` prints, so users can search for
them. `ManifestError` carries every problem found in a submission, one located line each.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # a client reading manifests (trimaran.api.manifests) needs no pydantic
    from pydantic import ValidationError
    from pydantic_core import PydanticCustomError

__all__ = [
    "FieldError",
    "ManifestError",
    "field_errors_from_validation_error",
    "format_value",
    "invalid_value",
    "join_path",
]

ErrorType = Literal["Invalid", "Required", "Forbidden", "NotSupported", "Duplicate", "NotFound", "TooLong"]

# Segments that read unambiguously after a dot; anything else (label keys with "/" or ".",
# resource names like nvidia.com/gpu) is written in brackets, as Kubernetes writes map keys.
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_MAX_VALUE_CHARS = 200


def join_path(base: str, *segments: str | int) -> str:
    """Append field names, map keys and list indexes to a field path.

    >>> join_path("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu")
    'spec.containers[0].resources.limits[nvidia.com/gpu]'
    """
    out = base
    for seg in segments:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif _PLAIN_SEGMENT.fullmatch(seg):
            out = f"{out}.{seg}" if out else seg
        else:
            out += f"[{seg}]"
    return out


def format_value(value: Any) -> str:
    """Render a rejected value the way Kubernetes does: JSON scalars, a type word for the rest."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, (list, tuple)):
        return '"array"'
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json.dumps(repr(value), ensure_ascii=False)
    if len(text) > _MAX_VALUE_CHARS:
        # A multi-megabyte value would drown the one line that explains the problem.
        text = text[:_MAX_VALUE_CHARS] + '..." (truncated)'
    return text


@dataclass(frozen=True)
class FieldError:
    """One problem with one field, printed as ``<path>: <kind of error>: <detail>``."""

    path: str
    type: ErrorType
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    @classmethod
    def invalid(cls, path: str, value: Any, detail: str) -> FieldError:
        """The field has a value, and that value is wrong."""
        return cls(path, "Invalid", detail, value)

    @classmethod
    def required(cls, path: str, detail: str = "") -> FieldError:
        """The field must be given."""
        return cls(path, "Required", detail)

    @classmethod
    def forbidden(cls, path: str, detail: str) -> FieldError:
        """The field may not be given, or not together with another."""
        return cls(path, "Forbidden", detail)

    @classmethod
    def not_supported(cls, path: str, value: Any, supported: list[str] | tuple[str, ...]) -> FieldError:
        """The value is not one of a fixed set."""
        return cls(path, "NotSupported", value=value, supported=tuple(supported))

    @classmethod
    def duplicate(cls, path: str, value: Any) -> FieldError:
        """The value repeats one that must be unique."""
        return cls(path, "Duplicate", value=value)

    @classmethod
    def not_found(cls, path: str, value: Any) -> FieldError:
        """The value refers to something that does not exist (a volume name, say)."""
        return cls(path, "NotFound", value=value)

    @classmethod
    def too_long(cls, path: str, limit: int, detail: str = "") -> FieldError:
        """The value is longer than ``limit`` bytes (not printed: it is long)."""
        return cls(path, "TooLong", detail, limit)

    def __str__(self) -> str:
        if self.type == "TooLong":
            return f"{self.path}: Too long: may not be more than {self.value} bytes" + (
                f": {self.detail}" if self.detail else "")
        if self.type == "Invalid":
            body = f"Invalid value: {format_value(self.value)}"
            return f"{self.path}: {body}: {self.detail}" if self.detail else f"{self.path}: {body}"
        if self.type == "Required":
            return f"{self.path}: Required value" + (f": {self.detail}" if self.detail else "")
        if self.type == "Forbidden":
            return f"{self.path}: Forbidden" + (f": {self.detail}" if self.detail else "")
        if self.type == "NotSupported":
            options = ", ".join(json.dumps(s) for s in self.supported)
            return f"{self.path}: Unsupported value: {format_value(self.value)}: supported values: {options}"
        if self.type == "Duplicate":
            return f"{self.path}: Duplicate value: {format_value(self.value)}"
        return f"{self.path}: Not found: {format_value(self.value)}"


class ManifestError(Exception):
    """A manifest (or a whole submission) was rejected.

    `problems` holds one self-contained line per problem, each naming where it is (file,
    document, object, field path); `str()` joins them with newlines. `field_errors` keeps the
    structured errors behind them, for callers that build API responses.
    """

    def __init__(self, problems: list[str], field_errors: list[FieldError] | None = None) -> None:
        self.problems = list(problems)
        self.field_errors = list(field_errors or [])
        super().__init__("\n".join(self.problems))

    @classmethod
    def from_field_errors(cls, prefix: str, errors: list[FieldError]) -> ManifestError:
        """One problem line per field error, each starting with `prefix` (e.g. ``TFJob "x"``)."""
        return cls([f"{prefix}: {e}" if prefix else str(e) for e in errors], errors)

    def prefixed(self, prefix: str) -> ManifestError:
        """The same problems, each located further (e.g. by file and document)."""
        return ManifestError([f"{prefix}: {p}" for p in self.problems], self.field_errors)


def invalid_value(detail: str) -> PydanticCustomError:
    """An error for custom pydantic validators; rendered as ``Invalid value: <input>: detail``."""
    from pydantic_core import PydanticCustomError

    # The detail travels in the context: a message template would treat braces in it as fields.
    return PydanticCustomError("k8s_invalid", "{detail}", {"detail": detail})


_TYPE_WORDS = {
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "string_type": "string",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "float_type": "number",
    "float_parsing": "number",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "must be greater than or equal to {}"),
    "less_than_equal": ("le", "must be less than or equal to {}"),
    "greater_than": ("gt", "must be greater than {}"),
    "less_than": ("lt", "must be less than {}"),
}
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def field_errors_from_validation_error(exc: ValidationError, base: str = "") -> list[FieldError]:
    """Translate pydantic's errors into Kubernetes-worded field errors, all of them."""
    out: list[FieldError] = []
    for err in exc.errors(include_url=False):
        # "[key]" marks a failure of a dict key itself; the key is already the segment before it.
        segments = [s for s in err["loc"] if s != "[key]"]
        path = join_path(base, *segments) or "<root>"
        kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
        if kind == "missing":
            out.append(FieldError.required(path))
        elif kind in _TYPE_WORDS:
            out.append(FieldError.invalid(path, value, f"must be of type {_TYPE_WORDS[kind]}"))
        elif kind in _BOUNDS:
            key, template = _BOUNDS[kind]
            out.append(FieldError.invalid(path, value, template.format(ctx.get(key))))
        elif kind == "literal_error":
            options = _QUOTED.findall(str(ctx.get("expected", "")))
            out.append(FieldError.not_supported(path, value, options))
        elif kind == "k8s_invalid":
            out.append(FieldError.invalid(path, value, str(ctx.get("detail", err["msg"]))))
        else:
            out.append(FieldError.invalid(path, value, err["msg"]))
    return out
