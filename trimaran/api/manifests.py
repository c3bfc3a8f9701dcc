"""Reading manifests: YAML, JSON, directories and stdin, as kubectl reads them; no validation.

Kept apart from the models (``loader.validate``) so that a client reads manifests without loading
pydantic and every kind's model: ``trimaran apply`` parses here and lets the API server validate.

YAML is read as Kubernetes reads it (sigs.k8s.io/yaml): timestamps and ``1:30`` stay strings,
keys become strings, and the result must be representable as JSON.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from trimaran.api.errors import ManifestError, format_value, join_path

__all__ = ["MANIFEST_SUFFIXES", "STDIN", "Manifest", "json_type", "load_manifests", "parse_sources"]

STDIN = "<stdin>"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Past these a document is an accident or an attack (YAML aliases can expand exponentially).
MAX_DEPTH = 100
MAX_VALUES = 1_000_000


class Manifest(NamedTuple):
    """One object read from a source.

    `doc_index` counts documents in the source from 1 (empty documents included, so it matches
    what a reader counts); `item_index` is the 0-based position inside a ``kind: List``.
    `warnings` are problems that do not reject the object (duplicate or unknown fields).
    """

    source_name: str
    doc_index: int
    object: dict[str, Any]
    warnings: list[str]
    item_index: int | None = None

    @property
    def location(self) -> str:
        """``job.yaml (document 2)``, or ``list.json (document 1): items[3]``."""
        where = _where(self.source_name, self.doc_index)
        return where if self.item_index is None else f"{where}: items[{self.item_index}]"


def _where(source_name: str, doc_index: int) -> str:
    return f"{source_name} (document {doc_index})"


# --- YAML as Kubernetes reads it ------------------------------------------------------------

_YAML_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _YamlLoader(_YAML_BASE):  # type: ignore[misc, valid-type]
    """Safe loader that makes mapping keys strings, as Kubernetes' YAML-to-JSON step does, and
    records duplicate keys instead of silently keeping the last one.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            # Keys brought in by a "<<" merge may be overridden; only repeated explicit keys count.
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                if key_node.value in seen:
                    self.duplicates.append(
                        f'duplicate field "{key_node.value}" at line {key_node.start_mark.line + 1}')
                seen.add(key_node.value)
        self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            # Converting here, not later, keeps `1:` and `true:` apart (1 == True in a Python dict).
            key = _key_text(self.construct_object(key_node, deep=deep))
            if key is None:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "found a key that is not a scalar",
                    key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _key_text(key: Any) -> str | None:
    """A scalar key as text (``true``, ``1``, ``null``), or None for keys JSON cannot have."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return str(key)
    if isinstance(key, (datetime.date, datetime.datetime)):
        return key.isoformat()
    return None


# PyYAML (YAML 1.1) turns unquoted timestamps into datetimes and "1:30" into 90; Kubernetes'
# YAML keeps both as strings. Drop those resolvers and re-add int/float without base 60.
_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:timestamp", _INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YamlLoader.add_implicit_resolver(_INT_TAG, re.compile(
    r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"), list("-+0123456789"))
_YamlLoader.add_implicit_resolver(_FLOAT_TAG, re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))


class _Problem(Exception):
    """A document-level problem found while reading; the message is located by the caller."""


def _yaml_documents(text: str) -> Iterator[tuple[int, Any, list[str], str | None]]:
    """(index, document, duplicate-key warnings, error) per document; an error ends the stream."""
    loader = _YamlLoader(text)
    index = 0
    try:
        while True:
            index += 1
            loader.duplicates = []
            try:
                if not loader.check_data():
                    return
                doc = loader.get_data()
            except yaml.MarkedYAMLError as exc:
                mark = exc.problem_mark or exc.context_mark
                at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
                yield index, None, [], f"invalid YAML{at}: {exc.problem or exc.context or exc}"
                return
            except yaml.reader.ReaderError as exc:
                # Characters YAML forbids (NUL, most control characters); located by offset.
                line = text.count("\n", 0, exc.position) + 1
                column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
                yield index, None, [], f"invalid YAML at line {line}, column {column}: {exc.reason}"
                return
            except yaml.YAMLError as exc:
                yield index, None, [], "invalid YAML: " + " ".join(str(exc).split())
                return
            except RecursionError:
                yield index, None, [], "invalid YAML: nested too deeply"
                return
            yield index, doc, list(loader.duplicates), None
    finally:
        loader.dispose()


def _json_documents(text: str) -> Iterator[tuple[int, Any, list[str], str | None]]:
    """Like `_yaml_documents` for JSON: one object, or several objects one after another."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                duplicates.append(f'duplicate field "{key}"')
            out[key] = value
        return out

    def reject_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    decoder = json.JSONDecoder(object_pairs_hook=pairs, parse_constant=reject_constant)
    whitespace = re.compile(r"\s*")
    pos, index = whitespace.match(text, 0).end(), 0  # type: ignore[union-attr]
    while pos < len(text):
        index += 1
        duplicates.clear()
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield index, None, [], f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            return
        except ValueError as exc:
            yield index, None, [], f"invalid JSON: {exc}"
            return
        except RecursionError:
            yield index, None, [], "invalid JSON: nested too deeply"
            return
        yield index, doc, list(duplicates), None
        pos = whitespace.match(text, pos).end()  # type: ignore[union-attr]


def _plain(value: Any, path: str, counter: list[int], depth: int = 0) -> Any:
    """A JSON-compatible copy of a parsed document; `counter` bounds the values visited."""
    counter[0] += 1
    if counter[0] > MAX_VALUES:
        raise _Problem(f"document is too large (more than {MAX_VALUES} values, aliases expanded)")
    if depth > MAX_DEPTH:
        raise _Problem(f"nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Problem(f"{path or '<root>'}: {value} is not a valid number (JSON has no NaN or infinity)")
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key] = _plain(item, join_path(path, key), counter, depth + 1)
        return out
    if isinstance(value, list):
        return [_plain(item, join_path(path, i), counter, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()  # only from an explicit !!timestamp tag
    raise _Problem(f"{path or '<root>'}: unsupported value of type {type(value).__name__}")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _is_json(name: str, text: str) -> bool:
    if name.lower().endswith(".json"):
        return True
    return name == STDIN and text.lstrip()[:1] == "{"


def _parse(name: str, text: str) -> list[Manifest | str]:
    """Manifests of one source and located problems (strings), in document order."""
    entries: list[Manifest | str] = []
    text = text.removeprefix("\ufeff")
    documents = _json_documents(text) if _is_json(name, text) else _yaml_documents(text)
    for index, doc, warnings, error in documents:
        where = _where(name, index)
        if error is not None:
            entries.append(f"{where}: {error}")
            break
        try:
            doc = _plain(doc, "", [0])
        except _Problem as exc:
            entries.append(f"{where}: {exc}")
            continue
        if doc is None:
            continue  # an empty document, e.g. after a trailing "---"
        if not isinstance(doc, dict):
            entries.append(f"{where}: expected an object with apiVersion and kind, got {json_type(doc)}")
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc["items"]
            if not isinstance(items, list):
                entries.append(f"{where}: items: Invalid value: {format_value(items)}: must be of type array")
                continue
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    entries.append(Manifest(name, index, item, list(warnings), i))
                else:
                    entries.append(f"{where}: items[{i}]: expected an object with apiVersion and kind, "
                                    f"got {json_type(item)}")
        else:
            entries.append(Manifest(name, index, doc, warnings))
    return entries


def _read_sources(source: str | Path, text: str | None, problems: list[str]) -> list[tuple[str, str]]:
    """(name, text) of each source: given text, stdin, one file, or a directory's manifest files."""
    if text is not None:
        return [(STDIN if str(source) == "-" else str(source), text)]
    if str(source) == "-":
        return [(STDIN, sys.stdin.read())]
    path = Path(source)
    files = [path]
    if path.is_dir():
        try:
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            return []
    out = []
    for file in files:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            problems.append(f"{file}: no such file or directory")
            continue
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            problems.append(f"{file}: {getattr(exc, 'strerror', None) or exc}")
            continue
        try:
            out.append((str(file), data.decode("utf-8-sig")))
        except UnicodeDecodeError as exc:
            problems.append(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    return out


def parse_sources(source: str | Path, text: str | None) -> list[Manifest | str]:
    """Manifests and located problems (strings) of every source, in reading order (what
    `load_manifests` returns or raises, for a caller that goes on past a bad document)."""
    problems: list[str] = []
    sources = _read_sources(source, text, problems)
    entries: list[Manifest | str] = list(problems)
    for name, content in sources:
        entries.extend(_parse(name, content))
    return entries


def load_manifests(source: str | Path, text: str | None = None) -> list[Manifest]:
    """Parse every object in `source`: a YAML file (``---``-separated documents), a JSON file
    (one object or several in a row), a directory (its ``*.yaml``, ``*.yml``, ``*.json``
    files, sorted by name, not recursing), or ``-`` (standard input).

    With `text`, `text` is parsed and `source` only names it (``-`` names it ``<stdin>``).
    ``kind: List`` (or any ``*List`` with ``items``) yields its items. Empty documents are
    skipped. Objects are returned as parsed, not validated (see `load_and_validate`).

    Raises ManifestError listing every unreadable file and malformed document.
    """
    entries = parse_sources(source, text)
    problems = [e for e in entries if isinstance(e, str)]
    if problems:
        raise ManifestError(problems)
    return [e for e in entries if isinstance(e, Manifest)]
