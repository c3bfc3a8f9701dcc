"""Speed the control plane relies on, with bounds loose enough for a busy CI machine.

Targets on an idle machine: list of 500 ~3 KB jobs well under 50 ms; create/update ~1 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _job(i: int) -> dict[str, Any]:
    env = [{"name": f"VAR_{k}", "value": "v" * 40} for k in range(20)]
    replica = {
        "replicas": 2,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "python:3.11", "env": env}]}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": f"job-{i:04d}", "namespace": "default", "labels": {"team": "ml"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
    }


def test_list_500_jobs_and_write_latency(store):
    started = time.perf_counter()
    for i in range(500):
        store.create(_job(i))
    create_ms = (time.perf_counter() - started) / 500 * 1000

    jobs = store.list("PyTorchJob")
    assert 2500 < len(str(jobs[0])) < 4500
    started = time.perf_counter()
    for job in jobs[:200]:
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
        store.update(job)
    update_ms = (time.perf_counter() - started) / 200 * 1000

    list_ms = min(_timed(lambda: store.list("PyTorchJob")) for _ in range(5))
    assert len(store.list("PyTorchJob", label_selector={"team": "ml"})) == 500
    print(f"create {create_ms:.2f} ms, update {update_ms:.2f} ms, list of 500 {list_ms:.1f} ms")
    assert list_ms < 250
    assert create_ms < 10 and update_ms < 10


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000
