"""Deletion as Kubernetes does it: the API marks or removes the one object a DELETE names, and the
garbage collector, a level-triggered reconciler, does the rest from ownerReferences and finalizers.

Nothing of a cascade happens inside the request, so a control plane killed halfway through one
finishes it after a restart: the collector's first pass finds the dependents whose owners are gone
and the owners still held by ``orphan`` or ``foregroundDeletion``. Pods are only marked
(``deletionTimestamp``): the kubelet stops their processes, then removes them.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable

from trimaran.api import kinds
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.conditions import now_rfc3339
from trimaran.store import Conflict, Invalid, NotFound, Store, StoreError
from trimaran.store.base import WatchEvent

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
# A namespace goes once everything in it has gone (Kubernetes' namespace controller's finalizer).
NAMESPACE_FINALIZER = "kubernetes"
_NAMESPACE_RECHECK = 0.5
PROPAGATIONS = ("Background", "Foreground", "Orphan")
_FINALIZER_OF = {"Orphan": ORPHAN_FINALIZER, "Foreground": FOREGROUND_FINALIZER}
# A delete re-reads and decides again when the object changed under it, as the apiserver's
# guaranteed update does; a bound, so an object rewritten without pause ends in a 409, not a hang.
_CONFLICT_RETRIES = 5

# What a dependent's owner reference points at, for the collector (Kubernetes' classification).
_SOLID = "solid"  # there, and not waiting for its dependents to go
_WAITING = "waiting"  # there, being deleted in foreground: it waits for its dependents
_GONE = "gone"


class PreconditionFailed(Conflict):
    """A delete's precondition (uid or resourceVersion) does not hold for the stored object (HTTP 409)."""

    def __init__(self, obj: dict, field: str, wanted: str, actual: str | None) -> None:
        StoreError.__init__(
            self, f"Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {actual}")
        meta = obj["metadata"]
        self.kind, self.namespace, self.name = obj["kind"], meta.get("namespace") or "", meta["name"]


def request_delete(
    store: Store,
    obj: dict,
    propagation: str = "Background",
    preconditions: dict | None = None,
    dry_run: bool = False,
) -> dict | None:
    """Delete ``obj`` as kube-apiserver does; return it as stored afterwards, or None once it is gone.

    ``Orphan`` and ``Foreground`` mark the object (``deletionTimestamp``) and add the finalizer the
    garbage collector acts on; ``Background`` removes the object now unless a finalizer holds it,
    in which case it is only marked. An explicit propagation replaces the one an earlier delete
    chose (as in Kubernetes); the deletionTimestamp is set once. A Pod is only marked, whatever the
    propagation: the kubelet stops its processes, then removes it. Dependents are left to the
    collector. With ``dry_run`` nothing is written; the answer is what would have been.

    Args:
        preconditions: ``uid`` and/or ``resourceVersion`` the stored object must have.

    Raises:
        NotFound: There is no such object.
        Conflict: A precondition does not hold (:class:`PreconditionFailed`), or the object kept
            changing under the delete.
        Invalid: ``propagation`` is not one of :data:`PROPAGATIONS`.
    """
    if propagation not in PROPAGATIONS:
        raise Invalid(f'propagationPolicy: Unsupported value: "{propagation}": supported values: '
                      + ", ".join(f'"{p}"' for p in PROPAGATIONS))
    kind, namespace, name = obj["kind"], obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
    for _ in range(_CONFLICT_RETRIES):
        current = store.get(kind, namespace, name)
        _check_preconditions(current, preconditions or {})
        marked = copy.deepcopy(current)
        meta = marked["metadata"]
        if kind != "Pod":
            finalizers = _finalizers_after(meta.get("finalizers") or [], propagation)
            if kind == "Namespace" and NAMESPACE_FINALIZER not in finalizers:
                finalizers.append(NAMESPACE_FINALIZER)
            if not finalizers:
                if not dry_run:
                    _remove(store, current)
                return None
            meta["finalizers"] = finalizers
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_rfc3339()
        if dry_run or marked == current:
            return marked
        try:
            return store.update(marked)  # conditional on the resourceVersion just read
        except Conflict:
            continue
    raise Conflict(kind, namespace, name)


def _check_preconditions(obj: dict, preconditions: dict) -> None:
    meta = obj["metadata"]
    for field, actual in (("uid", meta.get("uid")), ("resourceVersion", meta.get("resourceVersion"))):
        wanted = preconditions.get(field)
        if wanted not in (None, "") and str(wanted) != actual:
            raise PreconditionFailed(obj, field, str(wanted), actual)


def _finalizers_after(finalizers: list[str], propagation: str) -> list[str]:
    """The finalizers a delete with ``propagation`` leaves: the object's own, and at most one of the
    collector's (the one asked for; ``Background`` asks for none)."""
    wanted = _FINALIZER_OF.get(propagation)
    kept = [f for f in finalizers if f not in _FINALIZER_OF.values() or f == wanted]
    if wanted and wanted not in kept:
        kept.append(wanted)
    return kept


def _remove(store: Store, obj: dict) -> None:
    """Take ``obj`` out of the store with what is kept about it by name: events, a trial's observations.

    Those go first: a crash in between leaves the object, whose deletion is then finished again,
    rather than observations nobody will ever delete.
    """
    kind, namespace, name = obj["kind"], obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
    if kind == "Trial":
        store.delete_observations(namespace, name)
    store.delete_events_for(kind, namespace, name)
    try:
        store.delete(kind, namespace, name)
    except NotFound:
        pass


def _store_kinds() -> tuple[str, ...]:
    # The store keys objects by kind, not version: MPIJob v1 and v2beta1 are one kind there.
    return tuple(dict.fromkeys(info.kind for info in kinds.all_kinds()))


class GarbageCollector(Reconciler):
    """Kubernetes' garbage collector: finishes every deletion ``request_delete`` started.

    - An object with ownerReferences none of whose owners is there (or all of them wait in
      foreground deletion) is deleted; one owner still there keeps it, and its references to the
      others are dropped.
    - An owner marked with ``foregroundDeletion`` has its dependents deleted (in foreground too when
      their reference blocks the owner's deletion) and loses the finalizer once no dependent with
      ``blockOwnerDeletion`` is left.
    - An owner marked with ``orphan`` has its reference removed from every dependent, then the
      finalizer.
    - An object other than a Pod that is marked and has no finalizer left is removed from the store
      (the apiserver does that when the last finalizer goes; here a user's controller removing its
      own finalizer ends the same way). Pods are removed by the kubelet.
    """

    name = "garbage-collector"
    every_kind = True  # users' CRDs add kinds at run time: the manager's watch is not narrowed to those of now

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        # The uid each key had at its latest event: a deleted object's dependents are found by it.
        # Entries go when the reconcile of a key finds the object gone.
        self._uids: dict[Key, str] = {}
        # Uids some object has named as its owner → the kinds of those objects, so that an owner's
        # deletion looks for dependents among those kinds only, not through every kind.
        self._dependent_kinds: dict[str | None, set[str]] = {}
        self._uids_lock = threading.Lock()

    @property  # type: ignore[override]
    def kinds(self) -> tuple[str, ...]:
        """Every kind registered now, users' CRDs' included."""
        return _store_kinds()

    @staticmethod
    def _namespaced() -> dict[str, bool]:
        return {info.kind: info.namespaced for info in kinds.all_kinds()}

    # -- what wakes it ---------------------------------------------------------------------------
    def keys_for_event(self, event: WatchEvent) -> Iterable[Key]:
        # Most changes are status writes of live objects (a pod's every transition), which nothing
        # here acts on: only what is created (its owner may be gone already), deleted (its
        # dependents may be orphans now) or being deleted is looked at; the resync covers the rest.
        obj = event.object
        meta = obj["metadata"]
        key = key_of(obj)
        with self._uids_lock:
            self._uids[key] = meta["uid"]
            self._note_owners(obj)
        if event.type == "MODIFIED" and not meta.get("deletionTimestamp"):
            return []
        if event.type == "ADDED" and not (meta.get("ownerReferences") or meta.get("deletionTimestamp")):
            return []
        # Owners too: a dependent that goes may be the last one an owner in foreground deletion waits for.
        owners = (self._owner_key(obj, ref) for ref in meta.get("ownerReferences") or [])
        return [key, *(owner for owner in owners if owner is not None)]

    def initial_keys(self) -> Iterable[Key]:
        # After a crash: dependents whose owners went meanwhile, owners held by a finalizer. Not a
        # shared list: that would keep every object of every kind decoded in memory between passes.
        for kind in self.kinds:
            for obj in self.store.list(kind):
                meta = obj["metadata"]
                if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
                    with self._uids_lock:
                        self._note_owners(obj)
                    yield key_of(obj)

    def _note_owners(self, obj: dict) -> None:
        """Remember the owners ``obj`` names, and its kind among their dependents' (under the lock)."""
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._dependent_kinds.setdefault(ref.get("uid"), set()).add(obj["kind"])

    # -- the pass --------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        try:
            obj = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            self._wake_dependents_of(key)
            return None
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            self._collect(obj)
            return None
        finalizers = meta.get("finalizers") or []
        if NAMESPACE_FINALIZER in finalizers and obj["kind"] == "Namespace":
            return self._empty_namespace(obj)
        if FOREGROUND_FINALIZER in finalizers:
            self._delete_dependents(obj)
        elif ORPHAN_FINALIZER in finalizers:
            self._orphan_dependents(obj)
        elif not finalizers and obj["kind"] != "Pod":
            _remove(self.store, obj)
        return None

    def _wake_dependents_of(self, key: Key) -> None:
        with self._uids_lock:
            uid = self._uids.pop(key, None)
            # Most objects that go own nothing (a trial's pods): no look through any kind for them;
            # the others only through the kinds of the objects that named them (since the start,
            # whose list saw every object's references, or since they were written).
            kinds = self._dependent_kinds.pop(uid, None)
        # Without a uid (no event seen since the start) there is nothing to look up by; the
        # dependents, if any, carry their references and are queued by the start and every resync.
        if uid is not None and kinds:
            for dependent in self._dependents(key.namespace, uid, kinds):
                self.wake(key_of(dependent))

    def _collect(self, obj: dict) -> None:
        """Delete ``obj`` when no owner keeps it; else drop its references to owners that do not."""
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if not refs:
            return
        states = [self._owner_state(obj, ref) for ref in refs]
        solid = [ref for ref, state in zip(refs, states, strict=True) if state == _SOLID]
        try:
            if not solid:
                # An owner waiting in foreground for this dependent wants its dependents gone first.
                blocks = any(state == _WAITING and ref.get("blockOwnerDeletion")
                             for ref, state in zip(refs, states, strict=True))
                request_delete(self.store, obj, "Foreground" if blocks else "Background",
                               preconditions={"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
            elif len(solid) < len(refs):
                self.store.update(_with_meta(obj, "ownerReferences", solid))
        except (NotFound, Conflict):
            pass  # gone, or changed since it was read: that change's event brings it back

    def _empty_namespace(self, namespace: dict) -> float | None:
        """Delete everything in a namespace being deleted; when nothing is left, let it go."""
        name = namespace["metadata"]["name"]
        if (namespace.get("status") or {}).get("phase") != "Terminating":
            try:
                self.store.update_status({**namespace, "status": {**(namespace.get("status") or {}),
                                                                  "phase": "Terminating"}})
            except (NotFound, Conflict):
                return _NAMESPACE_RECHECK
        left = [obj for kind in _store_kinds() if kind != "Namespace" for obj in self.store.list(kind, name)]
        for obj in left:
            if not obj["metadata"].get("deletionTimestamp"):
                try:
                    request_delete(self.store, obj)
                except (NotFound, Conflict):
                    pass  # gone or changed: the next look sees it
        if left:
            return _NAMESPACE_RECHECK
        self._drop_finalizer(namespace, NAMESPACE_FINALIZER)
        return None

    def _delete_dependents(self, owner: dict) -> None:
        namespace, uid = owner["metadata"].get("namespace") or "", owner["metadata"]["uid"]
        dependents = self._dependents(namespace, uid)
        for dependent in dependents:
            if not dependent["metadata"].get("deletionTimestamp"):
                self._collect(dependent)
        if dependents and any(_blocks(dependent, uid) for dependent in self._dependents(namespace, uid)):
            return  # each dependent's deletion event wakes the owner again
        self._drop_finalizer(owner, FOREGROUND_FINALIZER)

    def _orphan_dependents(self, owner: dict) -> None:
        uid = owner["metadata"]["uid"]
        for dependent in self._dependents(owner["metadata"].get("namespace") or "", uid):
            refs = [ref for ref in dependent["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid]
            try:
                self.store.update(_with_meta(dependent, "ownerReferences", refs))
            except NotFound:
                continue
            except Conflict:
                return  # the dependent changed and still names the owner: its event wakes the owner
        self._drop_finalizer(owner, ORPHAN_FINALIZER)

    def _drop_finalizer(self, obj: dict, finalizer: str) -> None:
        left = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        try:
            stored = self.store.update(_with_meta(obj, "finalizers", left))
        except (NotFound, Conflict):
            return  # gone, or changed meanwhile: that change's event brings it back
        if not left and stored["kind"] != "Pod":
            _remove(self.store, stored)

    # -- owners and dependents -------------------------------------------------------------------
    def _owner_key(self, obj: dict, ref: dict) -> Key | None:
        namespaced = self._namespaced().get(ref.get("kind"))
        if namespaced is None or not ref.get("name"):
            return None
        return Key(ref["kind"], (obj["metadata"].get("namespace") or "") if namespaced else "", ref["name"])

    def _owner_state(self, obj: dict, ref: dict) -> str:
        key = self._owner_key(obj, ref)
        if key is None:
            # A kind this store cannot hold (a manifest written for a cluster): nothing can show
            # the owner is gone, so, as Kubernetes' collector, leave the dependent alone.
            return _SOLID
        try:
            owner = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            return _GONE
        meta = owner["metadata"]
        if meta["uid"] != ref.get("uid"):
            return _GONE  # a new object under the old owner's name
        if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or []):
            return _WAITING
        return _SOLID

    def _dependents(self, namespace: str, uid: str, kinds: Iterable[str] | None = None) -> list[dict]:
        """Objects (of ``kinds``, else of any kind) that name ``uid`` among their owners: in its
        namespace, or anywhere for a cluster-scoped owner (``namespace`` "")."""
        kinds = self.kinds if kinds is None else [kind for kind in self.kinds if kind in kinds]
        if namespace:
            scoped = self._namespaced()
            wanted = [kind for kind in kinds if scoped[kind]]
            return [obj for kind in wanted for obj in self.store.list(kind, namespace, owner_uid=uid)]
        return [obj for kind in kinds for obj in self.store.list(kind, owner_uid=uid)]


def _blocks(dependent: dict, owner_uid: str) -> bool:
    """Whether ``dependent``'s reference to the owner holds the owner's foreground deletion."""
    return any(ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion")
               for ref in dependent["metadata"].get("ownerReferences") or [])


def _with_meta(obj: dict, field: str, values: list) -> dict:
    """``obj`` with the metadata list ``field`` replaced (left out when empty, as Kubernetes writes it)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != field}
    if values:
        meta[field] = values
    return {**obj, "metadata": meta}

