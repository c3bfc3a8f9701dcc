"""``kfp.Client`` end to end on a real control plane: ``create_run_from_pipeline_func`` then
``wait_for_run_completion`` (a dataset passed between two lightweight steps), and the
train-tune-serve example (a PyTorchJob, a Katib Experiment and an InferenceService made from inside
pipeline steps) run small."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import REPO
from tests.pipelines.kfp_corpus import kfp_python
from tests.pipelines.test_kfp_client import CONNECT
from tests.server.sdk import run_client
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

EXAMPLE = REPO / "examples" / "pipeline-train-tune-serve"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "kfp-e2e") as handle:
        yield handle


def _run(plane: ControlPlaneHandle, uid: str) -> dict:
    api = plane.client()
    try:
        return next(r for r in api.list("Run", "default") if r["metadata"]["uid"] == uid)
    finally:
        api.close()


FUNC = CONNECT + r'''
from kfp import dsl


@dsl.component
def make(n: int, data: dsl.Output[dsl.Dataset]):
    with open(data.path, "w") as fh:
        fh.write(",".join(str(i) for i in range(n)))


@dsl.component
def total(data: dsl.Input[dsl.Dataset]) -> int:
    with open(data.path) as fh:
        return sum(int(v) for v in fh.read().split(","))


@dsl.pipeline(name="summing")
def summing(n: int = 3) -> int:
    return total(data=make(n=n).outputs["data"]).output


run = client.create_run_from_pipeline_func(summing, arguments={"n": 5}, experiment_name="e2e")
done = client.wait_for_run_completion(run.run_id, timeout=300, sleep_duration=1)
tasks = {t.display_name: t for t in done.run_details.task_details}
print(json.dumps({"run_id": run.run_id, "state": done.state, "finished": done.finished_at is not None,
                  "tasks": {name: [t.state, bool(t.pod_name), sorted(t.outputs or {})] for name, t in tasks.items()},
                  "data": tasks["make"].outputs["data"].artifact_ids}))
'''


def test_create_run_from_pipeline_func_then_wait_for_completion(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(kfp_python(), plane, FUNC, tmp_path)
    assert out["state"] == "SUCCEEDED" and out["finished"]
    assert out["tasks"] == {"make": ["SUCCEEDED", True, ["data"]], "total": ["SUCCEEDED", True, []]}
    assert Path(out["data"][0]).read_text() == "0,1,2,3,4"  # the artifact's URI is a local path
    steps = {t["id"]: t for t in _run(plane, out["run_id"])["status"]["tasks"]}
    assert steps["total"]["outputs"]["parameters"] == {"Output": 10}


EXAMPLE_RUN = CONNECT + r'''
import runpy
from kfp import compiler

example = sys.argv[1]
# The committed YAML is what pipeline.py compiles to.
module = runpy.run_path(f"{example}/pipeline.py")
fresh = "fresh-pipeline.yaml"  # in the script's own directory
compiler.Compiler().compile(module["train_tune_serve"], fresh)
same = list(yaml.safe_load_all(open(fresh))) == list(yaml.safe_load_all(open(f"{example}/pipeline.yaml")))
run = client.create_run_from_pipeline_package(f"{example}/pipeline.yaml", arguments={"trials": 2, "prefix": "tts"})
done = client.wait_for_run_completion(run.run_id, timeout=900, sleep_duration=1)
print(json.dumps({"same": same, "run_id": run.run_id, "state": done.state, "error": str(done.error),
                  "tasks": {t.display_name: t.state for t in done.run_details.task_details}}))
'''


@pytest.mark.heavy  # a PyTorchJob, two Katib trials and a model server behind five pipeline steps
def test_train_tune_serve_example_runs_small(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(kfp_python(), plane, EXAMPLE_RUN, tmp_path, str(EXAMPLE), timeout=900)
    assert out["same"], "examples/pipeline-train-tune-serve/pipeline.yaml is stale: run pipeline.py to compile it"
    assert out["state"] == "SUCCEEDED", out
    assert out["tasks"] == dict.fromkeys(("prepare", "train", "tune", "serve", "query"), "SUCCEEDED")
    outputs = {t["id"]: (t.get("outputs") or {}).get("parameters") or {}
               for t in _run(plane, out["run_id"])["status"]["tasks"]}
    assert outputs["train"]["Output"] > 0.9  # the PyTorchJob's baseline accuracy, read from its log
    assert outputs["query"]["Output"] > 0.9  # the served best trial on held-out digits
    api = plane.client()
    try:
        best = api.get("Trial", "default", outputs["tune"]["Output"])
        service = api.get("InferenceService", "default", "tts")
    finally:
        api.close()
    assert best["metadata"]["labels"]["katib.kubeflow.org/experiment"] == "tts-tune"
    assert service["spec"]["predictor"]["model"]["storageUri"] == f"pvc://digits-pipeline/{best['metadata']['name']}"
