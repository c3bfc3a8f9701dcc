"""JSON request bodies decoded with bounded nesting, for the control plane's API and the model server.

A body nested deeper than a decoder can follow must be a client's error (400), never a
``RecursionError`` (500): orjson stops at 1,024 levels by itself, Python's ``json`` (needed for
TF Serving's ``NaN`` and ``Infinity``, which orjson refuses) overflows the stack near 1,000, and
whatever walks the decoded value afterwards must not recurse deeper than :func:`check_shape` let
through.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "BodyError", "TooDeep", "TooMany", "check_shape", "loads"]

MAX_DEPTH = 100
_ORJSON_DEPTH = 1024


class BodyError(ValueError):
    """The body is not JSON the server takes; ``str()`` is the message for the client."""


class TooDeep(BodyError):
    def __init__(self, what: str, depth: int) -> None:
        super().__init__(f"{what} is nested too deeply: more than {depth} levels")


class TooMany(BodyError):
    def __init__(self, what: str, count: int) -> None:
        super().__init__(f"{what} has more than {count} values")


def loads(body: bytes | str, what: str = "the body of the request", allow_nan: bool = False) -> Any:
    """Decode JSON; ``allow_nan`` also takes the ``NaN``, ``Infinity`` and ``-Infinity`` literals.

    Raises:
        TooDeep: deeper than the decoder can follow.
        BodyError: not valid JSON.
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep(what, _ORJSON_DEPTH) from None
        if not allow_nan:
            raise BodyError(f"{what} is not valid JSON: {exc}") from None
        error = exc
    try:
        return json.loads(body)
    except RecursionError:
        raise TooDeep(what, _ORJSON_DEPTH) from None
    except (ValueError, UnicodeDecodeError):
        raise BodyError(f"{what} is not valid JSON: {error}") from None


def check_shape(value: Any, what: str = "the body of the request", max_depth: int = MAX_DEPTH,
                max_values: int | None = None) -> None:
    """Refuse ``value`` when it nests deeper than ``max_depth`` or holds more than ``max_values`` values.

    Raises:
        TooDeep, TooMany: as said.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if max_values is not None and count > max_values:
            raise TooMany(what, max_values)
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= max_depth:
            raise TooDeep(what, max_depth)
        stack.extend((child, depth + 1) for child in children)
