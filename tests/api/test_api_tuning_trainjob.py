"""Katib trials of kind TrainJob (Trainer v2), as ``OptimizerClient.optimize`` writes them: Katib's
defaults for the kind and the rules of a trial template."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_api_tuning import experiment
from trimaran.api import DEFAULT_JOB_FAILURE_CONDITION, DEFAULT_JOB_SUCCESS_CONDITION, ManifestError, validate


def trainjob_experiment(**template: Any) -> dict[str, Any]:
    """An experiment whose trials are TrainJobs of ``torch-distributed`` (the SDK's template shape)."""
    trial_spec = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
            "trainer": {"numNodes": 2, "command": ["bash", "-c", "train(**{'lr': '${trialParameters.lr}', "
                                                   "'layers': '${trialParameters.layers}'})"]},
        },
    }
    base = {"primaryContainerName": "node", "retain": True,
            "trialParameters": [{"name": "lr", "reference": "learning_rate"},
                                {"name": "layers", "reference": "num_layers"}],
            "trialSpec": trial_spec}
    base.update(template)
    return experiment(trialTemplate=base)


def test_trainjob_trials_get_katibs_defaults() -> None:
    template = validate(trainjob_experiment()).object["spec"]["trialTemplate"]
    assert template["successCondition"] == DEFAULT_JOB_SUCCESS_CONDITION
    assert template["failureCondition"] == DEFAULT_JOB_FAILURE_CONDITION
    # Metrics are read from node 0 (torchrun's rank 0), whose container is the runtime's "node".
    assert template["primaryPodLabels"] == {"jobset.sigs.k8s.io/replicatedjob-name": "node",
                                            "batch.kubernetes.io/job-completion-index": "0"}


def test_trainjob_trials_keep_given_conditions_and_labels() -> None:
    given = {"successCondition": 'status.conditions.#(type=="Done")#|#(status=="True")#',
             "primaryPodLabels": {"jobset.sigs.k8s.io/replicatedjob-name": "launcher"}}
    template = validate(trainjob_experiment(**given)).object["spec"]["trialTemplate"]
    assert template["successCondition"] == given["successCondition"]
    assert template["primaryPodLabels"] == given["primaryPodLabels"]
    assert template["failureCondition"] == DEFAULT_JOB_FAILURE_CONDITION


def test_a_trainjob_trial_of_another_version_is_refused() -> None:
    obj = trainjob_experiment()
    obj["spec"]["trialTemplate"]["trialSpec"]["apiVersion"] = "trainer.kubeflow.org/v1"
    with pytest.raises(ManifestError) as info:
        validate(obj)
    assert [p.split(": ", 1)[1] for p in info.value.problems] == [
        'spec.trialTemplate.trialSpec.apiVersion: Unsupported value: "trainer.kubeflow.org/v1": '
        'supported values: "trainer.kubeflow.org/v1alpha1"']
