"""`trimaran logs` as the README uses it: `-f` on a job whose pod does not exist yet waits for it, and a
log that is empty says so instead of printing nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO


def _pytorchjob(tmp_path, suspend: bool) -> str:
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "x", "command": ["python", "-c", "print('hello from the master')"]}]}}}
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "later"},
           "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {"Master": replica}}}
    path = tmp_path / f"later-{suspend}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_follow_waits_for_the_pod_of_a_job_just_applied(plane, tmp_path):
    plane.cli("apply", "-f", _pytorchjob(tmp_path, suspend=True))  # a job with no pod yet
    follower = subprocess.Popen([sys.executable, "-m", "trimaran.cli", "logs", "later", "-f"], env=plane.env,
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Absence can only be observed over a window: it has not given up within a second and a half.
        with pytest.raises(subprocess.TimeoutExpired):
            follower.wait(timeout=1.5)
        plane.cli("apply", "-f", _pytorchjob(tmp_path, suspend=False))
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert out == "hello from the master\n"


def test_an_empty_log_says_which_pod_it_was(plane, tmp_path):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "quiet"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "main", "image": "x", "command": ["python", "-c", "pass"]}]}}}}
    path = tmp_path / "quiet.json"
    path.write_text(json.dumps(job))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "job/quiet", "--for=condition=Complete", "--timeout=60s")
    proc = plane.cli("logs", "job/quiet", "-f")
    assert proc.stdout == ""
    assert "pod quiet-" in proc.stderr and "has written nothing to its log" in proc.stderr
