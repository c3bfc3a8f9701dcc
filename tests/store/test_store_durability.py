"""Crash safety and concurrency: killed writers, many threads, several processes."""

from __future__ import annotations

import queue
import signal
import sqlite3
import threading
from collections import Counter

from trimaran.store import Conflict, SQLiteStore

_WRITE_LOOP = """
import sys
from trimaran.store import SQLiteStore
store = SQLiteStore(sys.argv[1], keep_revisions=100_000)
i = 0
while True:
    obj = store.create({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": f"cm-{i}", "namespace": "default"},
                        "data": {"payload": "x" * 2000, "i": str(i)}})
    print("created", i, obj["metadata"]["resourceVersion"], flush=True)
    obj["data"]["i"] = f"updated-{i}"
    obj = store.update(obj)
    print("updated", i, obj["metadata"]["resourceVersion"], flush=True)
    i += 1
"""


def test_kill_9_during_writes_loses_nothing_committed(db_path, spawn_python):
    child = spawn_python(_WRITE_LOOP, str(db_path))
    committed: list[tuple[str, int, int]] = []
    for line in child.stdout:
        step, i, revision = line.split()
        committed.append((step, int(i), int(revision)))
        if len(committed) >= 400:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)

    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    store = SQLiteStore(db_path)
    try:
        for step, i, revision in committed:
            stored = store.get("ConfigMap", "default", f"cm-{i}")
            assert stored["data"]["payload"] == "x" * 2000
            if step == "updated":
                assert stored["data"]["i"] == f"updated-{i}"
                assert stored["metadata"]["resourceVersion"] == str(revision)

        # The change log agrees with the objects, and no revision was handed out without a change.
        replay = list(store.watch(since=0, timeout=0))
        head = store.current_revision()
        assert [e.revision for e in replay] == list(range(1, head + 1))
        latest = {e.object["metadata"]["name"]: e.object for e in replay}
        assert latest == {o["metadata"]["name"]: o for o in store.list("ConfigMap")}

        # The store goes on from where it was.
        after = store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}, "data": {}})
        assert after["metadata"]["resourceVersion"] == str(head + 1)
    finally:
        store.close()


def test_threads_incrementing_one_object_lose_no_update(store):
    store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counter"}, "data": {"n": 0}})
    threads, increments = 8, 25
    conflicts = Counter()

    def increment() -> None:
        done = 0
        while done < increments:
            current = store.get("ConfigMap", "", "counter")
            current["data"]["n"] += 1
            try:
                store.update(current)
                done += 1
            except Conflict:
                conflicts["seen"] += 1

    workers = [threading.Thread(target=increment) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert store.get("ConfigMap", "", "counter")["data"]["n"] == threads * increments
    modified = list(store.watch(["ConfigMap"], since=1, timeout=0))
    assert len(modified) == threads * increments
    assert [int(e.object["data"]["n"]) for e in modified] == list(range(1, threads * increments + 1))


def test_threads_writing_and_watching(store):
    writers, per_writer = 6, 40
    since = store.current_revision()
    stop = threading.Event()
    seen: queue.Queue[int] = queue.Queue()

    def watch() -> None:
        for event in store.watch(since=since, stop=stop):
            seen.put(event.revision)

    def write(w: int) -> None:
        for i in range(per_writer):
            obj = store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"w{w}-{i}", "namespace": "d"}})
            obj["status"] = {"phase": "Running"}
            store.update_status(obj)
            if i % 2:
                store.delete("Pod", "d", f"w{w}-{i}")
            store.list("Pod", namespace="d")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        workers = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        expected = writers * per_writer * 2 + writers * per_writer // 2
        assert store.current_revision() == expected
        assert [seen.get(timeout=10) for _ in range(expected)] == list(range(1, expected + 1))
        assert len(store.list("Pod")) == writers * per_writer // 2
    finally:
        stop.set()
        watcher.join(timeout=10)


def test_processes_writing_the_same_file(db_path, spawn_python):
    # The file does not exist yet: the children also race to create the schema.
    code = """
        import sys
        from trimaran.store import SQLiteStore
        store = SQLiteStore(sys.argv[1])
        for i in range(50):
            store.create({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": f"{sys.argv[2]}-{i}", "namespace": "d"}})
        """
    children = [spawn_python(code, str(db_path), f"p{n}") for n in range(3)]
    assert [child.wait(timeout=60) for child in children] == [0, 0, 0]
    with SQLiteStore(db_path) as store:
        assert len(store.list("Pod")) == 150
        assert store.current_revision() == 150
        revisions = sorted(int(o["metadata"]["resourceVersion"]) for o in store.list("Pod"))
        assert revisions == list(range(1, 151))
