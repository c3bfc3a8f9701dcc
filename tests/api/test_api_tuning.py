"""Katib's Experiment, Trial and Suggestion: the webhook's defaults and rules, with field paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.builders import FIXTURES
from trimaran.api import (
    DEFAULT_JOB_FAILURE_CONDITION,
    DEFAULT_JOB_SUCCESS_CONDITION,
    DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION,
    DEFAULT_METRICS_FILE,
    Experiment,
    ManifestError,
    Suggestion,
    Trial,
    for_object,
    load_and_validate,
    lookup,
    validate,
)

CNN = FIXTURES / "katib_seed_experiment_cnn.yaml"
EARLY_STOPPING = FIXTURES / "katib_seed_experiment_early_stopping.yaml"


def job_template(command: list[str] | None = None, container: str = "training") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": container, "image": "python:3.11", "command": command or [
                        "python", "train.py", "--lr=${trialParameters.lr}", "--layers=${trialParameters.layers}"]}],
                    "restartPolicy": "Never",
                }
            }
        },
    }


def experiment(name: str = "tune", **spec: Any) -> dict[str, Any]:
    """A valid experiment (random search over lr and layers, a batch Job per trial); `spec` overrides."""
    base: dict[str, Any] = {
        "objective": {"type": "minimize", "objectiveMetricName": "loss"},
        "algorithm": {"algorithmName": "random"},
        "maxTrialCount": 6,
        "parameters": [
            {"name": "learning_rate", "parameterType": "double", "feasibleSpace": {"min": "0.001", "max": "0.1"}},
            {"name": "num_layers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "4"}},
        ],
        "trialTemplate": {
            "primaryContainerName": "training",
            "trialParameters": [
                {"name": "lr", "reference": "learning_rate"},
                {"name": "layers", "reference": "num_layers"},
            ],
            "trialSpec": job_template(),
        },
    }
    base.update(spec)
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": name}, "spec": base}


def with_params(*params: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """An experiment over `params` only, whose template uses each of them."""
    names = [p["name"] for p in params]
    command = ["train", *(f"--{n}=${{trialParameters.{n}}}" for n in names)]
    template = {
        "primaryContainerName": "training",
        "trialParameters": [{"name": n, "reference": n} for n in names],
        "trialSpec": job_template(command),
    }
    return experiment(parameters=list(params), trialTemplate=template, **spec)


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    return validate(obj).object


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def error(obj: dict[str, Any]) -> str:
    """The one problem `obj` has, without the object prefix."""
    problems = errors(obj)
    assert len(problems) == 1, problems
    return problems[0].split(": ", 1)[1]


# --- kinds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("experiment", Experiment),
        ("experiments", Experiment),
        ("Experiment", Experiment),
        ("exp", Experiment),
        ("experiments.kubeflow.org", Experiment),
        ("experiments.v1beta1.kubeflow.org", Experiment),
        ("trial", Trial),
        ("trials", Trial),
        ("trials.kubeflow.org", Trial),
        ("suggestion", Suggestion),
        ("suggestions", Suggestion),
        ("suggestions.v1beta1.kubeflow.org", Suggestion),
    ],
)
def test_lookup(name: str, model: type) -> None:
    info = lookup(name)
    assert info.model is model
    assert (info.api_version, info.group, info.version, info.namespaced) == (
        "kubeflow.org/v1beta1", "kubeflow.org", "v1beta1", True)


def test_for_object() -> None:
    assert for_object("kubeflow.org/v1beta1", "Experiment").model is Experiment
    assert lookup("trials").plural == "trials" and lookup("suggestions").plural == "suggestions"


# --- the seed experiments -----------------------------------------------------------------------


def test_seed_cnn_accepted_with_katib_defaults() -> None:
    [m] = load_and_validate(CNN)
    assert m.warnings == []
    exp = m.object
    assert exp["metadata"] == {"name": "cnn-hyperparameter-tuning", "namespace": "kubeflow"}
    spec = exp["spec"]
    # As written.
    assert (spec["parallelTrialCount"], spec["maxTrialCount"], spec["maxFailedTrialCount"]) == (5, 30, 3)
    assert spec["resumePolicy"] == "FromVolume"
    assert spec["algorithm"] == {"algorithmName": "bayesianoptimization",
                                 "algorithmSettings": [{"name": "random_state", "value": "42"}]}
    assert spec["objective"]["goal"] == 0.99
    # Objective first, then the additional metrics; max for every one (type maximize).
    assert spec["objective"]["metricStrategies"] == [
        {"name": "accuracy", "value": "max"},
        {"name": "loss", "value": "max"},
        {"name": "val_accuracy", "value": "max"},
    ]
    assert [p["feasibleSpace"]["distribution"] for p in spec["parameters"]] == ["uniform"] * 5
    assert spec["parameters"][3]["feasibleSpace"] == {"list": ["adam", "sgd", "rmsprop"], "distribution": "uniform"}
    assert spec["metricsCollectorSpec"] == {
        "collector": {"kind": "StdOut"},
        "source": {"fileSystemPath": {"path": DEFAULT_METRICS_FILE, "kind": "File", "format": "TEXT"}},
    }
    template = spec["trialTemplate"]
    assert template["successCondition"] == DEFAULT_JOB_SUCCESS_CONDITION
    assert template["failureCondition"] == DEFAULT_JOB_FAILURE_CONDITION
    assert "primaryPodLabels" not in template  # only Kubeflow training kinds get the master label
    assert template["primaryContainerName"] == "training"
    assert [p["name"] for p in template["trialParameters"]] == [
        "learningRate", "batchSize", "numLayers", "optimizer", "dropoutRate"]
    # The trial template is kept as written: placeholders intact.
    command = template["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[2] == "--learning_rate=${trialParameters.learningRate}"
    assert template["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}


def test_seed_early_stopping_accepted_without_a_trial_template() -> None:
    [m] = load_and_validate(EARLY_STOPPING)
    exp = m.object
    assert exp["metadata"] == {"name": "early-stopping-experiment", "namespace": "default"}
    spec = exp["spec"]
    assert spec["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [{"name": "min_trials_required", "value": "3"}, {"name": "start_step", "value": "5"}],
    }
    assert spec["algorithm"] == {"algorithmName": "tpe"}
    assert (spec["parallelTrialCount"], spec["maxTrialCount"], spec["resumePolicy"]) == (10, 50, "Never")
    assert spec["objective"]["metricStrategies"] == [{"name": "val_accuracy", "value": "max"}]
    assert "trialTemplate" not in spec
    assert m.warnings == []


# --- defaults -----------------------------------------------------------------------------------


def test_defaults_of_a_minimal_experiment() -> None:
    spec = defaulted(experiment())["spec"]
    assert spec["parallelTrialCount"] == 3
    assert spec["resumePolicy"] == "Never"
    assert spec["objective"]["metricStrategies"] == [{"name": "loss", "value": "min"}]
    assert spec["metricsCollectorSpec"]["collector"] == {"kind": "StdOut"}
    assert "retain" not in spec["trialTemplate"]


def test_metric_strategies_keep_given_ones_and_default_the_rest() -> None:
    objective = {
        "type": "minimize",
        "objectiveMetricName": "loss",
        "additionalMetricNames": ["accuracy", "f1"],
        "metricStrategies": [{"name": "accuracy", "value": "latest"}],
    }
    spec = defaulted(experiment(objective=objective))["spec"]
    assert spec["objective"]["metricStrategies"] == [
        {"name": "accuracy", "value": "latest"},
        {"name": "loss", "value": "min"},
        {"name": "f1", "value": "min"},
    ]


def test_empty_resume_policy_is_defaulted() -> None:
    assert defaulted(experiment(resumePolicy=""))["spec"]["resumePolicy"] == "Never"


@pytest.mark.parametrize(("kind", "api_version", "role"), [
    ("TFJob", "kubeflow.org/v1", "master"), ("PyTorchJob", "kubeflow.org/v1", "master"),
    ("MPIJob", "kubeflow.org/v1", "master"), ("MPIJob", "kubeflow.org/v2beta1", "launcher")])
def test_kubeflow_trial_kinds_get_conditions_and_primary_pod_labels(kind: str, api_version: str, role: str) -> None:
    key = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
    pod = {"spec": {"containers": [{"name": "training", "image": "x", "args": [
        "--lr=${trialParameters.lr}", "--layers=${trialParameters.layers}"]}]}}
    trial_spec = {"apiVersion": api_version, "kind": kind,
                  "spec": {key: {"Master": {"replicas": 1, "template": pod}}}}
    obj = experiment()
    obj["spec"]["trialTemplate"]["trialSpec"] = trial_spec
    template = defaulted(obj)["spec"]["trialTemplate"]
    assert template["successCondition"] == DEFAULT_KUBEFLOW_JOB_SUCCESS_CONDITION
    assert template["failureCondition"] == DEFAULT_JOB_FAILURE_CONDITION
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": role}


def test_given_conditions_and_primary_pod_labels_are_kept() -> None:
    obj = experiment()
    obj["spec"]["trialTemplate"].update(
        successCondition="status.succeeded", failureCondition="status.failed", primaryPodLabels={"role": "main"})
    template = defaulted(obj)["spec"]["trialTemplate"]
    assert (template["successCondition"], template["failureCondition"]) == ("status.succeeded", "status.failed")
    assert template["primaryPodLabels"] == {"role": "main"}


@pytest.mark.parametrize(
    ("collector", "source"),
    [
        ({"kind": "File"}, {"fileSystemPath": {"path": DEFAULT_METRICS_FILE, "kind": "File", "format": "TEXT"}}),
        ({"kind": "TensorFlowEvent"}, {"fileSystemPath": {"path": "/var/log/katib/tfevent/", "kind": "Directory"}}),
        ({"kind": "PrometheusMetric"}, {"httpGet": {"path": "/metrics", "port": 8080}}),
        ({"kind": "Push"}, None),
    ],
)
def test_metrics_collector_defaults_per_kind(collector: dict[str, Any], source: dict[str, Any] | None) -> None:
    mc = defaulted(experiment(metricsCollectorSpec={"collector": collector}))["spec"]["metricsCollectorSpec"]
    assert mc.get("source") == source


def test_file_collector_keeps_given_path_and_json_format() -> None:
    given = {"collector": {"kind": "File"},
             "source": {"fileSystemPath": {"path": "/out/metrics.json", "format": "JSON"}}}
    mc = defaulted(experiment(metricsCollectorSpec=given))["spec"]["metricsCollectorSpec"]
    assert mc["source"]["fileSystemPath"] == {"path": "/out/metrics.json", "kind": "File", "format": "JSON"}


def test_none_collector_is_the_old_name_of_push() -> None:
    result = validate(experiment(metricsCollectorSpec={"collector": {"kind": "None"}}))
    assert result.object["spec"]["metricsCollectorSpec"] == {"collector": {"kind": "Push"}}
    assert result.warnings == ['spec.metricsCollectorSpec.collector.kind "None" is deprecated (Katib 0.18 renamed '
                               'it); it was stored as "Push"']


def test_custom_collector_container_kept() -> None:
    given = {"collector": {"kind": "Custom", "customCollector": {"name": "collector", "image": "me/collector"}}}
    mc = defaulted(experiment(metricsCollectorSpec=given))["spec"]["metricsCollectorSpec"]
    assert mc == given


# --- rejected experiments -----------------------------------------------------------------------


def test_valid_experiment_has_no_problems() -> None:
    assert validate(experiment()).warnings == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Tune", 'metadata.name: Invalid value: "Tune": name must consist of lower case alphanumeric characters'),
        ("1tune", "regex used for validation is '^[a-z]([-a-z0-9]*[a-z0-9])?$'"),
        ("tune.v2", "name must consist of lower case alphanumeric"),
        ("tune-", "name must consist of lower case alphanumeric"),
        ("a" * 41, "name must be no more than 40 characters"),
    ],
)
def test_experiment_name_rule(name: str, message: str) -> None:
    assert message in error(experiment(name=name))


def test_forty_character_name_is_fine() -> None:
    assert defaulted(experiment(name="a" * 40))["metadata"]["name"] == "a" * 40


def test_parameters_and_nas_config() -> None:
    assert error(experiment(nasConfig={"graphConfig": {"numLayers": 8}})) == (
        "spec.nasConfig: Forbidden: only one of spec.parameters and spec.nasConfig can be specified")
    obj = experiment()
    del obj["spec"]["parameters"]
    assert error(obj) == "spec.parameters: Required value: spec.parameters or spec.nasConfig must be specified"


@pytest.mark.parametrize(
    ("objective", "message"),
    [
        ({"type": "maximise", "objectiveMetricName": "loss"},
         'spec.objective.type: Unsupported value: "maximise": supported values: "minimize", "maximize"'),
        ({"objectiveMetricName": "loss"}, "spec.objective.type: Required value: must be minimize or maximize"),
        ({"type": "minimize"}, "spec.objective.objectiveMetricName: Required value: must be specified"),
        ({"type": "minimize", "objectiveMetricName": "loss", "additionalMetricNames": ["acc", "loss"]},
         'spec.objective.additionalMetricNames[1]: Invalid value: "loss": should not contain '
         "spec.objective.objectiveMetricName"),
        ({"type": "minimize", "objectiveMetricName": "loss", "metricStrategies": [{"name": "loss", "value": "avg"}]},
         'spec.objective.metricStrategies[0].value: Unsupported value: "avg": supported values: "min", "max", '
         '"latest"'),
    ],
)
def test_objective_rules(objective: dict[str, Any], message: str) -> None:
    assert error(experiment(objective=objective)) == message


def test_objective_and_algorithm_required() -> None:
    obj = experiment()
    del obj["spec"]["objective"], obj["spec"]["algorithm"]
    assert sorted(p.split(": ", 1)[1] for p in errors(obj)) == [
        "spec.algorithm: Required value: must be specified",
        "spec.objective: Required value: must be specified",
    ]


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"parallelTrialCount": 0}, "spec.parallelTrialCount: Invalid value: 0: must be greater than 0"),
        ({"parallelTrialCount": 7},
         "spec.parallelTrialCount: Invalid value: 7: should be less than or equal to spec.maxTrialCount"),
        ({"maxTrialCount": 0, "parallelTrialCount": 0}, "spec.maxTrialCount: Invalid value: 0: must be greater than 0"),
        ({"maxFailedTrialCount": -1}, "spec.maxFailedTrialCount: Invalid value: -1: should not be less than 0"),
        ({"maxFailedTrialCount": 7},
         "spec.maxFailedTrialCount: Invalid value: 7: should be less than or equal to spec.maxTrialCount"),
        ({"maxTrialCount": 2},
         "spec.parallelTrialCount: Invalid value: 3: should be less than or equal to spec.maxTrialCount "
         "(parallelTrialCount defaults to 3; set it)"),
        ({"parallelTrialCount": "2"}, 'spec.parallelTrialCount: Invalid value: "2": must be of type integer'),
    ],
)
def test_trial_counts(counts: dict[str, Any], message: str) -> None:
    assert message in [p.split(": ", 1)[1] for p in errors(experiment(**counts))]


def test_counts_equal_to_max_are_fine() -> None:
    spec = defaulted(experiment(maxTrialCount=2, parallelTrialCount=2, maxFailedTrialCount=2))["spec"]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"], spec["maxFailedTrialCount"]) == (2, 2, 2)
    assert "maxTrialCount" not in defaulted(experiment(maxTrialCount=None))["spec"]  # unbounded


def test_resume_policy_must_be_known() -> None:
    assert error(experiment(resumePolicy="Always")) == (
        'spec.resumePolicy: Unsupported value: "Always": supported values: "Never", "LongRunning", "FromVolume", ""')


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"algorithmName": "hyperopt"}, 'spec.algorithm.algorithmName: Unsupported value: "hyperopt": supported '
         'values: "random", "grid", "bayesianoptimization", "tpe", "multivariate-tpe", "cmaes", "sobol", '
         '"hyperband", "pbt", "nsga2"'),
        ({"algorithmName": ""}, "spec.algorithm.algorithmName: Required value: must be specified"),
        ({}, "spec.algorithm.algorithmName: Required value: must be specified"),
    ],
)
def test_algorithm_must_be_known(algorithm: dict[str, Any], message: str) -> None:
    assert error(experiment(algorithm=algorithm)) == message


@pytest.mark.parametrize("name", ["random", "grid", "bayesianoptimization", "tpe", "multivariate-tpe", "cmaes",
                                  "sobol", "hyperband", "pbt", "nsga2"])
def test_known_algorithms(name: str) -> None:
    params = [{"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "0.5", "step": "0.1"}}]
    algorithm: dict[str, Any] = {"algorithmName": name}
    extra: dict[str, Any] = {}
    if name == "pbt":  # required settings, and its checkpoints need the experiment's volume
        algorithm["algorithmSettings"] = [{"name": "suggestion_trial_dir", "value": "/ckpt"},
                                          {"name": "n_population", "value": "5"},
                                          {"name": "truncation_threshold", "value": "0.2"}]
        extra["resumePolicy"] = "FromVolume"
    if name == "hyperband":  # Katib's required settings
        algorithm["algorithmSettings"] = [{"name": "resource_name", "value": "lr"}, {"name": "r_l", "value": "9"}]
    assert defaulted(with_params(*params, algorithm=algorithm, maxTrialCount=5, **extra))


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"algorithmName": "tpe", "algorithmSettings": [{"name": "n_startup_trials", "value": "many"}]},
         'spec.algorithm.algorithmSettings[0].value: Invalid value: "many": '),
        ({"algorithmName": "random", "algorithmSettings": [{"name": "seed", "value": "1"}]},
         'spec.algorithm.algorithmSettings[0].value: Invalid value: "1": '),
        ({"algorithmName": "hyperband", "algorithmSettings": [{"name": "r_l", "value": "9"}]},
         'spec.algorithm.algorithmSettings: Required value: algorithm "hyperband": setting "resource_name"'),
    ],
)
def test_algorithm_settings_are_checked_at_apply(algorithm: dict[str, Any], message: str) -> None:
    assert error(experiment(algorithm=algorithm)).startswith(message)


def test_early_stopping_settings_are_checked_at_apply() -> None:
    exp = experiment(earlyStopping={"algorithmName": "medianstop",
                                    "algorithmSettings": [{"name": "start_step", "value": "0"}]})
    assert error(exp).startswith('spec.earlyStopping.algorithmSettings[0].value: Invalid value: "0": ')


def test_early_stopping_algorithm_must_be_known() -> None:
    assert error(experiment(earlyStopping={"algorithmName": "median"})) == (
        'spec.earlyStopping.algorithmName: Unsupported value: "median": supported values: "medianstop", "asha"')
    for name in ("medianstop", "asha"):
        assert defaulted(experiment(earlyStopping={"algorithmName": name}))["spec"]["earlyStopping"] == {
            "algorithmName": name}


# --- search spaces ------------------------------------------------------------------------------


def double(name: str = "lr", **space: Any) -> dict[str, Any]:
    return {"name": name, "parameterType": "double", "feasibleSpace": space}


def integer(name: str = "n", **space: Any) -> dict[str, Any]:
    return {"name": name, "parameterType": "int", "feasibleSpace": space}


def choice(name: str = "opt", kind: str = "categorical", **space: Any) -> dict[str, Any]:
    return {"name": name, "parameterType": kind, "feasibleSpace": space}


def test_min_above_max_message_as_katib_words_it() -> None:
    obj = with_params(double("a", min="0", max="1"), double("b", min="0.5", max="0.1"))
    assert error(obj) == 'spec.parameters[1].feasibleSpace.max: Invalid value: "0.1": must be greater than min "0.5"'


@pytest.mark.parametrize(
    ("param", "message"),
    [
        (double(min="10", max="9.5"), 'spec.parameters[0].feasibleSpace.max: Invalid value: "9.5": must be greater '
                                      'than min "10"'),
        (integer(min="10", max="2"), 'spec.parameters[0].feasibleSpace.max: Invalid value: "2": must be greater '
                                     'than min "10"'),
        (double(min="small", max="1"), 'spec.parameters[0].feasibleSpace.min: Invalid value: "small": must be a '
                                       "number"),
        (double(min="0.1", max="1e999"), 'spec.parameters[0].feasibleSpace.max: Invalid value: "1e999": must be a '
                                         "number"),
        (double(min="nan", max="1"), 'spec.parameters[0].feasibleSpace.min: Invalid value: "nan": must be a number'),
        (double(min="0.1"), "spec.parameters[0].feasibleSpace.max: Required value: must be specified for "
                            "parameterType: double"),
        (integer(max="3"), "spec.parameters[0].feasibleSpace.min: Required value: must be specified for "
                           "parameterType: int"),
        (integer(min="1.5", max="3"), 'spec.parameters[0].feasibleSpace.min: Invalid value: "1.5": must be an '
                                      "integer"),
        (integer(min="1", max="3", step="0.5"), 'spec.parameters[0].feasibleSpace.step: Invalid value: "0.5": must '
                                                "be an integer"),
        (double(min="0", max="1", step="0"), 'spec.parameters[0].feasibleSpace.step: Invalid value: "0": must be '
                                             "greater than 0"),
        (double(min="0", max="1", step="-0.1"), 'spec.parameters[0].feasibleSpace.step: Invalid value: "-0.1": '
                                                "must be greater than 0"),
        (double(min="0", max="1", step="2"), 'spec.parameters[0].feasibleSpace.step: Invalid value: "2": must not '
                                             "be larger than max - min (1)"),
        (integer(min="1", max="4", step="4"), 'spec.parameters[0].feasibleSpace.step: Invalid value: "4": must not '
                                              "be larger than max - min (3)"),
        (double(min="0", max="1", list=["0.5"]), 'spec.parameters[0].feasibleSpace.list: Invalid value: "array": '
                                                 "feasibleSpace.list is not supported for parameterType: double"),
        (double(min="0", max="1", distribution="logUniform"),
         'spec.parameters[0].feasibleSpace.min: Invalid value: "0": must be greater than 0 for distribution '
         "logUniform"),
        (double(min="-1", max="1", distribution="logNormal"),
         'spec.parameters[0].feasibleSpace.min: Invalid value: "-1": must be greater than 0 for distribution '
         "logNormal"),
        (double(min="0", max="1", distribution="gaussian"),
         'spec.parameters[0].feasibleSpace.distribution: Unsupported value: "gaussian": supported values: '
         '"uniform", "logUniform", "normal", "logNormal", ""'),
        (choice(list=[]), "spec.parameters[0].feasibleSpace.list: Required value: must be specified for "
                          "parameterType: categorical"),
        (choice(kind="discrete", list=["1", "2"], min="1"),
         "spec.parameters[0].feasibleSpace.min: Forbidden: feasibleSpace .max, .min and .step is not supported for "
         "parameterType: discrete"),
        (choice(list=["a"], step="1"), "spec.parameters[0].feasibleSpace.step: Forbidden: feasibleSpace .max, .min "
                                       "and .step is not supported for parameterType: categorical"),
        ({"name": "lr", "parameterType": "double"},
         "spec.parameters[0].feasibleSpace: Required value: feasibleSpace must be specified"),
        ({"name": "lr", "parameterType": "float", "feasibleSpace": {"min": "0", "max": "1"}},
         'spec.parameters[0].parameterType: Unsupported value: "float": supported values: "double", "int", '
         '"discrete", "categorical"'),
        ({"name": "lr", "feasibleSpace": {"min": "0", "max": "1"}},
         "spec.parameters[0].parameterType: Required value: must be one of double, int, discrete, categorical"),
        (double(min=0.1, max="1"), "spec.parameters[0].feasibleSpace.min: Invalid value: 0.1: must be of type string"),
    ],
)
def test_unsamplable_search_spaces(param: dict[str, Any], message: str) -> None:
    assert error(with_params(param)) == message


@pytest.mark.parametrize(
    "param",
    [
        double(min="0.0", max="0.5"),
        double(min="-1", max="-0.5", step=".25"),
        double(min="1e-5", max="1E-1", distribution="logUniform"),
        double(min="0.5", max="0.5"),
        integer(min="-3", max="+3", step="2"),
        integer(min="16", max="256", step="16"),
        choice(kind="discrete", list=["1", "2", "4"]),
        choice(list=["adam"], distribution="uniform"),
    ],
)
def test_samplable_search_spaces(param: dict[str, Any]) -> None:
    assert defaulted(with_params(param))["spec"]["parameters"][0]["feasibleSpace"]["distribution"]


def test_parameter_names_unique_and_required() -> None:
    obj = with_params(double("lr", min="0", max="1"), integer("n", min="1", max="2"))
    obj["spec"]["parameters"].append(double("lr", min="0", max="1"))
    assert 'spec.parameters[2].name: Duplicate value: "lr"' in [p.split(": ", 1)[1] for p in errors(obj)]


def test_grid_needs_a_step_on_doubles_only() -> None:
    grid = {"algorithmName": "grid"}
    assert error(with_params(double(min="0", max="1"), algorithm=grid)) == (
        "spec.parameters[0].feasibleSpace.step: Required value: must be specified for parameterType double when "
        "spec.algorithm.algorithmName is grid")
    assert defaulted(with_params(integer(min="1", max="6"), algorithm=grid))
    assert defaulted(with_params(double(min="0", max="1")))  # random: no step needed


def test_grid_max_trial_count_must_fit_the_grid() -> None:
    params = (double("a", min="0", max="1", step="0.5"), integer("b", min="1", max="4", step="2"),
              choice("c", list=["x", "y"]))  # 3 * 2 * 2 = 12 points
    assert defaulted(with_params(*params, algorithm={"algorithmName": "grid"}, maxTrialCount=12))
    assert error(with_params(*params, algorithm={"algorithmName": "grid"}, maxTrialCount=13)) == (
        "spec.maxTrialCount: Invalid value: 13: must not be greater than the number of grid points (12) when "
        "spec.algorithm.algorithmName is grid")
    # Float steps that do not divide the range exactly: 0, 0.1, ..., 0.3 is 4 points.
    assert defaulted(with_params(double(min="0", max="0.3", step="0.1"), algorithm={"algorithmName": "grid"},
                                 maxTrialCount=4, parallelTrialCount=1))


# --- trial template -----------------------------------------------------------------------------


def template_errors(**changes: Any) -> list[str]:
    obj = experiment()
    template = obj["spec"]["trialTemplate"]
    for key, value in changes.items():
        if value is None:
            template.pop(key, None)
        else:
            template[key] = value
    return [p.split(": ", 1)[1] for p in errors(obj)]


def test_trial_spec_or_config_map() -> None:
    assert template_errors(configMap={"configMapName": "t", "configMapNamespace": "ns", "templatePath": "job.yaml"}
                           ) == ["spec.trialTemplate.configMap: Forbidden: only one of spec.trialTemplate.trialSpec "
                                 "or spec.trialTemplate.configMap can be specified"]
    problems = template_errors(trialSpec=None)
    assert "spec.trialTemplate.trialSpec: Required value: spec.trialTemplate.trialSpec or " \
           "spec.trialTemplate.configMap must be specified" in problems


def test_config_map_source() -> None:
    obj = experiment()
    template = obj["spec"]["trialTemplate"]
    del template["trialSpec"]
    template["configMap"] = {"configMapName": "templates", "configMapNamespace": "kubeflow"}
    problems = [p.split(": ", 1)[1] for p in errors(obj)]
    # No defaults without an inline trialSpec: the conditions must be given.
    assert problems == [
        "spec.trialTemplate.successCondition: Required value: successCondition and failureCondition must be "
        "specified (they are defaulted only for a trialSpec of a known kind)",
        "spec.trialTemplate.failureCondition: Required value: successCondition and failureCondition must be "
        "specified (they are defaulted only for a trialSpec of a known kind)",
        "spec.trialTemplate.configMap.templatePath: Required value: must be specified",
    ]
    template["configMap"]["templatePath"] = "job.yaml"
    template.update(successCondition="status.ok", failureCondition="status.bad")
    out = defaulted(obj)["spec"]["trialTemplate"]
    assert out["configMap"] == {"configMapName": "templates", "configMapNamespace": "kubeflow",
                                "templatePath": "job.yaml"}


def test_primary_container_name() -> None:
    assert template_errors(primaryContainerName=None) == [
        "spec.trialTemplate.primaryContainerName: Required value: must be specified"]
    assert template_errors(primaryContainerName="trainer") == [
        'spec.trialTemplate.primaryContainerName: Invalid value: "trainer": must be the name of a container of the '
        'trial\'s pods (containers: "training")']


def test_primary_container_in_any_replica_of_a_kubeflow_job() -> None:
    def replica(container: str, args: list[str]) -> dict[str, Any]:
        return {"replicas": 1, "template": {"spec": {"containers": [{"name": container, "image": "x", "args": args}]}}}

    obj = experiment()
    obj["spec"]["trialTemplate"]["trialSpec"] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "spec": {"tfReplicaSpecs": {"Chief": replica("chief", ["${trialParameters.lr}"]),
                                    "Worker": replica("tensorflow", ["${trialParameters.layers}"])}},
    }
    obj["spec"]["trialTemplate"]["primaryContainerName"] = "tensorflow"
    assert defaulted(obj)["spec"]["trialTemplate"]["primaryContainerName"] == "tensorflow"
    obj["spec"]["trialTemplate"]["primaryContainerName"] = "pytorch"
    assert error(obj) == ('spec.trialTemplate.primaryContainerName: Invalid value: "pytorch": must be the name of a '
                          'container of the trial\'s pods (containers: "chief", "tensorflow")')


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"apiVersion": None}, "spec.trialTemplate.trialSpec.apiVersion: Required value: APIVersion and Kind in "
                               "spec.trialTemplate must be specified"),
        ({"kind": None}, "spec.trialTemplate.trialSpec.kind: Required value: APIVersion and Kind in "
                         "spec.trialTemplate must be specified"),
        ({"kind": "Deployment", "apiVersion": "apps/v1"},
         'spec.trialTemplate.trialSpec.kind: Unsupported value: "Deployment": supported values: "TrainJob", "Job", '
         '"TFJob", "PyTorchJob", "XGBoostJob", "JAXJob", "PaddleJob", "MPIJob", "JobSet"'),
        ({"apiVersion": "batch/v2"},
         'spec.trialTemplate.trialSpec.apiVersion: Unsupported value: "batch/v2": supported values: "batch/v1"'),
        ({"metadata": {"name": "fixed"}}, "spec.trialTemplate.trialSpec.metadata.name: Forbidden: metadata.name and "
                                          "metadata.namespace in spec.trialTemplate must be omitted"),
        ({"metadata": {"namespace": "other", "labels": {"a": "b"}}},
         "spec.trialTemplate.trialSpec.metadata.namespace: Forbidden: metadata.name and metadata.namespace in "
         "spec.trialTemplate must be omitted"),
    ],
)
def test_trial_spec_header(change: dict[str, Any], message: str) -> None:
    trial_spec = job_template()
    for key, value in change.items():
        if value is None:
            del trial_spec[key]
        else:
            trial_spec[key] = value
    assert template_errors(trialSpec=trial_spec) == [message]


def test_trial_spec_labels_and_annotations_allowed() -> None:
    obj = experiment()
    obj["spec"]["trialTemplate"]["trialSpec"]["metadata"] = {"labels": {"team": "ml"}, "annotations": {"a": "b"}}
    assert defaulted(obj)["spec"]["trialTemplate"]["trialSpec"]["metadata"] == {
        "labels": {"team": "ml"}, "annotations": {"a": "b"}}


@pytest.mark.parametrize(
    ("trial_parameters", "message"),
    [
        ([{"name": "lr", "reference": "learning_rate"}, {"name": "lr", "reference": "num_layers"}],
         'spec.trialTemplate.trialParameters[1].name: Duplicate value: "lr"'),
        ([{"name": "lr", "reference": "learning_rate"}, {"name": "layers", "reference": "learning_rate"}],
         'spec.trialTemplate.trialParameters[1].reference: Duplicate value: "learning_rate"'),
        ([{"name": "lr}", "reference": "learning_rate"}, {"name": "layers", "reference": "num_layers"}],
         "spec.trialTemplate.trialParameters[0].name: Invalid value: \"lr}\": must not contain '{' or '}'"),
        ([{"reference": "learning_rate"}, {"name": "layers", "reference": "num_layers"}],
         "spec.trialTemplate.trialParameters[0].name: Required value"),
        ([{"name": "lr"}, {"name": "layers", "reference": "num_layers"}],
         "spec.trialTemplate.trialParameters[0].reference: Required value"),
        ([{"name": "lr", "reference": "lr"}, {"name": "layers", "reference": "num_layers"}],
         'spec.trialTemplate.trialParameters[0].reference: Invalid value: "lr": must be the name of one of '
         'spec.parameters ("learning_rate", "num_layers") or a trial metadata reference: ${trialSpec.Name}, '
         "${trialSpec.Namespace}, ${trialSpec.Kind}, ${trialSpec.APIVersion}, ${trialSpec.Labels[<key>]}, "
         "${trialSpec.Annotations[<key>]}"),
        ([{"name": "lr", "reference": "${trialSpec.Uid}"}, {"name": "layers", "reference": "num_layers"}],
         'spec.trialTemplate.trialParameters[0].reference: Invalid value: "${trialSpec.Uid}": must be the name of'),
    ],
)
def test_trial_parameter_rules(trial_parameters: list[dict[str, Any]], message: str) -> None:
    problems = template_errors(trialParameters=trial_parameters)
    assert any(p.startswith(message) for p in problems), problems


def test_trial_parameters_required() -> None:
    assert "spec.trialTemplate.trialParameters: Required value: must be specified" in template_errors(
        trialParameters=None)


@pytest.mark.parametrize(
    "reference",
    ["${trialSpec.Name}", "${trialSpec.Namespace}", "${trialSpec.Kind}", "${trialSpec.APIVersion}",
     "${trialSpec.Labels[app]}", "${trialSpec.Annotations[example.com/owner]}"],
)
def test_metadata_references_are_accepted(reference: str) -> None:
    obj = experiment()
    template = obj["spec"]["trialTemplate"]
    template["trialParameters"].append({"name": "meta", "reference": reference})
    template["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"].append("--out=${trialParameters.meta}")
    assert defaulted(obj)["spec"]["trialTemplate"]["trialParameters"][2]["reference"] == reference


def test_undeclared_placeholder_is_located() -> None:
    obj = experiment()
    command = obj["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"]
    command.append("--seed=${trialParameters.seed}")
    assert error(obj) == (
        "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].command[4]: Invalid value: "
        '"--seed=${trialParameters.seed}": parameter "seed" in spec.trialTemplate not found in '
        "spec.trialTemplate.trialParameters")


def test_declared_parameter_must_be_used() -> None:
    obj = experiment()
    obj["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"] = [
        "train", "--lr=${trialParameters.lr}"]
    assert error(obj) == ('spec.trialTemplate.trialParameters[1].name: Invalid value: "layers": parameter name: '
                          "layers in spec.trialParameters not found in spec.trialTemplate")


def test_placeholders_anywhere_in_the_template_count() -> None:
    obj = experiment()
    pod = obj["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]
    pod["spec"]["containers"][0]["command"] = ["train"]
    pod["spec"]["containers"][0]["env"] = [{"name": "LR", "value": "${trialParameters.lr}"}]
    pod["metadata"] = {"annotations": {"layers-${trialParameters.layers}": "yes"}}
    assert defaulted(obj)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"fileSystemPath": {"path": "metrics.log"}},
         'spec.metricsCollectorSpec.source.fileSystemPath.path: Invalid value: "metrics.log": must be an absolute '
         "path"),
        ({"fileSystemPath": {"path": "/m", "kind": "Directory"}},
         'spec.metricsCollectorSpec.source.fileSystemPath.kind: Unsupported value: "Directory": supported values: '
         '"File"'),
        ({"fileSystemPath": {"path": "/m.json", "format": "JSON"}, "filter": {"metricsFormat": ["(a)=(b)"]}},
         "spec.metricsCollectorSpec.source.filter: Forbidden: filter must be nil when format of metrics file is "
         "json"),
        ({"filter": {"metricsFormat": ["([a-z]+=(.*)"]}},
         'spec.metricsCollectorSpec.source.filter.metricsFormat[0]: Invalid value: "([a-z]+=(.*)": invalid filter: '
         "missing ), unterminated subpattern at position 0"),
        ({"filter": {"metricsFormat": ["loss=([0-9.]+)"]}},
         'spec.metricsCollectorSpec.source.filter.metricsFormat[0]: Invalid value: "loss=([0-9.]+)": two top '
         "subexpressions are required (group 1 the metric name, group 2 its value)"),
    ],
)
def test_file_collector_rules(source: dict[str, Any], message: str) -> None:
    assert error(experiment(metricsCollectorSpec={"collector": {"kind": "File"}, "source": source})) == message


def test_collector_rules_of_other_kinds() -> None:
    def mc_error(spec: dict[str, Any]) -> str:
        return error(experiment(metricsCollectorSpec=spec))

    assert mc_error({"collector": {"kind": "TensorFlowEvent"}, "source": {"fileSystemPath": {"format": "TEXT"}}}) == (
        'spec.metricsCollectorSpec.source.fileSystemPath.format: Invalid value: "TEXT": must be empty')
    assert mc_error({"collector": {"kind": "Custom"}}) == (
        "spec.metricsCollectorSpec.collector.customCollector: Required value: metrics collector kind: Custom is "
        "required")
    assert mc_error({"collector": {"kind": "PrometheusMetric"}, "source": {"httpGet": {"path": "metrics"}}}) == (
        'spec.metricsCollectorSpec.source.httpGet.path: Invalid value: "metrics": path is invalid for metrics '
        "collector kind: PrometheusMetric")
    assert mc_error({"collector": {"kind": "PrometheusMetric"}, "source": {"httpGet": {"port": "http"}}}) == (
        'spec.metricsCollectorSpec.source.httpGet.port: Invalid value: "http": must be a positive integer value for '
        "metrics collector kind: PrometheusMetric")
    # Filters are checked whatever the collector (StdOut parses with them too).
    assert mc_error({"source": {"filter": {"metricsFormat": ["("]}}}).startswith(
        'spec.metricsCollectorSpec.source.filter.metricsFormat[0]: Invalid value: "(": invalid filter:')
    assert mc_error({"collector": {"kind": "Stdout"}}).startswith(
        'spec.metricsCollectorSpec.collector.kind: Unsupported value: "Stdout"')


def test_text_filters_with_two_groups_accepted() -> None:
    spec = {"collector": {"kind": "StdOut"},
            "source": {"filter": {"metricsFormat": [r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)",
                                                    r"(\w+):\s+(\S+)"]}}}
    out = defaulted(experiment(metricsCollectorSpec=spec))["spec"]["metricsCollectorSpec"]
    assert out["source"]["filter"] == spec["source"]["filter"]


def test_every_problem_reported_at_once() -> None:
    obj = with_params(double("a", min="2", max="1"), integer("b", min="x", max="3"),
                      maxTrialCount=2, parallelTrialCount=4, algorithm={"algorithmName": "nope"})
    paths = [p.split(": ")[1] for p in errors(obj)]
    assert paths == ["spec.parallelTrialCount", "spec.algorithm.algorithmName", "spec.parameters[0].feasibleSpace.max",
                     "spec.parameters[1].feasibleSpace.min"]


# --- unknown fields -----------------------------------------------------------------------------


def test_unknown_fields_warned_with_hints_and_dropped() -> None:
    obj = experiment(algorithmName="grid", trialCount=3)
    obj["spec"]["parameters"][0]["min"] = "0.1"
    obj["spec"]["metricsCollectorSpec"] = {"kind": "File"}
    result = validate(obj)
    assert sorted(result.warnings) == [
        'unknown field "spec.algorithmName" (did you mean "spec.algorithm.algorithmName"?)',
        'unknown field "spec.metricsCollectorSpec.kind" (did you mean "spec.metricsCollectorSpec.collector.kind"?)',
        'unknown field "spec.parameters[0].min" (did you mean "spec.parameters[0].feasibleSpace.min"?)',
        'unknown field "spec.trialCount"',
    ]
    spec = result.object["spec"]
    assert "algorithmName" not in spec and "trialCount" not in spec and "min" not in spec["parameters"][0]


def test_free_form_parts_are_not_unknown() -> None:
    obj = experiment()
    obj["spec"]["trialTemplate"]["trialSpec"]["spec"]["ttlSecondsAfterFinished"] = 60
    result = validate(obj)
    assert result.warnings == []
    assert result.object["spec"]["trialTemplate"]["trialSpec"]["spec"]["ttlSecondsAfterFinished"] == 60


# --- status round trips -------------------------------------------------------------------------

CONDITION = {"type": "Running", "status": "True", "reason": "ExperimentRunning", "message": "Experiment is running",
             "lastUpdateTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}


def test_experiment_status_round_trip() -> None:
    obj = experiment()
    status = {
        "startTime": "2025-01-01T00:00:00Z",
        "completionTime": "2025-01-01T01:00:00Z",
        "lastReconcileTime": "2025-01-01T00:59:00Z",
        "conditions": [{"type": "Created", "status": "True", "reason": "ExperimentCreated",
                        "message": "Experiment is created"}, CONDITION],
        "currentOptimalTrial": {
            "bestTrialName": "tune-abcd1234",
            "parameterAssignments": [{"name": "learning_rate", "value": "0.0123"},
                                     {"name": "num_layers", "value": "3"}],
            "observation": {"metrics": [{"name": "loss", "min": "0.1", "max": "0.9", "latest": "0.1"}]},
        },
        "runningTrialList": ["tune-a"],
        "pendingTrialList": ["tune-b"],
        "failedTrialList": ["tune-c"],
        "succeededTrialList": ["tune-abcd1234"],
        "killedTrialList": ["tune-d"],
        "earlyStoppedTrialList": ["tune-e"],
        "metricsUnavailableTrialList": ["tune-f"],
        "trials": 7,
        "trialsSucceeded": 1,
        "trialsFailed": 1,
        "trialsKilled": 1,
        "trialsPending": 1,
        "trialsRunning": 1,
        "trialsEarlyStopped": 1,
        "trialMetricsUnavailable": 1,
    }
    obj["status"] = copy.deepcopy(status)
    result = validate(obj)
    assert result.warnings == []
    assert result.object["status"] == status


def test_experiment_status_counts_are_checked() -> None:
    obj = experiment()
    obj["status"] = {"trials": -1}
    assert error(obj) == "status.trials: Invalid value: -1: must be greater than or equal to 0"


def trial(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
            "metadata": {"name": "tune-abcd1234", "namespace": "kubeflow",
                         "labels": {"katib.kubeflow.org/experiment": "tune"}},
            "spec": spec}


def test_trial_round_trip() -> None:
    run_spec = job_template(["train", "--lr=0.01"])
    run_spec["metadata"] = {"name": "tune-abcd1234", "namespace": "kubeflow"}
    spec = {
        "objective": {"type": "minimize", "objectiveMetricName": "loss",
                      "metricStrategies": [{"name": "loss", "value": "min"}]},
        "parameterAssignments": [{"name": "learning_rate", "value": "0.01"}],
        "earlyStoppingRules": [{"name": "loss", "value": "0.5", "comparison": "greater", "startStep": 4}],
        "runSpec": run_spec,
        "retainRun": False,
        "metricsCollector": {"collector": {"kind": "StdOut"}},
        "primaryPodLabels": {"training.kubeflow.org/job-role": "master"},
        "primaryContainerName": "training",
        "successCondition": DEFAULT_JOB_SUCCESS_CONDITION,
        "failureCondition": DEFAULT_JOB_FAILURE_CONDITION,
        "labels": {"katib.kubeflow.org/trial": "tune-abcd1234"},
    }
    status = {
        "startTime": "2025-01-01T00:00:00Z",
        "completionTime": "2025-01-01T00:10:00Z",
        "lastReconcileTime": "2025-01-01T00:10:00Z",
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "TrialSucceeded", "message": "done"}],
        "observation": {"metrics": [{"name": "loss", "min": "0.2", "max": "0.8", "latest": "0.2"},
                                    {"name": "acc", "min": "unavailable", "max": "unavailable",
                                     "latest": "unavailable"}]},
    }
    obj = trial(**copy.deepcopy(spec))
    obj["status"] = copy.deepcopy(status)
    result = validate(obj)
    assert result.warnings == []
    assert result.object["spec"] == spec
    assert result.object["status"] == status


def test_trial_rules() -> None:
    assert [p.split(": ", 1)[1] for p in errors(trial(runSpec={"spec": {}}))] == [
        "spec.runSpec.apiVersion: Required value", "spec.runSpec.kind: Required value"]
    assert error(trial(earlyStoppingRules=[{"name": "loss", "value": "1", "comparison": "lt"}])) == (
        'spec.earlyStoppingRules[0].comparison: Unsupported value: "lt": supported values: "equal", "less", '
        '"greater"')
    assert error(trial(parameterAssignments=[{"name": "lr", "value": 0.1}])) == (
        "spec.parameterAssignments[0].value: Invalid value: 0.1: must be of type string")


def test_suggestion_round_trip() -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Suggestion",
        "metadata": {"name": "tune", "namespace": "kubeflow"},
        "spec": {"algorithm": {"algorithmName": "hyperband",
                               "algorithmSettings": [{"name": "resource_name", "value": "epochs"}]},
                 "earlyStopping": {"algorithmName": "medianstop"},
                 "requests": 6,
                 "resumePolicy": "FromVolume"},
        "status": {
            "algorithmSettings": [{"name": "s_max", "value": "2"}, {"name": "current_s", "value": "1"}],
            "suggestionCount": 2,
            "suggestions": [
                {"name": "tune-aaaaaaaa", "parameterAssignments": [{"name": "lr", "value": "0.1"}],
                 "labels": {"bracket": "1"}},
                {"name": "tune-bbbbbbbb", "parameterAssignments": [{"name": "lr", "value": "0.2"}],
                 "earlyStoppingRules": [{"name": "loss", "value": "0.4", "comparison": "less", "startStep": 3}]},
            ],
            "startTime": "2025-01-01T00:00:00Z",
            "conditions": [{"type": "Running", "status": "True", "reason": "SuggestionRunning"}],
        },
    }
    result = validate(copy.deepcopy(obj))
    assert result.warnings == []
    assert result.object == {**obj, "metadata": obj["metadata"]}
    bad = copy.deepcopy(obj)
    bad["spec"]["requests"] = -2
    assert error(bad) == "spec.requests: Invalid value: -2: must be greater than or equal to 0"
