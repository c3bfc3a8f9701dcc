"""TFJob and PyTorchJob: the operator's defaults and its webhook's rules."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.builders import container, pytorchjob, replica, tfjob
from trimaran.api import PYTORCHJOB, TFJOB, ManifestError, PyTorchJob, TFJob, validate


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    return validate(obj).object


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


# --- constants ----------------------------------------------------------------------------------


def test_framework_constants() -> None:
    assert (TFJOB.default_container, TFJOB.port_name, TFJOB.default_port) == ("tensorflow", "tfjob-port", 2222)
    assert (TFJOB.plural, TFJOB.operator_name, TFJOB.default_restart_policy) == ("tfjobs", "tfjob-controller", "Never")
    assert (PYTORCHJOB.default_container, PYTORCHJOB.port_name, PYTORCHJOB.default_port) == (
        "pytorch",
        "pytorchjob-port",
        23456,
    )
    assert (PYTORCHJOB.plural, PYTORCHJOB.operator_name, PYTORCHJOB.default_restart_policy) == (
        "pytorchjobs",
        "pytorchjob-controller",
        "OnFailure",
    )
    assert TFJob.framework is TFJOB and PyTorchJob.framework is PYTORCHJOB


# --- defaults -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("worker", "Worker"),
        ("WORKER", "Worker"),
        ("ps", "PS"),
        ("Ps", "PS"),
        ("chief", "Chief"),
        ("master", "Master"),
        ("evaluator", "Evaluator"),
    ],
)
def test_tf_replica_keys_case_normalised(given: str, canonical: str) -> None:
    job = defaulted(tfjob({given: replica([container("tensorflow")])}))
    assert list(job["spec"]["tfReplicaSpecs"]) == [canonical]


def test_pytorch_replica_keys_case_normalised_and_order_kept() -> None:
    job = defaulted(pytorchjob({"master": replica([container("pytorch")]), "worker": replica([container("pytorch")])}))
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master", "Worker"]


def test_tf_defaults() -> None:
    job = defaulted(tfjob({"Worker": replica([container("tensorflow")])}))
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1
    assert worker["restartPolicy"] == "Never"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert job["spec"]["successPolicy"] == ""
    assert job["metadata"]["namespace"] == "default"
    assert "status" not in job


def test_pytorch_defaults() -> None:
    job = defaulted(pytorchjob({"Master": replica([container("pytorch")]), "Worker": replica([container("pytorch")])}))
    spec = job["spec"]
    assert spec["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert spec["nprocPerNode"] == "auto"
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert "elasticPolicy" not in spec


def test_empty_restart_policy_is_unset() -> None:
    job = defaulted(tfjob({"Worker": replica([container("tensorflow")], restartPolicy="")}))
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"


def test_given_values_are_kept() -> None:
    job = defaulted(
        tfjob(
            {"Worker": replica([container("tensorflow")], replicas=0, restartPolicy="ExitCode")},
            runPolicy={"cleanPodPolicy": "All", "backoffLimit": 3},
            successPolicy="AllWorkers",
        )
    )
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (0, "ExitCode")
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 3, "suspend": False}
    assert job["spec"]["successPolicy"] == "AllWorkers"


def test_default_port_goes_to_the_named_container() -> None:
    job = defaulted(tfjob({"Worker": replica([container("sidecar"), container("tensorflow")])}))
    sidecar, tf = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert "ports" not in sidecar
    assert tf["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]


def test_default_port_not_added_when_named_port_present() -> None:
    ports = [{"name": "pytorchjob-port", "containerPort": 29500}, {"name": "metrics", "containerPort": 8080}]
    job = defaulted(pytorchjob({"Worker": replica([container("pytorch", ports=ports)])}))
    [c] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("pytorchjob-port", 29500), ("metrics", 8080)]


def test_default_port_appended_after_other_ports() -> None:
    job = defaulted(tfjob({"Worker": replica([container("tensorflow", ports=[{"containerPort": 6006}])])}))
    [c] = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert [p.get("name") for p in c["ports"]] == [None, "tfjob-port"]


@pytest.mark.parametrize(
    ("elastic", "expected"),
    [
        ({}, (3, 3)),
        ({"minReplicas": 3}, (3, 3)),
        ({"maxReplicas": 3}, (3, 3)),
        ({"minReplicas": 1, "maxReplicas": 4}, (1, 4)),
    ],
)
def test_elastic_min_max_defaulting(elastic: dict[str, int], expected: tuple[int, int]) -> None:
    # Workers stay within the bounds (tests/api/test_elastic.py): 3 of them fit every case.
    job = defaulted(pytorchjob({"Worker": replica([container("pytorch")], replicas=3)}, elasticPolicy=elastic))
    policy = job["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == expected


def test_elastic_defaults_from_defaulted_worker_replicas() -> None:
    job = defaulted(pytorchjob({"worker": replica([container("pytorch")])}, elasticPolicy={"rdzvBackend": "c10d"}))
    assert job["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 1, "rdzvBackend": "c10d"}


def test_deprecated_elastic_nproc_keeps_nproc_unset_and_warns() -> None:
    result = validate(pytorchjob({"Worker": replica([container("pytorch")])}, elasticPolicy={"nProcPerNode": 2}))
    assert "nprocPerNode" not in result.object["spec"]
    assert result.object["spec"]["elasticPolicy"]["nProcPerNode"] == 2
    assert result.warnings == ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]


def test_all_elastic_policy_fields_accepted() -> None:
    elastic = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "rdzvPort": 29400,
        "rdzvHost": "h",
        "rdzvId": "run-1",
        "rdzvConf": [{"key": "timeout", "value": "900"}],
        "standalone": True,
        "maxRestarts": 100,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            }
        ],
    }
    result = validate(pytorchjob({"Worker": replica([container("pytorch")])}, elasticPolicy=elastic))
    assert result.warnings == []
    assert result.object["spec"]["elasticPolicy"] == elastic


def test_model_helpers() -> None:
    job = TFJob.model_validate(
        tfjob({"PS": replica([container("tensorflow")]), "Worker": replica([container("tensorflow")], replicas=2)})
    )
    job.set_defaults()
    assert list(job.replica_specs) == ["PS", "Worker"]
    assert job.total_replicas() == 3


# --- validation ---------------------------------------------------------------------------------


def test_job_name_must_be_dns1035_label() -> None:
    [problem] = errors(tfjob({"Worker": replica([container("tensorflow")])}, name="1mnist"))
    assert problem.startswith('TFJob "1mnist": metadata.name: Invalid value: "1mnist": a DNS-1035 label')


def test_job_name_required() -> None:
    obj = tfjob({"Worker": replica([container("tensorflow")])})
    del obj["metadata"]["name"]
    assert errors(obj) == ["TFJob: metadata.name: Required value: name or generateName is required"]
    obj["metadata"]["generateName"] = "mnist-"
    assert validate(obj).object["metadata"]["generateName"] == "mnist-"


def test_missing_replica_specs() -> None:
    obj = tfjob({})
    del obj["spec"]["tfReplicaSpecs"]
    assert errors(obj) == ['TFJob "mnist": spec.tfReplicaSpecs: Required value']
    assert errors(tfjob({})) == ['TFJob "mnist": spec.tfReplicaSpecs: Required value: must be required']


def test_missing_spec() -> None:
    obj = tfjob({})
    del obj["spec"]
    assert errors(obj) == ['TFJob "mnist": spec: Required value']


def test_negative_replicas() -> None:
    assert errors(pytorchjob({"Worker": replica([container("pytorch")], replicas=-1)}, name="x")) == [
        'PyTorchJob "x": spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: -1: '
        "must be greater than or equal to 0"
    ]


@pytest.mark.parametrize("bad", ["two", "2", 2.5, True, [1]])
def test_replicas_must_be_integer(bad: Any) -> None:
    [problem] = errors(pytorchjob({"Worker": replica([container("pytorch")], replicas=bad)}))
    assert "spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: " in problem
    assert problem.endswith("must be of type integer")


def test_unknown_restart_policy() -> None:
    [problem] = errors(tfjob({"Worker": replica([container("tensorflow")], restartPolicy="Sometimes")}))
    assert problem == (
        'TFJob "mnist": spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: "Sometimes": '
        'supported values: "Always", "OnFailure", "Never", "ExitCode", ""'
    )


def test_unknown_clean_pod_policy() -> None:
    [problem] = errors(tfjob({"Worker": replica([container("tensorflow")])}, runPolicy={"cleanPodPolicy": "Some"}))
    assert 'spec.runPolicy.cleanPodPolicy: Unsupported value: "Some"' in problem


def test_missing_default_container() -> None:
    assert errors(tfjob({"Worker": replica([container("tf")])})) == [
        'TFJob "mnist": spec.tfReplicaSpecs.Worker.template.spec.containers: Required value: '
        "must have at least one container with name tensorflow"
    ]
    [problem] = errors(pytorchjob({"Worker": replica([container("torch")])}))
    assert problem.endswith("must have at least one container with name pytorch")


def test_no_containers() -> None:
    assert errors(tfjob({"Worker": replica([])})) == [
        'TFJob "mnist": spec.tfReplicaSpecs.Worker.template.spec.containers: Required value'
    ]


def test_missing_template() -> None:
    assert errors(tfjob({"Worker": {"replicas": 1}})) == [
        'TFJob "mnist": spec.tfReplicaSpecs.Worker.template: Required value'
    ]


def test_image_required() -> None:
    assert errors(tfjob({"Worker": replica([{"name": "tensorflow"}])})) == [
        'TFJob "mnist": spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: Required value'
    ]


def test_replica_types_per_kind() -> None:
    [problem] = errors(
        tfjob({"Worker": replica([container("tensorflow")]), "Launcher": replica([container("tensorflow")])})
    )
    assert problem == (
        'TFJob "mnist": spec.tfReplicaSpecs.Launcher: Unsupported value: "Launcher": '
        'supported values: "Chief", "Evaluator", "Master", "PS", "Worker"'
    )
    [problem] = errors(pytorchjob({"PS": replica([container("pytorch")])}))
    assert problem.endswith(
        'spec.pytorchReplicaSpecs.PS: Unsupported value: "PS": supported values: "Master", "Worker"'
    )


def test_same_type_twice_in_different_case() -> None:
    [problem] = errors(
        tfjob({"Worker": replica([container("tensorflow")]), "worker": replica([container("tensorflow")])})
    )
    assert problem == 'TFJob "mnist": spec.tfReplicaSpecs.worker: Duplicate value: "Worker"'


def test_at_most_one_chief_or_master() -> None:
    assert errors(
        tfjob({"Chief": replica([container("tensorflow")]), "master": replica([container("tensorflow")])})
    ) == ['TFJob "mnist": spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role']


@pytest.mark.parametrize("replicas", [0, 2])
def test_pytorch_master_exactly_one(replicas: int) -> None:
    assert errors(pytorchjob({"Master": replica([container("pytorch")], replicas=replicas)})) == [
        'PyTorchJob "ddp": spec.pytorchReplicaSpecs.Master.replicas: Forbidden: must be 1'
    ]


def test_elastic_requires_worker() -> None:
    assert errors(pytorchjob({"Master": replica([container("pytorch")])}, elasticPolicy={"minReplicas": 1})) == [
        'PyTorchJob "ddp": spec.pytorchReplicaSpecs.Worker: Required value: must be specified when elasticPolicy is set'
    ]


def test_nproc_per_node_not_twice() -> None:
    [problem] = errors(
        pytorchjob({"Worker": replica([container("pytorch")])}, nprocPerNode="2", elasticPolicy={"nProcPerNode": 2})
    )
    assert problem.endswith("spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")


@pytest.mark.parametrize("value", ["auto", "cpu", "gpu", "1", "8"])
def test_nproc_per_node_values(value: str) -> None:
    assert (
        defaulted(pytorchjob({"Worker": replica([container("pytorch")])}, nprocPerNode=value))["spec"]["nprocPerNode"]
        == value
    )


@pytest.mark.parametrize("value", ["0", "two", "-1", ""])
def test_nproc_per_node_invalid(value: str) -> None:
    [problem] = errors(pytorchjob({"Worker": replica([container("pytorch")])}, nprocPerNode=value))
    assert "spec.nprocPerNode: Invalid value" in problem


def test_nproc_per_node_is_a_string() -> None:
    [problem] = errors(pytorchjob({"Worker": replica([container("pytorch")])}, nprocPerNode=2))
    assert problem.endswith("spec.nprocPerNode: Invalid value: 2: must be of type string")


def test_managed_by() -> None:
    ok = defaulted(
        tfjob({"Worker": replica([container("tensorflow")])}, runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    )
    assert ok["spec"]["runPolicy"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    [problem] = errors(tfjob({"Worker": replica([container("tensorflow")])}, runPolicy={"managedBy": "me"}))
    assert 'spec.runPolicy.managedBy: Unsupported value: "me"' in problem


def test_all_problems_of_a_job_reported_together() -> None:
    obj = tfjob(
        {
            "Worker": replica([container("tf")]),
            "Chief": replica([container("tensorflow")]),
            "Master": replica([container("tensorflow")]),
        },
        name="Bad_Name",
    )
    problems = errors(obj)
    assert len(problems) == 3
    assert any("metadata.name" in p for p in problems)
    assert any("Worker.template.spec.containers: Required value" in p for p in problems)
    assert any("more than 1 Chief or Master" in p for p in problems)


def test_all_type_errors_reported_together() -> None:
    obj = pytorchjob(
        {
            "Worker": replica([container("pytorch")], replicas="two"),
            "Master": replica([container("pytorch", image=3)], restartPolicy=1),
        }
    )
    problems = errors(obj)
    assert [p.split(": Invalid")[0].split(": Unsupported")[0] for p in problems] == [
        'PyTorchJob "ddp": spec.pytorchReplicaSpecs.Worker.replicas',
        'PyTorchJob "ddp": spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image',
        'PyTorchJob "ddp": spec.pytorchReplicaSpecs.Master.restartPolicy',
    ]


def test_status_round_trips() -> None:
    obj = tfjob({"Worker": replica([container("tensorflow")])})
    obj["status"] = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "TFJobCreated",
                "message": "TFJob mnist is created.",
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "replicaStatuses": {
            "Worker": {"active": 1, "succeeded": 0, "failed": 0, "selector": "training.kubeflow.org/job-name=mnist"}
        },
        "startTime": "2026-01-01T00:00:00Z",
    }
    assert defaulted(obj)["status"] == obj["status"]


def test_condition_status_must_be_true_false_unknown() -> None:
    obj = tfjob({"Worker": replica([container("tensorflow")])})
    obj["status"] = {"conditions": [{"type": "Running", "status": "yes"}]}
    [problem] = errors(obj)
    assert (
        'status.conditions[0].status: Unsupported value: "yes": supported values: "True", "False", "Unknown"' in problem
    )
