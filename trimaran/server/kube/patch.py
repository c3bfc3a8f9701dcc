"""PATCH bodies and server-side apply, with the field ownership (``managedFields``) they keep.

* JSON merge patch (RFC 7386) and JSON patch (RFC 6902, through the ``jsonpatch`` library) for
  every kind.
* Strategic merge patch for built-in kinds only, as kube-apiserver (custom resources answer 415):
  each field merges as its type declares (``api/patchmeta.py``: a Service's ports by ``port``, a
  container's by ``containerPort``, tolerations replaced whole), and the ``$patch``, ``$retainKeys``,
  ``$setElementOrder`` and ``$deleteFromPrimitiveList`` directives are obeyed.
* Server-side apply (``application/apply-patch+yaml``): the applied configuration's fields become
  its manager's, a field another manager owns with another value is a conflict (409) unless
  ``force``, and fields the manager applied before but no longer lists are removed when no one else
  owns them. Ownership is kept in ``metadata.managedFields`` in the ``FieldsV1`` format, so
  ``kubectl apply --server-side`` sees the owners it expects and sends no migration requests.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any

import jsonpatch

from trimaran.api.patchmeta import FieldMeta, field_meta, kind_type
from trimaran.server.kube.bodies import load_json
from trimaran.server.kube.errors import StatusError

__all__ = ["apply_patch", "json_patch", "merge_patch", "prune_managed_fields", "server_side_apply",
           "strategic_merge_patch", "track_update"]

# Server-side apply's keyed lists (the field sets' ``k:`` elements), by field name: items of these
# lists are owned one by one. Strategic merge patch does not use this: it goes by type.
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ports": "containerPort",
    "imagePullSecrets": "name", "ownerReferences": "uid", "conditions": "type", "hostAliases": "ip",
    "resourceClaims": "name", "replicatedJobs": "name", "dependsOn": "name",
}
# A Service's ports share the field name with a container's but merge by ``port`` (ServiceSpec's
# patchMergeKey); an item is told apart by the key it carries.
_SERVICE_PORT_KEY = "port"


def _merge_key(field: str, items: list) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports" and any(isinstance(i, dict) and "containerPort" not in i and _SERVICE_PORT_KEY in i
                                for i in items):
        return _SERVICE_PORT_KEY
    return key


# Never owned by anyone: identity and server-kept fields.
_UNOWNED_TOP = frozenset({"apiVersion", "kind", "status"})
_UNOWNED_META = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                           "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
                           "generateName"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: dict, operations: Any) -> dict:
    """RFC 6902; a failed ``test`` or a path that does not exist is a 422, as kube-apiserver answers."""
    if not isinstance(operations, list):
        raise StatusError.bad_request("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(target, operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError,
            IndexError, ValueError) as exc:
        raise StatusError(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
                          ) from None


def strategic_merge_patch(target: Any, patch: Any, type_name: str | None = None) -> Any:
    """Kubernetes' strategic merge of ``patch`` into ``target``, a built-in kind's object.

    Each field merges as its type declares (``api/patchmeta.py``, upstream's patch strategies and
    merge keys, found by ``target``'s apiVersion and kind unless ``type_name`` is given), and the
    directives are obeyed as apimachinery's ``strategicpatch`` obeys them when it applies a patch:
    ``$patch: replace|delete`` in a map or a list, ``$retainKeys``, ``$setElementOrder/<list>`` and
    ``$deleteFromPrimitiveList/<list>``. New items of a merged list come before the live ones that
    the patch does not name, as upstream orders them.

    Raises:
        StatusError: a directive or item upstream refuses, with its words and code.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if type_name is None:
        type_name = kind_type(str((target or {}).get("apiVersion", "")), str((target or {}).get("kind", ""))) \
            if isinstance(target, dict) else ""
    return _merge_map(copy.deepcopy(target) if isinstance(target, dict) else {}, copy.deepcopy(patch), type_name)


_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def _go(value: Any) -> str:
    """``value`` as Go's %v prints a decoded JSON value, for upstream's error messages."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _smp_error(message: str, code: int = 500) -> StatusError:
    """An error of apimachinery's patch code: kube-apiserver passes most through as a 500 with no reason."""
    return StatusError(code, "BadRequest" if code == 400 else "", message)


def _merge_map(original: dict, patch: dict, type_name: str) -> dict:
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        raise _smp_error(f"unknown patch type: {_go(directive)} in map: {_go({**patch, _DIRECTIVE: directive})}")
    if _RETAIN in patch:
        retained = patch.pop(_RETAIN)
        if not isinstance(retained, list) or not all(isinstance(k, str) for k in retained):
            raise _smp_error("invalid patch format of retainKeys", 400)
        for key in [k for k in original if k not in retained]:
            del original[key]
    for key in [k for k in patch if k.startswith(_ORDER)]:
        order = patch.pop(key)
        name = key[len(_ORDER):]
        if not isinstance(order, list):
            raise _smp_error("invalid patch format of setElementOrder list", 400)
        meta = field_meta(type_name, name)
        live, listed = original.get(name), patch.get(name)
        if not order or (live is None and listed is None):
            continue
        patch.pop(name, None)
        live = live if isinstance(live, list) else []
        listed = listed if isinstance(listed, list) else []
        merged = _merge_slice(live, listed, meta) if meta.merge else _strip(listed)
        original[name] = _ordered(merged, order, live, meta.key)
    for key, value in patch.items():
        if key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            name = key[len(_DELETE_FROM):]
            if isinstance(original.get(name), list) and isinstance(value, list):
                original[name] = [v for v in original[name] if v not in value]
            continue
        if value is None:
            original.pop(key, None)
            continue
        meta = field_meta(type_name, key)
        live = original.get(key)
        if key not in original or type(live) is not type(value) or not isinstance(value, (dict, list)):
            kept = _strip(value)
            if kept is _DROPPED:
                original.pop(key, None)
            else:
                original[key] = kept
        elif isinstance(value, dict):
            original[key] = _strip(value) if meta.replace else _merge_map(live, value, meta.type)
        else:
            original[key] = _merge_slice(live, value, meta) if meta.merge else _strip(value)
    return original


_DROPPED = object()


def _strip(value: Any) -> Any:
    """A patch's value taken whole: its directives and nulls left out (upstream's removeDirectives
    with IgnoreUnmatchedNulls); a map that is itself a directive is dropped."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return _DROPPED
        out = {}
        for k, v in value.items():
            if k.startswith("$") or v is None:
                continue
            kept = _strip(v)
            if kept is not _DROPPED:
                out[k] = kept
        return out
    if isinstance(value, list):
        return [kept for kept in (_strip(v) for v in value) if kept is not _DROPPED]
    return value


def _merge_slice(original: list, patch: list, meta: FieldMeta) -> list:
    """A list with the ``merge`` strategy: primitives as a set, objects item by item by the merge key."""
    if not original and not patch:
        return original
    if not all(isinstance(i, dict) for i in [*original, *patch]):
        merged = list(dict.fromkeys(_hashable(v) for v in [*original, *patch]))
        merged = [_unhashable(v) for v in merged]
        return _ordered(merged, patch, original, "")
    key = meta.key
    if not key:
        raise _smp_error("cannot merge lists without merge key")
    items: list[dict] = []
    replace = False
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if directive is None:
            items.append(item)
        elif directive == "delete":
            if key not in item:
                raise _smp_error(f"map: {_go(item)} does not contain declared merge key: {key}")
            original = [o for o in original if o.get(key) != item[key]]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _smp_error("merging lists cannot yet be specified in the patch")
        else:
            raise _smp_error(f"unknown patch type: {_go(directive)} in map: {_go(item)}")
    if replace:
        original, items = [_strip(i) for i in items], []
    merged = list(original)
    for item in items:
        if key not in item:
            raise _smp_error(f"map: {_go(item)} does not contain declared merge key: {key}")
        index = next((n for n, o in enumerate(merged) if o.get(key) == item[key]), None)
        if index is None:
            merged.append(_strip(item))
        else:
            merged[index] = _merge_map(merged[index], item, meta.type)
    return _ordered(merged, items, original, key)


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _unhashable(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def _ordered(merged: list, order: list, server: list, key: str) -> list:
    """``merged`` in upstream's order: the items ``order`` names in its order, the others in the
    live list's, interleaved where the live list places them (apimachinery's normalizeElementOrder)."""
    def ident(item: Any) -> Any:
        return _hashable(item.get(key) if key and isinstance(item, dict) else item)

    order_index = {}
    for n, item in enumerate(order):
        order_index.setdefault(ident(item), n)
    server_index = {}
    for n, item in enumerate(server):
        server_index.setdefault(ident(item), n)
    named = sorted((i for i in merged if ident(i) in order_index), key=lambda i: order_index[ident(i)])
    others = sorted((i for i in merged if ident(i) not in order_index),
                    key=lambda i: server_index.get(ident(i), len(server)))
    out: list = []
    left, right = 0, 0
    while left < len(others) or right < len(named):
        if right >= len(named):
            out.append(others[left])
            left += 1
        elif left >= len(others):
            out.append(named[right])
            right += 1
        else:
            li, ri = server_index.get(ident(others[left])), server_index.get(ident(named[right]))
            if li is not None and ri is not None and li < ri:
                out.append(others[left])
                left += 1
            else:
                out.append(named[right])
                right += 1
    return out


def apply_patch(content_type: str, target: dict, body: bytes, builtin: bool) -> dict:
    """``target`` patched by a merge, JSON or strategic patch of ``content_type``."""
    patch = load_json(body or b"null", "the body of the patch")
    if content_type == "application/json-patch+json":
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise StatusError.bad_request("a merge patch must be a JSON object")
    if content_type == "application/merge-patch+json":
        return merge_patch(target, patch)
    if content_type == "application/strategic-merge-patch+json":
        if not builtin:
            raise StatusError.unsupported_media_type(content_type)
        return strategic_merge_patch(target, patch)
    raise StatusError.unsupported_media_type(content_type)


# Field sets ------------------------------------------------------------------------------
# A path is a tuple of FieldsV1 elements: "f:<field>" for a map key, 'k:{"name":"x"}' for an item
# of a keyed list. A leaf path owns a value; a list item's "." owns the item itself.

Path = tuple[str, ...]


def _item_element(field: str, item: dict) -> str | None:
    key = _merge_key(field, [item])
    if not key or key not in item:
        return None
    return "k:" + json.dumps({key: item[key]}, separators=(",", ":"))


def field_paths(obj: Any, prefix: Path = (), field: str = "") -> set[Path]:
    """The leaf paths of ``obj`` in FieldsV1 terms (top-level identity and status left out)."""
    out: set[Path] = set()
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            if not prefix and key in _UNOWNED_TOP:
                continue
            if prefix == ("f:metadata",) and key in _UNOWNED_META:
                continue
            out |= field_paths(value, (*prefix, f"f:{key}"), key)
        return out
    if isinstance(obj, list) and obj and all(isinstance(i, dict) and _item_element(field, i) for i in obj):
        for item in obj:
            element = (*prefix, _item_element(field, item))
            out.add((*element, "."))
            out |= field_paths(item, element, field)
        return out
    if prefix:
        out.add(prefix)
    return out


def _lookup(obj: Any, path: Path) -> Any:
    cur = obj
    for element in path:
        if element == ".":
            return cur
        if element.startswith("f:"):
            if not isinstance(cur, dict) or element[2:] not in cur:
                return _ABSENT
            cur = cur[element[2:]]
        else:
            wanted = json.loads(element[2:])
            ((k, v),) = wanted.items()
            if not isinstance(cur, list):
                return _ABSENT
            cur = next((i for i in cur if isinstance(i, dict) and i.get(k) == v), _ABSENT)
            if cur is _ABSENT:
                return cur
    return cur


def _remove(obj: Any, path: Path) -> None:
    """Remove the value at ``path`` (a leaf, or a list item when the path ends in ".")."""
    if path[-1] == ".":
        path = path[:-1]
    parent = _lookup(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        ((k, v),) = json.loads(last[2:]).items()
        parent[:] = [i for i in parent if not (isinstance(i, dict) and i.get(k) == v)]


_ABSENT = object()


def to_fields_v1(paths: set[Path]) -> dict:
    root: dict = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    return root


def from_fields_v1(tree: dict, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for element, child in (tree or {}).items():
        path = (*prefix, element)
        if element == "." or not child:
            out.add(path)
        else:
            out |= from_fields_v1(child, path)
    return out


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(manager: str, operation: str, api_version: str, paths: set[Path]) -> dict:
    return {"manager": manager, "operation": operation, "apiVersion": api_version, "time": _now(),
            "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths)}


def _owners(obj: dict) -> list[tuple[dict, set[Path]]]:
    return [(e, from_fields_v1(e.get("fieldsV1") or {})) for e in (obj.get("metadata") or {}).get("managedFields") or []
            if isinstance(e, dict)]


def _deep_apply(live: Any, applied: Any, field: str = "") -> Any:
    """``applied`` laid over ``live``: maps merge, keyed lists merge by key, the rest is replaced."""
    if isinstance(applied, dict) and isinstance(live, dict):
        out = dict(live)
        for key, value in applied.items():
            out[key] = _deep_apply(live.get(key), value, key)
        return out
    if isinstance(applied, list) and isinstance(live, list) and applied and \
            all(isinstance(i, dict) and _item_element(field, i) for i in applied):
        key = _merge_key(field, applied)
        out = [copy.deepcopy(i) for i in live]
        for item in applied:
            index = next((n for n, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item[key]), None)
            if index is None:
                out.append(copy.deepcopy(item))
            else:
                out[index] = _deep_apply(out[index], item, field)
        return out
    return copy.deepcopy(applied)


def server_side_apply(live: dict | None, applied: dict, manager: str, force: bool) -> dict:
    """The object after ``manager`` applies ``applied`` to ``live`` (None when it does not exist yet).

    Raises:
        StatusError: 409 Conflict naming each field another manager owns with another value.
    """
    applied_paths = field_paths(applied)
    if live is None:
        out = copy.deepcopy(applied)
        out.setdefault("metadata", {})["managedFields"] = [
            _entry(manager, "Apply", applied.get("apiVersion", ""), applied_paths)]
        return out
    owners = _owners(live)
    conflicts: list[tuple[str, Path]] = []
    for entry, paths in owners:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            continue
        for path in paths & applied_paths:
            if path[-1] != "." and _lookup(live, path) != _lookup(applied, path):
                conflicts.append((entry.get("manager", ""), path))
    if conflicts and not force:
        causes = [{"reason": "FieldManagerConflict", "message": f'conflict with "{who}"',
                   "field": _dotted(path)} for who, path in conflicts]
        lines = "\n".join(f'- {who}: {_dotted(path)}' for who, path in conflicts)
        raise StatusError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict"
                          f"{'s' if len(conflicts) > 1 else ''}: conflicts with the managers of:\n{lines}",
                          {"causes": causes})
    previous = next((paths for entry, paths in owners
                     if entry.get("manager") == manager and entry.get("operation") == "Apply"), set())
    out = _deep_apply(live, {k: v for k, v in applied.items() if k not in ("status",)})
    others = set().union(*(paths for entry, paths in owners
                           if not (entry.get("manager") == manager and entry.get("operation") == "Apply")))
    # A map applied empty before and with fields now is still applied: only its fields are new.
    still_applied = {path[:i] for path in applied_paths for i in range(1, len(path))}
    # Deepest first, so an item goes after the fields inside it.
    for path in sorted(previous - applied_paths - others - still_applied, key=len, reverse=True):
        _remove(out, path)
    entries = []
    mine = None
    for entry, paths in owners:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            # Unchanged ownership keeps its entry (and time), so a repeated apply writes nothing.
            mine = entry if paths == applied_paths else None
            continue
        kept = paths - applied_paths if force else paths
        if kept:
            entries.append(entry if kept == paths else {**entry, "fieldsV1": to_fields_v1(kept)})
    entries.append(mine or _entry(manager, "Apply", applied.get("apiVersion", ""), applied_paths))
    out.setdefault("metadata", {})["managedFields"] = entries
    return out


def prune_managed_fields(obj: dict) -> None:
    """Drop ownership of fields ``obj`` does not have (an applied field validation dropped)."""
    entries = []
    for entry, paths in _owners(obj):
        kept = {p for p in paths if _lookup(obj, p[:-1] if p[-1] == "." else p) is not _ABSENT}
        if kept:
            entries.append(entry if kept == paths else {**entry, "fieldsV1": to_fields_v1(kept)})
    if entries or "managedFields" in obj.get("metadata", {}):
        obj.setdefault("metadata", {})["managedFields"] = entries


def track_update(old: dict | None, new: dict, manager: str) -> None:
    """Record in ``new``'s managedFields that ``manager`` set what this write changed (an Update).

    Fields this write changed move to the manager (as kube-apiserver does for every non-apply
    write), so a later server-side apply of them by someone else is a conflict.
    """
    old_paths = field_paths(old) if old else set()
    new_paths = field_paths(new)
    changed = {p for p in new_paths if p not in old_paths or _lookup(old, p) != _lookup(new, p)}
    entries = []
    mine: set[Path] = set()
    mine_entry = None
    for entry, paths in _owners(old or {}):
        kept = (paths - changed) & new_paths
        if entry.get("manager") == manager and entry.get("operation") == "Update":
            mine, mine_entry = kept, entry if kept == paths else None
        elif kept:
            entries.append(entry if kept == paths else {**entry, "fieldsV1": to_fields_v1(kept)})
    if changed:
        mine |= changed
        mine_entry = None
    if mine:
        entries.append(mine_entry or _entry(manager, "Update", new.get("apiVersion", ""), mine))
    new.setdefault("metadata", {})["managedFields"] = entries


def _dotted(path: Path) -> str:
    out = ""
    for element in path:
        if element == ".":
            continue
        if element.startswith("f:"):
            out += "." + element[2:]
        else:
            out += "[" + element[2:] + "]"
    return out
