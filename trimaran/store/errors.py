"""Errors the store raises, shaped like the Kubernetes API's status reasons.

Each carries the HTTP ``code`` and ``reason`` the API server answers with, so the
server maps a store error to a Kubernetes ``Status`` without a lookup table.
"""

from __future__ import annotations


def describe(kind: str, namespace: str, name: str) -> str:
    """Name an object in messages: ``TFJob "default/x"``, or ``Namespace "x"`` when cluster-scoped."""
    return f'{kind} "{namespace}/{name}"' if namespace else f'{kind} "{name}"'


class StoreError(Exception):
    """Base of every error the store raises on purpose."""

    code: int = 500
    reason: str = "InternalError"


class NotFound(StoreError):
    """The object does not exist (HTTP 404)."""

    code = 404
    reason = "NotFound"

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{describe(kind, namespace, name)} not found")
        self.kind, self.namespace, self.name = kind, namespace, name


class AlreadyExists(StoreError):
    """An object with the same kind, namespace and name exists (HTTP 409)."""

    code = 409
    reason = "AlreadyExists"

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{describe(kind, namespace, name)} already exists")
        self.kind, self.namespace, self.name = kind, namespace, name


class Conflict(StoreError):
    """The caller's ``metadata.resourceVersion`` is stale (HTTP 409): re-read and retry."""

    code = 409
    reason = "Conflict"

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(
            f"Operation cannot be fulfilled on {describe(kind, namespace, name)}: the object has been "
            "modified; please apply your changes to the latest version and try again"
        )
        self.kind, self.namespace, self.name = kind, namespace, name


class Expired(StoreError):
    """A watch asked for changes the store has compacted away (HTTP 410 Gone): list again."""

    code = 410
    reason = "Expired"

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(
            f"too old resource version: {requested} ({compacted + 1}); "
            "list again and watch from the revision the list returned"
        )
        self.requested, self.compacted = requested, compacted


class Invalid(StoreError):
    """The object cannot be stored as given, e.g. it has neither a name nor a generateName (HTTP 422)."""

    code = 422
    reason = "Invalid"


class DiskFull(StoreError):
    """A write could not commit because the store's disk is full (HTTP 507 Insufficient Storage).

    Deletes (and writes to objects being deleted) may still commit: the store keeps a reserve of
    space for them (see :class:`~trimaran.store.sqlite.SQLiteStore`)."""

    code = 507
    reason = "InsufficientStorage"
