"""The batch Job controller creates pods in bounded batches, as the job controller does."""

from __future__ import annotations

from pathlib import Path

from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.batch import MAX_POD_CREATES_PER_SYNC, BatchJobReconciler
from trimaran.store import SQLiteStore


def test_a_wide_job_gets_its_pods_in_batches(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    parallelism = MAX_POD_CREATES_PER_SYNC + 20
    job = validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wide"},
                    "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                             "template": {"spec": {"restartPolicy": "Never", "containers": [
                                 {"name": "main", "image": "python", "command": ["true"]}]}}}}).object
    store.create(job)
    reconciler = BatchJobReconciler(store)
    key = Key("Job", "default", "wide")
    assert reconciler.reconcile(key) == 0.0  # more to make: again at once
    assert len(store.list("Pod", "default")) == MAX_POD_CREATES_PER_SYNC
    # As the job controller's: the pods a pass made are active in the status it writes.
    assert store.get("Job", "default", "wide")["status"]["active"] == MAX_POD_CREATES_PER_SYNC
    reconciler.reconcile(key)
    pods = store.list("Pod", "default")
    indexes = sorted(int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for p in pods)
    assert indexes == list(range(parallelism))
    assert store.get("Job", "default", "wide")["status"]["active"] == parallelism
