"""Elastic PyTorchJob scaling: torchrun's c10d rendezvous driven by the operator's PET_* variables,
workers added and removed through the scale subresource (by hand and by the operator's HPA) while
training goes on, and a rendezvous that cannot complete failing with the missing workers named.
(Restarts, killed workers and the etcd rendezvous: test_elastic_restart.py, a file of its own so
that the two halves run on two xdist workers.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.e2e.elastic import apply, elastic_job, log, worlds
from tests.helpers import poll


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    # The operator's HPA decides every 2 s rather than 15 s, so the autoscaling test waits seconds for
    # its decision; only that test's job has metrics.
    os.environ["TRIMARAN_HPA_SYNC_SECONDS"] = "2"
    try:
        with module_plane(tmp_path_factory, "elastic") as handle:
            os.environ.pop("TRIMARAN_HPA_SYNC_SECONDS")
            yield handle
    finally:
        os.environ.pop("TRIMARAN_HPA_SYNC_SECONDS", None)


@pytest.mark.heavy
def test_scaled_two_three_two_while_training_and_finishes(plane, tmp_path):
    apply(plane, tmp_path, elastic_job("elastic", 2, 2, 3, epochs=60))
    poll(lambda: 2 in worlds(plane, "elastic-worker-0"), timeout=180, what="training with 2 workers")
    env = {e["name"]: e.get("value") for e in
           plane.client().get("Pod", "default", "elastic-worker-1")["spec"]["containers"][0]["env"]}
    assert (env["PET_NNODES"], env["PET_RDZV_BACKEND"], env["PET_MAX_RESTARTS"]) == ("2:3", "c10d", "20")
    assert re.fullmatch(r"elastic-worker-0:\d+", env["PET_RDZV_ENDPOINT"])

    assert plane.cli("scale", "pytorchjob/elastic", "--replicas", "3").stdout.strip() == \
        "pytorchjob.kubeflow.org/elastic scaled"
    # Each rank logs its own epochs, so rank 0's first line in a world of 3 may come after rank 2's.
    poll(lambda: 3 in worlds(plane, "elastic-worker-2") and 3 in worlds(plane, "elastic-worker-0"), timeout=180,
         what="the third worker training, and rank 0 in the world of 3")
    plane.cli("scale", "pytorchjob", "elastic", "--replicas", "2")
    poll(lambda: worlds(plane, "elastic-worker-0")[-1:] == [2] and 3 in worlds(plane, "elastic-worker-0"),
         timeout=180, what="training with 2 workers again")
    plane.cli("wait", "pytorchjob/elastic", "--for=condition=Succeeded", "--timeout=300s")

    trained = worlds(plane, "elastic-worker-0")
    # Scaling restarts the group but never the training: epochs continue, none is lost to a restart.
    epochs = [int(e) for e in re.findall(r"^epoch=(\d+) ", log(plane, "elastic-worker-0"), re.M)]
    assert epochs == sorted(epochs) and epochs[-1] == 60 and len(set(epochs)) == len(epochs), epochs
    assert 2 in trained[:trained.index(3)] and trained[-1] == 2
    accuracy = float(re.search(r"test_accuracy=([\d.]+) world=2", log(plane, "elastic-worker-0")).group(1))
    assert accuracy > 0.9
    assert plane.client().list("Pod", "default", selector="training.kubeflow.org/job-name=elastic,"
                                                          "training.kubeflow.org/replica-index=2") == []


def test_scale_outside_the_bounds_is_refused(plane, tmp_path):
    job = elastic_job("bounded", 2, 2, 3, epochs=1)
    job["spec"]["runPolicy"] = {"suspend": True}  # nothing needs to run to judge a scale
    apply(plane, tmp_path, job)
    refused = plane.cli("scale", "pytorchjob/bounded", "--replicas", "4", check=False)
    assert refused.returncode != 0
    assert ("spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: 4: must be between "
            "elasticPolicy.minReplicas (2) and elasticPolicy.maxReplicas (3)") in refused.stderr
    assert plane.get("pytorchjob", "bounded")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    plane.cli("scale", "pytorchjob/bounded", "--replicas", "3")
    assert plane.get("pytorchjob", "bounded")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_scale_through_the_scale_subresource(plane, tmp_path):
    job = elastic_job("kscaled", 2, 2, 3, epochs=1)
    job["spec"]["runPolicy"] = {"suspend": True}
    apply(plane, tmp_path, job)
    env = dict(os.environ, KUBECONFIG=str(plane.home / "kubeconfig"))
    scaled = subprocess.run(["kubectl", "scale", "pytorchjob", "kscaled", "--replicas=3"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert scaled.stdout.strip() == "pytorchjob.kubeflow.org/kscaled scaled", scaled.stderr
    refused = subprocess.run(["kubectl", "scale", "pytorchjob/kscaled", "--replicas=1"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: 1" in refused.stderr
    got = subprocess.run(["kubectl", "get", "pytorchjob", "kscaled", "-o", "jsonpath={.spec.pytorchReplicaSpecs."
                          "Worker.replicas}"], env=env, capture_output=True, text=True, timeout=60)
    assert got.stdout == "3"


def test_rendezvous_that_cannot_complete_fails_naming_the_missing_worker(plane, tmp_path):
    job = elastic_job("stuck", 2, 2, 2, epochs=1, join_timeout=5)
    # The workers ask for more cores than any machine has: none starts, the rendezvous never completes.
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1000"}}
    apply(plane, tmp_path, job)
    plane.cli("wait", "pytorchjob/stuck", "--for=condition=Failed", "--timeout=120s")
    failed = next(c for c in plane.get("pytorchjob", "stuck")["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert "rendezvous could not complete within the join timeout of 5s" in failed["message"]
    assert "missing: Worker 0 (pod stuck-worker-0 cannot be scheduled" in failed["message"] and \
        "Worker 1 (pod stuck-worker-1 cannot be scheduled" in failed["message"], failed["message"]


@pytest.mark.heavy
def test_cpu_metric_scales_the_workers_up_as_the_operators_hpa_does(plane, tmp_path):
    job = elastic_job("hpa", 2, 2, 3, epochs=100000)
    job["spec"]["elasticPolicy"]["metrics"] = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 10}}}]
    # A training worker keeps far more than a tenth of its 100m request busy.
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m"}}
    apply(plane, tmp_path, job)
    try:
        poll(lambda: plane.get("pytorchjob", "hpa")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3,
             timeout=240, what="the autoscaler's scale-up to maxReplicas")
        events = plane.client().events("PyTorchJob", "default", "hpa")
        assert any(e["reason"] == "SuccessfulRescale" and e["message"] == (
            "New size: 3; reason: cpu resource utilization (percentage of request) above target") for e in events)
        poll(lambda: 3 in worlds(plane, "hpa-worker-2"), timeout=240, what="the third worker training")
    finally:
        plane.cli("delete", "pytorchjob", "hpa", check=False)  # it trains without end
