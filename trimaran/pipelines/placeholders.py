"""One task's I/O as KFP's launcher builds it: the ``ExecutorInput`` JSON the component reads, its
command and args with every placeholder the compiler writes resolved, and its outputs read back after
it ran (``executor_output.json`` and the output parameter files).

Parameters are typed by the component's declared ``parameterType``: a NUMBER_INTEGER is an int
(kfp.Client sends every number as a double, the compiler writes 3.0 for 3), a NUMBER_DOUBLE a float.
Numbers inside a LIST or STRUCT, and in artifact metadata, stay as JSON has them, as on a cluster
(its driver writes the ExecutorInput with Go's protojson, where the double 1 is ``1``; kfp.local's
Python protobuf writes ``1.0`` instead). An artifact's
local path is its URI when that is a local path (kfp's ``Artifact.path`` maps ``gs://``, ``s3://``
and ``minio://`` to mount points; so do we).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["CONTEXT_PLACEHOLDERS", "PlaceholderError", "coerce_parameter", "executor_input", "local_path",
           "read_outputs", "resolve_args", "resolve_metadata"]

EXECUTOR_OUTPUT = "executor_output.json"
# The run's and task's own facts (dsl.PIPELINE_*_PLACEHOLDER, dsl.WORKSPACE_PATH_PLACEHOLDER): the
# placeholder's name after "$.", looked up in resolve_args' context.
CONTEXT_PLACEHOLDERS = (
    "pipeline_job_name", "pipeline_job_resource_name", "pipeline_job_uuid", "pipeline_task_name",
    "pipeline_task_uuid", "pipeline_root", "pipeline_job_create_time_utc", "pipeline_job_schedule_time_utc",
    "workspace_path",
)
_PLACEHOLDER = re.compile(r"\{\{\$(?:\.(.*?))?\}\}")
# inputs.parameters['x'], outputs.artifacts['x'].metadata['k'], ...: the side, the kind, the name, the rest.
_IO = re.compile(r"(inputs|outputs)\.(parameters|artifacts)\['([^']*)'\](.*)")
_MOUNTS = (("gs://", "/gcs/"), ("minio://", "/minio/"), ("s3://", "/s3/"))


class PlaceholderError(ValueError):
    """A placeholder, input or output that does not fit the component: the message says which."""


def coerce_parameter(name: str, value: Any, kind: str) -> Any:
    """`value` as a `kind` parameter arrives in the component after KFP's protobuf round trip;
    PlaceholderError when it cannot be one."""
    if kind == "NUMBER_INTEGER":
        if isinstance(value, str):
            value = _loads(name, value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind == "NUMBER_DOUBLE":
        if isinstance(value, str):
            value = _loads(name, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind == "BOOLEAN":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, bool):
            return value
    elif kind in ("LIST", "STRUCT"):
        if isinstance(value, str):
            value = _loads(name, value)
        if isinstance(value, list if kind == "LIST" else dict):
            return value
    elif kind == "STRING":
        return value if isinstance(value, str) else json.dumps(value)
    else:  # TASK_FINAL_STATUS and types to come: as given
        return value
    raise PlaceholderError(f"parameter {name!r}: {value!r} is not a {kind}")


def _loads(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PlaceholderError(f"parameter {name!r}: {text!r} is not JSON ({exc})") from None


def _definitions(component: Mapping, side: str, kind: str) -> Mapping[str, Any]:
    return ((component.get(side) or {}).get(kind)) or {}


def _artifact_type(ref: Mapping, definition: Mapping | None) -> dict[str, str]:
    declared = (definition or {}).get("artifactType") or {}
    given = ref.get("type")
    if isinstance(given, Mapping):
        return {"schemaTitle": given.get("schemaTitle") or "system.Artifact",
                "schemaVersion": given.get("schemaVersion") or declared.get("schemaVersion") or "0.0.1"}
    return {"schemaTitle": given or declared.get("schemaTitle") or "system.Artifact",
            "schemaVersion": declared.get("schemaVersion") or "0.0.1"}


def executor_input(component: Mapping, *, parameters: Mapping[str, Any], artifacts: Mapping[str, list[Mapping]],
                   outputs_dir: str, artifacts_uri: str) -> dict:
    """KFP's ExecutorInput for one task of `component` (its ComponentSpec in the IR): the input values
    typed by their definitions (declared defaults filled in), input artifacts, and where each output
    goes: parameter files and ``executor_output.json`` under `outputs_dir`, artifacts at
    `artifacts_uri`/NAME."""
    declared = _definitions(component, "inputDefinitions", "parameters")
    values: dict[str, Any] = {}
    for name, definition in declared.items():
        if name in parameters and parameters[name] is not None:
            values[name] = coerce_parameter(name, parameters[name], definition.get("parameterType", "STRING"))
        elif "defaultValue" in definition:
            kind = definition.get("parameterType", "STRING")
            values[name] = coerce_parameter(name, definition["defaultValue"], kind)
    # Values the compiler injected for f-strings (pipelinechannel--...) are not declared: as given.
    values.update({k: v for k, v in parameters.items() if k not in declared and v is not None})
    document: dict[str, Any] = {"inputs": {"parameterValues": values}, "outputs": {}}
    artifact_definitions = _definitions(component, "inputDefinitions", "artifacts")
    inputs = {name: {"artifacts": [{"name": ref.get("name") or name, "uri": ref["uri"],
                                    "type": _artifact_type(ref, artifact_definitions.get(name)),
                                    "metadata": dict(ref.get("metadata") or {})} for ref in refs]}
              for name, refs in artifacts.items() if refs}
    if inputs:
        document["inputs"]["artifacts"] = inputs
    # An f-string input refers to the injected values: "{{$.inputs.parameters['pipelinechannel--x']}}-b".
    for name, value in values.items():
        if isinstance(value, str) and "{{$.inputs.parameters[" in value:
            values[name] = _substitute(value, document, {})
    outputs = document["outputs"]
    output_parameters = _definitions(component, "outputDefinitions", "parameters")
    if output_parameters:
        outputs["parameters"] = {name: {"outputFile": os.path.join(outputs_dir, name)} for name in output_parameters}
    output_artifacts = _definitions(component, "outputDefinitions", "artifacts")
    if output_artifacts:
        base = artifacts_uri.rstrip("/")
        outputs["artifacts"] = {name: {"artifacts": [{"name": name, "uri": f"{base}/{name}",
                                                      "type": _artifact_type({}, definition), "metadata": {}}]}
                                for name, definition in output_artifacts.items()}
    outputs["outputFile"] = os.path.join(outputs_dir, EXECUTOR_OUTPUT)
    return document


def local_path(uri: str) -> str:
    """Where an artifact's file is, as kfp's ``Artifact.path`` says."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    for prefix, mount in _MOUNTS:
        if uri.startswith(prefix):
            return mount + uri[len(prefix):]
    return uri


def _artifact(document: Mapping, side: str, name: str) -> Mapping:
    refs = (((document.get(side) or {}).get("artifacts") or {}).get(name) or {}).get("artifacts") or []
    if not refs:
        raise PlaceholderError(f"{side}.artifacts[{name!r}]: the task has no such artifact")
    return refs[0]


def _io_value(expression: str, document: Mapping) -> str | None:
    """The text an I/O placeholder stands for; None when it names an input that was not given."""
    match = _IO.fullmatch(expression)
    if not match:
        raise PlaceholderError(f"{{{{$.{expression}}}}}: not a placeholder KFP's compiler writes")
    side, kind, name, rest = match.groups()
    if kind == "parameters":
        if side == "inputs":
            values = (document.get("inputs") or {}).get("parameterValues") or {}
            if rest:
                raise PlaceholderError(f"{{{{$.{expression}}}}}: an input parameter has no attribute {rest!r}")
            if name not in values:
                return None
            value = values[name]
            return value if isinstance(value, str) else json.dumps(value)
        if rest != ".output_file":
            raise PlaceholderError(f"{{{{$.{expression}}}}}: an output parameter has only .output_file")
        spec = ((document.get("outputs") or {}).get("parameters") or {}).get(name)
        if spec is None:
            raise PlaceholderError(f"outputs.parameters[{name!r}]: the component declares no such output")
        return spec["outputFile"]
    if side == "inputs" and name not in ((document.get("inputs") or {}).get("artifacts") or {}):
        return None
    artifact = _artifact(document, side, name)
    if rest == "":
        return json.dumps(artifact)
    if rest == ".path":
        return local_path(artifact["uri"])
    if rest in (".uri", ".name"):
        return artifact[rest[1:]]
    if rest == ".metadata":
        return json.dumps(artifact.get("metadata") or {})
    key = re.fullmatch(r"\.metadata\['([^']*)'\]", rest)
    if key:
        value = (artifact.get("metadata") or {}).get(key.group(1))
        return value if isinstance(value, str) else json.dumps(value)
    raise PlaceholderError(f"{{{{$.{expression}}}}}: an artifact has path, uri, name and metadata")


def _substitute(text: str, document: Mapping, context: Mapping[str, str]) -> str:
    def one(match: re.Match) -> str:
        expression = match.group(1)
        if expression is None:
            return json.dumps(document)
        if expression in ("outputs.output_file", "outputMetadataUri"):
            return document["outputs"]["outputFile"]
        if expression in CONTEXT_PLACEHOLDERS:
            if expression in context:
                return context[expression]
            if expression == "pipeline_job_resource_name" and "pipeline_job_name" in context:
                return context["pipeline_job_name"]
            raise PlaceholderError(f"{{{{$.{expression}}}}}: the run does not provide it")
        value = _io_value(expression, document)
        # An absent optional input outside IfPresent: KFP's launcher writes null in its place.
        return "null" if value is None else value

    return _PLACEHOLDER.sub(one, text)


def _provided(document: Mapping, name: str) -> bool:
    inputs = document.get("inputs") or {}
    return name in (inputs.get("parameterValues") or {}) or name in (inputs.get("artifacts") or {})


def _structure(element: Any, document: Mapping) -> list[str]:
    """A Concat or IfPresent element (or plain text) as the argument strings it becomes, unresolved."""
    if isinstance(element, str):
        return [element]
    if isinstance(element, list):
        return [part for item in element for part in _structure(item, document)]
    if isinstance(element, Mapping) and len(element) == 1:
        (kind, body), = element.items()
        if kind == "Concat" and isinstance(body, list):
            return ["".join("".join(_structure(part, document)) for part in body)]
        if kind == "IfPresent" and isinstance(body, Mapping) and "InputName" in body:
            branch = body.get("Then") if _provided(document, body["InputName"]) else body.get("Else")
            return [] if branch is None else _structure(branch, document)
    raise PlaceholderError(f"{json.dumps(element)[:200]}: not a Concat or IfPresent placeholder")


def resolve_args(values: list, executor_input: Mapping, context: Mapping[str, str]) -> list[str]:
    """A container's command or args with every placeholder replaced: the ExecutorInput itself
    (``{{$}}``), input values, artifact paths/URIs/metadata, output files, Concat and IfPresent (which
    may become no argument or several), and the run's context (`context`: pipeline_job_name,
    pipeline_job_uuid, pipeline_task_name, pipeline_task_uuid, pipeline_root, ...)."""
    resolved: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise PlaceholderError(f"{value!r}: a command or argument must be a string")
        parts = [value]
        if value.startswith(('{"Concat"', '{"IfPresent"')):
            try:
                parts = _structure(json.loads(value), executor_input)
            except ValueError as exc:
                if isinstance(exc, PlaceholderError):
                    raise
                raise PlaceholderError(f"{value[:200]}: not valid JSON ({exc})") from None
        resolved += [_substitute(part, executor_input, context) for part in parts]
    return resolved


def resolve_metadata(value: Any, executor_input: Mapping, context: Mapping[str, str]) -> Any:
    """An importer's metadata with its placeholders resolved, in keys and values at any depth (the
    compiler turns each pipeline value given to ``dsl.importer(metadata=...)`` into an input
    parameter of the importer and a placeholder in its place). A value that is one input
    parameter's placeholder alone becomes that value with its declared type (``rows: 3`` stays a
    number); placeholders inside longer text, and in keys, become text."""
    if isinstance(value, Mapping):
        return {_substitute(str(key), executor_input, context): resolve_metadata(item, executor_input, context)
                for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_metadata(item, executor_input, context) for item in value]
    if not isinstance(value, str):
        return value
    whole = _PLACEHOLDER.fullmatch(value)
    parameter = _IO.fullmatch(whole.group(1) or "") if whole else None
    if parameter and parameter.group(1, 2, 4) == ("inputs", "parameters", ""):
        return ((executor_input.get("inputs") or {}).get("parameterValues") or {}).get(parameter.group(3))
    return _substitute(value, executor_input, context)


def _read_file_parameter(name: str, path: str, kind: str) -> Any:
    """An output parameter file as KFP's launcher reads it: text for a STRING, JSON for the rest."""
    with open(path) as f:
        text = f.read()
    if kind == "STRING":
        return text
    try:
        return json.loads(text.lower() if kind == "BOOLEAN" else text)
    except ValueError:
        raise PlaceholderError(f"output {name!r}: {text[:100]!r} in {path} is not a {kind}") from None


def read_outputs(component: Mapping, executor_input: Mapping) -> tuple[dict[str, Any], dict[str, list[dict]]]:
    """The task's outputs after it ran: parameters from ``executor_output.json``, else their output
    files, typed by the component; artifacts with the metadata the component wrote (a Metrics'
    logged values, ...). A declared output parameter nobody wrote is an error naming it."""
    outputs = executor_input.get("outputs") or {}
    written: dict[str, Any] = {}
    path = outputs.get("outputFile")
    if path and os.path.isfile(path):
        try:
            with open(path) as f:
                written = json.load(f)
        except ValueError as exc:
            raise PlaceholderError(f"{path}: not JSON ({exc})") from None
        if not isinstance(written, dict):
            raise PlaceholderError(f"{path}: not an ExecutorOutput object")
    written_values = written.get("parameterValues") or {}
    parameters: dict[str, Any] = {}
    for name, definition in _definitions(component, "outputDefinitions", "parameters").items():
        kind = definition.get("parameterType", "STRING")
        if name in written_values:
            value = written_values[name]
        else:
            file = ((outputs.get("parameters") or {}).get(name) or {}).get("outputFile")
            if not file or not os.path.isfile(file):
                raise PlaceholderError(f"output parameter {name!r} was not written (neither in "
                                       f"{EXECUTOR_OUTPUT} nor in {file or 'its output file'})")
            value = _read_file_parameter(name, file, kind)
        parameters[name] = coerce_parameter(name, value, kind)
    written_artifacts = written.get("artifacts") or {}
    artifacts: dict[str, list[dict]] = {}
    for name in _definitions(component, "outputDefinitions", "artifacts"):
        planned = _artifact(executor_input, "outputs", name)
        reported = ((written_artifacts.get(name) or {}).get("artifacts") or [{}])[0]
        artifacts[name] = [{"name": reported.get("name") or planned.get("name") or name,
                            "uri": reported.get("uri") or planned["uri"],
                            "type": planned["type"]["schemaTitle"],
                            "metadata": {**(planned.get("metadata") or {}), **(reported.get("metadata") or {})}}]
    return parameters, artifacts
