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
