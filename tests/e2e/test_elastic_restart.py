"""Elastic PyTorchJob restarts: a killed worker (or the one hosting the rendezvous store) is
restarted in place and its agent rejoins, training going on from the checkpoints; and the etcd
rendezvous, with the job's own etcd or none to use. (Scaling: test_elastic.py.)"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterator

import psutil
import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.e2e.elastic import apply, elastic_job, log, worlds
from tests.helpers import poll


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "elastic-restart") as handle:
        yield handle


def _agent(plane, pod_name: str) -> psutil.Process:
    """The torchrun agent of a pod: the process running torch.distributed.run whose parent does not.
    With ``--start-method=fork`` the training process is forked from the agent and keeps its command
    line; killing that one instead is a worker failure the agent restarts by itself."""
    uid = plane.client().get("Pod", "default", pod_name)["metadata"]["uid"]
    found: dict[int, psutil.Process] = {}
    for proc in plane.pod_processes():
        try:
            if proc.environ().get("TRIMARAN_POD_UID") == uid and "torch.distributed.run" in proc.cmdline():
                found[proc.pid] = proc
        except psutil.Error:
            continue
    agents = [proc for proc in found.values() if proc.ppid() not in found]
    assert len(agents) == 1, f"torchrun agents of {pod_name}: {agents}"
    return agents[0]


def _restarts(plane, pod: str) -> int:
    statuses = plane.client().get("Pod", "default", pod)["status"].get("containerStatuses") or []
    return sum(s.get("restartCount", 0) for s in statuses)


@pytest.mark.heavy
@pytest.mark.parametrize("killed", [1, 0], ids=["worker", "store-host"])
def test_killed_worker_rejoins_and_the_job_finishes(plane, tmp_path, killed):
    name = f"rejoin{killed}"
    apply(plane, tmp_path, elastic_job(name, 2, 2, 2, epochs=30))
    poll(lambda: 2 in worlds(plane, f"{name}-worker-{killed}"), timeout=180, what="training with 2 workers")
    os.kill(_agent(plane, f"{name}-worker-{killed}").pid, signal.SIGKILL)
    # The kubelet restarts the worker in place (OnFailure); its agent joins a new rendezvous. Worker 0
    # hosts the rendezvous store: when it dies the other agent fails too and is restarted in place.
    plane.cli("wait", f"pytorchjob/{name}", "--for=condition=Succeeded", "--timeout=300s")
    assert _restarts(plane, f"{name}-worker-{killed}") >= 1
    rejoined = log(plane, f"{name}-worker-{killed}")
    resumed = [int(e) for e in re.findall(r"^joined rank=\d world=2 epoch=(\d+)", rejoined, re.M)]
    assert resumed and resumed[-1] > 0, rejoined  # it went on from a checkpoint, not from the start
    for i in range(2):
        finished = log(plane, f"{name}-worker-{i}")
        assert re.search(r"^epoch=30 world=2", finished, re.M), finished
        assert float(re.search(r"test_accuracy=([\d.]+)", finished).group(1)) > 0.9


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
    # Nothing started: no worker and no etcd (other tests' pods share this control plane).
    assert plane.client().list("Pod", "default", selector="training.kubeflow.org/job-name=noetcd") == []
    assert plane.client().list("Pod", "default", selector="trimaran.io/rendezvous-etcd-for=noetcd") == []
