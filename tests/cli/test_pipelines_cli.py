"""Pipeline runs from the command line against a real control plane: ``trimaran run`` with typed
``-p`` values and its refusals, ``get runs``, ``describe run``, ``logs run/NAME --task``, ``run
--wait`` and ``delete run``.

The pipelines are the corpus' (compiled by the real kfp SDK), run by the Run controller.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import poll
from tests.pipelines.kfp_corpus import compiled
from trimaran.cli.client import APIError
from trimaran.cli.pipelines import RunInputError, parse_parameters, task_pod


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "pipelines-cli") as handle:
        yield handle


def _marker_dir(plane: ControlPlaneHandle) -> str:
    """A directory the run's pods may write: under the namespace's runs directory, which they mount;
    open to all, since pods' ids are not this user's when it is root."""
    path = plane.home / "pipelines" / "runs" / "default" / "markers"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return str(path)


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
    assert run["spec"]["pipelineSpec"] == compiled("parameters").pipeline_spec
    listed = plane.cli("get", "runs").stdout
    assert any(line.split()[0] == "typed" for line in listed.splitlines()[1:]), listed


def test_run_refuses_parameters_that_do_not_fit(plane):
    spec = compiled("parameters").pipeline_spec
    for args, said in [(["flag=yes"], "'flag' is BOOLEAN: 'yes' is not true or false"),
                       (["items={}"], "'items' is LIST: '{}' is not a JSON list"),
                       (["nope=1"], "the pipeline has no input 'nope' (it takes: config, count, flag, items, ratio, "
                                    "text)"),
                       (["count"], "-p count: expected key=value")]:
        with pytest.raises(RunInputError) as refused:
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


def test_run_wait_follows_a_failing_run_then_describe_and_logs_show_the_failed_task(plane):
    proc = plane.cli("run", "-f", str(compiled("exit_handler").path), "-p", f"marker_dir={_marker_dir(plane)}",
                     "--name", "guarded", "--wait", check=False)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[0] == "run/guarded created" and lines[-1].startswith("run/guarded FAILED in ")
    # Progress is printed as --wait sees it change; a short step may start and end between two looks.
    # A run that ended within one look (it says "in 0s") may show no RUNNING line at all.
    assert "FAILED: 3/3 tasks done" in lines, lines
    assert any(line.startswith("RUNNING: ") for line in lines) or lines[-1].endswith(" in 0s"), lines
    assert "task exit-handler-1.fail failed: exit code 1" in proc.stderr
    assert "about to fail: the last log line" in proc.stderr, "the step's last log lines say why"

    out = plane.cli("describe", "run", "guarded").stdout
    assert all(line == line.rstrip() for line in out.splitlines()), "no trailing blanks"
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert rows["exit-handler-1.work"][1:3] == ["container", "SUCCEEDED"]
    assert rows["exit-handler-1.fail"][1:3] == ["container", "FAILED"]
    assert rows["exit-handler-1.fail"][-1].startswith("guarded-"), "its pod"
    assert rows["on-exit"][2] == "SUCCEEDED", "the exit handler ran after the failure"
    assert "Task exit-handler-1.fail failed:" in out

    assert "about to fail: the last log line" in plane.cli("logs", "run/guarded", "--task", "fail").stdout
    assert plane.cli("delete", "run", "guarded").stdout.startswith("run/guarded deleted")
    assert not plane.client().list("Pod", "default", "pipelines.trimaran.io/run=guarded"), "its pods went with it"


def test_logs_name_a_loop_iteration_by_id(plane):
    created = plane.cli("run", "-f", str(compiled("fanout").path), "-p", "n=2", "--no-cache").stdout
    fan = re.fullmatch(r"run/(fanout-[a-z0-9]{5}) created\n", created).group(1)  # named after the pipeline
    client = plane.client()
    ids = ["for-loop-1.iteration-0.work", "for-loop-1.iteration-1.work"]

    def ran() -> bool:
        tasks = {t["id"]: t for t in (client.get("Run", "default", fan).get("status") or {}).get("tasks") or []}
        return all(tasks.get(i, {}).get("state") in ("SUCCEEDED", "FAILED") for i in ids)

    poll(ran, timeout=120, interval=0.5, what="both iterations to run")
    proc = plane.cli("logs", f"run/{fan}", "--task", "work", check=False)
    assert proc.returncode == 1 and f"ran 2 times (in a loop): name one by id: {', '.join(ids)}" in proc.stderr
    assert '"x": 1' in plane.cli("logs", f"run/{fan}", "--task", ids[1]).stdout, "iteration 1's input, as KFP logs it"
    with pytest.raises(APIError, match=f"run {fan} has no task 'nope'"):
        task_pod(client, "default", fan, "nope")
