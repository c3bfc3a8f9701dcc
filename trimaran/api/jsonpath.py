"""The part of Kubernetes' JSONPath that printer columns, ``-o jsonpath`` and ``wait --for=jsonpath`` use.

CRDs write ``.status.conditions[-1:].type``, ``.status.conditions[?(@.type=='Ready')].status`` and
``.traffic[?(@.latestRevision==true)].percent``: fields, indexes, slices, ``[*]`` and filters
comparing a relative path with a string, number or boolean. kube-apiserver evaluates each column
and keeps the first result; a missing key gives no result rather than an error. The libraries on
PyPI parse a different dialect (no ``==true`` literals, other slice rules), so the subset is here.
It is pure (no server, no pydantic) so the CLI's quick commands can use it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

__all__ = ["JSONPathError", "as_text", "compile_path", "first", "render_template", "values"]


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


def values(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` finds in ``obj``, in order."""
    return list(_walk(obj, compile_path(path)))


def _relative(path: str) -> str:
    """A template's path, ``@`` (the current object) read as the root it is evaluated against."""
    return path.lstrip("@") or "$"


def as_text(value: Any) -> str:
    """A value as kubectl prints (and ``wait --for=jsonpath`` compares) it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


_TEMPLATE_PART = re.compile(r"\{([^{}]*)\}")


def _parse_template(template: str) -> list:
    """The template as a list of literal strings, ``("path", PATH)`` and ``("range", PATH, BODY)``."""
    root: list = []
    stack = [root]
    pos = 0
    for match in _TEMPLATE_PART.finditer(template):
        stack[-1].append(template[pos:match.start()])
        pos = match.end()
        inner = match.group(1).strip()
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            stack[-1].append(inner[1:-1].encode().decode("unicode_escape"))
        elif inner.startswith("range "):
            body: list = []
            stack[-1].append(("range", _relative(inner[len("range "):].strip()), body))
            stack.append(body)
        elif inner == "end":
            if len(stack) == 1:
                raise JSONPathError(f"{{end}} without {{range}} in {template!r}")
            stack.pop()
        else:
            path = _relative(inner)
            compile_path(path)
            stack[-1].append(("path", path))
    if len(stack) > 1:
        raise JSONPathError(f"{{range}} without {{end}} in {template!r}")
    stack[-1].append(template[pos:])
    return root


def _render(obj: Any, parts: list, out: list[str]) -> None:
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif part[0] == "path":
            out.append(" ".join(as_text(v) for v in values(obj, part[1])))
        else:
            for item in values(obj, part[1]):
                _render(item, part[2], out)


def render_template(obj: Any, template: str) -> str:
    """``kubectl get -o jsonpath=TEMPLATE``: literal text, ``{path}`` parts (a path's values joined
    by spaces), quoted literals such as ``{"\\n"}`` and ``{range PATH}...{end}`` blocks."""
    out: list[str] = []
    _render(obj, _parse_template(template), out)
    return "".join(out)
