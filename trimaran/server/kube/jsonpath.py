"""The part of Kubernetes' JSONPath that printer columns use.

CRDs write ``.status.conditions[-1:].type``, ``.status.conditions[?(@.type=='Ready')].status`` and
``.traffic[?(@.latestRevision==true)].percent``: fields, indexes, slices, ``[*]`` and filters
comparing a relative path with a string, number or boolean. kube-apiserver evaluates each column
and keeps the first result; a missing key gives no result rather than an error. The libraries on
PyPI parse a different dialect (no ``==true`` literals, other slice rules), so the subset is here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

__all__ = ["JSONPathError", "compile_path", "first"]


class JSONPathError(ValueError):
    pass


_STEP = re.compile(r"""
    \.(?P<field>[A-Za-z0-9_\-]+)
  | \[(?P<bracket>[^\]]*)\]
""", re.VERBOSE)
_FILTER = re.compile(r"\?\(@((?:\.[A-Za-z0-9_\-]+)+)\s*(==|!=|<=|>=|<|>)\s*(.+)\)")


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise JSONPathError(f"unrecognized filter literal {text!r}") from exc


@lru_cache(maxsize=256)
def compile_path(path: str) -> tuple[tuple[str, Any], ...]:
    """Parse ``path`` (with or without the surrounding ``{}``) into steps."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if text.startswith("$"):
        text = text[1:]
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        match = _STEP.match(text, pos)
        if not match:
            raise JSONPathError(f"unrecognized character in {path!r} at {pos}")
        pos = match.end()
        if match.group("field") is not None:
            steps.append(("field", match.group("field")))
            continue
        inner = match.group("bracket").strip()
        if inner == "*":
            steps.append(("all", None))
        elif inner.startswith("?"):
            fm = _FILTER.fullmatch(inner)
            if not fm:
                raise JSONPathError(f"unsupported filter {inner!r}")
            steps.append(("filter", (tuple(fm.group(1)[1:].split(".")), fm.group(2), _literal(fm.group(3)))))
        elif ":" in inner:
            parts = [p.strip() for p in inner.split(":")]
            bounds = [int(p) if p else None for p in parts[:2]]
            steps.append(("slice", (bounds[0], bounds[1])))
        elif inner.lstrip("-").isdigit():
            steps.append(("index", int(inner)))
        else:
            steps.append(("field", _literal(inner) if inner[:1] in "'\"" else inner))
    return tuple(steps)


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    try:
        return {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op]
    except TypeError:
        return False


def _walk(value: Any, steps: tuple[tuple[str, Any], ...]) -> Iterator[Any]:
    if not steps:
        yield value
        return
    (kind, arg), rest = steps[0], steps[1:]
    if kind == "field":
        if isinstance(value, dict) and arg in value:
            yield from _walk(value[arg], rest)
    elif kind == "all":
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        for item in items:
            yield from _walk(item, rest)
    elif isinstance(value, list):
        if kind == "index":
            if -len(value) <= arg < len(value):
                yield from _walk(value[arg], rest)
        elif kind == "slice":
            for item in value[arg[0]:arg[1]]:
                yield from _walk(item, rest)
        elif kind == "filter":
            keys, op, literal = arg
            for item in value:
                found = next(_walk(item, tuple(("field", k) for k in keys)), _MISSING)
                if found is not _MISSING and _compare(found, op, literal):
                    yield from _walk(item, rest)


_MISSING = object()


def first(obj: Any, path: str) -> Any:
    """The first value ``path`` finds in ``obj``, or None (kube-apiserver's printer-column rule)."""
    return next(_walk(obj, compile_path(path)), None)
