"""The part of GJSON (github.com/tidwall/gjson) that KServe's graph router uses for step conditions: whether a
path exists in a JSON document.

Understood: dotted keys (``\\.`` escapes a dot), array indexes (``predictions.0``), ``#`` (an array's length;
``#.key`` that key of every element), queries ``#(path op value)`` (the first match) and ``#(...)#`` (all
matches) with ``== != < <= > >= % !%`` (``%`` is a ``*``/``?`` pattern), ``@this``, and multipaths
``[a,b]`` (``[@this].#(...)`` queries the document itself). Anything else is refused at apply (`parse`), not
silently never matched.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["PathError", "evaluate", "exists", "parse"]

MISSING = object()
_OPS = ("==", "!=", "<=", ">=", "!%", "<", ">", "%")


class PathError(ValueError):
    """The expression is not GJSON this module understands."""


@dataclass(frozen=True)
class _Query:
    path: tuple[Any, ...]  # relative to the element; () compares the element itself
    op: str | None  # None: the path only has to exist
    value: Any
    all_matches: bool


Segment = str | int | _Query  # a key, an index, "#" (length or map), "@this", or a query


@dataclass(frozen=True)
class Expression:
    """A parsed path; ``multipath`` holds the ``[a,b]`` members, then ``rest`` applies to their array."""

    multipath: tuple[tuple[Segment, ...], ...] | None
    rest: tuple[Segment, ...]


def parse(text: str) -> Expression:
    """Parse ``text``; raises PathError naming what is not understood."""
    text = text.strip()
    if not text:
        raise PathError("an empty path")
    if text.startswith("["):
        end = _closing(text, 0, "[", "]")
        members = tuple(_path(p) for p in _split(text[1:end], ","))
        rest = text[end + 1:]
        if rest and not rest.startswith((".", "|")):
            raise PathError(f"expected '.' after the multipath, got {rest[:1]!r}")
        return Expression(members, _path(rest[1:]) if rest else ())
    return Expression(None, _path(text))


def evaluate(expr: Expression, doc: Any) -> Any:
    """The value at ``expr`` in ``doc``, or MISSING."""
    if expr.multipath is not None:
        values = [_walk(p, doc) for p in expr.multipath]
        doc = [v for v in values if v is not MISSING]
    return _walk(expr.rest, doc)


def exists(expr: Expression, doc: Any) -> bool:
    return evaluate(expr, doc) is not MISSING


def _split(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside parentheses, brackets and quotes, keeping ``\\`` escapes."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "([{":
            depth += 1
        elif not quoted and c in ")]}":
            depth -= 1
        elif not quoted and depth == 0 and c in sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    if depth or quoted:
        raise PathError("unbalanced brackets or quotes")
    parts.append(text[start:])
    return parts


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    depth, quoted, i = 0, False, start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif not quoted and c == opening:
            depth += 1
        elif not quoted and c == closing:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise PathError(f"no closing {closing!r}")


def _path(text: str) -> tuple[Segment, ...]:
    if not text:
        return ()
    out: list[Segment] = []
    for part in _split(text, ".|"):
        if part.startswith("#("):
            end = _closing(part, 1, "(", ")")
            tail = part[end + 1:]
            if tail not in ("", "#"):
                raise PathError(f"unexpected {tail!r} after a query")
            out.append(_query(part[2:end], all_matches=tail == "#"))
        elif part in ("#", "@this"):
            out.append(part)
        elif part.startswith("@") or part.startswith(("[", "{", "!")) or not part:
            raise PathError(f"{part or 'an empty key'!r} is not understood (keys, indexes, #, #(query) and @this are)")
        elif part.isdigit():
            out.append(int(part))
        else:
            out.append(re.sub(r"\\(.)", r"\1", part))
    return tuple(out)


def _query(text: str, all_matches: bool) -> _Query:
    for op in _OPS:
        at = _find_op(text, op)
        if at >= 0:
            lhs, rhs = text[:at].strip(), text[at + len(op):].strip()
            return _Query(_path(lhs), op, _literal(rhs), all_matches)
    return _Query(_path(text.strip()), None, None, all_matches)


def _find_op(text: str, op: str) -> int:
    quoted = False
    for i in range(len(text)):
        if text[i] == '"':
            quoted = not quoted
        elif not quoted and text.startswith(op, i):
            return i
    return -1


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise PathError(f"{text!r} is not a JSON value (strings are quoted)") from None


def _walk(path: tuple[Segment, ...], doc: Any) -> Any:
    for i, seg in enumerate(path):
        if doc is MISSING:
            return MISSING
        if seg == "@this":
            continue
        if seg == "#":
            if not isinstance(doc, list):
                return MISSING
            rest = path[i + 1:]
            if not rest:
                return len(doc)
            mapped = [_walk(rest, item) for item in doc]
            return [v for v in mapped if v is not MISSING]
        if isinstance(seg, _Query):
            if not isinstance(doc, list):
                return MISSING
            matches = [item for item in doc if _matches(seg, item)]
            if seg.all_matches:
                doc = matches
            else:
                doc = matches[0] if matches else MISSING
            continue
        if isinstance(doc, dict):
            doc = doc.get(str(seg), MISSING)
        elif isinstance(doc, list) and isinstance(seg, int):
            doc = doc[seg] if seg < len(doc) else MISSING
        else:
            return MISSING
    return doc


def _matches(query: _Query, item: Any) -> bool:
    value = _walk(query.path, item)
    if value is MISSING:
        return False
    if query.op is None:
        return True
    want = query.value
    if query.op in ("%", "!%"):
        hit = isinstance(value, str) and isinstance(want, str) and fnmatch.fnmatchcase(value, want)
        return hit if query.op == "%" else not hit
    if query.op == "==":
        return value == want
    if query.op == "!=":
        return value != want
    comparable = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and isinstance(want, (int, float))) or (isinstance(value, str) and isinstance(want, str))
    if not comparable:
        return False
    return {"<": value < want, "<=": value <= want, ">": value > want, ">=": value >= want}[query.op]
