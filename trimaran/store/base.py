"""The store interface the rest of Trimaran talks to.

Objects are plain dicts (``{"apiVersion", "kind", "metadata", "spec", "status"}``) keyed by
``(kind, metadata.namespace, metadata.name)``; cluster-scoped kinds use namespace ``""``.
Every change gets the next value of one global revision counter, which is also the
object's ``metadata.resourceVersion`` (as a string) and the position a watch resumes from.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trimaran.store.errors import AlreadyExists

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"]
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change to one object, as a watch reports it.

    Attributes:
        type: ``"ADDED"``, ``"MODIFIED"`` or ``"DELETED"``.
        object: The object after the change; for ``DELETED``, its last state with the
            deletion's resourceVersion.
        revision: The store revision of the change; pass it as ``since`` to resume after it.
    """

    type: WatchEventType
    object: dict[str, Any]
    revision: int


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list.

    Attributes:
        items: The page's objects, in the list's order.
        more: Whether objects past the page are chosen too (a list goes on from the last item).
        remaining: How many objects of the kind lie past the page, where nothing but the kind and
            namespace chose them (kube-apiserver's ``remainingItemCount``); else ``None``.
    """

    items: list[dict[str, Any]]
    more: bool
    remaining: int | None


class Store(abc.ABC):
    """Objects, their change log (for watch) and events.

    The usual controller loop lists, then watches from the revision taken *before* the list,
    so nothing written in between is missed (a change seen twice is harmless to a
    level-triggered reconciler)::

        since = store.current_revision()
        for job in store.list("PyTorchJob"):
            reconcile(job)
        for event in store.watch(["PyTorchJob"], since=since, stop=stopping):
            reconcile(event.object)

    Every method is safe to call from many threads at once.
    """

    #: Admission of new objects (the control plane sets it: ``trimaran.controllers.quota``): called
    #: by `create` inside its write transaction with the object as it will be stored (its name
    #: generated); it returns the object, defaulted, or raises to refuse it. It may read the store
    #: but not write it. Checked and written under one lock, so two creates racing for the last of
    #: a quota cannot both pass.
    admit_create: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @abc.abstractmethod
    def create(self, obj: dict[str, Any], *, uid: str | None = None) -> dict[str, Any]:
        """Store a new object and return it as stored.

        Sets ``metadata.uid`` (``uid`` when given), ``resourceVersion``, ``generation`` (1) and ``creationTimestamp``.
        Without ``metadata.name``, a ``metadata.generateName`` prefix gets a random suffix.

        Raises:
            AlreadyExists: An object of that kind, namespace and name exists.
            Invalid: The object has no kind, or neither a name nor a generateName.
        """

    @abc.abstractmethod
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """Return the stored object.

        Raises:
            NotFound: There is no such object.
        """

    @abc.abstractmethod
    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: dict[str, str] | None = None,
        owner_uid: str | None = None,
        shared: bool = False,
    ) -> list[dict[str, Any]]:
        """Objects of ``kind``, sorted by namespace then name.

        Args:
            kind: The kind, e.g. ``"PyTorchJob"``.
            namespace: Only this namespace; ``None`` lists all namespaces.
            label_selector: Only objects carrying every one of these labels with these values.
            owner_uid: Only objects with an ownerReference to the object of this uid.
            shared: The caller only reads the objects, so the store may hand out objects it has
                handed out before at the same resourceVersion instead of decoding them again (a
                reconciler that lists hundreds of children on every pass). They must not be
                modified: copy one before changing it.
        """

    @abc.abstractmethod
    def list_page(
        self,
        kind: str,
        namespace: str | None,
        *,
        after: tuple[str, str] | None,
        limit: int,
        label_selector: dict[str, str] | None = None,
        accepts: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Page:
        """One page of :meth:`list`: the first ``limit`` objects past ``after`` (a ``(namespace,
        name)`` position, ``None`` for the start) that carry ``label_selector``'s labels and that
        ``accepts``. Reads about as many objects as the page holds, however many the kind has.
        The objects are shared, as with ``list(shared=True)``: copy one before changing it.
        """

    @abc.abstractmethod
    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an object's spec and metadata; return it as stored.

        The stored status is kept whatever ``obj`` carries (status is written with
        :meth:`update_status`); uid and creationTimestamp are kept too. ``generation`` grows by
        one when anything but ``metadata`` and ``status`` changed. An update that changes
        nothing writes nothing and returns the stored object with its old resourceVersion.

        Raises:
            Conflict: ``obj.metadata.resourceVersion`` is set and is not the stored one.
                Without a resourceVersion the update is unconditional.
            NotFound: There is no such object.
        """

    @abc.abstractmethod
    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace only an object's ``status`` with ``obj["status"]``; return it as stored.

        The same resourceVersion check as :meth:`update`; a status equal to the stored one
        writes nothing.

        Raises:
            Conflict: ``obj.metadata.resourceVersion`` is set and is stale.
            NotFound: There is no such object.
        """

    @abc.abstractmethod
    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """Remove an object and the events recorded about it; return its last state.

        Raises:
            NotFound: There is no such object.
        """

    @abc.abstractmethod
    def current_revision(self) -> int:
        """The revision of the latest change (0 for an empty store)."""

    @abc.abstractmethod
    def watch(
        self,
        kinds: Iterable[str] | None = None,
        since: int | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        """Yield every change after revision ``since``, in revision order.

        Args:
            kinds: Only changes to these kinds; ``None`` for all.
            since: Report changes after this revision. ``None`` means from the moment of the
                call (not of the first ``next()``), so nothing written in between is lost.
            timeout: End once this many seconds pass with no new change; ``None`` never ends
                on its own.
            stop: End soon (within the poll interval) after this event is set.

        Raises:
            Expired: The change log no longer reaches back to ``since`` (raised by the
                iterator, possibly later on if the watcher falls that far behind): list again.
        """

    @abc.abstractmethod
    def record_event(self, obj: dict[str, Any], type: EventType, reason: str, message: str) -> None:
        """Record a Kubernetes-style Event about ``obj``.

        An event with the same involved object, type, reason and message as an earlier one
        is folded into it: ``count`` grows and ``lastTimestamp`` moves, ``firstTimestamp`` stays.

        Args:
            obj: The involved object (its kind, namespace, name, uid and apiVersion are used).
            type: ``"Normal"`` or ``"Warning"``.
            reason: A short CamelCase cause, e.g. ``"SuccessfulCreatePod"``.
            message: What happened, for a person.
        """

    @abc.abstractmethod
    def list_events(
        self, kind: str | None = None, namespace: str | None = None, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Events, oldest ``lastTimestamp`` first, optionally only those about this kind/namespace/name."""

    @abc.abstractmethod
    def delete_events_for(self, kind: str, namespace: str, name: str) -> int:
        """Remove every event about the named object, whatever its uid; return how many."""

    @abc.abstractmethod
    def add_observations(self, namespace: str, trial: str, trial_uid: str, rows: Sequence[dict[str, Any]]) -> None:
        """Append metric observations of a trial: dicts with ``metric``, ``value``, and optional
        ``step`` (default 0) and ``timestamp`` (epoch seconds, default now). All or nothing."""

    @abc.abstractmethod
    def list_observations(
        self, namespace: str, trials: Sequence[str] | None = None, metric: str | None = None
    ) -> list[dict[str, Any]]:
        """Observations in the order they were added, optionally only of these trials / this metric."""

    @abc.abstractmethod
    def delete_observations(self, namespace: str, trial: str) -> int:
        """Forget a trial's observations (when the trial is deleted); return how many."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` was called: a watch of a closed store ends at once, so a thread
        that follows the store stops when this is true rather than watching again."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the database; open watches end."""

    def ensure_namespace(self, name: str) -> dict[str, Any]:
        """Return the Namespace ``name``, creating it first if it does not exist."""
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
            "spec": {},
            "status": {"phase": "Active"},
        }
        try:
            return self.create(namespace)
        except AlreadyExists:
            return self.get("Namespace", "", name)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
