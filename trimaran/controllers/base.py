"""The reconcile framework: watch the store, queue keys, call reconcilers.

Level-triggered on purpose: a reconciler gets only a key, reads the current desired and actual
state itself, and acts on the difference. Missing an event, handling one twice, or starting
after a crash therefore never needs a special path: at start every object is queued once.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import Histogram

from trimaran.api.quota import AdmissionRefused
from trimaran.store import Conflict, NotFound, Store
from trimaran.store.base import WatchEvent

log = logging.getLogger(__name__)

# Own status writes remembered until their watch event arrives; a bound against a lost event.
_OWN_WRITES_KEPT = 10_000
# After a lost status write (another writer got there first), when to look at the object again.
CONFLICT_RETRY_SECONDS = 0.05
# A failing reconcile is retried after 1 s, doubling up to this, as client-go's rate-limited queue.
_MAX_RETRY_SECONDS = 60.0
# The same error on the same object is an event at most this often (the log has every one).
_ERROR_EVENT_EVERY = 60.0


@dataclass(frozen=True, order=True)
class Key:
    """Identifies one object a reconciler owns."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def key_of(obj: dict) -> Key:
    meta = obj["metadata"]
    return Key(obj["kind"], meta.get("namespace", ""), meta["name"])


def owner_key(obj: dict, kinds: Iterable[str]) -> Key | None:
    """The key of the controlling owner of ``obj`` when its kind is one of ``kinds``."""
    wanted = set(kinds)
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in wanted:
            return Key(ref["kind"], obj["metadata"].get("namespace", ""), ref["name"])
    return None


def is_being_deleted(obj: dict) -> bool:
    """Whether ``obj`` waits for its deletion to finish (finalizers, foreground or orphan deletion).

    A controller leaves such an object alone, as Kubernetes' controllers do: recreating the pods the
    garbage collector removes would keep a foreground deletion from ever finishing.
    """
    return bool(obj["metadata"].get("deletionTimestamp"))


class Reconciler(ABC):
    """One reconcile loop. ``kinds`` are the primary kinds; ``watches`` what wakes it."""

    name: str = "reconciler"
    kinds: tuple[str, ...] = ()
    watches: tuple[str, ...] = ()
    every_kind: bool = False  # wakes for changes of any kind, those registered later too

    def __init__(self, store: Store) -> None:
        self.store = store
        self.wake: Callable[[Key], None] = lambda key: None  # set by the manager: queue a key now
        self._own_writes: set[tuple[Key, str]] = set()

    def write_status(self, obj: dict) -> dict:
        """Store ``obj``'s status and return the stored object.

        The watch event of this write does not queue the object again: the pass that wrote it has
        already acted on everything it read, and a pass per own write would double the work.
        """
        stored = self.store.update_status(obj)
        if stored["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            self._remember(stored)
        return stored

    def create_counted(self, obj: dict) -> dict:
        """Create ``obj``, an object of a kind this reconciler watches, and return it as stored.

        Its ADDED event does not queue this reconciler: the pass that created it counts it in the
        status it writes (an experiment its new trials), so a pass for the event would find nothing to do.
        """
        stored = self.store.create(obj)
        self._remember(stored)
        return stored

    def _remember(self, stored: dict) -> None:
        if len(self._own_writes) > _OWN_WRITES_KEPT:
            self._own_writes.clear()  # events that never came (a relist); forgetting them is safe
        self._own_writes.add((key_of(stored), stored["metadata"]["resourceVersion"]))

    def settle_status(self, obj: dict, status: dict, before: dict, requeue: float | None) -> float | None:
        """End a pass: store ``status`` on ``obj`` when it differs from ``before``, then requeue as
        the pass asked. A conflict records nothing and looks again shortly, from fresh state; an
        object deleted meanwhile needs nothing more (its children are being collected).
        """
        if status == before:
            return requeue
        obj["status"] = status
        try:
            # ``obj`` is then as stored, for what the pass does after its write.
            obj["metadata"]["resourceVersion"] = self.write_status(obj)["metadata"]["resourceVersion"]
        except Conflict:
            return CONFLICT_RETRY_SECONDS
        except NotFound:
            return None
        return requeue

    def wrote(self, obj: dict) -> bool:
        """Whether this change is this reconciler's own: a status write of a primary object, or an
        object it made with :meth:`create_counted`."""
        marker = (key_of(obj), obj["metadata"].get("resourceVersion"))
        if marker in self._own_writes:
            self._own_writes.discard(marker)
            return True
        return False

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        """Map a change of ``obj`` to the primary keys that must be reconciled."""
        if event_kind in self.kinds:
            return [key_of(obj)]
        owner = owner_key(obj, self.kinds)
        return [owner] if owner else []

    def keys_for_event(self, event: WatchEvent) -> Iterable[Key]:
        """Map a watch event to the keys to reconcile; by default by the changed object alone."""
        return self.keys_for(event.object["kind"], event.object)

    def initial_keys(self) -> Iterable[Key]:
        for kind in self.kinds:
            for obj in self.store.list(kind):
                yield key_of(obj)

    @abstractmethod
    def reconcile(self, key: Key) -> float | None:
        """Bring ``key`` closer to its desired state; return seconds until a requeue, if any."""


class _Queue:
    """A de-duplicating work queue with delayed adds, as client-go's rate-limited queue."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: list[Key] = []
        self._queued: set[Key] = set()
        self._delayed: list[tuple[float, Key]] = []
        # Each key's one pending delayed add (its earliest), as client-go's delaying queue keeps it:
        # without it every resync and event that requeues a periodic key would start one more chain.
        self._due: dict[Key, float] = {}
        self._processing: set[Key] = set()
        self._dirty_while_processing: set[Key] = set()

    def add(self, key: Key, after: float = 0.0) -> None:
        with self._cond:
            if after > 0:
                due = time.monotonic() + after
                if self._due.get(key, float("inf")) <= due:
                    return  # already due as soon
                self._due[key] = due
                heapq.heappush(self._delayed, (due, key))
            elif key in self._processing:
                self._dirty_while_processing.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
            self._cond.notify()

    def __len__(self) -> int:
        """Keys ready for a worker (client-go's workqueue depth; delayed retries not counted)."""
        with self._cond:
            return len(self._ready)

    def get(self, stop: threading.Event) -> Key | None:
        with self._cond:
            while not stop.is_set():
                now = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now:
                    due, key = heapq.heappop(self._delayed)
                    if self._due.get(key) != due:
                        continue  # replaced by an earlier add of the same key
                    del self._due[key]
                    if key not in self._queued and key not in self._processing:
                        self._queued.add(key)
                        self._ready.append(key)
                    elif key in self._processing:
                        self._dirty_while_processing.add(key)
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                wait = self._delayed[0][0] - now if self._delayed else 0.5
                self._cond.wait(timeout=min(max(wait, 0.001), 0.5))
            return None

    def done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty_while_processing:
                self._dirty_while_processing.discard(key)
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()


class ControllerManager:
    """Runs reconcilers: one store watch feeding one queue per reconciler."""

    def __init__(self, store: Store, reconcilers: list[Reconciler], resync_seconds: float = 30.0) -> None:
        self.store = store
        self.reconcilers = reconcilers
        self.resync_seconds = resync_seconds
        self._queues = {r.name: _Queue() for r in reconcilers}
        for r in reconcilers:
            r.wake = lambda key, r=r: self.enqueue(r, key)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # (reconciler, key) -> (failures in a row, when the last event was recorded, its message)
        self._failing: dict[tuple[str, Key], tuple[int, float, str]] = {}
        self._failing_lock = threading.Lock()
        # Off the global registry: each control plane (tests run several per process) has its own.
        self.reconcile_seconds = Histogram("controller_runtime_reconcile_time_seconds",
                                           "Length of time per reconciliation per controller.", ["controller"],
                                           registry=None)

    def queue_depths(self) -> dict[str, int]:
        """Each reconciler's keys waiting for it, as controller-runtime's ``workqueue_depth``."""
        return {name: len(queue) for name, queue in self._queues.items()}

    def enqueue(self, reconciler: Reconciler, key: Key, after: float = 0.0) -> None:
        self._queues[reconciler.name].add(key, after)

    def start(self) -> None:
        since = self.store.current_revision()
        for r in self.reconcilers:
            for key in r.initial_keys():
                self.enqueue(r, key)
        watch = threading.Thread(target=self._watch_loop, args=(since,), name="watch", daemon=True)
        watch.start()
        self._threads.append(watch)
        for r in self.reconcilers:
            t = threading.Thread(target=self._work_loop, args=(r,), name=f"reconcile-{r.name}", daemon=True)
            t.start()
            self._threads.append(t)
        resync = threading.Thread(target=self._resync_loop, name="resync", daemon=True)
        resync.start()
        self._threads.append(resync)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=timeout)

    def _watch_loop(self, since: int) -> None:
        kinds: set[str] = set()
        for r in self.reconcilers:
            kinds.update(r.kinds)
            kinds.update(r.watches)
        watched = None if any(r.every_kind for r in self.reconcilers) else kinds
        while not self._stop.is_set() and not self.store.closed:
            try:
                for event in self.store.watch(kinds=watched, since=since, stop=self._stop, timeout=1.0):
                    since = event.revision
                    for r in self.reconcilers:
                        kind = event.object["kind"]
                        if kind in r.kinds or kind in r.watches:
                            if event.type != "DELETED" and r.wrote(event.object):
                                continue
                            for key in r.keys_for_event(event):
                                self.enqueue(r, key)
            except Exception:  # an expired revision or a transient store error: relist everything
                log.exception("watch failed; relisting")
                since = self.store.current_revision()
                for r in self.reconcilers:
                    for key in r.initial_keys():
                        self.enqueue(r, key)
                self._stop.wait(0.5)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.resync_seconds):
            for r in self.reconcilers:
                for key in r.initial_keys():
                    self.enqueue(r, key)

    def _work_loop(self, r: Reconciler) -> None:
        queue = self._queues[r.name]
        while not self._stop.is_set():
            key = queue.get(self._stop)
            if key is None:
                return
            began = time.perf_counter()
            try:
                after = r.reconcile(key)
                with self._failing_lock:
                    self._failing.pop((r.name, key), None)
            except AdmissionRefused as exc:  # a pod or object it made was refused: said on its object
                log.info("%s: reconcile %s: %s", r.name, key, exc)
                after = self._failed(r, key, exc)
            except Exception as exc:
                log.exception("%s: reconcile %s failed", r.name, key)
                after = self._failed(r, key, exc)
            finally:
                queue.done(key)
                self.reconcile_seconds.labels(r.name).observe(time.perf_counter() - began)
            if after is not None:
                queue.add(key, after)

    def _failed(self, r: Reconciler, key: Key, exc: Exception) -> float:
        """Tell the object's owner: a Warning event ``ReconcileError`` on it (the same one at most
        once a minute), or ``FailedCreate`` with the API's refusal when admission refused what it
        made (the Job and ReplicaSet controllers' words); return when to retry (1 s, doubling to a
        minute while it keeps failing)."""
        reason = "ReconcileError"
        if isinstance(exc, AdmissionRefused):
            reason, message = "FailedCreate", f"Error creating: {exc}"
        else:
            message = f"{r.name}: {type(exc).__name__}: {exc}" if str(exc) else f"{r.name}: {type(exc).__name__}"
        now = time.monotonic()
        with self._failing_lock:
            failures, last, said = self._failing.get((r.name, key), (0, float("-inf"), ""))
            report = said != message or now - last >= _ERROR_EVENT_EVERY
            self._failing[(r.name, key)] = (failures + 1, now if report else last, message if report else said)
        if report:
            try:
                self.store.record_event(self.store.get(key.kind, key.namespace, key.name), "Warning",
                                        reason, message)
            except NotFound:
                pass  # gone meanwhile: nobody to tell
            except Exception:  # the store itself failing: the log line above is all there can be
                log.exception("%s: could not record the failure of %s", r.name, key)
        return min(2.0 ** failures, _MAX_RETRY_SECONDS)
