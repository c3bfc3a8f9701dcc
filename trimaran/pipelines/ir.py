"""The compiled pipeline (KFP's ``PipelineSpec`` IR, schemaVersion 2.x), checked whole before a run
is stored: every error names its path in the spec."""

from __future__ import annotations

from typing import Any

from trimaran.api.errors import FieldError, join_path

__all__ = ["SCHEMA_VERSIONS", "parameter_errors", "spec_errors"]

SCHEMA_VERSIONS = ("2.0.0", "2.1.0")
# parameterType → the JSON types a value of it may have.
_PARAMETER_TYPES: dict[str, tuple[type, ...]] = {
    "STRING": (str,),
    "NUMBER_INTEGER": (int,),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": (bool,),
    "LIST": (list,),
    "STRUCT": (dict,),
    "TASK_FINAL_STATUS": (dict,),
}


def spec_errors(spec: Any, path: str, platform: Any = None, platform_path: str = "") -> list[FieldError]:
    """What makes `spec` not a runnable pipeline: each problem with its path under `path`."""
    if not isinstance(spec, dict) or "root" not in spec or "pipelineInfo" not in spec:
        return [FieldError.invalid(path, "<document>", "not a compiled pipeline (a PipelineSpec has "
                                   "pipelineInfo, root, components, deploymentSpec and schemaVersion)")]
    version = spec.get("schemaVersion")
    if version not in SCHEMA_VERSIONS:
        return [FieldError.not_supported(join_path(path, "schemaVersion"), version, SCHEMA_VERSIONS)]
    errs: list[FieldError] = []
    if platform is not None and not isinstance(platform, dict):
        errs.append(FieldError.invalid(platform_path, "<document>", "must be the platforms document of kfp-kubernetes"))
    return errs


def _declared_parameters(spec: dict[str, Any]) -> dict[str, Any]:
    return ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}


def parameter_errors(spec: dict[str, Any], values: dict[str, Any], path: str) -> list[FieldError]:
    """The run's parameters against the pipeline's inputs: unknown, missing or of the wrong type."""
    declared = _declared_parameters(spec)
    errs: list[FieldError] = []
    for name, value in values.items():
        definition = declared.get(name)
        if definition is None:
            errs.append(FieldError.invalid(join_path(path, name), value, "the pipeline has no such input "
                                           f"(it takes: {', '.join(sorted(declared)) or 'none'})"))
            continue
        kind = definition.get("parameterType", "STRING")
        allowed = _PARAMETER_TYPES.get(kind, (object,))
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, allowed):
            errs.append(FieldError.invalid(join_path(path, name), value, f"must be {kind}"))
    for name, definition in declared.items():
        if name not in values and "defaultValue" not in definition and not definition.get("isOptional"):
            errs.append(FieldError.required(join_path(path, name), "the pipeline's input has no default"))
    return errs
