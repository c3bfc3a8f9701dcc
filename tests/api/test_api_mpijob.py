"""MPIJob in both versions: the training operator's (kubeflow.org/v1) and the MPI operator's
(kubeflow.org/v2beta1). Their defaults, their rules with field paths, and what we store against
each CRD's structural schema."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.builders import FIXTURES, container, replica, schema_errors
from trimaran.api import MPIJOB, ManifestError, MPIJob, MPIJobV2Beta1, for_object, load_and_validate, lookup, validate

SCHEMAS = Path("/work/shared/schemas")
CRDS = {
    "kubeflow.org/v1": SCHEMAS / "kubeflow-training" / "kubeflow.org_mpijobs.yaml",
    "kubeflow.org/v2beta1": SCHEMAS / "mpi-operator" / "kubeflow.org_mpijobs.yaml",
}


def mpijob(specs: dict[str, Any], version: str = "v2beta1", name: str = "pi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"kubeflow.org/{version}",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {"mpiReplicaSpecs": specs, **spec},
    }


def launcher(**extra: Any) -> dict[str, Any]:
    return replica([container("launcher", command=["mpirun", "-np", "2", "python", "pi.py"])], **extra)


def worker(**extra: Any) -> dict[str, Any]:
    return replica([container("worker")], **extra)


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


# --- kinds --------------------------------------------------------------------------------------


def test_both_versions_are_registered_as_one_kind() -> None:
    assert for_object("kubeflow.org/v1", "MPIJob").model is MPIJob
    assert for_object("kubeflow.org/v2beta1", "MPIJob").model is MPIJobV2Beta1
    assert lookup("mpijobs").model is MPIJob  # registered first, as the other v1 kinds
    assert lookup("mpijobs.v2beta1.kubeflow.org").model is MPIJobV2Beta1
    assert lookup("mpijob").plural == "mpijobs"
    assert (MPIJOB.default_container, MPIJOB.port_name, MPIJOB.default_port) == ("mpi", "mpi-port", 9999)
    assert MPIJOB.operator_name == "mpijob-controller"


# --- defaults -----------------------------------------------------------------------------------


def test_v2beta1_defaults() -> None:
    spec = validate(mpijob({"Launcher": launcher(), "Worker": worker(replicas=2)})).object["spec"]
    assert spec["slotsPerWorker"] == 1
    assert spec["runLauncherAsWorker"] is False
    assert spec["sshAuthMountPath"] == "/root/.ssh"
    assert spec["launcherCreationPolicy"] == "AtStartup"
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    specs = spec["mpiReplicaSpecs"]
    assert (specs["Launcher"]["replicas"], specs["Launcher"]["restartPolicy"]) == (1, "OnFailure")
    assert specs["Worker"]["restartPolicy"] == "Never"


def test_v1_defaults_and_the_deprecated_clean_pod_policy() -> None:
    job = mpijob({"launcher": launcher(), "worker": worker()}, version="v1", cleanPodPolicy="All")
    spec = validate(job).object["spec"]
    specs = spec["mpiReplicaSpecs"]
    assert list(specs) == ["Launcher", "Worker"]  # keys case-normalised as for the other kinds
    assert (specs["Launcher"]["replicas"], specs["Worker"]["replicas"]) == (1, 0)
    assert specs["Launcher"]["restartPolicy"] == specs["Worker"]["restartPolicy"] == "Never"
    assert spec["slotsPerWorker"] == 1
    assert spec["runPolicy"]["cleanPodPolicy"] == "All"
    assert "runLauncherAsWorker" not in spec  # v2beta1's fields stay out of v1
    # runPolicy's own value wins over the deprecated copy.
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "Running"}
    assert validate(job).object["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_v2beta1_has_no_top_level_clean_pod_policy() -> None:
    result = validate(mpijob({"Launcher": launcher()}, cleanPodPolicy="Running"))
    assert result.object["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    assert result.warnings == ['unknown field "spec.cleanPodPolicy" '
                               '(did you mean "spec.runPolicy.cleanPodPolicy"? It is ignored where it is)']


def test_given_values_kept() -> None:
    spec = validate(mpijob({"Launcher": launcher(restartPolicy="Never"), "Worker": worker(replicas=3)},
                           slotsPerWorker=4, runLauncherAsWorker=True, launcherCreationPolicy="WaitForWorkersReady",
                           mpiImplementation="Intel", sshAuthMountPath="/home/mpiuser/.ssh")).object["spec"]
    assert (spec["slotsPerWorker"], spec["runLauncherAsWorker"], spec["launcherCreationPolicy"]) == (
        4, True, "WaitForWorkersReady")
    assert (spec["mpiImplementation"], spec["sshAuthMountPath"]) == ("Intel", "/home/mpiuser/.ssh")
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"


# --- rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v2beta1"])
def test_launcher_required(version: str) -> None:
    assert errors(mpijob({"Worker": worker(replicas=2)}, version=version)) == [
        'MPIJob "pi": spec.mpiReplicaSpecs.Launcher: Required value: must have Launcher replica spec'
    ]


@pytest.mark.parametrize("version", ["v1", "v2beta1"])
def test_exactly_one_launcher(version: str) -> None:
    assert errors(mpijob({"Launcher": launcher(replicas=2)}, version=version)) == [
        'MPIJob "pi": spec.mpiReplicaSpecs.Launcher.replicas: Invalid value: 2: must be 1'
    ]


def test_replica_specs_required() -> None:
    problems = errors({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
                       "spec": {}})
    assert any("spec.mpiReplicaSpecs" in p and "Required" in p for p in problems), problems


def test_unknown_replica_type() -> None:
    problems = errors(mpijob({"Launcher": launcher(), "PS": worker()}))
    assert problems == ['MPIJob "pi": spec.mpiReplicaSpecs.PS: Unsupported value: "PS": '
                        'supported values: "Launcher", "Worker"']


def test_no_container_name_is_required() -> None:
    # Unlike TFJob's "tensorflow", MPIJob's "mpi" container name is only where exit codes are read.
    validate(mpijob({"Launcher": launcher(), "Worker": worker()}, version="v1"))


@pytest.mark.parametrize(("spec", "problem"), [
    ({"slotsPerWorker": 0}, "spec.slotsPerWorker: Invalid value: 0: must be greater than or equal to 1"),
    ({"mpiImplementation": "LAM"}, 'spec.mpiImplementation: Unsupported value: "LAM"'),
    ({"launcherCreationPolicy": "Later"}, 'spec.launcherCreationPolicy: Unsupported value: "Later"'),
    ({"runPolicy": {"cleanPodPolicy": "Sometimes"}}, 'spec.runPolicy.cleanPodPolicy: Unsupported value'),
    ({"runPolicy": {"managedBy": "kubeflow.org/training-operator"}},
     'spec.runPolicy.managedBy: Unsupported value: "kubeflow.org/training-operator": '
     'supported values: "kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"'),
])
def test_v2beta1_field_rules(spec: dict[str, Any], problem: str) -> None:
    problems = errors(mpijob({"Launcher": launcher(), "Worker": worker()}, **spec))
    assert any(problem in p for p in problems), problems


def test_v2beta1_restart_policies_are_a_batch_jobs() -> None:
    problems = errors(mpijob({"Launcher": launcher(restartPolicy="Always"),
                              "Worker": worker(restartPolicy="ExitCode")}))
    assert problems == [
        'MPIJob "pi": spec.mpiReplicaSpecs.Launcher.restartPolicy: Unsupported value: "Always": '
        'supported values: "Never", "OnFailure"',
        'MPIJob "pi": spec.mpiReplicaSpecs.Worker.restartPolicy: Unsupported value: "ExitCode": '
        'supported values: "Never", "OnFailure"',
    ]
    # The training operator's v1 MPIJob takes every v1 restart policy.
    validate(mpijob({"Launcher": launcher(restartPolicy="ExitCode"), "Worker": worker(restartPolicy="Always")},
                    version="v1"))


def test_v1_managed_by_is_the_training_operator() -> None:
    job = mpijob({"Launcher": launcher()}, version="v1", runPolicy={"managedBy": "kubeflow.org/training-operator"})
    validate(job)


def test_image_required() -> None:
    job = mpijob({"Launcher": replica([{"name": "launcher", "command": ["mpirun"]}])})
    assert any("spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].image: Required value" in p
               for p in errors(job))


def test_job_name_must_be_a_dns1035_label() -> None:
    assert any("metadata.name" in p for p in errors(mpijob({"Launcher": launcher()}, name="1pi")))


# --- the CRD schemas ----------------------------------------------------------------------------


def _schema(api_version: str) -> dict[str, Any]:
    path = CRDS[api_version]
    if not path.exists():
        pytest.skip("no CRD schema here")
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = api_version.split("/")[1]
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def _full(version: str) -> dict[str, Any]:
    job = mpijob({
        "Launcher": launcher(restartPolicy="OnFailure"),
        "Worker": replica([container("worker", env=[{"name": "A", "value": "b"}],
                                     resources={"limits": {"cpu": "1", "memory": "1Gi"}})], replicas=2),
    }, version=version, slotsPerWorker=2,
        runPolicy={"cleanPodPolicy": "Running", "backoffLimit": 3, "activeDeadlineSeconds": 600,
                   "ttlSecondsAfterFinished": 60, "schedulingPolicy": {"minAvailable": 3}})
    job["metadata"]["labels"] = {"team": "a"}
    if version == "v1":
        job["spec"]["mainContainer"] = "worker"
    else:
        job["spec"].update(runLauncherAsWorker=True, launcherCreationPolicy="WaitForWorkersReady",
                           mpiImplementation="MPICH", sshAuthMountPath="/home/mpi/.ssh")
    return job


@pytest.mark.parametrize("version", ["v1", "v2beta1"])
def test_stored_objects_validate_against_the_crd_schema(version: str) -> None:
    schema = _schema(f"kubeflow.org/{version}")
    assert schema_errors(validate(_full(version)).object, schema) == []
    assert schema_errors(validate(mpijob({"Launcher": launcher()}, version=version)).object, schema) == []
    broken = copy.deepcopy(_full(version))
    broken["spec"]["slotsPerWorker"] = "2"
    assert schema_errors(broken, schema) != []  # the checker checks


def test_the_seed_validates_against_the_v1_schema() -> None:
    [m] = load_and_validate(FIXTURES / "seed_mpijob_tensorflow_benchmarks.yaml")
    assert schema_errors(m.object, _schema("kubeflow.org/v1")) == []
