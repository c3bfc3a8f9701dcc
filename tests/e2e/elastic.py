"""What the elastic PyTorchJob tests share: the example's job under other names and bounds, and its
logs read as the world size of each epoch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ControlPlaneHandle
from tests.helpers import EXAMPLES
from trimaran.cli.client import APIError

ELASTIC = EXAMPLES / "pytorch-elastic"


def elastic_job(name: str, workers: int, low: int, high: int, epochs: int, join_timeout: int = 600) -> dict[str, Any]:
    """The example's elastic PyTorchJob under another name, bounds and length."""
    job = yaml.safe_load((ELASTIC / "pytorchjob.yaml").read_text())
    job["metadata"]["name"] = name
    policy = job["spec"]["elasticPolicy"]
    policy.update(minReplicas=low, maxReplicas=high)
    policy["rdzvConf"].append({"key": "join_timeout", "value": str(join_timeout)})
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    worker["template"]["spec"]["containers"][0]["args"] = ["--epochs", str(epochs)]
    return job


def apply(plane: ControlPlaneHandle, tmp_path: Path, obj: dict[str, Any]) -> None:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    plane.cli("apply", "-f", str(ELASTIC / "code-configmap.yaml"), "-f", str(path))


def log(plane: ControlPlaneHandle, pod: str) -> str:
    try:
        return plane.log(pod)
    except APIError:  # the pod is not there (yet, or any more)
        return ""


def worlds(plane: ControlPlaneHandle, pod: str) -> list[int]:
    """The world size of each epoch the pod's rank trained, in order."""
    return [int(w) for w in re.findall(r"^epoch=\d+ world=(\d+)", log(plane, pod), re.M)]
