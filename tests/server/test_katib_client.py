"""Katib's own ``KatibClient`` (``kubeflow-katib``) against a real control plane: an Experiment made from
the SDK's typed models, waited for and read back, and ``tune`` with a Python objective.

The SDK runs from ``$TRIMARAN_KATIB_PYTHON`` (``scripts/test.sh`` builds ``.venv-katib``). ``tune`` wraps
the objective's source in ``bash -c`` (it writes it to a file under ``mktemp -d`` and runs ``python -u``) as a
batch Job's container ``training-container``; metrics come from its stdout (Katib's StdOut collector,
``name=value`` lines). The generated script imports nothing but what the objective imports, and ``python``
in a pod is the control plane's interpreter, so an objective may import what that environment has; one that
needs the SDK itself (``report_metrics``) runs with the SDK's interpreter when ``env_per_trial`` puts its
``bin`` first on ``PATH``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.server.sdk import run_client, venv_python
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

MAKE_EXPERIMENT = r'''
import json, sys
from kubernetes.client import V1ObjectMeta
from kubeflow.katib import (KatibClient, V1beta1AlgorithmSpec, V1beta1Experiment, V1beta1ExperimentSpec,
                            V1beta1FeasibleSpace, V1beta1ObjectiveSpec, V1beta1ParameterSpec, V1beta1TrialTemplate,
                            V1beta1TrialParameterSpec)


def quadratic(name, trials, parallel, retain=False):
    code = "import sys; x = float(sys.argv[1]); print(f'loss={(x - 2) ** 2}')"
    trial_spec = {
        "apiVersion": "batch/v1", "kind": "Job",
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "training-container", "image": "python:3.11",
            "command": ["python", "-c", code, "${trialParameters.x}"]}]}}},
    }
    return V1beta1Experiment(
        api_version="kubeflow.org/v1beta1", kind="Experiment",
        metadata=V1ObjectMeta(name=name, namespace="default"),
        spec=V1beta1ExperimentSpec(
            max_trial_count=trials, parallel_trial_count=parallel, max_failed_trial_count=1,
            objective=V1beta1ObjectiveSpec(type="minimize", objective_metric_name="loss"),
            algorithm=V1beta1AlgorithmSpec(algorithm_name="random"),
            parameters=[V1beta1ParameterSpec(name="x", parameter_type="double",
                                             feasible_space=V1beta1FeasibleSpace(min="-5", max="5"))],
            trial_template=V1beta1TrialTemplate(
                primary_container_name="training-container", retain=retain,
                trial_parameters=[V1beta1TrialParameterSpec(name="x", description="x", reference="x")],
                trial_spec=trial_spec)))


katib = KatibClient()  # KUBECONFIG, namespace "default"
'''

EXPERIMENT = MAKE_EXPERIMENT + r'''
katib.create_experiment(quadratic("quadratic", trials=4, parallel=2))
done = katib.wait_for_experiment_condition("quadratic", timeout=240, polling_interval=0.5)
best = katib.get_optimal_hyperparameters("quadratic")
trials = katib.list_trials("quadratic")
suggestion = katib.get_suggestion("quadratic")
katib.delete_experiment("quadratic")
print(json.dumps({
    "conditions": [(c.type, c.status) for c in done.status.conditions],
    "succeeded": done.status.trials_succeeded,
    "best": {"name": best.best_trial_name,
             "x": [(a.name, a.value) for a in best.parameter_assignments],
             "metrics": [(m.name, m.latest, m.min) for m in best.observation.metrics]},
    "trials": sorted((t.metadata.name, t.status.conditions[-1].type, t.status.observation.metrics[0].latest)
                     for t in trials),
    "suggestion": suggestion.status.suggestion_count if suggestion.status else None,
}))
'''

TUNE = r'''
import json
import kubeflow.katib as katib


def objective(parameters):
    import math
    x = float(parameters["x"])
    for step in range(3):
        print(f"loss={(x - 2) ** 2 + math.exp(-step):.6f}")
    print(f"accuracy={1 / (1 + abs(x - 2)):.6f}")


client = katib.KatibClient()
client.tune(name="tuned", objective=objective, parameters={"x": katib.search.double(min=-5, max=5)},
            objective_metric_name="loss", additional_metric_names=["accuracy"], objective_type="minimize",
            algorithm_name="random", max_trial_count=3, parallel_trial_count=3, max_failed_trial_count=1)
done = client.wait_for_experiment_condition("tuned", timeout=240, polling_interval=0.5)
best = client.get_optimal_hyperparameters("tuned")
trials = client.list_trials("tuned")
experiment = client.get_experiment("tuned")
template = experiment.spec.trial_template
print(json.dumps({
    "succeeded": done.status.trials_succeeded,
    "collector": experiment.spec.metrics_collector_spec.collector.kind,
    "kind": template.trial_spec["kind"],
    "container": template.trial_spec["spec"]["template"]["spec"]["containers"][0]["command"],
    "best": {"x": float(best.parameter_assignments[0].value),
             "metrics": {m.name: float(m.latest) for m in best.observation.metrics}},
    "trials": sorted([t.status.conditions[-1].type for t in trials]),
}))
'''
# An objective that needs the SDK inside the trial (e.g. to call katib.report_metrics) runs with the
# SDK's own interpreter: the container's PATH (env_per_trial) names where `python` is found.
TUNE_IN_SDK_VENV = r'''
import json, os, sys
import kubeflow.katib as katib


def objective(parameters):
    import os, sys
    import kubeflow.katib  # noqa: F401 - importable only in the SDK's environment
    print(f"loss={float(parameters['x']) ** 2}")
    print(f"sdk_python={int(sys.prefix == os.environ['SDK_PREFIX'])}")


client = katib.KatibClient()
client.tune(name="in-venv", objective=objective, parameters={"x": katib.search.double(min=-1, max=1)},
            objective_metric_name="loss", additional_metric_names=["sdk_python"], objective_type="minimize",
            max_trial_count=1, parallel_trial_count=1, max_failed_trial_count=1,
            env_per_trial={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "SDK_PREFIX": sys.prefix})
client.wait_for_experiment_condition("in-venv", timeout=240, polling_interval=0.5)
trial = client.list_trials("in-venv")[0]
print(json.dumps({"state": trial.status.conditions[-1].type,
                  "metrics": {m.name: float(m.latest) for m in trial.status.observation.metrics}}))
'''

LOGS = MAKE_EXPERIMENT + r'''
katib.create_experiment(quadratic("logged", trials=1, parallel=1, retain=True))
katib.wait_for_experiment_condition("logged", timeout=240, polling_interval=0.5)
trial = katib.list_trials("logged")[0]
print(json.dumps({"logs": list(katib.get_job_logs("logged", trial.metadata.name)),
                  "loss": trial.status.observation.metrics[0].latest}))
'''


@pytest.fixture
def katib_python() -> str:
    """Requested before ``plane``, so a skip does not start a control plane first."""
    return venv_python("TRIMARAN_KATIB_PYTHON", "kubeflow.katib", ".venv-katib")


def test_katib_client_creates_and_waits_for_an_experiment(katib_python: str, plane: ControlPlaneHandle,
                                                          tmp_path: Path) -> None:
    out = run_client(katib_python, plane, EXPERIMENT, tmp_path, timeout=300)
    assert dict(out["conditions"])["Succeeded"] == "True"
    assert out["succeeded"] == 4
    trials = out["trials"]
    assert len(trials) == 4 and {state for _, state, _ in trials} == {"Succeeded"}
    best_loss = min(float(loss) for _, _, loss in trials)
    best = out["best"]
    assert best["name"] in {name for name, _, _ in trials}
    assert [name for name, _ in best["x"]] == ["x"]
    assert best["metrics"][0][0] == "loss" and float(best["metrics"][0][1]) == best_loss
    assert float(best["metrics"][0][1]) == pytest.approx((float(best["x"][0][1]) - 2) ** 2)
    assert out["suggestion"] == 4


def test_katib_client_tune_runs_a_python_objective(katib_python: str, plane: ControlPlaneHandle,
                                                   tmp_path: Path) -> None:
    out = run_client(katib_python, plane, TUNE, tmp_path, timeout=300)
    assert out["succeeded"] == 3 and out["trials"] == ["Succeeded"] * 3
    assert out["collector"] == "StdOut" and out["kind"] == "Job"
    assert out["container"] == ["bash", "-c"]
    x, metrics = out["best"]["x"], out["best"]["metrics"]
    # StdOut keeps the last value printed: step 2's loss.
    assert metrics["loss"] == pytest.approx((x - 2) ** 2 + 0.135335, abs=1e-5)
    assert metrics["accuracy"] == pytest.approx(1 / (1 + abs(x - 2)), abs=1e-5)


def test_katib_client_tune_runs_trials_with_the_sdks_interpreter(katib_python: str, plane: ControlPlaneHandle,
                                                                 tmp_path: Path) -> None:
    out = run_client(katib_python, plane, TUNE_IN_SDK_VENV, tmp_path, timeout=300)
    assert out["state"] == "Succeeded"
    assert out["metrics"]["sdk_python"] == 1.0


def test_katib_client_reads_a_retained_trials_logs(katib_python: str, plane: ControlPlaneHandle,
                                                   tmp_path: Path) -> None:
    out = run_client(katib_python, plane, LOGS, tmp_path, timeout=300)
    assert out["logs"] == [f"loss={out['loss']}"]
