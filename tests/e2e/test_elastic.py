"""Elastic PyTorchJob: torchrun's c10d rendezvous driven by the operator's PET_* variables, workers
added and removed through the scale subresource while training goes on, a killed worker that
rejoins, and a rendezvous that cannot complete failing with the missing workers named."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from typing import Any

import psutil
import pytest
import yaml

from tests.helpers import EXAMPLES, poll

ELASTIC = EXAMPLES / "pytorch-elastic"


def elastic_job(name: str, workers: int, low: int, high: int, epochs: int, join_timeout: int = 600) -> dict[str, Any]:
    """The example's elastic PyTorchJob under another name, bounds and length."""
    job = yaml.safe_load((ELASTIC / "pytorchjob.yaml").read_text())
    job["metadata"]["name"] = name
    policy = job["spec"]["elasticPolicy"]
    policy.update(minReplicas=low, maxReplicas=high)
    policy["rdzvConf"].append({"key": "join_timeout", "value": str(join_timeout)})
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    worker["template"]["spec"]["containers"][0]["args"] = ["--epochs", str(epochs)]
    return job


def apply(plane, tmp_path, obj: dict[str, Any]) -> None:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    plane.cli("apply", "-f", str(ELASTIC / "code-configmap.yaml"), "-f", str(path))


def log(plane, pod: str) -> str:
    return plane.cli("logs", pod, check=False).stdout


def worlds(plane, pod: str) -> list[int]:
    """The world size of each epoch the pod's rank trained, in order."""
    return [int(w) for w in re.findall(r"^epoch=\d+ world=(\d+)", log(plane, pod), re.M)]


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
    poll(lambda: 3 in worlds(plane, "elastic-worker-2"), timeout=180, what="the third worker training")
    assert 3 in worlds(plane, "elastic-worker-0")
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


def _agent(plane, pod_name: str) -> psutil.Process:
    """The torchrun agent of a pod (the process that runs torch.distributed.run)."""
    uid = plane.client().get("Pod", "default", pod_name)["metadata"]["uid"]
    for proc in plane.pod_processes():
        try:
            if proc.environ().get("TRIMARAN_POD_UID") == uid and "torch.distributed.run" in proc.cmdline():
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no torchrun agent found for {pod_name}")


@pytest.mark.heavy
@pytest.mark.parametrize("killed", [1, 0], ids=["worker", "store-host"])
def test_killed_worker_rejoins_and_the_job_finishes(plane, tmp_path, killed):
    apply(plane, tmp_path, elastic_job("rejoin", 2, 2, 2, epochs=40))
    poll(lambda: 2 in worlds(plane, f"rejoin-worker-{killed}"), timeout=180, what="training with 2 workers")
    os.kill(_agent(plane, f"rejoin-worker-{killed}").pid, signal.SIGKILL)
    # The kubelet restarts the worker in place (OnFailure); its agent joins a new rendezvous. Worker 0
    # hosts the rendezvous store: when it dies the other agent fails too and is restarted in place.
    plane.cli("wait", "pytorchjob/rejoin", "--for=condition=Succeeded", "--timeout=300s")
    assert _restarts(plane, f"rejoin-worker-{killed}") >= 1
    rejoined = log(plane, f"rejoin-worker-{killed}")
    resumed = [int(e) for e in re.findall(r"^joined rank=\d world=2 epoch=(\d+)", rejoined, re.M)]
    assert resumed and resumed[-1] > 0, rejoined  # it went on from a checkpoint, not from the start
    for i in range(2):
        finished = log(plane, f"rejoin-worker-{i}")
        assert re.search(r"^epoch=40 world=2", finished, re.M), finished
        assert float(re.search(r"test_accuracy=([\d.]+)", finished).group(1)) > 0.9


def _restarts(plane, pod: str) -> int:
    statuses = plane.client().get("Pod", "default", pod)["status"].get("containerStatuses") or []
    return sum(s.get("restartCount", 0) for s in statuses)


def test_rendezvous_that_cannot_complete_fails_naming_the_missing_worker(plane, tmp_path):
    job = elastic_job("stuck", 2, 2, 2, epochs=1, join_timeout=5)
    # Worker 1 asks for more cores than any machine has: it never starts, the rendezvous never completes.
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
@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed (scripts/bootstrap.sh)")
def test_etcd_rendezvous_runs_its_own_etcd_and_stops_it_with_the_job(plane, tmp_path):
    job = elastic_job("etcdrdzv", 2, 2, 2, epochs=3)
    job["spec"]["elasticPolicy"]["rdzvBackend"] = "etcd"
    apply(plane, tmp_path, job)
    etcd = poll(lambda: next(iter(plane.client().list("Pod", "default",
                                                        selector="trimaran.io/rendezvous-etcd-for=etcdrdzv")), None),
                timeout=60, what="the job's etcd pod")
    assert etcd["metadata"]["ownerReferences"][0]["name"] == "etcdrdzv"
    plane.cli("wait", "pytorchjob/etcdrdzv", "--for=condition=Succeeded", "--timeout=240s")
    env = {e["name"]: e.get("value") for e in
           plane.client().get("Pod", "default", "etcdrdzv-worker-0")["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_BACKEND"] == "etcd" and "is_host" not in env.get("PET_RDZV_CONF", "")
    for i in range(2):
        assert re.search(r"^epoch=3 world=2", log(plane, f"etcdrdzv-worker-{i}"), re.M)
    poll(lambda: plane.client().list("Pod", "default", selector="trimaran.io/rendezvous-etcd-for=etcdrdzv") == [],
         timeout=60, what="the etcd pod stopped with the job")


def test_etcd_rendezvous_with_no_etcd_to_use_fails_saying_so(plane, tmp_path):
    job = elastic_job("noetcd", 2, 2, 2, epochs=1)
    job["spec"]["elasticPolicy"].update(rdzvBackend="etcd", rdzvHost="etcd.example.invalid", rdzvPort=2379)
    apply(plane, tmp_path, job)
    plane.cli("wait", "pytorchjob/noetcd", "--for=condition=Failed", "--timeout=60s")
    failed = next(c for c in plane.get("pytorchjob", "noetcd")["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == (
        "PyTorchJob default/noetcd has failed because no etcd answers at etcd.example.invalid:2379 (rdzvBackend "
        "etcd), and Trimaran starts one itself only on this machine's loopback (spec.elasticPolicy.rdzvHost unset, "
        "localhost or 127.0.0.1)")
    assert plane.client().list("Pod", "default") == []


@pytest.mark.heavy
def test_cpu_metric_scales_the_workers_up_as_the_operators_hpa_does(plane, tmp_path):
    job = elastic_job("hpa", 2, 2, 3, epochs=100000)
    job["spec"]["elasticPolicy"]["metrics"] = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 10}}}]
    # A training worker keeps far more than a tenth of its 100m request busy.
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m"}}
    apply(plane, tmp_path, job)
    poll(lambda: plane.get("pytorchjob", "hpa")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3,
         timeout=240, what="the autoscaler's scale-up to maxReplicas")
    events = plane.client().events("PyTorchJob", "default", "hpa")
    assert any(e["reason"] == "SuccessfulRescale" and e["message"] == (
        "New size: 3; reason: cpu resource utilization (percentage of request) above target") for e in events)
    poll(lambda: 3 in worlds(plane, "hpa-worker-2"), timeout=240, what="the third worker training")
