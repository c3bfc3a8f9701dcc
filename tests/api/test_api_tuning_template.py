"""Rendering a Katib trial template: trial-parameter references and placeholder substitution."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.builders import FIXTURES
from trimaran.api import (
    ExperimentSpec,
    TrialTemplateError,
    check_trial_spec,
    is_metadata_reference,
    load_and_validate,
    resolve_metadata_reference,
    substitute_trial_template,
    template_parameter_names,
    trial_parameter_refs,
    trial_parameter_values,
)

META = {
    "name": "tune-abcd1234",
    "namespace": "kubeflow",
    "labels": {"katib.kubeflow.org/experiment": "tune", "team": "vision"},
    "annotations": {"example.com/owner": "ana"},
}


def job(*command: str, **pod: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "containers": [{"name": "training", "image": "python:3.11", "command": list(command)}],
            "restartPolicy": "Never", **pod}}},
    }


def command_of(obj: dict[str, Any]) -> list[str]:
    return obj["spec"]["template"]["spec"]["containers"][0]["command"]


# --- substitution -------------------------------------------------------------------------------


def test_values_replace_placeholders_inside_argv_elements() -> None:
    template = job("python", "train.py", "--lr=${trialParameters.lr}", "${trialParameters.layers}")
    out = substitute_trial_template(template, {"lr": "0.01", "layers": "3"}, META)
    assert command_of(out) == ["python", "train.py", "--lr=0.01", "3"]
    assert out["spec"]["backoffLimit"] == 0  # non-strings untouched
    assert out["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    "value",
    ["adam w", "a'b\"c", "$(rm -rf /)", "`id`", "x; echo hi", "--flag", "", "${HOME}", "a\nb", "${trialSpec.Nope}"],
)
def test_values_stay_single_plain_strings(value: str) -> None:
    """No shell, no splitting, no expansion: the value lands in its argv element verbatim."""
    template = job("train", "--opt=${trialParameters.opt}", "${trialParameters.opt}")
    out = substitute_trial_template(template, {"opt": value}, META)
    assert command_of(out) == ["train", f"--opt={value}", value]


def test_numbers_stay_strings() -> None:
    template = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "${trialParameters.n}"}}}}
    out = substitute_trial_template(template, {"n": "4"}, META)
    assert out["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == "4"


def test_one_pass_never_re_expands() -> None:
    template = job("train", "${trialParameters.a}", "${trialParameters.b}")
    out = substitute_trial_template(template, {"a": "${trialParameters.b}", "b": "2"}, META)
    assert command_of(out) == ["train", "${trialParameters.b}", "2"]


def test_several_placeholders_in_one_string_env_and_keys() -> None:
    template = job("sh", "-c", "echo ${trialParameters.a}-${trialParameters.b}")
    pod = template["spec"]["template"]
    pod["metadata"] = {"labels": {"lr-${trialParameters.a}": "x"}}
    pod["spec"]["containers"][0]["env"] = [{"name": "B", "value": "${trialParameters.b}"}]
    out = substitute_trial_template(template, {"a": "1", "b": "two"}, META)
    assert command_of(out)[2] == "echo 1-two"
    assert out["spec"]["template"]["metadata"]["labels"] == {"lr-1": "x"}
    assert out["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "B", "value": "two"}]


def test_input_is_not_modified() -> None:
    template = job("train", "--lr=${trialParameters.lr}")
    before = copy.deepcopy(template)
    out = substitute_trial_template(template, {"lr": "0.1"}, META)
    assert template == before
    out["spec"]["template"]["spec"]["containers"][0]["command"].append("x")
    assert template == before


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("${trialSpec.Name}", "tune-abcd1234"),
        ("${trialSpec.Namespace}", "kubeflow"),
        ("${trialSpec.Kind}", "Job"),  # from the template when trial_meta has none
        ("${trialSpec.APIVersion}", "batch/v1"),
        ("${trialSpec.Labels[team]}", "vision"),
        ("${trialSpec.Labels[katib.kubeflow.org/experiment]}", "tune"),
        ("${trialSpec.Annotations[example.com/owner]}", "ana"),
    ],
)
def test_metadata_references(reference: str, expected: str) -> None:
    out = substitute_trial_template(job("train", "--out=/models/${trialParameters.x}"), {"x": reference}, META)
    assert command_of(out) == ["train", f"--out=/models/{expected}"]
    assert resolve_metadata_reference(reference, {**META, "kind": "Job", "apiVersion": "batch/v1"}) == expected


def test_trial_meta_kind_wins_over_the_template() -> None:
    out = substitute_trial_template(job("${trialParameters.k}"), {"k": "${trialSpec.Kind}"}, {**META, "kind": "X"})
    assert command_of(out) == ["X"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "trial parameter 'lr' used in the trial template has no value"),
        ({"lr": "${trialSpec.Labels[missing]}"}, "${trialSpec.Labels[missing]}: the trial has no labels key 'missing'"),
        ({"lr": "${trialSpec.Annotations[a]}"}, "${trialSpec.Annotations[a]}: the trial has no annotations key 'a'"),
    ],
)
def test_missing_values_raise(values: dict[str, str], message: str) -> None:
    with pytest.raises(TrialTemplateError) as info:
        substitute_trial_template(job("--lr=${trialParameters.lr}"), values, {"name": "t"})
    assert str(info.value) == message


def test_missing_namespace_raises() -> None:
    with pytest.raises(TrialTemplateError, match="the trial has no namespace"):
        substitute_trial_template(job("${trialParameters.ns}"), {"ns": "${trialSpec.Namespace}"}, {"name": "t"})


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("${trialSpec.Name}", True),
        ("${trialSpec.Labels[a/b]}", True),
        ("${trialSpec.Annotations[x]}", True),
        ("${trialSpec.Uid}", False),
        ("${trialSpec.Labels}", False),
        ("${trialSpec.Spec[x]}", False),
        ("trialSpec.Name", False),
        ("learning_rate", False),
    ],
)
def test_is_metadata_reference(reference: str, expected: bool) -> None:
    assert is_metadata_reference(reference) is expected


def test_resolve_rejects_non_references() -> None:
    with pytest.raises(TrialTemplateError, match="is not a trial metadata reference"):
        resolve_metadata_reference("lr", META)


# --- references and values from an experiment ---------------------------------------------------


def seed_spec() -> dict[str, Any]:
    [m] = load_and_validate(FIXTURES / "katib_seed_experiment_cnn.yaml")
    return m.object["spec"]


def test_trial_parameter_refs_of_the_seed() -> None:
    refs = trial_parameter_refs(seed_spec())
    assert refs == {"learningRate": "learning_rate", "batchSize": "batch_size", "numLayers": "num_layers",
                    "optimizer": "optimizer", "dropoutRate": "dropout_rate"}
    assert trial_parameter_refs(ExperimentSpec.model_validate(seed_spec())) == refs
    assert trial_parameter_refs({"objective": {}}) == {}


def test_render_the_seed_trial_for_one_assignment() -> None:
    spec = seed_spec()
    assignments = [{"name": "learning_rate", "value": "0.0123"}, {"name": "batch_size", "value": "64"},
                   {"name": "num_layers", "value": "4"}, {"name": "optimizer", "value": "sgd"},
                   {"name": "dropout_rate", "value": "0.25"}]
    values = trial_parameter_values(spec, assignments)
    assert values == {"learningRate": "0.0123", "batchSize": "64", "numLayers": "4", "optimizer": "sgd",
                      "dropoutRate": "0.25"}
    run_spec = substitute_trial_template(spec["trialTemplate"]["trialSpec"], values, META)
    assert run_spec["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "python", "/app/train.py", "--learning_rate=0.0123", "--batch_size=64", "--num_layers=4",
        "--optimizer=sgd", "--dropout_rate=0.25"]
    assert "${" not in str(run_spec)


def test_values_pass_metadata_references_through() -> None:
    spec = {"trialTemplate": {"trialParameters": [{"name": "lr", "reference": "learning_rate"},
                                                  {"name": "trialName", "reference": "${trialSpec.Name}"}]}}
    values = trial_parameter_values(spec, {"learning_rate": "0.1"})
    assert values == {"lr": "0.1", "trialName": "${trialSpec.Name}"}
    out = substitute_trial_template(job("--lr=${trialParameters.lr}", "--out=/m/${trialParameters.trialName}"),
                                    values, META)
    assert command_of(out) == ["--lr=0.1", "--out=/m/tune-abcd1234"]


def test_values_need_every_referenced_assignment() -> None:
    spec = {"trialTemplate": {"trialParameters": [{"name": "lr", "reference": "learning_rate"}]}}
    with pytest.raises(TrialTemplateError, match="trial parameter 'lr': no assignment for parameter 'learning_rate'"):
        trial_parameter_values(spec, {"num_layers": "2"})


def test_template_parameter_names() -> None:
    template = job("--a=${trialParameters.a}", "${trialParameters.b}${trialParameters.a}", "${trialParams.c}")
    assert template_parameter_names(template) == ["a", "b"]


# --- checking a template read from a ConfigMap --------------------------------------------------


def test_check_trial_spec_for_a_config_map_template() -> None:
    template = job("--a=${trialParameters.a}", "${trialParameters.c}")
    template["metadata"] = {"name": "fixed"}
    problems = [str(e) for e in check_trial_spec(
        template, ["a", "b"], "trainer", path="configMap[job.yaml]", parameters_path="trialParameters",
        container_path="primaryContainerName")]
    assert problems == [
        "configMap[job.yaml].metadata.name: Forbidden: metadata.name and metadata.namespace in spec.trialTemplate "
        "must be omitted",
        'configMap[job.yaml].spec.template.spec.containers[0].command[1]: Invalid value: "${trialParameters.c}": '
        'parameter "c" in spec.trialTemplate not found in spec.trialTemplate.trialParameters',
        'trialParameters[1].name: Invalid value: "b": parameter name: b in spec.trialParameters not found in '
        "spec.trialTemplate",
        'primaryContainerName: Invalid value: "trainer": must be the name of a container of the trial\'s pods '
        '(containers: "training")',
    ]
    assert check_trial_spec(job("--a=${trialParameters.a}"), ["a"], "training") == []
