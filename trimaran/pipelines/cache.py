"""A task's cache key: the fingerprint of what determines its outputs, as KFP's cache key holds it
(input parameter values, input artifacts, output definitions, the container), so a task whose key
matches an earlier task's reuses that task's outputs. The run's name, the task's place in the DAG and
where its outputs go are not in it: the same step in another run hits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from trimaran.pipelines.placeholders import PlaceholderError, coerce_parameter

__all__ = ["cache_key"]


def _parameters(component: Mapping, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The values the task runs with, typed as declared (3 and 3.0 are one NUMBER_INTEGER) with
    declared defaults filled in, so a value given equal to its default keys the same."""
    declared = ((component.get("inputDefinitions") or {}).get("parameters")) or {}
    values: dict[str, Any] = {}
    for name, definition in declared.items():
        value = parameters.get(name, definition.get("defaultValue"))
        if value is None:
            continue
        try:
            values[name] = coerce_parameter(name, value, definition.get("parameterType", "STRING"))
        except PlaceholderError:
            values[name] = value  # the task will fail on it; its key need only be stable
    values.update({name: value for name, value in parameters.items() if name not in declared and value is not None})
    return values


def cache_key(component: Mapping, executor: Mapping, parameters: Mapping[str, Any],
              artifacts: Mapping[str, list[Mapping]]) -> str:
    """sha256 (hex) of the task's inputs (input artifacts by URI, type, metadata and import), its
    component's outputs and its container (`executor`:
    the IR's ``executors.X.container``: image, command, args, env)."""
    document = {
        "inputParameters": _parameters(component, parameters),
        # An artifact is its URI, type and metadata (KFP's metadata store matches all three), and an
        # importer's reimport makes each import another artifact.
        "inputArtifacts": {name: [{"uri": ref.get("uri"), "type": ref.get("type"), "metadata": ref.get("metadata"),
                                   "importId": ref.get("importId")} for ref in refs]
                           for name, refs in artifacts.items() if refs},
        "outputs": component.get("outputDefinitions") or {},
        "container": {"image": executor.get("image"), "command": list(executor.get("command") or []),
                      "args": list(executor.get("args") or []),
                      "env": sorted((e.get("name"), str(e.get("value", ""))) for e in executor.get("env") or [])},
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
