"""What the store does to an object's body, apart from any database.

Pure functions of (stored, incoming) so each store implementation applies the same
Kubernetes semantics: which metadata the server owns, when ``generation`` moves, and
that ``update`` and ``update_status`` each touch only their half of the object.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timezone
from typing import Any

from trimaran.store import _codec
from trimaran.store.errors import Invalid

# Kubernetes' generateName alphabet: no vowels (no accidental words), no look-alike 0/1/3.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5

# Top-level fields that are not the desired state; a change elsewhere bumps generation.
_NOT_SPEC = ("metadata", "status")


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes timestamps: ``2024-05-01T12:00:00Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_object(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy that also proves the object is JSON (a JSON round trip beats ``deepcopy``)."""
    return _codec.loads(_codec.dumps(obj))


def object_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """``(kind, namespace, name)`` of an object; namespace ``""`` for cluster-scoped kinds."""
    kind = obj.get("kind")
    if not kind:
        raise Invalid("object has no kind")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise Invalid(f"{kind}: metadata.name is required")
    return kind, meta.get("namespace") or "", name


def generated_name(prefix: str) -> str:
    """``prefix`` plus a random suffix, as the API server expands ``metadata.generateName``."""
    return prefix + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))


def prepare_create(obj: dict[str, Any], revision: int, uid: str | None = None) -> dict[str, Any]:
    """A copy of ``obj`` with the server-owned metadata a new object gets.

    A ``generateName`` without a ``name`` must have been expanded by the caller already.
    Any uid or resourceVersion the client sent is replaced: they belong to the server. ``uid`` is
    one the API server gave the object before defaulting it (a Job's selector names it).
    """
    body = copy_object(obj)
    meta = body.setdefault("metadata", {})
    meta["uid"] = uid or str(uuid.uuid4())
    meta["resourceVersion"] = str(revision)
    meta["generation"] = 1
    meta["creationTimestamp"] = now_rfc3339()
    return body


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in _NOT_SPEC}


def merge_update(stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The body an ``update`` stores: ``incoming`` with the stored status and server-owned metadata.

    The resourceVersion is left at the stored one; the caller compares the result with
    ``stored`` to tell a no-op from a change, and only then assigns a new revision.
    """
    body = copy_object(incoming)
    old_meta = stored["metadata"]
    meta = body.setdefault("metadata", {})
    for owned in ("uid", "creationTimestamp", "resourceVersion"):
        meta[owned] = old_meta[owned]
    changed_spec = _spec_part(body) != _spec_part(stored)
    meta["generation"] = old_meta.get("generation", 1) + (1 if changed_spec else 0)
    # Status belongs to the controllers: a spec writer must not be able to erase it.
    body.pop("status", None)
    if "status" in stored:
        body["status"] = stored["status"]
    return body


def merge_status(stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The body an ``update_status`` stores: ``stored`` with ``incoming``'s status and nothing else."""
    body = copy_object(stored)
    if "status" in incoming:
        body["status"] = copy_object(incoming["status"])
    else:
        body.pop("status", None)
    return body


def matches_labels(obj: dict[str, Any], selector: dict[str, str] | None) -> bool:
    """Whether every ``key: value`` of an equality-based label selector is among the object's labels."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())
