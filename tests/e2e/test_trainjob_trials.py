"""Katib trials of kind TrainJob applied as manifests: 2-node ``torch-distributed`` trials whose
metrics come from node 0 only (Katib's primary pod labels for the kind), by stdout or by a metrics
file on the volume the trial's runtime patch mounts there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ControlPlaneHandle
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

# Node 1 reports a score 10 higher than node 0: a trial that read it would show.
SCORE = "import os, sys; print(f'score={float(sys.argv[1]) + 10 * int(os.environ[\"PET_NODE_RANK\"])}')"


def experiment(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    trial_spec = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "500m"}}, "command": command}}}
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": name}, "spec": {
        "objective": {"type": "maximize", "objectiveMetricName": "score"},
        "algorithm": {"algorithmName": "grid"}, "maxTrialCount": 2, "parallelTrialCount": 2,
        "parameters": [{"name": "level", "parameterType": "discrete", "feasibleSpace": {"list": ["1", "3"]}}],
        "trialTemplate": {"primaryContainerName": "node", "retain": True,
                          "trialParameters": [{"name": "level", "reference": "level"}], "trialSpec": trial_spec},
        **spec}}


def run(plane: ControlPlaneHandle, tmp_path: Path, obj: dict[str, Any]) -> list[float]:
    """The experiment's trials' scores, once it has succeeded."""
    name = obj["metadata"]["name"]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(obj))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", f"experiment/{name}", "--for=condition=Succeeded", "--timeout=120s")
    trials = plane.client().list("Trial", "default", f"katib.kubeflow.org/experiment={name}")
    for trial in trials:
        # The TrainJob is the trial's, named after it, and ended Complete.
        job = plane.get("trainjob", trial["metadata"]["name"])
        assert job["metadata"]["ownerReferences"][0]["uid"] == trial["metadata"]["uid"]
        assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"] == ["Complete"]
    return sorted(float(next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")["latest"])
                  for t in trials)


def test_trainjob_trials_read_node_0s_stdout(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    assert run(plane, tmp_path, experiment("tjout", ["python", "-c", SCORE, "${trialParameters.level}"])) == [1, 3]


def test_trainjob_trials_read_node_0s_metrics_file(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    # Node 0's file is on the emptyDir the trial's runtime patch mounts; stdout says something else.
    write = ("import os, sys; rank = int(os.environ['PET_NODE_RANK']); print('score=-1'); "
             "open('/var/log/katib/metrics.log', 'w').write(f'score={float(sys.argv[1]) + 10 * rank}')")
    obj = experiment("tjfile", ["python", "-c", write, "${trialParameters.level}"], metricsCollectorSpec={
        "collector": {"kind": "File"},
        "source": {"fileSystemPath": {"path": "/var/log/katib/metrics.log", "kind": "File"}}})
    assert run(plane, tmp_path, obj) == [1, 3]
