"""Watch: order, resuming with since, wake-ups within and across processes, compaction."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from trimaran.store import Expired, SQLiteStore, WatchEvent


def summary(events: list[WatchEvent]) -> list[tuple[str, str, int]]:
    return [(e.type, e.object["metadata"]["name"], e.revision) for e in events]


def test_watch_reports_added_modified_deleted_in_order(store, obj):
    since = store.current_revision()
    created = store.create(obj("a"))
    created["spec"]["replicas"] = 2
    store.update(created)
    store.update_status({**created, "status": {"phase": "Running"}, "metadata": {"name": "a", "namespace": "default"}})
    store.delete("PyTorchJob", "default", "a")
    events = list(store.watch(since=since, timeout=0))
    assert summary(events) == [("ADDED", "a", 1), ("MODIFIED", "a", 2), ("MODIFIED", "a", 3), ("DELETED", "a", 4)]
    assert events[1].object["spec"]["replicas"] == 2
    assert events[2].object["status"] == {"phase": "Running"}
    assert events[3].object["metadata"]["resourceVersion"] == "4"
    assert [e.object["metadata"]["resourceVersion"] for e in events] == ["1", "2", "3", "4"]


def test_watch_without_since_starts_at_the_call(store, obj):
    store.create(obj("before"))
    watch = store.watch(timeout=0)
    store.create(obj("after"))  # written before the first next(): still reported
    assert summary(list(watch)) == [("ADDED", "after", 2)]


def test_watch_filters_kinds(store, obj):
    store.create(obj("job"))
    store.create(obj("pod", kind="Pod"))
    store.create(obj("cm", kind="ConfigMap"))
    assert [e.object["kind"] for e in store.watch(["Pod", "ConfigMap"], since=0, timeout=0)] == ["Pod", "ConfigMap"]
    assert [e.object["kind"] for e in store.watch("Pod", since=0, timeout=0)] == ["Pod"]
    assert list(store.watch([], since=0, timeout=0)) == []


def test_noop_writes_make_no_events(store, obj):
    created = store.create(obj("a"))
    since = store.current_revision()
    store.update(created)
    store.update_status(created)
    assert list(store.watch(since=since, timeout=0)) == []


def test_watch_replays_after_restart(db_path, obj):
    first = SQLiteStore(db_path)
    for name in "abc":
        first.create(obj(name))
    seen = next(iter(first.watch(since=0, timeout=0)))
    assert seen.revision == 1
    first.delete("PyTorchJob", "default", "b")
    first.close()

    restarted = SQLiteStore(db_path)
    try:
        assert summary(list(restarted.watch(since=seen.revision, timeout=0))) == [
            ("ADDED", "b", 2),
            ("ADDED", "c", 3),
            ("DELETED", "b", 4),
        ]
    finally:
        restarted.close()


def test_long_replay_spans_several_batches(store, obj):
    for i in range(1200):
        store.create(obj(f"j{i:04d}", kind="Pod" if i % 3 else "PyTorchJob"))
    revisions = [e.revision for e in store.watch(["Pod"], since=0, timeout=0)]
    assert len(revisions) == 800
    assert revisions == sorted(revisions)


def _watch_in_thread(store: SQLiteStore, since: int, stop: threading.Event) -> queue.Queue:
    received: queue.Queue = queue.Queue()

    def run() -> None:
        for event in store.watch(since=since, stop=stop):
            received.put((event, time.monotonic()))

    threading.Thread(target=run, daemon=True).start()
    return received


def test_watcher_thread_is_woken_at_once_by_a_write(db_path, obj):
    # A poll interval far longer than the deadline: only the in-process wake-up can deliver in time.
    store = SQLiteStore(db_path, poll_interval=60)
    stop = threading.Event()
    try:
        received = _watch_in_thread(store, store.current_revision(), stop)
        store.create(obj("warmup"))
        assert received.get(timeout=5)[0].object["metadata"]["name"] == "warmup"
        for name in ("a", "b", "c"):
            written = time.monotonic()
            store.create(obj(name))
            event, arrived = received.get(timeout=5)
            assert event.object["metadata"]["name"] == name
            assert arrived - written < 1.0
    finally:
        stop.set()
        store.close()


def test_write_from_another_process_reaches_a_watcher(store, db_path, run_python):
    watch = store.watch(["Pod"], timeout=15)
    run_python(
        """
        import sys
        from trimaran.store import SQLiteStore
        with SQLiteStore(sys.argv[1]) as other:
            other.create({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "from-child", "namespace": "default"}, "spec": {}})
        """,
        str(db_path),
    )
    event = next(watch)
    assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "from-child")


def test_watcher_blocked_in_wait_notices_another_process(store, db_path, spawn_python):
    # Starting the child takes far longer than the watcher needs to settle into its wait,
    # so these writes can only be noticed by polling the change log.
    stop = threading.Event()
    received = _watch_in_thread(store, store.current_revision(), stop)
    try:
        child = spawn_python(
            """
            import sys
            from trimaran.store import SQLiteStore
            with SQLiteStore(sys.argv[1]) as other:
                for i in range(3):
                    other.create({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {}})
            """,
            str(db_path),
        )
        names = [received.get(timeout=15)[0].object["metadata"]["name"] for _ in range(3)]
        assert names == ["p0", "p1", "p2"]
        assert child.wait(timeout=15) == 0
    finally:
        stop.set()


def test_stop_and_timeout_end_a_watch(store, obj):
    stop = threading.Event()
    watch = store.watch(stop=stop)
    store.create(obj("a"))
    assert next(watch).object["metadata"]["name"] == "a"
    stop.set()
    assert list(watch) == []

    started = time.monotonic()
    assert list(store.watch(timeout=0.3)) == []
    assert time.monotonic() - started >= 0.3


def test_close_ends_open_watches(db_path):
    store = SQLiteStore(db_path, poll_interval=60)
    ended = threading.Event()

    def run() -> None:
        for _ in store.watch():
            pass
        ended.set()

    threading.Thread(target=run, daemon=True).start()
    store.close()
    assert ended.wait(timeout=5)


def test_compacted_revision_is_expired(db_path, obj):
    store = SQLiteStore(db_path, keep_revisions=10)
    try:
        for i in range(25):
            store.create(obj(f"j{i}"))
        # Writes compact on their own, in steps of a tenth of what is kept.
        with pytest.raises(Expired, match="too old resource version: 3") as caught:
            next(store.watch(since=3, timeout=0))
        assert caught.value.code == 410
        assert store.compact() == 15
        with pytest.raises(Expired):
            next(store.watch(since=14, timeout=0))
        assert [e.revision for e in store.watch(since=15, timeout=0)] == list(range(16, 26))
        # A store emptied of objects still knows its revision; a watch from now works.
        assert store.current_revision() == 25
        assert list(store.watch(timeout=0)) == []
    finally:
        store.close()


def test_watcher_that_falls_behind_compaction_is_expired(db_path, obj):
    store = SQLiteStore(db_path, keep_revisions=10)
    try:
        watch = store.watch(since=0)
        store.create(obj("first"))
        assert next(watch).revision == 1
        for i in range(30):
            store.create(obj(f"j{i}"))
        with pytest.raises(Expired):
            for _ in watch:
                pass
    finally:
        store.close()


def test_own_writes_around_another_process_write_arrive_in_order(db_path, obj, run_python):
    # This process's writes are served to its watchers from memory; another process's write in
    # between leaves a gap there, which the watcher must fill from the change log.
    store = SQLiteStore(db_path, poll_interval=60)
    stop = threading.Event()
    try:
        received = _watch_in_thread(store, store.current_revision(), stop)
        store.create(obj("mine-1"))
        run_python(
            """
            import sys
            from trimaran.store import SQLiteStore
            with SQLiteStore(sys.argv[1]) as other:
                other.create({"apiVersion": "v1", "kind": "PyTorchJob",
                              "metadata": {"name": "theirs", "namespace": "default"}, "spec": {}})
            """,
            str(db_path),
        )
        store.create(obj("mine-2"))
        names = [received.get(timeout=10)[0].object["metadata"]["name"] for _ in range(3)]
        assert names == ["mine-1", "theirs", "mine-2"]
    finally:
        stop.set()
        store.close()
