"""Mode in-process: the Experiment controller's loop in the caller's process, with the same
algorithms, early stopping and completion rules, and report_metrics routed to memory."""

from __future__ import annotations

import threading

import pytest

from trimaran.sdk import ExperimentFailedError, TrialStopped, TuningClient, report_metrics, search
from trimaran.tuning.metrics import NotInTrialError

SPACE = {"x": search.double(-5.0, 5.0)}


def quadratic(p):
    return (p["x"] - 2) ** 2


def tune(name, objective=quadratic, **kwargs):
    kwargs.setdefault("parameters", SPACE)
    kwargs.setdefault("mode", "in-process")
    return TuningClient().tune(name, objective=objective, **kwargs)


def test_tpe_converges_near_the_optimum():
    result = tune("tpe-quad", algorithm_name="tpe", algorithm_settings={"random_state": 5},
                  max_trial_count=50, parallel_trial_count=1)
    assert result.condition == "Succeeded" and result.reason == "ExperimentMaxTrialsReached"
    assert len(result.trials) == 50 and all(t.state == "Succeeded" for t in result.trials)
    assert abs(result.best_parameters["x"] - 2) < 0.1
    assert result.best_value == min(t.value for t in result.trials)
    # TPE beats its own random start-up phase (the first 10 trials).
    assert result.best_value < min(t.value for t in result.trials[:10])


@pytest.mark.parametrize("parallel", [1, 3])
def test_same_random_state_same_run(parallel):
    runs = [tune("det", algorithm_name="tpe", algorithm_settings={"random_state": 9}, max_trial_count=25,
                 parallel_trial_count=parallel) for _ in range(2)]
    assert [t.assignments for t in runs[0].trials] == [t.assignments for t in runs[1].trials]
    other = tune("det", algorithm_name="tpe", algorithm_settings={"random_state": 10}, max_trial_count=25,
                 parallel_trial_count=parallel)
    assert [t.assignments for t in other.trials] != [t.assignments for t in runs[0].trials]


def test_parallel_trials_run_at_once_on_threads():
    barrier = threading.Barrier(3, timeout=10)

    def objective(p):
        barrier.wait()  # passes only when three trials run at the same time
        return quadratic(p)

    result = tune("par", objective=objective, algorithm_name="random", max_trial_count=6, parallel_trial_count=3)
    assert [t.state for t in result.trials] == ["Succeeded"] * 6


def test_report_metrics_records_steps_and_additional_metrics():
    seen = []

    def objective(p):
        seen.append(dict(p))
        for epoch in range(3):
            report_metrics({"acc": p["x"] * (epoch + 1), "loss": 1.0 / (epoch + 1)})
        report_metrics({"acc": "0.5"}, step=10)

    params = {"x": search.double(0, 1), "bs": search.categorical([16, 32]), "epochs": 3}
    result = tune("steps", objective=objective, parameters=params,
                  objective_metric_name="acc", objective_type="maximize", additional_metric_names=["loss"],
                  algorithm_name="random", max_trial_count=2, parallel_trial_count=1)
    trial = result.trials[0]
    assert isinstance(seen[0]["x"], float) and seen[0]["bs"] in (16, 32) and seen[0]["epochs"] == 3
    assert [(m, s) for m, s, _ in trial.observations if m == "acc"] == [("acc", 0), ("acc", 1), ("acc", 2), ("acc", 10)]
    assert trial.value == max(trial.parameters["x"] * 3, 0.5)
    assert [m["name"] for m in trial.metrics] == ["acc", "loss"]
    third = repr(1 / 3)
    assert trial.metrics[1] == {"name": "loss", "min": third, "max": "1.0", "latest": third}


def test_returned_dict_and_bad_returns():
    result = tune("ret", objective=lambda p: {"loss": p["x"] ** 2, "aux": 1}, additional_metric_names=["aux"],
                  algorithm_name="random", max_trial_count=2, parallel_trial_count=1)
    assert all(t.state == "Succeeded" for t in result.trials)
    result = tune("ret", objective=lambda p: "high", algorithm_name="random", max_trial_count=1, parallel_trial_count=1)
    assert result.trials[0].state == "Failed" and "return a number" in result.trials[0].message
    result = tune("ret", objective=lambda p: None, algorithm_name="random", max_trial_count=1, parallel_trial_count=1)
    assert result.trials[0].state == "MetricsUnavailable"


def test_max_failed_trial_count_fails_the_experiment_with_the_traceback():
    def objective(p):
        raise RuntimeError(f"diverged at x={p['x']:.1f}")

    with pytest.raises(ExperimentFailedError, match="diverged at x=") as caught:
        tune("fails", objective=objective, algorithm_name="random", max_trial_count=10, max_failed_trial_count=2,
             parallel_trial_count=1)
    assert [t.state for t in caught.value.result.trials] == ["Failed", "Failed"]
    client = TuningClient()
    assert client.is_experiment_failed("fails")
    with pytest.raises(ExperimentFailedError, match="diverged"):
        client.wait_for_experiment_condition("fails")


def test_goal_ends_the_experiment_and_stops_running_trials():
    result = tune("goal", objective_goal=1.0, algorithm_name="grid",
                  parameters={"x": search.double(-5, 5, step=1)}, max_trial_count=11, parallel_trial_count=1)
    assert result.reason == "ExperimentGoalReached"
    assert result.best_value <= 1.0 and len(result.trials) < 11


def test_grid_ends_when_exhausted():
    result = tune("grid", algorithm_name="grid", parameters={"x": search.int(0, 3)}, max_trial_count=None,
                  parallel_trial_count=2)
    assert result.reason == "ExperimentSuggestionEndReached"
    assert sorted(t.parameters["x"] for t in result.trials) == [0, 1, 2, 3]
    assert result.best_parameters == {"x": 2}


def test_median_stop_stops_poor_trials_and_is_not_swallowed():
    def curve(p):
        for step in range(6):
            try:
                report_metrics({"score": p["level"] * (1 - 0.5 ** (step + 1))}, step=step)
            except Exception:  # an objective's broad except must not swallow the stop
                pytest.fail("TrialStopped is caught by `except Exception`")

    result = tune("median", objective=curve, objective_metric_name="score", objective_type="maximize",
                  parameters={"level": search.categorical([0.9, 0.8, 0.1, 0.85, 0.05])}, algorithm_name="grid",
                  max_trial_count=5, parallel_trial_count=1,
                  early_stopping={"algorithmName": "medianstop",
                                  "algorithmSettings": {"min_trials_required": 2, "start_step": 2}})
    states = {t.parameters["level"]: t.state for t in result.trials}
    assert states == {0.9: "Succeeded", 0.8: "Succeeded", 0.1: "EarlyStopped", 0.85: "Succeeded",
                      0.05: "EarlyStopped"}
    stopped = next(t for t in result.trials if t.state == "EarlyStopped")
    assert len(stopped.observations) == 2 and "median" in stopped.message
    assert issubclass(TrialStopped, BaseException) and not issubclass(TrialStopped, Exception)


def test_client_reads_in_process_results_as_katib_objects():
    client = TuningClient(namespace="sdk-tests")
    result = client.tune("read", objective=quadratic, parameters=SPACE, algorithm_name="random",
                         algorithm_settings={"random_state": 1}, max_trial_count=4, parallel_trial_count=2,
                         mode="in-process")
    exp = client.get_experiment("read")
    assert exp["status"]["trials"] == 4 and exp["status"]["trialsSucceeded"] == 4
    assert exp["status"]["currentOptimalTrial"]["bestTrialName"] == result.best_trial.name
    best = client.get_optimal_hyperparameters("read")
    assert best == {"name": result.best_trial.name, "parameters": result.best_parameters,
                    "metrics": result.best_trial.metrics}
    trials = client.list_trials("read")
    assert [t["metadata"]["name"] for t in trials] == [t.name for t in result.trials]
    assert client.wait_for_experiment_condition("read")["metadata"]["name"] == "read"
    assert client.get_result("read") is result
    client.delete_experiment("read")
    assert client.get_result("read") is None


def test_invalid_experiments_are_rejected_with_the_field_path():
    with pytest.raises(ValueError, match="spec.parallelTrialCount"):
        tune("bad", max_trial_count=2, parallel_trial_count=3)
    with pytest.raises(ValueError, match="name"):
        tune("Bad_Name", max_trial_count=2)
    with pytest.raises(ValueError, match="objective"):
        tune("bad", objective_type="best", max_trial_count=2)
    with pytest.raises(ValueError, match="spec.algorithm.algorithmName"):
        tune("bad", algorithm_name="nope", max_trial_count=2)


def test_report_metrics_outside_a_trial_raises(monkeypatch):
    for var in ("TRIMARAN_TRIAL", "KATIB_TRIAL_NAME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(NotInTrialError):
        report_metrics({"loss": 1.0})


@pytest.mark.parametrize("mode", ["in-process", "process"])
def test_pbt_is_refused_with_the_way_to_run_it(mode):
    with pytest.raises(ValueError, match="checkpoint directory.*examples/katib-pbt"):
        TuningClient(autostart=False).tune("pbt", objective=lambda p: p["x"], parameters={"x": search.double(0, 1)},
                                           algorithm_name="pbt", max_trial_count=5, mode=mode)
