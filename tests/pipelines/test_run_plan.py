"""The run engine's decisions (trimaran.pipelines.dag, pure) on kfp-compiled control flow: which steps
start, which are skipped and why, what loops collect and what the run's state is.

The tests play the steps' pods themselves: each ready step "finishes" with outputs the test computes
from its inputs, so every branch is reached in milliseconds (test_run_engine.py runs real pods).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.pipelines.kfp_corpus import compiled
from trimaran.pipelines import dag

Step = Callable[[dag.Ready], tuple[str, dict[str, Any]]]


def drive(name: str, step: Step, parameters: dict[str, Any] | None = None) -> tuple[dag.Plan, list[list[str]]]:
    """Plan, finish every ready step with ``step``, plan again, until nothing is ready: the last plan
    and the ids started in each round."""
    pipeline = compiled(name)
    arguments = {**pipeline.arguments, **(parameters or {})}
    facts: dict[str, dict[str, Any]] = {}
    rounds: list[list[str]] = []
    while True:
        planned = dag.plan(pipeline.pipeline_spec, arguments, facts, run_name="r")
        if not planned.ready:
            return planned, rounds
        rounds.append([r.id for r in planned.ready])
        for ready in planned.ready:
            state, outputs = step(ready)
            facts[ready.id] = {"id": ready.id, "name": ready.name, "type": "container", "state": state,
                               "inputs": ready.inputs, "outputs": outputs, "podName": f"pod-{ready.id}"}


def returning(value: Callable[[dict[str, Any]], Any]) -> Step:
    """Every step succeeds and returns ``value(its input parameters)`` as its Output."""
    return lambda ready: ("SUCCEEDED", {"parameters": {"Output": value(ready.inputs["parameters"])}})


def states(planned: dag.Plan) -> dict[str, str]:
    return {t["id"]: t["state"] for t in planned.tasks}


def test_if_elif_else_runs_only_the_branch_whose_condition_holds() -> None:
    planned, _ = drive("conditions", returning(lambda p: p.get("msg", p.get("n"))))
    got = states(planned)
    assert planned.state == "SUCCEEDED"
    assert got["condition-branches-1.condition-2"] == "SKIPPED"  # flip == heads
    assert got["condition-branches-1.condition-3"] == "SUCCEEDED"  # elif flip == tails
    assert got["condition-branches-1.condition-4"] == "SKIPPED"
    skipped = next(t for t in planned.tasks if t["id"] == "condition-branches-1.condition-2")
    assert "is false" in skipped["message"]
    ran = {t["inputs"]["parameters"]["msg"] for t in planned.tasks
           if t["type"] == "container" and t["state"] == "SUCCEEDED" and "msg" in (t.get("inputs") or {}).get(
               "parameters", {})}
    assert ran == {"tails", "big n, small x"}


def test_parallel_for_holds_iterations_to_its_parallelism_and_collects_outputs() -> None:
    def step(ready: dag.Ready) -> tuple[str, dict[str, Any]]:
        p = ready.inputs["parameters"]
        if "out" in str(ready.component.get("outputDefinitions")):
            return "SUCCEEDED", {"artifacts": {"out": [{"uri": f"/r/{ready.id}", "type": "system.Dataset"}]}}
        if "values" in p:
            return "SUCCEEDED", {"parameters": {"Output": sum(p["values"])}}
        if "n" in p:
            return "SUCCEEDED", {"parameters": {"Output": list(range(p["n"]))}}
        if "a" in p:
            return "SUCCEEDED", {"parameters": {"Output": p["a"] * p["b"]}}
        if "parts" in ready.inputs["artifacts"]:
            return "SUCCEEDED", {"parameters": {"Output": len(ready.inputs["artifacts"]["parts"])}}
        return "SUCCEEDED", {"parameters": {"Output": p["x"] * p["x"]}}

    planned, rounds = drive("loops", step)
    assert planned.state == "SUCCEEDED"
    constant_loop = [i for i in rounds[0] if i.startswith("for-loop-2.")]
    assert len(constant_loop) == 2  # parallelism=2 over [1, 2, 3, 4]
    total = next(t for t in planned.tasks if t["name"] == "total")
    assert total["inputs"]["parameters"]["values"] == [1, 4, 9, 16]
    concat = next(t for t in planned.tasks if t["name"] == "concat")
    parts = [a["uri"] for a in concat["inputs"]["artifacts"]["parts"]]  # numbers = [5, 6]
    assert len(parts) == 2 and parts[0].endswith(".iteration-0.write") and parts[1].endswith(".iteration-1.write")
    pairs = sorted(t["outputs"]["parameters"]["Output"] for t in planned.tasks if t["name"] == "pair")
    assert pairs == [10, 40]  # dict items: a * b
    over_output = [t["inputs"]["parameters"]["x"] for t in planned.tasks if t["name"] == "square-2"]
    assert over_output == [0, 1, 2]  # make_list(n=3)


def test_one_of_hands_on_the_branch_that_ran() -> None:
    def step(ready: dag.Ready) -> tuple[str, dict[str, Any]]:
        if ready.name.startswith("mark"):
            return "SUCCEEDED", {"artifacts": {"out": [{"uri": f"/r/{ready.inputs['parameters']['msg']}"}]}}
        if ready.name == "read":
            return "SUCCEEDED", {"parameters": {"Output": ready.inputs["artifacts"]["a"][0]["uri"]}}
        return "SUCCEEDED", {"parameters": {"Output": ready.inputs["parameters"]["msg"]}}

    planned, _ = drive("oneof", step, {"flip": "tails"})
    assert planned.state == "SUCCEEDED"
    read = next(t for t in planned.tasks if t["name"] == "read")
    assert read["outputs"]["parameters"]["Output"] == "/r/T"
    branches = next(t for t in planned.tasks if t["type"] == "dag" and t["name"].startswith("condition-branches"))
    assert list(branches["outputs"]["parameters"].values()) == ["tails won"]


def test_a_failed_step_skips_its_dependents_but_not_an_ignore_upstream_failure_step() -> None:
    def step(ready: dag.Ready) -> tuple[str, dict[str, Any]]:
        if ready.name == "fail":
            return "FAILED", {}
        return "SUCCEEDED", {"parameters": {"Output": ready.inputs["parameters"]["msg"]}}

    planned, rounds = drive("ignore_failure", step)
    assert planned.state == "FAILED"
    cleaned = [t for t in planned.tasks if t["name"].startswith("cleanup")]
    assert {t["inputs"]["parameters"]["msg"]: t["state"] for t in cleaned if t.get("inputs")} == {
        "cleaned": "SUCCEEDED"}
    assert sorted(t["state"] for t in cleaned) == ["SKIPPED", "SUCCEEDED"]
    assert len(rounds) == 2


def test_an_exit_handler_sees_the_failed_final_status() -> None:
    def step(ready: dag.Ready) -> tuple[str, dict[str, Any]]:
        if ready.name == "fail":
            return "FAILED", {}
        return "SUCCEEDED", {"parameters": {"Output": "x"}}

    planned, rounds = drive("exit_handler", step, {"marker_dir": "/m"})
    assert planned.state == "FAILED"
    on_exit = next(t for t in planned.tasks if t["name"] == "on-exit")
    status = on_exit["inputs"]["parameters"]["status"]
    assert status["state"] == "FAILED" and status["pipelineTaskName"] == "guarded"
    assert status["pipelineJobResourceName"] == "r" and "fail" in status["error"]["message"]
    assert rounds[-1] == ["on-exit"]


def test_nested_pipelines_pass_outputs_out_of_their_dag() -> None:
    def step(ready: dag.Ready) -> tuple[str, dict[str, Any]]:
        p = ready.inputs["parameters"]
        if ready.name == "add":
            return "SUCCEEDED", {"parameters": {"Output": p["a"] + p["b"]}}
        if ready.name == "save":
            return "SUCCEEDED", {"artifacts": {"out": [{"uri": f"/r/{p['x']}"}]}}
        return "SUCCEEDED", {"parameters": {"Output": int(ready.inputs["artifacts"]["data"][0]["uri"][3:])}}

    planned, _ = drive("nested", step)
    assert planned.state == "SUCCEEDED"
    load = next(t for t in planned.tasks if t["name"] == "load")
    assert load["outputs"]["parameters"]["Output"] == 7  # a=3 + b=4 through the inner pipeline
    inner_adds = sorted(t["outputs"]["parameters"]["Output"] for t in planned.tasks
                        if t["name"] == "add" and ".iteration-" in t["id"])
    assert inner_adds == [17, 27]
