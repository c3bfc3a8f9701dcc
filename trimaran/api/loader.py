"""Validating manifests as the API server would.

`validate` parses one object with its kind's model, defaults it and checks it;
`load_and_validate` reads a submission (`trimaran.api.manifests`) and validates every object,
rejecting it as a whole and listing every problem, so that the caller stores nothing from a
file with a mistake in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from trimaran.api.core import start_errors
from trimaran.api.errors import FieldError, ManifestError, field_errors_from_validation_error, format_value, join_path
from trimaran.api.kinds import UnknownKindError, for_object
from trimaran.api.manifests import Manifest, json_type, parse_sources

__all__ = ["ValidationResult", "load_and_validate", "validate"]

DEFAULT_NAMESPACE = "default"


class ValidationResult(NamedTuple):
    """A defaulted object (plain dict, as stored) and the warnings to show its author."""

    object: dict[str, Any]
    warnings: list[str]


def _pop_unknown_fields(node: Any, path: str, out: list[str]) -> None:
    """Record the paths of keys no model declares, and drop them (they are not stored)."""
    if isinstance(node, BaseModel):
        extra = node.__pydantic_extra__
        if extra:
            out.extend(join_path(path, key) for key in extra)
            extra.clear()
        for name, info in type(node).model_fields.items():
            value = getattr(node, name)
            if value is not None:
                _pop_unknown_fields(value, join_path(path, info.alias or name), out)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _pop_unknown_fields(item, join_path(path, i), out)
    elif isinstance(node, dict):
        for key, item in node.items():
            _pop_unknown_fields(item, join_path(path, str(key)), out)


def _describe(kind: str, obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{kind} {format_value(name)}" if isinstance(name, str) and name else kind


def validate(obj: Any) -> ValidationResult:
    """Parse `obj` with its kind's model, default it, check it; return the stored form.

    The result is a plain dict (camelCase keys, unset fields left out, unknown fields dropped);
    a namespaced object without a namespace gets ``default``. Unknown fields are warnings
    (``unknown field "spec.foo"``), as with kubectl's field validation.

    Raises ManifestError listing every problem of the object, each with its field path, e.g.
    ``PyTorchJob "x": spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: -1: must be
    greater than or equal to 0``.
    """
    if not isinstance(obj, dict):
        raise ManifestError([f"expected an object with apiVersion and kind, got {json_type(obj)}"])
    header: list[FieldError] = []
    for field in ("apiVersion", "kind"):
        value = obj.get(field)
        if value is None or value == "":
            header.append(FieldError.required(field))
        elif not isinstance(value, str):
            header.append(FieldError.invalid(field, value, "must be of type string"))
    if header:
        raise ManifestError.from_field_errors("", header)
    api_version, kind = obj["apiVersion"], obj["kind"]
    try:
        info = for_object(api_version, kind)
    except UnknownKindError as exc:
        raise ManifestError([str(exc)]) from None
    label = _describe(kind, obj)
    try:
        model = info.model.model_validate(obj)
    except ValidationError as exc:
        raise ManifestError.from_field_errors(label, field_errors_from_validation_error(exc)) from None

    unknown: list[str] = []
    _pop_unknown_fields(model, "", unknown)
    warnings = []
    for path in unknown:
        hint = model.unknown_field_hint(path)
        warnings.append(f'unknown field "{path}"' + (f" ({hint})" if hint else ""))

    if info.namespaced:
        model.metadata.namespace = model.metadata.namespace or DEFAULT_NAMESPACE
    else:
        model.metadata.namespace = None
    model.set_defaults()
    warnings.extend(model.admission_warnings())
    errors = model.check()
    stored = model.to_dict()
    if info.pod_templates is not None:
        for template in info.pod_templates(stored):
            errors.extend(start_errors(template.spec, template.spec_path))
    if errors:
        raise ManifestError.from_field_errors(label, errors)
    return ValidationResult(stored, warnings)


def load_and_validate(source: str | Path, text: str | None = None) -> list[Manifest]:
    """`load_manifests` then `validate` every object: all defaulted objects (with their parse
    and validation warnings), or one ManifestError listing every problem of every document,
    each line located (``job.yaml (document 2): PyTorchJob "x": spec...: ...``).
    An empty source yields an empty list.
    """
    problems: list[str] = []
    field_errors: list[FieldError] = []
    validated: list[Manifest] = []
    for manifest in parse_sources(source, text):
        if isinstance(manifest, str):
            problems.append(manifest)
            continue
        try:
            result = validate(manifest.object)
        except ManifestError as exc:
            problems.extend(exc.prefixed(manifest.location).problems)
            field_errors.extend(exc.field_errors)
            continue
        validated.append(manifest._replace(object=result.object, warnings=[*manifest.warnings, *result.warnings]))
    if problems:
        raise ManifestError(problems, field_errors)
    return validated
