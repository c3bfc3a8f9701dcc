"""A task's ``triggerPolicy.condition``: the CEL expression KFP's compiler writes for
``dsl.If``/``Elif``/``Else`` (``int(inputs.parameter_values['pipelinechannel--n']) > 3 &&
!(inputs.parameter_values['pipelinechannel--flip'] == 'heads')``), evaluated by cel-python as KFP's
driver evaluates it with cel-go.

The values are typed as the driver sees them, protobuf ``Value``s: every number is a double (the
compiler casts integer inputs back with ``int()``), strings, booleans, lists and structs as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

__all__ = ["ConditionError", "evaluate"]


class ConditionError(ValueError):
    """An expression that does not parse, refers to an input the task lacks, or is not a boolean."""


@functools.cache
def _environment() -> Any:
    import celpy  # about a second to import on a busy machine: only runs with conditions pay it

    return celpy.Environment()


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> Any:
    import celpy

    environment = _environment()
    try:
        return environment.program(environment.compile(expression))
    except celpy.CELParseError as exc:
        where = f" (column {exc.column})" if getattr(exc, "column", None) else ""
        raise ConditionError(f"{expression!r} is not a CEL expression: it does not parse{where}") from None


def _as_protobuf(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [_as_protobuf(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _as_protobuf(v) for k, v in value.items()}
    return value


def evaluate(expression: str, parameter_values: Mapping[str, Any]) -> bool:
    """Whether `expression` holds for the task's input `parameter_values` (by input name)."""
    import celpy
    from celpy import celtypes

    if not isinstance(expression, str) or not expression.strip():
        raise ConditionError(f"{expression!r}: a condition must be a non-empty CEL expression")
    program = _program(expression)
    activation = {"inputs": celpy.json_to_cel({"parameter_values": _as_protobuf(parameter_values)})}
    try:
        result = program.evaluate(activation)
    except celpy.CELEvalError as exc:
        raise ConditionError(f"{expression!r}: {_reason(exc)}") from None
    if isinstance(result, celpy.CELEvalError):  # an error value the expression did not absorb
        raise ConditionError(f"{expression!r}: {_reason(result)}")
    if not isinstance(result, celtypes.BoolType):
        raise ConditionError(f"{expression!r} is {type(result).__name__.removesuffix('Type').lower()} "
                             f"{result!r}, not a boolean")
    return bool(result)


def _reason(error: Exception) -> str:
    """cel-python's error arguments as words: ('no such key', KeyError, (StringType('x'),))."""
    args = error.args
    if len(args) >= 3 and args[0] == "no such key" and args[2]:
        return f"the task has no input {str(args[2][0])!r}"
    return str(args[0]) if args else type(error).__name__
