"""The seed manifests (tests/api/fixtures/seed_*.yaml, copied verbatim) are our contract:
each must load as written and come out defaulted exactly as the operator/API server would.
"""

from __future__ import annotations

import pytest

from tests.api.builders import FIXTURES
from trimaran.api import load_and_validate, parse_memory

SEEDS = sorted(p.name for p in FIXTURES.glob("seed_*.yaml"))


def test_all_seed_files_present() -> None:
    assert SEEDS == [
        "seed_mpijob_tensorflow_benchmarks.yaml",
        "seed_pod_gpu.yaml",
        "seed_pod_mig.yaml",
        "seed_pytorchjob_a100.yaml",
        "seed_pytorchjob_resnet.yaml",
        "seed_tfjob_mnist.yaml",
    ]


@pytest.mark.parametrize("name", SEEDS)
def test_seed_accepted(name: str) -> None:
    manifests = load_and_validate(FIXTURES / name)
    assert len(manifests) == 1
    assert manifests[0].location == f"{FIXTURES / name} (document 1)"


def test_tfjob_mnist_defaults() -> None:
    [m] = load_and_validate(FIXTURES / "seed_tfjob_mnist.yaml")
    job = m.object
    assert job["metadata"] == {"name": "mnist-training", "namespace": "kubeflow"}
    spec = job["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert spec["successPolicy"] == ""
    assert list(spec["tfReplicaSpecs"]) == ["PS", "Worker"]
    ps, worker = spec["tfReplicaSpecs"]["PS"], spec["tfReplicaSpecs"]["Worker"]
    assert (ps["replicas"], worker["replicas"]) == (1, 4)
    assert ps["restartPolicy"] == worker["restartPolicy"] == "OnFailure"  # as written, not the Never default
    [tf] = worker["template"]["spec"]["containers"]
    assert tf["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
    assert tf["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert parse_memory(tf["resources"]["requests"]["memory"]) == 8 * 2**30
    assert worker["template"]["spec"]["volumes"][1] == {
        "name": "model-output",
        "persistentVolumeClaim": {"claimName": "model-storage"},
    }
    # The seed puts ttlSecondsAfterFinished directly under spec, where the operator ignores it.
    assert "ttlSecondsAfterFinished" not in spec
    assert m.warnings == [
        'unknown field "spec.ttlSecondsAfterFinished" '
        '(did you mean "spec.runPolicy.ttlSecondsAfterFinished"? It is ignored where it is)'
    ]


def test_pytorchjob_resnet_elastic_defaults() -> None:
    [m] = load_and_validate(FIXTURES / "seed_pytorchjob_resnet.yaml")
    spec = m.object["spec"]
    assert m.warnings == []
    assert spec["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 8,
        "rdzvBackend": "etcd",
        "rdzvHost": "etcd-service",
        "rdzvPort": 2379,
    }
    assert spec["nprocPerNode"] == "auto"
    master, worker = spec["pytorchReplicaSpecs"]["Master"], spec["pytorchReplicaSpecs"]["Worker"]
    assert (master["replicas"], worker["replicas"]) == (1, 3)
    [c] = master["template"]["spec"]["containers"]
    assert c["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
    assert c["command"][-1] == "/app/train_resnet.py"
    dshm = master["template"]["spec"]["volumes"][0]
    assert dshm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}


def test_pytorchjob_a100_scheduling_fields_kept() -> None:
    [m] = load_and_validate(FIXTURES / "seed_pytorchjob_a100.yaml")
    job = m.object
    assert job["metadata"]["namespace"] == "default"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "OnFailure"  # PyTorchJob's default
    pod_spec = worker["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"accelerator": "nvidia-a100"}
    [term] = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0] == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB"],
    }
    assert pod_spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod_spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}


def test_mig_pod_requests_default_to_limits() -> None:
    [m] = load_and_validate(FIXTURES / "seed_pod_mig.yaml")
    spec = m.object["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-3g.20gb": "1"},
        "requests": {"nvidia.com/mig-3g.20gb": "1"},
    }


def test_gpu_pod_env_kept() -> None:
    [m] = load_and_validate(FIXTURES / "seed_pod_gpu.yaml")
    [c] = m.object["spec"]["containers"]
    assert c["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"},
    ]
    assert c["resources"]["requests"] == {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}


def test_katib_trial_job_from_the_seed_accepted() -> None:
    # The seed's Experiment embeds this batch/v1 Job as its trialSpec.
    [m] = load_and_validate(FIXTURES / "katib_trial_job.yaml")
    spec = m.object["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed"
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_mpijob_tensorflow_benchmarks_defaults() -> None:
    [m] = load_and_validate(FIXTURES / "seed_mpijob_tensorflow_benchmarks.yaml")
    assert m.warnings == []
    spec = m.object["spec"]
    # The top-level cleanPodPolicy is v1's deprecated copy; it still decides when runPolicy has none.
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": False}
    assert spec["slotsPerWorker"] == 1
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 2)
    assert launcher["restartPolicy"] == worker["restartPolicy"] == "Never"
    [c] = launcher["template"]["spec"]["containers"]
    assert c["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "2"]
    assert "ports" not in c  # MPIJob adds no port: the launcher reaches workers by exec
    assert "command" not in worker["template"]["spec"]["containers"][0]
