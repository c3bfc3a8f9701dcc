"""replicaStatuses as the training operator reports them: only Running pods are active, so a job whose
replicas wait for admission (GPUs, cores) shows 0 active. The reconciler runs against a real store; pod
phases are written there as the kubelet writes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.training.job import TrainingJobReconciler
from trimaran.store import SQLiteStore

KINDS = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch", {"Master": 1, "Worker": 2}),
    "TFJob": ("tfReplicaSpecs", "tensorflow", {"Chief": 1, "Worker": 2}),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "t.db")
    s.ensure_namespace("default")
    yield s
    s.close()


def _job(kind: str) -> dict:
    spec_key, container, replicas = KINDS[kind]
    template = {"spec": {"containers": [{"name": container, "image": "x", "command": ["python", "-c", "pass"],
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    doc = {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "gpus", "namespace": "default"},
           "spec": {spec_key: {rtype: {"replicas": n, "template": template} for rtype, n in replicas.items()}}}
    return validate(doc).object


def _set_phase(store: SQLiteStore, pod: dict, phase: str) -> None:
    store.update_status({**pod, "status": {**(pod.get("status") or {}), "phase": phase}})


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pending_replicas_are_not_active(store: SQLiteStore, kind: str) -> None:
    reconciler = TrainingJobReconciler(store)
    store.create(_job(kind))
    key = Key(kind, "default", "gpus")
    reconciler.reconcile(key)
    reconciler.reconcile(key)
    pods = store.list("Pod", "default")
    assert len(pods) == 3 and {p["status"]["phase"] for p in pods} == {"Pending"}
    statuses = store.get(kind, "default", "gpus")["status"]["replicaStatuses"]
    assert {rtype: s["active"] for rtype, s in statuses.items()} == {rtype: 0 for rtype in KINDS[kind][2]}

    # One replica admitted and started: it alone is active.
    worker0 = next(p for p in pods if p["metadata"]["name"] == "gpus-worker-0")
    _set_phase(store, worker0, "Running")
    reconciler.reconcile(key)
    job = store.get(kind, "default", "gpus")
    assert job["status"]["replicaStatuses"]["Worker"]["active"] == 1
    assert all(s["active"] == 0 for rtype, s in job["status"]["replicaStatuses"].items() if rtype != "Worker")
    assert not any(c["type"] == "Running" and c["status"] == "True" for c in job["status"]["conditions"])
