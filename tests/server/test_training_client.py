"""The Kubeflow Training Operator's v1 SDK (``kubeflow-training``'s ``TrainingClient``) against a real
control plane: a PyTorchJob made from a Python function, waited for, its logs read and followed.

The SDK runs from ``$TRIMARAN_TRAINING_PYTHON`` (``scripts/test.sh`` builds ``.venv-training``). Its
``create_job(train_func=...)`` wraps the function's source in ``bash -c`` and starts it with ``torchrun``
when there is more than one worker: the pods run that with the control plane's Python, whose
environment has torch, so torchrun's rendezvous runs across the two replicas as on a cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.server.sdk import run_client, venv_python
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

SCRIPT = r'''
import json
from kubeflow.training import TrainingClient
from kubeflow.training.models import KubeflowOrgV1PyTorchJob


def train(parameters):
    import os
    rank, size = os.environ["RANK"], os.environ["WORLD_SIZE"]
    print(f"rank {rank} of {size}, lr {parameters['lr']}", flush=True)
    for epoch in range(3):
        print(f"rank {rank} epoch {epoch} loss {1.0 / (epoch + 1):.3f}", flush=True)


client = TrainingClient()  # KUBECONFIG, namespace "default"
client.create_job(name="from-func", train_func=train, parameters={"lr": 0.1}, num_workers=2, num_procs_per_worker=1,
                  base_image="docker.io/pytorch/pytorch:2.1.0-cpu")
seen = []
job = client.wait_for_job_conditions("from-func", wait_timeout=240, polling_interval=0.5,
                                     callback=lambda j: seen.append([c.type for c in j.status.conditions or []]
                                                                    if j.status else []))
logs, _ = client.get_job_logs("from-func")
workers, _ = client.get_job_logs("from-func", is_master=False, replica_type="worker", replica_index=0)
followed, events = client.get_job_logs("from-func", follow=True, verbose=True)
jobs = client.list_jobs()
succeeded = client.is_job_succeeded("from-func")
pod_names = client.get_job_pod_names("from-func")
client.delete_job("from-func")
try:
    client.get_job("from-func")
    gone = False
except RuntimeError:
    gone = True
print(json.dumps({
    "typed": isinstance(job, KubeflowOrgV1PyTorchJob),
    "conditions": [(c.type, c.status) for c in job.status.conditions],
    "replica_statuses": {k: v.succeeded for k, v in job.status.replica_statuses.items()},
    "polled": seen, "logs": logs, "workers": workers, "followed": followed,
    "events": events, "listed": [j.metadata.name for j in jobs],
    "succeeded": succeeded, "pod_names": sorted(pod_names), "gone": gone,
}))
'''


@pytest.fixture
def training_python() -> str:
    """Requested before ``plane``, so a skip does not start a control plane first."""
    return venv_python("TRIMARAN_TRAINING_PYTHON", "kubeflow.training", ".venv-training")


def test_training_client_runs_a_function_as_a_pytorchjob(training_python: str, plane: ControlPlaneHandle,
                                                         tmp_path: Path) -> None:
    out = run_client(training_python, plane, SCRIPT, tmp_path, timeout=300)
    assert out["typed"]
    types = [t for t, _ in out["conditions"]]
    assert types[0] == "Created" and types[-1] == "Succeeded", out["conditions"]
    assert dict(out["conditions"])["Succeeded"] == "True"
    assert out["replica_statuses"] == {"Master": 1, "Worker": 1}
    assert out["polled"][-1][-1] == "Succeeded"
    expected = ["rank 0 of 2, lr 0.1"] + [f"rank 0 epoch {e} loss {1.0 / (e + 1):.3f}" for e in range(3)]
    assert list(out["logs"]) == ["from-func-master-0"]
    assert out["logs"]["from-func-master-0"].splitlines() == expected
    assert list(out["workers"]) == ["from-func-worker-0"]
    assert out["workers"]["from-func-worker-0"].splitlines()[0] == "rank 1 of 2, lr 0.1"
    # follow=True streams line by line (the SDK joins the lines without their newlines).
    assert out["followed"] == {"from-func-master-0": "".join(expected)}
    # verbose=True: the namespace's Events, kept for the job and its master pod.
    assert set(out["events"]) == {"pytorchjob/from-func", "pod/from-func-master-0"}
    assert out["events"]["pytorchjob/from-func"][-1].endswith("successfully completed."), out["events"]
    assert any("Started pod from-func-master-0" in e for e in out["events"]["pod/from-func-master-0"])
    assert out["listed"] == ["from-func"]
    assert out["succeeded"] is True
    assert out["pod_names"] == ["from-func-master-0", "from-func-worker-0"]
    assert out["gone"]
