"""`trimaran trials` says why: a trial whose pods cannot be scheduled says so while it waits (and its job
counts no replica active), and a failed trial's message keeps its cause, not only its first line."""

from __future__ import annotations

import csv
import io
import json

from tests.helpers import poll


def _experiment(tmp_path, name: str, trial_spec: dict, primary: str) -> str:
    exp = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": name}, "spec": {
        "objective": {"type": "maximize", "objectiveMetricName": "score"}, "algorithm": {"algorithmName": "grid"},
        "parallelTrialCount": 2, "maxTrialCount": 2,
        "parameters": [{"name": "level", "parameterType": "categorical", "feasibleSpace": {"list": ["0.7", "0.2"]}}],
        "trialTemplate": {"primaryContainerName": primary,
                          "trialParameters": [{"name": "level", "reference": "level"}], "trialSpec": trial_spec}}}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(exp))
    return str(path)


def test_a_trial_that_cannot_be_scheduled_says_why(plane_with, tmp_path):
    plane = plane_with(TRIMARAN_NODE_CPU="2")
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "x", "command": ["python", "-c", "print('score=1')", "${trialParameters.level}"],
         "resources": {"requests": {"cpu": "8"}}}]}}}
    trial_spec = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                  "spec": {"pytorchReplicaSpecs": {"Master": replica}}}
    plane.cli("apply", "-f", _experiment(tmp_path, "big", trial_spec, "pytorch"))

    def waiting() -> list[dict]:
        rows = json.loads(plane.cli("trials", "big", "-o", "json").stdout)
        return rows if len(rows) == 2 and all("cannot be scheduled" in (r["message"] or "") for r in rows) else []

    rows = poll(waiting, timeout=60, interval=0.5, what="both trials to say they cannot be scheduled")
    assert {r["status"] for r in rows} == {"Running"}  # as in Katib: the job exists and has not ended
    assert all("0/1 nodes are available" in r["message"] and "cpu" in r["message"] for r in rows)
    table = plane.cli("trials", "big").stdout
    assert "cannot be scheduled" in table
    trial = plane.get("trial", rows[0]["trial"])
    running = next(c for c in trial["status"]["conditions"] if c["type"] == "Running")
    assert running["reason"] == "TrialPending" and running["message"] == rows[0]["message"]
    job = plane.get("pytorchjob", rows[0]["trial"])
    assert job["status"]["replicaStatuses"]["Master"]["active"] == 0, "a replica waiting for cores is not active"


def test_a_failed_trial_keeps_its_cause(plane, tmp_path):
    script = "import sys\nif float(sys.argv[1]) < 0.5: sys.exit('ValueError: level too low')\nprint('score=0.7')"
    trial_spec = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "x", "command": ["python", "-c", script, "${trialParameters.level}"]}]}}}}
    plane.cli("apply", "-f", _experiment(tmp_path, "cause", trial_spec, "main"))
    plane.cli("wait", "experiment/cause", "--for=condition=Succeeded", "--timeout=60s")

    rows = {r["status"]: r for r in json.loads(plane.cli("trials", "cause", "-o", "json").stdout)}
    assert set(rows) == {"Succeeded", "Failed"} and rows["Succeeded"]["message"] is None
    failed = rows["Failed"]["message"]
    assert "last lines:" in failed and failed.rstrip().endswith("ValueError: level too low"), failed
    csv_rows = {r["status"]: r for r in csv.DictReader(io.StringIO(plane.cli("trials", "cause", "-o", "csv").stdout))}
    assert csv_rows["Failed"]["message"] == failed, "csv carries the whole message, log tail included"
    table = plane.cli("trials", "cause").stdout
    line = next(ln for ln in table.splitlines() if "Failed" in ln)
    assert "last log line: ValueError: level too low" in line
