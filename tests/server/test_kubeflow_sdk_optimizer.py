"""The Kubeflow SDK's ``OptimizerClient`` unchanged against a real control plane: ``optimize`` makes a
Katib Experiment whose trials are TrainJobs (``torch-distributed``), each trial's metrics read by
Katib's StdOut collector from its node-0 pod; the experiment is read back, its best result and the
best trial's logs, then deleted.

The SDK runs from ``$TRIMARAN_KUBEFLOW_PYTHON`` (``scripts/test.sh`` builds ``.venv-kubeflow``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.server.sdk import run_client, venv_python
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

OPTIMIZE = r'''
import json, time
from kubernetes import client as k8s
from kubeflow.optimizer import Objective, OptimizerClient, RandomSearch, Search, TrialConfig
from kubeflow.trainer import CustomTrainer, TrainJobTemplate


def fit(lr):
    # Katib passes each suggestion as text: the SDK puts "${trialParameters.lr}" among the arguments.
    lr = float(lr)
    loss = (lr - 0.3) ** 2
    print(f"lr={lr} loss={loss:.6f}", flush=True)


optimizer = OptimizerClient()
name = optimizer.optimize(
    trial_template=TrainJobTemplate(runtime="torch-distributed", trainer=CustomTrainer(
        func=fit, num_nodes=1, resources_per_node={"cpu": 1})),
    search_space={"lr": Search.uniform(0.1, 0.5)},
    objectives=[Objective(metric="loss", direction="minimize")],
    algorithm=RandomSearch(),
    trial_config=TrialConfig(num_trials=2, parallel_trials=2),
)
job = optimizer.wait_for_job_status(name, timeout=150, polling_interval=0.5)
best = optimizer.get_best_results(name)
logs = list(optimizer.get_job_logs(name))
listed = [j.name for j in optimizer.list_jobs()]
# What Katib's pod webhook gives the primary container, here through the trial's runtime patch.
trial_env = {}
for t in job.trials:
    [pod] = k8s.CoreV1Api().list_namespaced_pod(
        "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={t.name}").items
    [node] = [c for c in pod.spec.containers if c.name == "node"]
    trial_env[t.name] = {e.name: e.value for e in node.env or [] if e.name == "KATIB_TRIAL_NAME"}
experiment = k8s.CustomObjectsApi().get_namespaced_custom_object(
    "kubeflow.org", "v1beta1", "default", "experiments", name)
optimizer.delete_job(name)
custom = k8s.CustomObjectsApi()
end = time.monotonic() + 60
while time.monotonic() < end and custom.list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")["items"]:
    time.sleep(0.2)
print(json.dumps({
    "name": name, "status": job.status,
    "trials": [{"name": t.name, "lr": t.parameters["lr"], "trainjob": t.trainjob.status,
                "steps": [s.name for s in t.trainjob.steps],
                "metrics": [(m.name, m.latest) for m in t.metrics]} for t in job.trials],
    "best": {"parameters": best.parameters, "metrics": [(m.name, m.latest) for m in best.metrics]},
    "logs": logs, "listed": listed, "trial_env": trial_env,
    "template_kind": experiment["spec"]["trialTemplate"]["trialSpec"]["kind"],
    "trainjobs_left": [t["metadata"]["name"] for t in custom.list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")["items"]],
}))
'''


@pytest.fixture
def kubeflow_python() -> str:
    """Requested before ``plane``, so a skip does not start a control plane first."""
    return venv_python("TRIMARAN_KUBEFLOW_PYTHON", "kubeflow.optimizer", ".venv-kubeflow")


def test_optimizer_client_tunes_a_function_with_trainjob_trials(kubeflow_python: str, plane: ControlPlaneHandle,
                                                                tmp_path: Path) -> None:
    out = run_client(kubeflow_python, plane, OPTIMIZE, tmp_path, timeout=240)
    assert out["template_kind"] == "TrainJob"
    assert out["status"] == "Complete"
    trials = out["trials"]
    assert len(trials) == 2
    for trial in trials:
        assert trial["trainjob"] == "Complete" and trial["steps"] == ["node-0"]
        lr = float(trial["lr"])
        assert 0.1 <= lr <= 0.5
        [(metric, latest)] = trial["metrics"]
        assert metric == "loss" and float(latest) == pytest.approx((lr - 0.3) ** 2, abs=1e-5)
    best = min(trials, key=lambda t: float(t["metrics"][0][1]))
    assert out["best"] == {"parameters": {"lr": best["lr"]}, "metrics": best["metrics"]}
    # The best trial's log, read through the StdOut collector's container name as the SDK asks for it.
    assert out["logs"] == [f"lr={float(best['lr'])} loss={float(best['metrics'][0][1]):.6f}"], out["logs"]
    assert out["listed"] == [out["name"]]
    assert out["trial_env"] == {t["name"]: {"KATIB_TRIAL_NAME": t["name"]} for t in trials}
    assert out["trainjobs_left"] == []
