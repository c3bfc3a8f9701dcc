"""``kubectl get``'s Table: the kind's printer columns evaluated on the server, as kube-apiserver does."""

from __future__ import annotations

from typing import Any

from trimaran.api.jsonpath import JSONPathError, first
from trimaran.api.kinds import KindInfo
from trimaran.api.printers import PrinterColumn, age

__all__ = ["partial_metadata", "table", "wants_table"]

_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                "description": "Name must be unique within a namespace. More info: "
                               "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}


def wants_table(accept: str) -> bool:
    """Whether the client asked for a Table (kubectl's human-readable ``get``) before plain JSON."""
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
        if part.split(";")[0].strip() in ("application/json", "*/*"):
            return False
    return False


def partial_metadata(obj: dict) -> dict:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}


def _cell(column: PrinterColumn, obj: dict) -> Any:
    if column.value is not None:
        return column.value(obj)
    try:
        value = first(obj, column.json_path)
    except JSONPathError:
        return None
    if value is None:
        return None
    if column.type == "date":
        return age(value) if isinstance(value, str) else None
    if column.type == "integer":
        return value if isinstance(value, int) else None
    if column.type == "number":
        return value if isinstance(value, (int, float)) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def table(info: KindInfo, objects: list[dict], resource_version: str, include_object: str = "Metadata",
          headers: bool = True, continue_token: str = "") -> dict:
    """A ``meta.k8s.io/v1`` Table of ``objects``; without ``headers`` (watch events after the first)
    the columns are left out, and kubectl keeps the ones it has."""
    columns = info.columns()
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [obj["metadata"].get("name")] + [_cell(c, obj) for c in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows}
    if headers:
        out["columnDefinitions"] = [_NAME_COLUMN] + [
            {"name": c.name, "type": "string" if c.type == "date" else c.type, "format": "",
             "description": c.description or c.json_path or c.name, "priority": c.priority} for c in columns]
    return out
