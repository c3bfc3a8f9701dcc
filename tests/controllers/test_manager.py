"""The reconcile framework with a real store: what wakes a reconciler and what does not."""

from __future__ import annotations

import threading

from tests.helpers import poll
from trimaran.controllers.base import ControllerManager, Key, Reconciler
from trimaran.store import NotFound, SQLiteStore


class CountingReconciler(Reconciler):
    """Writes a status counter each pass, as controllers record what they saw."""

    name = "counting"
    kinds = ("ConfigMap",)

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.passes = 0
        self.lock = threading.Lock()

    def reconcile(self, key: Key) -> float | None:
        with self.lock:
            self.passes += 1
            passes = self.passes
        obj = self.store.get(key.kind, key.namespace, key.name)
        self.write_status({**obj, "status": {"seenPasses": passes}})
        return None


def test_own_status_write_does_not_wake_the_writer_but_others_writes_do(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    reconciler = CountingReconciler(store)
    manager = ControllerManager(store, [reconciler], resync_seconds=3600)
    manager.start()
    try:
        store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
        poll(lambda: (store.get("ConfigMap", "default", "c").get("status") or {}).get("seenPasses") == 1,
             timeout=10, what="the first pass")
        # Without the skip, each pass's own write would queue the next pass forever.
        # Absence can only be observed over a window: watch it for a second.
        settled = store.current_revision()
        window = threading.Event()
        threading.Timer(1.0, window.set).start()
        assert [e.object["status"] for e in store.watch(since=settled, stop=window)] == []
        assert reconciler.passes == 1

        current = store.get("ConfigMap", "default", "c")
        store.update_status({**current, "status": {"seenPasses": 1, "other": "writer"}})
        poll(lambda: reconciler.passes == 2, timeout=10, what="a pass after another writer's status change")
    finally:
        manager.stop()
        store.close()


def test_a_key_has_one_pending_delayed_add_the_earliest() -> None:
    """As client-go's delaying queue: a periodic key requeued again by an event or a resync does not
    start a second chain of passes (they multiplied, one more per resync)."""
    from trimaran.controllers.base import _Queue

    queue = _Queue()
    key = Key("Node", "", "box")
    for after in (5.0, 0.05, 0.1, 10.0):
        queue.add(key, after)
    stop = threading.Event()
    assert queue.get(stop) == key  # at the earliest, 0.05 s
    queue.done(key)
    threading.Timer(0.4, stop.set).start()  # past the later adds, had they been kept
    assert queue.get(stop) is None


class ChildMaker(Reconciler):
    """Makes one Secret per ConfigMap with create_counted, and counts its passes."""

    name = "child-maker"
    kinds = ("ConfigMap",)
    watches = ("Secret",)

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.passes = 0

    def keys_for(self, event_kind: str, obj: dict) -> list[Key]:
        return [Key("ConfigMap", obj["metadata"]["namespace"], obj["metadata"]["name"])]

    def reconcile(self, key: Key) -> float | None:
        self.passes += 1
        try:
            self.store.get("Secret", key.namespace, key.name)
        except NotFound:
            self.create_counted({"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": key.name, "namespace": key.namespace}})
        return None


def test_an_object_made_with_create_counted_does_not_wake_its_maker_but_a_change_of_it_does(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    maker = ChildMaker(store)
    manager = ControllerManager(store, [maker], resync_seconds=3600)
    manager.start()
    try:
        store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
        secret = poll(lambda: store.list("Secret", "default"), timeout=10, what="the secret")[0]
        # Absence can only be observed over a window: a second after the secret was made.
        window = threading.Event()
        threading.Timer(1.0, window.set).start()
        window.wait()
        assert maker.passes == 1
        store.update({**secret, "metadata": {**secret["metadata"], "labels": {"changed": "by-another"}}})
        poll(lambda: maker.passes == 2, timeout=10, what="a pass after another writer changed the secret")
    finally:
        manager.stop()
        store.close()
