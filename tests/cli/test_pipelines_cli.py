"""Pipeline runs from the command line against a real control plane: ``trimaran run`` with typed
``-p`` values and its refusals, ``get runs``, ``describe run``, ``logs run/NAME --task``, ``run
--wait`` and ``delete run``.

The pipelines are the corpus' (compiled by the real kfp SDK). Where a test needs a run's tasks in a
given state, it writes the run's status through the API's status subresource as the Run controller
writes it, and the task's pod is a real pod with the run and task labels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import REPO, poll
from tests.pipelines.kfp_corpus import compiled
from trimaran.cli.client import APIError
from trimaran.cli.pipelines import ParameterError, parse_parameters, task_pod

STATUS_PATH = "/apis/pipelines.trimaran.io/v1/namespaces/default/runs/{}/status"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "pipelines-cli") as handle:
        yield handle


def _write_status(plane: ControlPlaneHandle, run: str, status: dict) -> None:
    plane.client().request("PATCH", STATUS_PATH.format(run), {"status": status},
                           content_type="application/merge-patch+json").read()


def _pod(plane: ControlPlaneHandle, name: str, run: str, task: str, text: str) -> None:
    client = plane.client()
    owner = {"apiVersion": "pipelines.trimaran.io/v1", "kind": "Run", "name": run, "controller": True,
             "uid": client.get("Run", "default", run)["metadata"]["uid"]}
    client.create("Pod", "default", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"pipelines.trimaran.io/run": run, "pipelines.trimaran.io/task": task},
                     "ownerReferences": [owner]},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "x", "command": ["sh", "-c", f"echo {text}"]}]}})
    poll(lambda: (client.get("Pod", "default", name).get("status") or {}).get("phase") == "Succeeded",
         timeout=60, what=f"pod {name} to finish")


def test_run_types_parameters_as_the_pipeline_declares(plane):
    pipeline = compiled("parameters")
    out = plane.cli("run", "-f", str(pipeline.path), "--name", "typed", "--experiment", "cli-exp", "-p", "count=7",
                    "-p", "ratio=2", "-p", "flag=false", "-p", 'items=["x","y"]', "-p", 'config={"k": 1}',
                    "-p", "text=a=b").stdout
    assert out.strip() == "run/typed created"
    run = plane.get("run", "typed")
    assert run["spec"]["parameters"] == {"count": 7, "ratio": 2.0, "flag": False, "items": ["x", "y"],
                                         "config": {"k": 1}, "text": "a=b"}
    assert run["spec"]["experiment"] == "cli-exp" and run["spec"]["enableCaching"] is True
    assert plane.get("pipelineexperiment", "cli-exp")["spec"]["displayName"] == "cli-exp", "made as kfp.Client does"
    listed = plane.cli("get", "runs").stdout
    assert any(line.split()[0] == "typed" for line in listed.splitlines()[1:]), listed


def test_run_refuses_parameters_that_do_not_fit(plane):
    spec = compiled("parameters").pipeline_spec
    for args, said in [(["flag=yes"], "'flag' is BOOLEAN: 'yes' is not true or false"),
                       (["items={}"], "'items' is LIST: '{}' is not a JSON list"),
                       (["nope=1"], "the pipeline has no input 'nope' (it takes: config, count, flag, items, ratio, "
                                    "text)"),
                       (["count"], "-p count: expected key=value")]:
        with pytest.raises(ParameterError) as refused:
            parse_parameters(spec, args)
        assert said in str(refused.value)
    proc = plane.cli("run", "-f", str(compiled("parameters").path), "--name", "refused", "-p", "count=abc",
                     check=False)
    said = "-p count=abc: the pipeline's input 'count' is NUMBER_INTEGER: 'abc' is not an integer"
    assert proc.returncode == 1 and said in " ".join(proc.stderr.split()), proc.stderr


def test_run_refuses_what_the_api_refuses_and_stores_nothing(plane, tmp_path):
    proc = plane.cli("run", "-f", str(compiled("exit_handler").path), "--name", "missing", check=False)
    assert proc.returncode == 1 and "spec.parameters.marker_dir: Required value" in proc.stderr, proc.stderr
    not_a_pipeline = tmp_path / "job.yaml"
    not_a_pipeline.write_text("apiVersion: batch/v1\nkind: Job\n")
    proc = plane.cli("run", "-f", str(not_a_pipeline), "--name", "missing", check=False)
    assert proc.returncode == 1 and "spec.pipelineSpec" in proc.stderr and "not a compiled pipeline" in proc.stderr
    assert not [r for r in plane.client().list("Run", "default") if r["metadata"]["name"] == "missing"]


def test_describe_and_logs_name_a_task_by_name_or_loop_iteration_id(plane):
    plane.cli("run", "-f", str(compiled("loops").path), "--name", "looped")
    _pod(plane, "looped-make-list", "looped", "make-list", "listing 3 items")
    _pod(plane, "looped-square-1", "looped", "for-loop-2.iteration-1.square", "squaring 2")
    iteration = {"type": "iteration", "state": "SUCCEEDED", "parent": "for-loop-2", "name": "for-loop-2"}
    _write_status(plane, "looped", {"state": "RUNNING", "startedAt": "2026-01-01T00:00:00Z", "tasks": [
        {"id": "make-list", "name": "make-list", "state": "SUCCEEDED", "podName": "looped-make-list", "attempts": 1,
         "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:03Z"},
        {"id": "for-loop-2", "name": "for-loop-2", "type": "loop", "state": "RUNNING"},
        {**iteration, "id": "for-loop-2.iteration-0", "iteration": 0},
        {**iteration, "id": "for-loop-2.iteration-1", "iteration": 1},
        {"id": "for-loop-2.iteration-0.square", "name": "square", "parent": "for-loop-2.iteration-0",
         "state": "CACHED", "cachedFrom": "earlier/for-loop-2.iteration-0.square"},
        {"id": "for-loop-2.iteration-1.square", "name": "square", "parent": "for-loop-2.iteration-1",
         "state": "FAILED", "podName": "looped-square-1", "attempts": 3, "message": "exit code 1; last lines:\nboom"},
    ]})
    out = plane.cli("describe", "run", "looped").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert rows["make-list"][1:4] == ["container", "SUCCEEDED", "3.0s"] and rows["make-list"][-1] == "looped-make-list"
    assert "earlier/for-loop-2.iteration-0.square" in rows["for-loop-2.iteration-0.square"]
    assert rows["for-loop-2.iteration-1.square"][2:] == ["FAILED", "3", "looped-square-1"]
    assert "Task for-loop-2.iteration-1.square failed:" in out and "boom" in out

    assert plane.cli("logs", "run/looped", "--task", "make-list").stdout == "listing 3 items\n"
    assert plane.cli("logs", "run/looped", "--task", "for-loop-2.iteration-1.square").stdout == "squaring 2\n"
    proc = plane.cli("logs", "run/looped", "--task", "square", check=False)
    assert proc.returncode == 1 and "ran 2 times (in a loop)" in proc.stderr
    assert "for-loop-2.iteration-0.square, for-loop-2.iteration-1.square" in proc.stderr
    client = plane.client()
    with pytest.raises(APIError, match=r"came from the cache \(earlier/for-loop-2.iteration-0.square\)"):
        task_pod(client, "default", "looped", "for-loop-2.iteration-0.square")
    with pytest.raises(APIError, match="run looped has no task 'nope'"):
        task_pod(client, "default", "looped", "nope")

    assert plane.cli("delete", "run", "looped").stdout.startswith("run/looped deleted")
    assert not client.list("Pod", "default", "pipelines.trimaran.io/run=looped"), "its pods went with it"


def test_run_wait_shows_progress_and_fails_with_the_run(plane):
    proc = subprocess.Popen([sys.executable, "-m", "trimaran.cli", "run", "-f", str(compiled("hello").path),
                             "--name", "waited", "--wait"], env=plane.env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        client = plane.client()
        poll(lambda: any(r["metadata"]["name"] == "waited" for r in client.list("Run", "default")), timeout=60,
             what="the run")
        greet = {"id": "greet", "name": "greet", "state": "RUNNING"}
        _write_status(plane, "waited", {"state": "RUNNING", "startedAt": "2026-01-01T00:00:00Z", "tasks": [greet]})
        _write_status(plane, "waited", {"state": "FAILED", "finishedAt": "2026-01-01T00:00:04Z", "tasks": [
            {**greet, "state": "FAILED", "message": "exit code 1; last lines:\nNameError: x"}]})
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "run/waited created" in out and "run/waited FAILED in 4.0s" in out
    assert "task greet failed: exit code 1; last lines:\nNameError: x" in err
    assert json.loads(plane.cli("get", "run", "waited", "-o", "json").stdout)["status"]["state"] == "FAILED"
