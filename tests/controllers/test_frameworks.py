"""The operator's per-kind rules, as pure functions: env contract and job outcome from replica counts.

The worked examples are those of training-operator.md §1.1 and §1.2.
"""

from __future__ import annotations

import json

from trimaran.controllers.conditions import set_training_condition
from trimaran.controllers.training import framework_for
from trimaran.controllers.training.framework import JobView, ReplicaAddress, ReplicaCounts

TF = framework_for("TFJob")
PT = framework_for("PyTorchJob")


def _addrs(job: str, ns: str, counts: dict[str, int], port: int = 2222) -> dict[str, list[ReplicaAddress]]:
    return {rt: [ReplicaAddress(f"{job}-{rt.lower()}-{i}", f"{job}-{rt.lower()}-{i}.{ns}.svc", port)
                 for i in range(n)] for rt, n in counts.items()}


def _spec(key: str, counts: dict[str, int], **extra) -> dict:
    return {key: {rt: {"replicas": n} for rt, n in counts.items()}, **extra}


def test_tf_config_matches_the_worked_example():
    counts = {"PS": 1, "Worker": 2}
    view = JobView("mnist", "default", _spec("tfReplicaSpecs", counts))
    env = TF.env(view, "Worker", 1, _addrs("mnist", "default", counts), {"name": "tensorflow"})
    assert env == [{"name": "TF_CONFIG", "value": (
        '{"cluster":{"ps":["mnist-ps-0.default.svc:2222"],"worker":["mnist-worker-0.default.svc:2222",'
        '"mnist-worker-1.default.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}')}]


def test_tf_config_puts_chief_first_keeps_evaluator_and_skips_other_containers():
    counts = {"Worker": 1, "Chief": 1, "Evaluator": 1}
    view = JobView("j", "ns", _spec("tfReplicaSpecs", counts))
    value = TF.env(view, "Evaluator", 0, _addrs("j", "ns", counts), {"name": "tensorflow"})[0]["value"]
    assert list(json.loads(value)["cluster"]) == ["chief", "evaluator", "worker"]
    assert TF.env(view, "Worker", 0, _addrs("j", "ns", counts), {"name": "sidecar"}) == []


def test_dynamic_worker_tf_config_is_sparse():
    counts = {"PS": 1, "Worker": 2}
    view = JobView("j", "ns", _spec("tfReplicaSpecs", counts, enableDynamicWorker=True))
    config = json.loads(TF.env(view, "Worker", 1, _addrs("j", "ns", counts), {"name": "tensorflow"})[0]["value"])
    assert config == {"cluster": {"worker": {"1": "j-worker-1.ns.svc:2222"}, "ps": ["j-ps-0.ns.svc:2222"]},
                      "task": {"type": "worker", "index": 1}}


def test_pytorch_env_with_nproc_per_node_multiplies_world_size_only():
    counts = {"Master": 1, "Worker": 3}
    view = JobView("ddp", "default", _spec("pytorchReplicaSpecs", counts, nprocPerNode="2"))
    env = {e["name"]: e["value"] for e in PT.env(view, "Worker", 2, _addrs("ddp", "default", counts, 23456), {})}
    assert env["WORLD_SIZE"] == "8" and env["RANK"] == "3" and env["PET_NPROC_PER_NODE"] == "2"
    assert env["MASTER_ADDR"] == "ddp-master-0" and env["MASTER_PORT"] == "23456"


def test_pytorch_elastic_env_matches_the_echo_example():
    counts = {"Worker": 2}
    spec = _spec("pytorchReplicaSpecs", counts, nprocPerNode="auto",
                 elasticPolicy={"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 100})
    view = JobView("elastic-example-echo", "default", spec)
    env = {e["name"]: e["value"]
           for e in PT.env(view, "Worker", 0, _addrs("elastic-example-echo", "default", counts, 23456), {})}
    assert env == {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": "auto",
                   "PET_RDZV_ENDPOINT": "elastic-example-echo-worker-0:23456", "PET_RDZV_BACKEND": "c10d",
                   "PET_NNODES": "1:2", "PET_MAX_RESTARTS": "100"}


def _view(key: str, spec_counts: dict[str, int], counts: dict[str, ReplicaCounts], **extra) -> JobView:
    view = JobView("j", "ns", _spec(key, spec_counts, **extra))
    view.counts = counts
    return view


def test_tfjob_without_chief_succeeds_when_worker_0_succeeds_unless_all_workers_policy():
    counts = {"Worker": ReplicaCounts(replicas=2, active=1, succeeded=1)}
    view = _view("tfReplicaSpecs", {"Worker": 2}, counts)
    view.worker0_succeeded = True
    assert TF.status(view)[0] == "Succeeded"
    strict = _view("tfReplicaSpecs", {"Worker": 2}, counts, successPolicy="AllWorkers")
    strict.worker0_succeeded = True
    assert TF.status(strict)[0] == "Running"


def test_tfjob_with_chief_follows_the_chief():
    counts = {"Chief": ReplicaCounts(1, succeeded=1), "PS": ReplicaCounts(1, active=1),
              "Worker": ReplicaCounts(2, active=2)}
    assert TF.status(_view("tfReplicaSpecs", {"Chief": 1, "PS": 1, "Worker": 2}, counts))[0] == "Succeeded"


def test_failed_replicas_fail_the_job_but_not_dynamic_workers():
    counts = {"PS": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, active=1, failed=1)}
    assert TF.status(_view("tfReplicaSpecs", {"PS": 1, "Worker": 2}, counts))[0] == "Failed"
    dynamic = _view("tfReplicaSpecs", {"PS": 1, "Worker": 2}, counts, enableDynamicWorker=True)
    assert TF.status(dynamic)[0] == "Running"


def test_pytorch_master_success_ends_the_job_and_elastic_needs_one_worker():
    counts = {"Master": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(2, active=2)}
    assert PT.status(_view("pytorchReplicaSpecs", {"Master": 1, "Worker": 2}, counts))[0] == "Succeeded"
    elastic = _view("pytorchReplicaSpecs", {"Worker": 3}, {"Worker": ReplicaCounts(3, active=2, succeeded=1)},
                    elasticPolicy={"minReplicas": 1})
    assert PT.status(elastic)[0] == "Succeeded"


def test_conditions_alternate_running_and_restarting_and_freeze_after_failure():
    status: dict = {}
    set_training_condition(status, "Created", "Created", "")
    set_training_condition(status, "Running", "Running", "")
    set_training_condition(status, "Restarting", "Restarting", "")
    assert [c["type"] for c in status["conditions"]] == ["Created", "Restarting"]
    set_training_condition(status, "Running", "Running", "")
    set_training_condition(status, "Failed", "Failed", "boom")
    running = [c for c in status["conditions"] if c["type"] == "Running"][0]
    assert running["status"] == "False" and status["conditions"][-1]["type"] == "Failed"
    assert not set_training_condition(status, "Succeeded", "Succeeded", "")
