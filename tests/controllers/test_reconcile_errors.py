"""What a reconcile that cannot succeed leaves on the object, with a real store and manager: a
Warning event a user sees in ``describe`` (not only a line in the server's log), and for a job
the node can never run, the reason, before anything is allocated."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.api import validate
from trimaran.controllers.base import ControllerManager, Key, Reconciler
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.training import TrainingJobReconciler
from trimaran.store import SQLiteStore


class BrokenReconciler(Reconciler):
    """Fails on every pass, as a reconciler with a bug or an unmet assumption does."""

    name = "broken"
    kinds = ("ConfigMap",)

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.passes = 0
        self.lock = threading.Lock()

    def reconcile(self, key: Key) -> float | None:
        with self.lock:
            self.passes += 1
        raise KeyError("spec.missing")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "t.db")
    yield store
    store.close()


def test_a_failing_reconcile_is_a_warning_event_on_the_object_rate_limited(store: SQLiteStore) -> None:
    broken = BrokenReconciler(store)
    manager = ControllerManager(store, [broken], resync_seconds=3600)
    manager.start()
    try:
        store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
        poll(lambda: broken.passes >= 2, timeout=15, what="a retry after the failure")
        events = store.list_events("ConfigMap", "default", "c")
        assert [(e["type"], e["reason"], e["message"]) for e in events] == [
            ("Warning", "ReconcileError", "broken: KeyError: 'spec.missing'")]
        # Retried, but the same error is not written again within the minute.
        assert events[0]["count"] == 1
    finally:
        manager.stop()


def test_a_job_with_more_replicas_than_the_node_can_ever_run_says_so(store: SQLiteStore) -> None:
    job = validate({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "huge", "namespace": "default"},
                    "spec": {"pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": {"spec": {"containers": [
                            {"name": "pytorch", "image": "python:3.11", "command": ["true"]}]}}},
                        "Worker": {"replicas": 999_999, "template": {"spec": {"containers": [
                            {"name": "pytorch", "image": "python:3.11", "command": ["true"]}]}}}}}}).object
    manager = ControllerManager(store, [TrainingJobReconciler(store, PortAllocator())], resync_seconds=3600)
    manager.start()
    try:
        store.create(job)
        found = poll(lambda: [e for e in store.list_events("PyTorchJob", "default", "huge")
                              if e["reason"] == "TooManyReplicas"], timeout=15, what="the TooManyReplicas event")
        assert found[0]["type"] == "Warning"
        assert found[0]["message"] == (f"1000000 replicas need 1000000 loopback ports and processes; this node "
                                       f"runs at most {PortAllocator.capacity} replicas at once")
        stored = store.get("PyTorchJob", "default", "huge")
        assert "trimaran.io/replica-ports" not in (stored["metadata"].get("annotations") or {})
        assert store.list("Pod", "default") == []
        assert not [e for e in store.list_events("PyTorchJob", "default", "huge") if e["reason"] == "ReconcileError"]
    finally:
        manager.stop()
