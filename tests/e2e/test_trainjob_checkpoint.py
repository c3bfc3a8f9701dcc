"""examples/trainjob-checkpoint on a real control plane: a TrainJob's 2 nodes train DDP on digits
and checkpoint to a claim; killing one node's training process fails the attempt, the runtime's
failurePolicy restarts the JobSet, and the new processes go on from the last checkpoint."""

from __future__ import annotations

import os
import re
import signal

import psutil
import pytest

from tests.helpers import EXAMPLES, poll

pytestmark = pytest.mark.heavy

JOB = "digits-ckpt"
STEPS = 150  # train.py's default


def _pods(plane, attempt: int) -> list[dict]:
    pods = plane.client().list("Pod", "default", selector=f"jobset.sigs.k8s.io/jobset-name={JOB},"
                                                           f"jobset.sigs.k8s.io/restart-attempt={attempt}")
    return sorted(pods, key=lambda p: p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


def _log(plane, pod: dict) -> str:
    return plane.cli("logs", pod["metadata"]["name"], check=False).stdout


def _last_checkpoint(plane) -> int:
    """The last step node 0 of the first attempt says it saved (0: none yet)."""
    pods = _pods(plane, 0)
    saved = re.findall(r"^checkpoint step=(\d+)", _log(plane, pods[0]), re.M) if pods else []
    return int(saved[-1]) if saved else 0


def _training_process(plane, pod: dict) -> psutil.Process:
    """The process torchrun started for the pod's rank (not the agent)."""
    uid = pod["metadata"]["uid"]
    for proc in plane.pod_processes():
        try:
            cmdline = " ".join(proc.cmdline())
            if proc.environ().get("TRIMARAN_POD_UID") == uid and "/app/train.py" in cmdline \
                    and "torchrun" not in cmdline:
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no training process found in {pod['metadata']['name']}")


def test_a_killed_node_restarts_the_jobset_and_training_resumes_from_the_last_checkpoint(plane):
    folder = EXAMPLES / "trainjob-checkpoint"
    plane.cli("apply", "-f", str(folder))  # the code, the claim, the runtime: the TrainJob needs its runtime first
    plane.cli("apply", "-f", str(folder / "train"))
    saved = poll(lambda: _last_checkpoint(plane), timeout=180, interval=0.2, what="node 0's first checkpoint")
    os.kill(_training_process(plane, _pods(plane, 0)[1]).pid, signal.SIGKILL)

    plane.cli("wait", f"trainjob/{JOB}", "--for=condition=Complete", "--timeout=300s")
    assert plane.get("jobset", JOB)["status"]["restarts"] == 1
    assert not _pods(plane, 0), "BlockingRecreate: every pod of the failed attempt is gone"
    logs = [_log(plane, pod) for pod in _pods(plane, 1)]
    starts = [re.findall(r"^start rank=(\d) world=2 step=(\d+)$", log, re.M) for log in logs]
    assert [[rank for rank, _ in found] for found in starts] == [["0"], ["1"]], logs
    resumed = {int(step) for found in starts for _, step in found}
    assert len(resumed) == 1, f"both nodes resume from one checkpoint: {logs}"
    [step] = resumed
    assert saved <= step < STEPS and step % 10 == 0, (saved, logs)
    assert re.findall(r"^checkpoint step=(\d+)", logs[0], re.M)[0] == str(step + 10), logs[0]
    accuracy = re.search(rf"^test_accuracy=([\d.]+) steps={STEPS} rank=0$", logs[0], re.M)
    assert accuracy and float(accuracy.group(1)) > 0.9, logs[0]
    assert (plane.home / "volumes" / "default" / "digits-trainjob-checkpoints" / "checkpoint.pt").is_file()
