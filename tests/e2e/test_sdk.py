"""The Python SDK against a real control plane: TuningClient.tune(mode="process") builds an
Experiment whose trials are Jobs running the pickled function, and reads the outcome back."""

from __future__ import annotations

import base64
import pickle
import sys

import pytest

from trimaran.sdk import ExperimentFailedError, TuningClient, report_metrics, search

pytestmark = pytest.mark.heavy


def quadratic(params):
    return (params["x"] - 2) ** 2


def curve(params):
    """Reports a learning curve and an extra metric, and checks the values arrive typed."""
    typed = isinstance(params["x"], float) and params["batch"] in (16, 32) and params["epochs"] == 3
    for step in range(params["epochs"]):
        report_metrics({"loss": (params["x"] - 2) ** 2 + 1.0 / (step + 1), "typed": float(typed)}, step=step)


def _observations(client: TuningClient, trial: str) -> list[dict]:
    return client.api._json("GET", f"/trimaran/v1/namespaces/{client.namespace}/observations",
                            params={"trial": trial})["items"]


def _state(obj: dict) -> str:
    true = [c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c["status"] == "True"]
    return true[-1] if true else ""


def test_process_mode_tunes_a_quadratic_with_real_trial_processes(plane):
    client = TuningClient()
    created = client.tune("quad", objective=quadratic, parameters={"x": search.double(-5, 5)},
                          objective_metric_name="loss", objective_type="minimize", max_trial_count=6,
                          parallel_trial_count=2, algorithm_name="random", algorithm_settings={"random_state": 7})
    assert created["kind"] == "Experiment" and created["spec"]["metricsCollectorSpec"]["collector"]["kind"] == "Push"
    container = created["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:4] == ["python", "-m", "trimaran.sdk._trial_runner", "/app/objective.pkl"]
    assert container["command"][4:] == ["--param", "x=${trialParameters.x}"]
    configmap = plane.client().get("ConfigMap", "default", "quad-objective")
    payload = pickle.loads(base64.b64decode(configmap["binaryData"]["objective.pkl"]))
    assert payload["objective"]({"x": 3.0}) == 1.0

    exp = client.wait_for_experiment_condition("quad", timeout=240)
    assert [c for c in exp["status"]["conditions"] if c["type"] == "Succeeded"][0]["reason"] == \
        "ExperimentMaxTrialsReached"
    trials = client.list_trials("quad")
    assert len(trials) == 6 and all(_state(t) == "Succeeded" for t in trials)
    losses = {}
    for t in trials:
        points = _observations(client, t["metadata"]["name"])
        assert [p["metric"] for p in points] == ["loss"], "the trial's own process pushed its result"
        x = float(t["spec"]["parameterAssignments"][0]["value"])
        assert points[0]["value"] == pytest.approx((x - 2) ** 2)
        losses[t["metadata"]["name"]] = points[0]["value"]

    best = client.get_optimal_hyperparameters("quad")
    assert -5 <= best["parameters"]["x"] <= 5
    assert best["name"] == min(losses, key=losses.get)
    assert float(best["metrics"][0]["min"]) == pytest.approx(min(losses.values()))
    assert (best["parameters"]["x"] - 2) ** 2 == pytest.approx(min(losses.values()))
    # KatibClient's V1beta1OptimalTrial attribute names read the same trial.
    assert best.best_trial_name == best["name"]
    assert best.parameter_assignments == [a for t in trials if t["metadata"]["name"] == best["name"]
                                          for a in t["spec"]["parameterAssignments"]]
    assert best.observation["metrics"] == best["metrics"]
    # The same experiment as the CLI shows it.
    assert "quad" in plane.cli("get", "experiments").stdout


def test_closure_with_report_metrics_and_typed_parameters(plane):
    offset = 2.0  # captured by the closure: cloudpickle ships it by value

    def objective(params):
        curve(params)
        return {"loss": (params["x"] - offset) ** 2}

    client = TuningClient()
    exp = client.tune("curve", objective=objective,
                      parameters={"x": search.double(0, 4), "batch": search.categorical([16, 32]), "epochs": 3},
                      objective_metric_name="loss", additional_metric_names=["typed"], max_trial_count=3,
                      parallel_trial_count=3, algorithm_name="random", algorithm_settings={"random_state": 1},
                      wait=True, timeout=240)
    assert exp["status"]["trialsSucceeded"] == 3
    for trial in client.list_trials("curve"):
        points = _observations(client, trial["metadata"]["name"])
        assert sorted(p["step"] for p in points if p["metric"] == "typed") == [0, 1, 2]
        assert all(p["value"] == 1.0 for p in points if p["metric"] == "typed"), "values arrived typed"
        assert len([p for p in points if p["metric"] == "loss"]) == 4  # three reports and the returned value
    best = client.get_optimal_hyperparameters("curve")
    assert set(best["parameters"]) == {"x", "batch"} and best["parameters"]["batch"] in (16, 32)
    assert {m["name"] for m in best["metrics"]} == {"loss", "typed"}


def test_without_cloudpickle_a_module_level_function_goes_by_reference(plane, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    client = TuningClient()
    exp = client.tune("byref", objective=quadratic, parameters={"x": search.int(0, 4)}, algorithm_name="grid",
                      max_trial_count=5, parallel_trial_count=2, wait=True, timeout=240)
    assert exp["status"]["trialsSucceeded"] == 5
    assert client.get_optimal_hyperparameters("byref")["parameters"] == {"x": 2}
    with pytest.raises(TypeError, match="cloudpickle"):
        client.tune("lambda", objective=lambda p: 0.0, parameters={"x": search.int(0, 4)}, max_trial_count=2)


def test_a_failing_objective_fails_the_experiment_with_its_traceback(plane):
    def objective(params):
        raise RuntimeError(f"diverged at x={params['x']}")

    client = TuningClient()
    with pytest.raises(ExperimentFailedError, match="diverged at x=") as caught:
        client.tune("fails", objective=objective, parameters={"x": search.int(0, 9)}, algorithm_name="random",
                    max_trial_count=4, parallel_trial_count=1, max_failed_trial_count=1, retain_trials=True,
                    wait=True, timeout=240)
    assert caught.value.experiment["status"]["trialsFailed"] == 1
    with pytest.raises(RuntimeError, match="already exists"):
        client.tune("fails", objective=quadratic, parameters={"x": search.int(0, 9)}, max_trial_count=2)

    client.delete_experiment("fails")
    api = plane.client()
    assert api.list("Trial", "default", "katib.kubeflow.org/experiment=fails") == []
    assert api.list("Job", "default", "katib.kubeflow.org/experiment=fails") == []
    assert all(c["metadata"]["name"] != "fails-objective" for c in api.list("ConfigMap", "default"))
    with pytest.raises(KeyError):
        client.get_experiment("fails")
