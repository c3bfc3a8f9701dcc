"""The examples train for real through the CLI: DDP over gloo, MultiWorkerMirroredStrategy,
ParameterServerStrategy, and the NVIDIA seed's Indexed sweep."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import EXAMPLES, poll

pytestmark = pytest.mark.heavy


def _accuracy(log: str) -> float:
    found = re.findall(r"test_accuracy=([0-9.]+)", log)
    assert found, log[-2000:]
    return float(found[-1])


def test_generated_configmaps_match_the_scripts():
    subprocess.run([sys.executable, str(EXAMPLES / "make_configmap.py"), "--check"], check=True)


def test_pytorch_ddp_converges_and_a_second_job_reads_its_checkpoint(plane):
    d = EXAMPLES / "pytorch-ddp"
    # As the README says: the folder holds the training only; the evaluation waits in its own folder.
    applied = plane.cli("apply", "-f", str(d)).stdout
    assert "pytorchjob.kubeflow.org/digits-ddp created" in applied and "digits-ddp-evaluate" not in applied
    worker_log = plane.cli("logs", "digits-ddp", "--replica-type", "worker", "--replica-index", "1", "-f").stdout
    assert "rank=2 epoch=0 local_loss=" in worker_log and "Traceback" not in worker_log
    plane.cli("wait", "pytorchjob/digits-ddp", "--for=condition=Succeeded", "--timeout=240s")
    assert _accuracy(plane.cli("logs", "digits-ddp").stdout) > 0.9
    volume = plane.home / "volumes" / "default" / "digits-checkpoints"
    assert (volume / "model.pt").exists() and list(volume.glob("checkpoint_epoch_*.pt"))
    job = plane.get("pytorchjob", "digits-ddp")
    assert job["status"]["replicaStatuses"]["Worker"]["failed"] == 0

    plane.cli("apply", "-f", str(d / "evaluate"))
    plane.cli("wait", "job/digits-ddp-evaluate", "--for=condition=Complete", "--timeout=120s")
    assert _accuracy(plane.cli("logs", "job/digits-ddp-evaluate").stdout) > 0.9


def test_tensorflow_multi_worker_mirrored_strategy(plane):
    d = EXAMPLES / "tf-multiworker"
    plane.cli("apply", "-f", str(d))
    plane.cli("wait", "tfjob/digits-mwms", "--for=condition=Succeeded", "--timeout=300s")
    assert (plane.home / "volumes" / "default" / "digits-models" / "digits.keras").exists()
    job = plane.get("tfjob", "digits-mwms")
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2


def test_tensorflow_parameter_server_strategy(plane):
    d = EXAMPLES / "tf-parameter-server"
    plane.cli("apply", "-f", str(d))
    plane.cli("wait", "tfjob/digits-ps", "--for=condition=Succeeded", "--timeout=300s")
    assert "Traceback" not in plane.cli("logs", "digits-ps", "--replica-type", "chief").stdout
    # cleanPodPolicy: Running ends the PS and workers, which never exit by themselves.
    poll(lambda: not plane.pod_processes(), timeout=60, what="PS and worker processes to be stopped")


def test_indexed_sweep_writes_every_result(plane):
    d = EXAMPLES / "indexed-sweep"
    plane.cli("apply", "-f", str(d / "pvc.yaml"), "-f", str(d / "code-configmap.yaml"), "-f", str(d / "sweep-job.yaml"))
    plane.cli("wait", "job/digits-sweep", "--for=condition=Complete", "--timeout=300s")
    results = plane.home / "volumes" / "default" / "digits-sweep-results"
    logs = sorted(results.glob("results_job_id_*.log"))
    assert len(logs) == 8
    out = subprocess.run([sys.executable, str(d / "analyze.py"), "--results-dir", str(results)],
                         capture_output=True, text=True,
                         check=True).stdout
    assert "best test accuracy" in out
    assert plane.get("job", "digits-sweep")["status"]["completedIndexes"] == "0-7"
