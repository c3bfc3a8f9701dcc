"""Trainer v2 kinds: the CRDs' and webhooks' rules with upstream's wording, earlier v1alpha1
fields stored as runtimePatches, stored objects valid against the v2.3 CRDs, and the built-in
runtimes installed once on a real store."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.builders import schema_errors
from trimaran.api import ManifestError, validate
from trimaran.api.trainer import TrainJob, runtime_errors
from trimaran.controllers.trainer.runtimes import builtin_runtimes, install_builtin_runtimes
from trimaran.store import open_store

SCHEMAS = Path("/work/shared/schemas/kubeflow-trainer-v2")


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    path = SCHEMAS / f"trainer.kubeflow.org_{kind.lower()}s.yaml"
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 10,000 lines
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _trainjob(trainer: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, **({"trainer": trainer} if trainer else {}),
                     **spec}}


def _problems(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        validate(obj)
    return caught.value.problems


def _runtimes() -> dict[str, dict]:
    return {r["metadata"]["name"]: r for r in builtin_runtimes()}


def test_defaults_are_the_crds():
    spec = validate(_trainjob({"numNodes": 2})).object["spec"]
    assert spec["runtimeRef"] == {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                  "kind": "ClusterTrainingRuntime"}
    assert (spec["suspend"], spec["managedBy"]) == (False, "trainer.kubeflow.org/trainjob-controller")


@pytest.mark.parametrize(("trainer", "spec", "expected"), [
    ({"numNodes": 0}, {}, "spec.trainer.numNodes: Invalid value: 0: should be greater than or equal to 1"),
    ({"numProcPerNode": "many"}, {},
     'spec.trainer.numProcPerNode: Invalid value: "many": must have an int value or [auto cpu gpu]'),
    ({"numProcPerNode": 0}, {}, "spec.trainer.numProcPerNode: Invalid value: 0: should be greater than or equal to 1"),
    (None, {"managedBy": "someone/else"}, 'spec.managedBy: Invalid value: "someone/else": ManagedBy must be '
     "trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"),
    (None, {"activeDeadlineSeconds": 0},
     "spec.activeDeadlineSeconds: Invalid value: 0: should be greater than or equal to 1"),
    (None, {"initializer": {"dataset": {"storageUri": "not a uri"}}},
     'spec.initializer.dataset.storageUri: Invalid value: "not a uri": storageUri may be empty, or it must be a '
     "valid URI (scheme://...)"),
    (None, {"runtimeRef": {"name": "x", "kind": "Deployment"}}, 'spec.runtimeRef: Invalid value: "object": the '
     "specified runtime is not supported: Deployment.trainer.kubeflow.org"),
    (None, {"runtimePatches": [{"manager": "a"}, {"manager": "a"}]},
     'spec.runtimePatches[1]: Duplicate value: "object"'),
])
def test_bad_trainjobs_are_refused_with_the_field_path(trainer, spec, expected):
    assert f'TrainJob "tj": {expected}' in _problems(_trainjob(trainer, **spec))


def _runtime_errors(runtime: str, env: list[str]) -> list[str]:
    job = validate(_trainjob({"env": [{"name": n, "value": "1"} for n in env]}, runtimeRef={"name": runtime})).object
    return [str(e) for e in runtime_errors(job, lambda kind, ns, name: _runtimes().get(name))]


def test_a_frameworks_reserved_variables_are_refused_in_its_plugins_words():
    assert _runtime_errors("torch-distributed", ["PET_NODE_RANK", "PET_NNODES", "OTHER"]) == [
        'spec.trainer.env: Invalid value: "array": must not have reserved envs, invalid envs configured: '
        "[PET_NNODES PET_NODE_RANK]"]
    assert _runtime_errors("xgboost-distributed", ["OTHER", "DMLC_TRACKER_PORT"]) == [
        "spec.trainer.env[1]: Forbidden: DMLC_TRACKER_PORT is reserved for the XGBoost runtime"]
    # jax's plugin reserves nothing, nor does MPI's.
    assert _runtime_errors("jax-distributed", ["JAX_PROCESS_ID"]) == []
    assert _runtime_errors("deepspeed-distributed", ["PET_NNODES"]) == []


def test_a_missing_runtime_is_refused_in_the_webhooks_words():
    job = validate(_trainjob(runtimeRef={"name": "mine", "kind": "TrainingRuntime"})).object
    asked = []
    errors = runtime_errors(job, lambda kind, ns, name: asked.append((kind, ns, name)))
    assert asked == [("TrainingRuntime", "default", "mine")]
    assert [str(e) for e in errors] == [
        'spec.runtimeRef: Invalid value: "object": trainingruntimes.trainer.kubeflow.org "mine" not found: '
        "specified trainingRuntime must be created before the TrainJob is created"]


def test_earlier_fields_are_stored_as_runtime_patches():
    old = _trainjob({"numProcPerNode": "auto"}, labels={"team": "a"},
                    podSpecOverrides=[{"targetJobs": [{"name": "node"}], "nodeSelector": {"disk": "ssd"}}],
                    podTemplateOverrides=[{"targetJobs": [{"name": "node"}], "metadata": {"labels": {"x": "y"}},
                                           "spec": {"serviceAccountName": "trainer"}}])
    result = validate(old)
    spec = result.object["spec"]
    assert "numProcPerNode" not in spec["trainer"], "numProcPerNode 'auto' is v2.3's unset"
    assert not {"labels", "podSpecOverrides", "podTemplateOverrides"} & set(spec)
    assert [p["manager"] for p in spec["runtimePatches"]] == [
        "trainer.kubeflow.org/spec-labels", "trainer.kubeflow.org/podSpecOverrides-0",
        "trainer.kubeflow.org/podTemplateOverrides-0"]
    pod = spec["runtimePatches"][2]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    assert pod["spec"]["template"] == {"metadata": {"labels": {"x": "y"}}, "spec": {"serviceAccountName": "trainer"}}
    assert any("podSpecOverrides is stored as spec.runtimePatches" in w for w in result.warnings)
    assert schema_errors(result.object, _schema("TrainJob")) == []


def test_stored_runtimes_and_trainjobs_validate_against_the_crds():
    for runtime in builtin_runtimes():
        assert schema_errors(runtime, _schema("ClusterTrainingRuntime")) == [], runtime["metadata"]["name"]
    job = validate(_trainjob({"numNodes": 2, "command": ["torchrun", "x.py"], "resourcesPerNode": {
        "limits": {"cpu": "2"}}}, initializer={"dataset": {"storageUri": "hf://org/data"}})).object
    assert schema_errors(job, _schema("TrainJob")) == []


def test_runtime_rules():
    torch = _runtimes()["torch-distributed"]
    two = copy.deepcopy(torch)
    two["spec"]["mlPolicy"]["jax"] = {}
    two["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    problems = _problems(two)
    assert 'ClusterTrainingRuntime "torch-distributed": spec.mlPolicy: Invalid value: "object": Only one of the ' \
           "policy can be configured" in problems
    assert 'ClusterTrainingRuntime "torch-distributed": spec.template.spec.replicatedJobs[0].replicas: Invalid ' \
           "value: 2: always must be 1" in problems
    bad_dep = copy.deepcopy(_runtimes()["deepspeed-distributed"])
    bad_dep["spec"]["template"]["spec"]["replicatedJobs"][1]["dependsOn"][0]["name"] = "nowhere"
    assert any("spec.template.spec.replicatedJobs[1].dependsOn[0].name" in p for p in _problems(bad_dep))


def test_what_may_change_after_create():
    old = validate(_trainjob({"numNodes": 1})).object
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    assert TrainJob.update_errors(old, new) == []
    new["spec"]["trainer"]["numNodes"] = 3
    assert [str(e) for e in TrainJob.update_errors(old, new)] == [
        'spec.trainer: Invalid value: "object": field is immutable']


def test_builtin_runtimes_are_installed_once_and_edits_survive_a_restart(tmp_path):
    store = open_store(tmp_path / "trimaran.db")
    try:
        assert sorted(install_builtin_runtimes(store)) == ["deepspeed-distributed", "jax-distributed",
                                                            "mlx-distributed", "torch-distributed",
                                                            "xgboost-distributed"]
        marker = store.get("ConfigMap", "kubeflow-system", "kubeflow-trainer-public")
        assert marker["data"] == {"kubeflow_trainer_version": "v2.3.0"}
        edited = store.get("ClusterTrainingRuntime", "", "torch-distributed")
        edited["spec"]["mlPolicy"]["numNodes"] = 4
        store.update(edited)
        store.delete("ClusterTrainingRuntime", "", "mlx-distributed")
        assert install_builtin_runtimes(store) == []
        assert store.get("ClusterTrainingRuntime", "", "torch-distributed")["spec"]["mlPolicy"]["numNodes"] == 4
        assert "mlx-distributed" not in {r["metadata"]["name"] for r in store.list("ClusterTrainingRuntime")}
    finally:
        store.close()
