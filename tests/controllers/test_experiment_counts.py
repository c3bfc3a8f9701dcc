"""An experiment's pass counts what it did: the trials it creates are pending in the status it writes."""

from __future__ import annotations

from pathlib import Path

from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.tuning import ExperimentReconciler
from trimaran.store import SQLiteStore

JOB = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
    {"name": "main", "image": "x", "command": ["echo", "${trialParameters.x}"]}]}}}}


def test_the_pass_that_creates_trials_counts_them_pending(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace("default")
    store.create(validate({
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "e"},
        "spec": {"objective": {"type": "maximize", "objectiveMetricName": "score"},
                 "algorithm": {"algorithmName": "random"}, "maxTrialCount": 5, "parallelTrialCount": 3,
                 "parameters": [{"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}}],
                 "trialTemplate": {"primaryContainerName": "main", "trialSpec": JOB,
                                   "trialParameters": [{"name": "x", "reference": "x"}]}},
    }).object)
    reconciler = ExperimentReconciler(store)
    reconciler.reconcile(Key("Experiment", "default", "e"))

    trials = sorted(t["metadata"]["name"] for t in store.list("Trial", "default"))
    status = store.get("Experiment", "default", "e")["status"]
    assert len(trials) == 3
    assert (status["trials"], status["trialsPending"], sorted(status["pendingTrialList"])) == (3, 3, trials)
    assert "trialsRunning" not in status and "runningTrialList" not in status
    assert store.get("Suggestion", "default", "e")["status"]["suggestionCount"] == 3
    # What a later pass recounts from the stored trials is the same: it writes nothing.
    revision = store.current_revision()
    reconciler.reconcile(Key("Experiment", "default", "e"))
    assert store.current_revision() == revision
    store.close()
