"""Label and field selectors in Kubernetes' syntax.

Label selectors take both forms kube-apiserver takes: equality (``a=b``, ``a==b``, ``a!=b``) and
set-based (``a in (x, y)``, ``a notin (x)``, ``a``, ``!a``), joined by commas. Field selectors
take ``=``, ``==`` and ``!=`` on the fields kube-apiserver supports for the kinds we serve.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trimaran.api.meta import is_qualified_name, is_valid_label_value
from trimaran.server.kube.errors import StatusError

__all__ = ["FieldSelector", "LabelSelector", "parse_field_selector", "parse_label_selector"]

_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # "!=" and "notin": absent keys match


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)

    def equalities(self) -> dict[str, str]:
        """The ``key=value`` requirements alone, which the store can filter on itself."""
        return {r.key: r.values[0] for r in self.requirements if r.op == "=" and len(r.values) == 1}


def _bad(raw: str, why: str) -> StatusError:
    return StatusError.bad_request(f'unable to parse requirement: {why} (in labelSelector "{raw}")')


def parse_label_selector(raw: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value; a 400 Status names what is wrong."""
    if not raw or not raw.strip():
        return LabelSelector()
    tokens = [t for t in _TOKEN.findall(raw)]
    if "".join(tokens) != re.sub(r"\s+", "", raw):
        raise _bad(raw, "unexpected characters")
    reqs: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise _bad(raw, "unexpected end of selector")
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        tok = take()
        if tok == "!":
            key = take()
            _check_key(raw, key)
            reqs.append(Requirement(key, "!"))
        else:
            key = tok
            _check_key(raw, key)
            if i >= len(tokens) or tokens[i] == ",":
                reqs.append(Requirement(key, "exists"))
            else:
                op = take()
                if op in ("=", "==", "!="):
                    value = take() if i < len(tokens) and tokens[i] != "," else ""
                    _check_value(raw, value)
                    reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
                elif op in ("in", "notin"):
                    if take() != "(":
                        raise _bad(raw, f"expected '(' after {op}")
                    values: list[str] = []
                    after_value = False
                    while True:
                        t = take()
                        if t == ")":
                            break
                        if t == ",":
                            after_value = False
                            continue
                        if after_value:  # "in (a b)": values are separated by commas
                            raise _bad(raw, f"found '{t}', expected: ',' or ')'")
                        _check_value(raw, t)
                        values.append(t)
                        after_value = True
                    reqs.append(Requirement(key, op, tuple(values)))
                else:
                    raise _bad(raw, f"found '{op}', expected: '=', '!=', '==', 'in', 'notin'")
        if i < len(tokens):
            if tokens[i] != ",":
                raise _bad(raw, f"found '{tokens[i]}', expected: ','")
            i += 1
    return LabelSelector(tuple(reqs))


def _check_key(raw: str, key: str) -> None:
    problems = is_qualified_name(key)
    if problems:
        raise _bad(raw, f'invalid label key "{key}": {problems[0]}')


def _check_value(raw: str, value: str) -> None:
    problems = is_valid_label_value(value)
    if problems:
        raise _bad(raw, f'invalid label value: "{value}": {problems[0]}')


def _path(obj: dict, dotted: str) -> str:
    cur: object = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    return str(cur).lower() if isinstance(cur, bool) else str(cur)


# Fields every kind may be selected by, and those some kinds add (kube-apiserver's field label
# conversion functions). Events are not stored objects, so their fields are read the same way.
_COMMON = ("metadata.name", "metadata.namespace")
_BY_KIND: dict[str, tuple[str, ...]] = {
    "Pod": ("status.phase", "spec.nodeName", "spec.restartPolicy", "status.podIP"),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
              "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
              "reason", "reportingComponent", "source", "type"),
    "Secret": ("type",),
    "Job": ("status.successful",),
    "Namespace": ("status.phase",),
    "Node": ("spec.unschedulable",),
}
# What a field left out reads as (Go's zero value of a non-pointer field).
_UNSET = {"spec.unschedulable": "false"}


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    def matches(self, obj: dict) -> bool:
        return all(((_path(obj, field) or _UNSET.get(field, "")) == value) == equal
                   for field, equal, value in self.terms)

    def value_of(self, field: str) -> str | None:
        """The value an equality term requires of ``field`` (to narrow a store query)."""
        return next((v for f, eq, v in self.terms if f == field and eq), None)


def parse_field_selector(raw: str | None, kind: str) -> FieldSelector:
    if not raw or not raw.strip():
        return FieldSelector()
    allowed = _COMMON + _BY_KIND.get(kind, ())
    terms = []
    for part in raw.split(","):
        part = part.strip()
        match = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(!=|==|=)\s*(.*)", part)
        if not match:
            raise StatusError.bad_request(f'invalid selector: "{raw}"; can\'t understand "{part}"')
        field, op, value = match.groups()
        if field not in allowed:
            raise StatusError.bad_request(f'"{field}" is not a known field selector: only "'
                                          + '", "'.join(allowed) + '"')
        terms.append((field, op != "!=", value))
    return FieldSelector(tuple(terms))

