"""Compact manifest builders and fixture paths for the API tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trimaran.api import ManifestError, load_and_validate

FIXTURES = Path(__file__).parent / "fixtures"


def container(name: str, image: str = "python:3.11", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def replica(containers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": containers}}, **extra}


def tfjob(specs: dict[str, Any], name: str = "mnist", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs, **spec},
    }


def pytorchjob(specs: dict[str, Any], name: str = "ddp", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs, **spec},
    }


def batch_job(pod_spec: dict[str, Any], name: str = "sweep", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }


def pod(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def rejection(source: str, text: str) -> str:
    """The message of the ManifestError that loading `text` must raise."""
    with pytest.raises(ManifestError) as info:
        load_and_validate(source, text)
    return str(info.value)


def schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """A structural-schema check (what the API server does with a CRD's openAPIV3Schema): types,
    enums, required keys, and no key the schema does not know unless it preserves unknown fields."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, (int, str)) else [f"{path}: not int-or-string"]
    if kind in types and not isinstance(value, types[kind]) or kind == "integer" and isinstance(value, bool):
        return [f"{path}: {value!r} is not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not in {schema['enum']}"]
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out += [f"{path}.{k}: required" for k in schema.get("required") or [] if k not in value]
        for key, item in value.items():
            if key in props:
                out += schema_errors(item, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += schema_errors(item, schema["additionalProperties"], f"{path}.{key}")
            elif props and not schema.get("x-kubernetes-preserve-unknown-fields"):  # no properties: metadata
                out.append(f"{path}.{key}: unknown field")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += schema_errors(item, schema["items"], f"{path}[{i}]")
    return out
