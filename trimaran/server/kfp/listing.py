"""KFP's list queries on objects already in KFP's shape: ``filter`` (a JSON ``Filter`` of predicates,
all of which must hold), ``sort_by`` (``"created_at desc"``), ``page_size`` and ``page_token``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import orjson

from trimaran.server.kfp.errors import KfpError

__all__ = ["DEFAULT_PAGE_SIZE", "page"]

DEFAULT_PAGE_SIZE = 20  # KFP's, when a list asks for none
MAX_PAGE_SIZE = 1000
# Filter.proto's operations, by number as kfp.Client sends them and by name as the REST API allows.
_OPERATIONS = {1: "EQUALS", 2: "NOT_EQUALS", 3: "GREATER_THAN", 5: "GREATER_THAN_EQUALS", 6: "LESS_THAN",
               7: "LESS_THAN_EQUALS", 8: "IN", 9: "IS_SUBSTRING"}
_TIME_KEYS = ("created_at", "finished_at", "scheduled_at", "updated_at", "last_run_created_at")


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, timezone.utc)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _predicate_value(predicate: dict[str, Any], index: int) -> tuple[Any, bool]:
    """The predicate's operand and whether it is a list (IN)."""
    path = f"filter.predicates[{index}]"
    for many in ("string_values", "stringValues", "int_values", "intValues", "long_values", "longValues"):
        if many in predicate:
            values = (predicate[many] or {}).get("values")
            if not isinstance(values, list):
                raise KfpError.invalid(f"{path}.{many}.values: must be a list")
            return values, True
    for one in ("string_value", "stringValue", "int_value", "intValue", "long_value", "longValue",
                "timestamp_value", "timestampValue"):
        if one in predicate:
            return predicate[one], False
    raise KfpError.invalid(f"{path}: needs a value (stringValue, intValue, longValue, timestampValue or *Values)")


def _matcher(raw: str) -> Callable[[dict[str, Any]], bool]:
    try:
        spec = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise KfpError.invalid(f"filter: not JSON: {exc}") from None
    predicates = spec.get("predicates") if isinstance(spec, dict) else None
    if predicates is None:
        return lambda item: True
    if not isinstance(predicates, list):
        raise KfpError.invalid("filter.predicates: must be a list")
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for index, predicate in enumerate(predicates):
        if not isinstance(predicate, dict) or not isinstance(predicate.get("key"), str):
            raise KfpError.invalid(f"filter.predicates[{index}].key: required")
        operation = predicate.get("operation", predicate.get("op"))
        operation = _OPERATIONS.get(operation, operation) if isinstance(operation, int) else operation
        if operation not in _OPERATIONS.values():
            raise KfpError.invalid(f"filter.predicates[{index}].operation: {operation!r} is not one of "
                                   f"{', '.join(_OPERATIONS.values())}")
        value, many = _predicate_value(predicate, index)
        if (operation == "IN") != many:
            raise KfpError.invalid(f"filter.predicates[{index}]: IN takes a list of values (stringValues, ...), "
                                   "the other operations one value")
        tests.append(_test(predicate["key"], operation, value))
    return lambda item: all(test(item) for test in tests)


def _test(key: str, operation: str, operand: Any) -> Callable[[dict[str, Any]], bool]:
    # Our fields are strings (times aside), and int64s travel as strings anyway.
    convert: Callable[[Any], Any] = _time if key in _TIME_KEYS else (lambda v: v if v is None else str(v))
    wanted = [convert(v) for v in operand] if isinstance(operand, list) else convert(operand)

    def test(item: dict[str, Any]) -> bool:
        have = convert(item.get(key))
        if operation == "EQUALS":
            return have == wanted
        if operation == "NOT_EQUALS":
            return have != wanted
        if operation == "IN":
            return have in wanted
        if operation == "IS_SUBSTRING":
            return isinstance(have, str) and str(wanted) in have
        if have is None or wanted is None:
            return False
        try:
            return {"GREATER_THAN": have > wanted, "GREATER_THAN_EQUALS": have >= wanted,
                    "LESS_THAN": have < wanted, "LESS_THAN_EQUALS": have <= wanted}[operation]
        except TypeError:
            return False
    return test


def _sort_key(field: str) -> Callable[[dict[str, Any]], tuple]:
    def key(item: dict[str, Any]) -> tuple:
        value = item.get(field)
        if field in _TIME_KEYS:
            value = _time(value)
        # Ties (and missing values) in a stable order: by creation, then id.
        return (value is None, value if value is not None else "", item.get("created_at") or "",
                item.get("_id", ""))
    return key


def page(items: list[dict[str, Any]], params: Any, list_key: str, id_key: str) -> dict[str, Any]:
    """One page of ``items`` (KFP-shaped objects) as KFP's List*Response under ``list_key``."""
    if params.get("filter"):
        matches = _matcher(params["filter"])
        items = [item for item in items if matches(item)]
    sort_by = (params.get("sort_by") or "created_at").split()
    field = sort_by[0] if sort_by else "created_at"
    if field in ("id", "_id"):
        field = id_key
    descending = len(sort_by) > 1 and sort_by[1].lower() == "desc"
    if len(sort_by) > 2 or len(sort_by) == 2 and sort_by[1].lower() not in ("asc", "desc"):
        raise KfpError.invalid(f'sort_by: "{params.get("sort_by")}" is not "FIELD", "FIELD asc" or "FIELD desc"')
    for item in items:
        item["_id"] = item.get(id_key, "")
    items = sorted(items, key=_sort_key(field), reverse=descending)
    for item in items:
        item.pop("_id", None)
    try:
        size = int(params.get("page_size") or 0) or DEFAULT_PAGE_SIZE
        start = int(base64.urlsafe_b64decode(params["page_token"]).decode()) if params.get("page_token") else 0
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise KfpError.invalid("page_size or page_token: not one this server gave") from None
    size = max(1, min(size, MAX_PAGE_SIZE))
    end = start + size
    body: dict[str, Any] = {list_key: items[start:end], "total_size": len(items)}
    if end < len(items):
        body["next_page_token"] = base64.urlsafe_b64encode(str(end).encode()).decode()
    return body
