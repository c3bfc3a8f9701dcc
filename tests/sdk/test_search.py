"""The search helpers write Katib's parameters[] entries, and the Experiment they build validates."""

from __future__ import annotations

import pytest

from trimaran.sdk import search
from trimaran.sdk._experiment import build_experiment, build_trial_spec, resource_requirements, split_parameters
from trimaran.tuning import SearchSpace


def test_helpers_write_katib_strings():
    assert search.double(0.001, 0.1) == {"parameterType": "double", "feasibleSpace": {"min": "0.001", "max": "0.1"}}
    assert search.double(1e-5, 1.0, log=True)["feasibleSpace"] == {
        "min": "1e-05", "max": "1.0", "distribution": "logUniform"}
    assert search.int(1, 10, step=3) == {"parameterType": "int",
                                         "feasibleSpace": {"min": "1", "max": "10", "step": "3"}}
    assert search.categorical(["a", "b"]) == {"parameterType": "categorical", "feasibleSpace": {"list": ["a", "b"]}}


def test_categorical_keeps_python_values():
    spec = search.categorical([16, 32, True, None, "x"])
    assert spec["feasibleSpace"]["list"] == ["16", "32", "True", "None", "x"]
    assert [spec.python_value(s) for s in spec["feasibleSpace"]["list"]] == [16, 32, True, None, "x"]


@pytest.mark.parametrize("call, message", [
    (lambda: search.double(1, 0), "must not be greater"),
    (lambda: search.double(0, 1, log=True), "min > 0"),
    (lambda: search.double(0, float("inf")), "finite"),
    (lambda: search.double("0", 1), "must be a number"),
    (lambda: search.int(0, 1.5), "must be an int"),
    (lambda: search.int(0, 4, step=0), "positive"),
    (lambda: search.categorical([]), "empty"),
    (lambda: search.categorical([1, "1"]), "distinct"),
])
def test_helpers_reject_bad_spaces(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_entries_are_a_search_space_the_engine_reads():
    params = split_parameters({"lr": search.double(1e-4, 1e-1, log=True), "layers": search.int(1, 4),
                               "opt": search.categorical(["adam", "sgd"]), "epochs": 5})
    space = SearchSpace.from_parameters(params.katib)
    assert space.names == ("lr", "layers", "opt")
    assert params.fixed == {"epochs": 5}
    assert params.types == {"lr": "double", "layers": "int", "opt": "categorical"}


def test_split_parameters_needs_a_searched_parameter_and_safe_names():
    with pytest.raises(ValueError, match="none is searched"):
        split_parameters({"epochs": 5})
    with pytest.raises(ValueError, match="may not contain"):
        split_parameters({"a=b": search.double(0, 1)})


def test_trial_job_passes_parameters_as_arguments_not_a_shell_string():
    params = split_parameters({"x": search.double(0, 1), "opt": search.categorical(["a b", "c;d"])})
    job = build_trial_spec(experiment="e", params=params, image="img", resources={"cpu": "1", "memory": "1Gi"},
                           env={"A": "1"})
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "trimaran.sdk._trial_runner", "/app/objective.pkl",
                                    "--param", "x=${trialParameters.x}", "--param", "opt=${trialParameters.opt}"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}}
    assert container["env"] == [{"name": "A", "value": "1"}]
    assert job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "e-objective"


def test_resources_pass_through_requests_and_limits():
    given = {"requests": {"cpu": 2}, "limits": {"memory": "2Gi"}}
    assert resource_requirements(given) == {"requests": {"cpu": "2"}, "limits": {"memory": "2Gi"}}
    assert resource_requirements(None) is None


def test_built_experiment_validates_with_the_api_models():
    from trimaran.api.loader import validate

    params = split_parameters({"x": search.double(0, 1), "n": search.categorical([1, 2])})
    trial_spec = build_trial_spec(experiment="sdk", params=params, image="img", resources=None, env=None)
    manifest = build_experiment(
        name="sdk", namespace="default", params=params, objective_metric_name="loss", objective_type="minimize",
        additional_metric_names=["acc"], objective_goal=0.1, max_trial_count=4, parallel_trial_count=2,
        max_failed_trial_count=1, algorithm_name="random", algorithm_settings={"random_state": 1},
        early_stopping={"algorithm_name": "medianstop", "algorithm_settings": {"start_step": 2}}, trial_spec=trial_spec)
    stored = validate(manifest).object
    spec = stored["spec"]
    assert spec["metricsCollectorSpec"]["collector"]["kind"] == "Push"
    assert spec["algorithm"]["algorithmSettings"] == [{"name": "random_state", "value": "1"}]
    assert spec["earlyStopping"] == {"algorithmName": "medianstop",
                                     "algorithmSettings": [{"name": "start_step", "value": "2"}]}
    assert spec["trialTemplate"]["trialParameters"] == [{"name": "x", "reference": "x"},
                                                        {"name": "n", "reference": "n"}]
    assert stored["metadata"]["annotations"]["sdk.trimaran.io/categorical-values"] == '{"n":[1,2]}'
