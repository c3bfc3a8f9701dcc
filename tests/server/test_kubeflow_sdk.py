"""The Kubeflow SDK (``kubeflow``, Trainer v2's ``TrainerClient``) unchanged against a real control plane:
runtimes listed, a function trained as a 2-node ``torch-distributed`` TrainJob (DDP over gloo on
sklearn's digits), its steps, logs (followed while it runs), events and deletion; a function that
raises; ``CustomTrainerContainer`` on a namespaced TrainingRuntime.

The SDK runs from ``$TRIMARAN_KUBEFLOW_PYTHON`` (``scripts/test.sh`` builds ``.venv-kubeflow``). ``train``
packs the function's source into a bash heredoc that writes it to a file in the container's working
directory and starts ``torchrun`` on it: in a host-process pod that is the control plane's Python, whose
environment has torch and scikit-learn, so nothing is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.server.sdk import run_client, venv_python
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

COMMON = r'''
import json, logging, time
from kubernetes import client as k8s
from kubeflow.trainer import CustomTrainer, CustomTrainerContainer, TrainerClient


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


sdk_warnings = Kept()  # e.g. that the control plane's version ConfigMap is missing
logging.getLogger("kubeflow").addHandler(sdk_warnings)
trainer = TrainerClient()  # KUBECONFIG, namespace "default"
core = k8s.CoreV1Api()


def pods_of(name):
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    return sorted(p.metadata.name for p in core.list_namespaced_pod("default", label_selector=selector).items)


def until_gone(name, deadline=60):
    end = time.monotonic() + deadline
    while pods_of(name) and time.monotonic() < end:
        time.sleep(0.2)
    return pods_of(name)


def step_view(job):
    return [(s.name, s.status, s.device, s.device_count) for s in job.steps]
'''

DIGITS = COMMON + r'''
def train_digits(epochs, lr):
    import os
    import torch
    import torch.distributed as dist
    from sklearn.datasets import load_digits

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world} on node {os.environ['PET_NODE_RANK']}", flush=True)
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    test_x, test_y, train_x, train_y = x[:297], y[:297], x[297:][rank::world], y[297:][rank::world]
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for epoch in range(epochs):
        for i in range(0, len(train_x), 50):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(train_x[i:i + 50]), train_y[i:i + 50])
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}", flush=True)
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"accuracy={accuracy:.3f}", flush=True)
    # Leave together and skip gloo's teardown, which can abort a rank whose peer has gone ("terminate
    # called without an active exception"): torchrun would count that rank failed, and the job with it.
    dist.barrier()
    os._exit(0)


runtimes = sorted(r.name for r in trainer.list_runtimes())
runtime = trainer.get_runtime("torch-distributed")
name = trainer.train(runtime=runtime, trainer=CustomTrainer(
    func=train_digits, func_args={"epochs": 20, "lr": 0.1}, num_nodes=2, resources_per_node={"cpu": 1}))
trainer.wait_for_job_status(name, status={"Running"}, timeout=120, polling_interval=0.2)
followed, status_at_first_line = [], None
for line in trainer.get_job_logs(name, follow=True):
    if status_at_first_line is None:
        status_at_first_line = trainer.get_job(name).status
    followed.append(line)
job = trainer.wait_for_job_status(name, timeout=120, polling_interval=0.2)
logs = list(trainer.get_job_logs(name))
node1 = list(trainer.get_job_logs(name, step="node-1"))
events = [(e.involved_object_kind, e.involved_object_name, e.reason) for e in trainer.get_job_events(name)]
listed = [(j.name, j.status) for j in trainer.list_jobs()]
pod_names = [s.pod_name for s in job.steps]
trainer.delete_job(name)
try:
    trainer.get_job(name)
    gone = False
except RuntimeError:
    gone = True
print(json.dumps({
    "runtimes": runtimes, "runtime": [runtime.name, runtime.kind.value, runtime.trainer.framework],
    "name": name, "status": job.status, "num_nodes": job.num_nodes, "steps": step_view(job),
    "followed": followed, "status_at_first_line": status_at_first_line, "logs": logs, "node1": node1,
    "events": events, "listed": listed, "pod_names": pod_names, "gone": gone, "pods_left": until_gone(name),
    "sdk_warnings": sdk_warnings.messages,
}))
'''


@pytest.fixture
def kubeflow_python() -> str:
    """Requested before ``plane``, so a skip does not start a control plane first."""
    return venv_python("TRIMARAN_KUBEFLOW_PYTHON", "kubeflow.trainer", ".venv-kubeflow")


@pytest.mark.heavy
def test_trainer_client_trains_digits_with_ddp_on_two_nodes(kubeflow_python: str, plane: ControlPlaneHandle,
                                                            tmp_path: Path) -> None:
    out = run_client(kubeflow_python, plane, DIGITS, tmp_path, timeout=240)
    assert {"torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed",
            "xgboost-distributed"} <= set(out["runtimes"])
    assert out["runtime"] == ["torch-distributed", "ClusterTrainingRuntime", "torch"]
    name = out["name"]
    assert out["status"] == "Complete" and out["num_nodes"] == 2
    assert out["steps"] == [["node-0", "Succeeded", "cpu", "1"], ["node-1", "Succeeded", "cpu", "1"]]
    # Followed while it ran: the first line came while the job was still running, and every line came.
    assert out["status_at_first_line"] == "Running"
    assert out["followed"] == out["logs"]
    assert out["logs"][0] == "rank 0 of 2 on node 0", out["logs"]
    assert out["node1"][0] == "rank 1 of 2 on node 1", out["node1"]
    accuracy = float(out["logs"][-1].removeprefix("accuracy="))
    assert accuracy > 0.9, out["logs"]
    # Events of the TrainJob and its pods, each pod scheduled and started.
    pods = set(out["pod_names"])
    assert len(pods) == 2
    for pod in pods:
        assert ("Pod", pod, "Started") in [tuple(e) for e in out["events"]], out["events"]
    assert out["listed"] == [[name, "Complete"]]
    assert out["gone"] and out["pods_left"] == []
    assert out["sdk_warnings"] == []


RAISES = COMMON + r'''
def diverge(lr):
    print(f"starting with lr {lr}", flush=True)
    raise ValueError(f"learning rate {lr} diverged")


def uses_a_package():
    import no_such_package  # noqa: F401


name = trainer.train(trainer=CustomTrainer(func=diverge, func_args={"lr": 7}, num_nodes=1,
                                           resources_per_node={"cpu": 1}))
# The SDK pip-installs packages_to_install in the pod first: offline (an index nobody answers, no pip
# config), a package the platform's environment lacks fails the job with pip's words.
offline = trainer.train(trainer=CustomTrainer(
    func=uses_a_package, packages_to_install=["no-such-package"], pip_index_urls=["http://127.0.0.1:9/simple"],
    env={"PIP_CONFIG_FILE": "/dev/null", "PIP_RETRIES": "0"}, num_nodes=1, resources_per_node={"cpu": 1}))
job = trainer.wait_for_job_status(name, status={"Failed"}, timeout=120, polling_interval=0.2)
logs = list(trainer.get_job_logs(name))
conditions = k8s.CustomObjectsApi().get_namespaced_custom_object(
    "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", name)["status"]["conditions"]
offline_job = trainer.wait_for_job_status(offline, status={"Failed"}, timeout=120, polling_interval=0.2)
print(json.dumps({"status": job.status, "steps": step_view(job), "logs": logs,
                  "conditions": [(c["type"], c["status"]) for c in conditions],
                  "offline": [offline_job.status, list(trainer.get_job_logs(offline))]}))
'''


def test_a_function_that_raises_fails_its_trainjob_with_the_traceback_in_its_logs(
        kubeflow_python: str, plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(kubeflow_python, plane, RAISES, tmp_path, timeout=180)
    assert out["status"] == "Failed"
    assert ["Failed", "True"] in out["conditions"], out["conditions"]
    assert out["steps"] == [["node-0", "Failed", "cpu", "1"]]
    logs = out["logs"]
    assert logs[0] == "starting with lr 7", logs
    assert "Traceback (most recent call last):" in logs
    assert "ValueError: learning rate 7 diverged" in logs
    status, offline_logs = out["offline"]
    assert status == "Failed"
    assert "ERROR: Failed to install Python packages: no-such-package" in offline_logs, offline_logs


CONTAINER = COMMON + r'''
# A namespaced runtime whose node runs its own command (a host process): CustomTrainerContainer gives
# the image, node count and environment, the runtime the program.
program = ("import os; print(os.environ['GREETING'], 'from node', os.environ['PET_NODE_RANK'], 'of', "
           "os.environ['PET_NNODES'])")
k8s.CustomObjectsApi().create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "default",
    "trainingruntimes", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "greeter", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "node", "image": "docker.io/library/python:3.11",
                    "command": ["python", "-c", program]}]}}}}}]}}}})
listed = {r.name: r.kind.value for r in trainer.list_runtimes()}
name = trainer.train(runtime="greeter", trainer=CustomTrainerContainer(
    image="docker.io/library/python:3.12", num_nodes=2, env={"GREETING": "hello"}))
job = trainer.wait_for_job_status(name, timeout=120, polling_interval=0.2)
spec = k8s.CustomObjectsApi().get_namespaced_custom_object(
    "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", name)["spec"]["trainer"]
print(json.dumps({"listed": listed, "status": job.status, "spec": spec,
                  "logs": {s: list(trainer.get_job_logs(name, step=s)) for s in ("node-0", "node-1")}}))
'''


def test_custom_trainer_container_runs_a_namespaced_runtimes_program(
        kubeflow_python: str, plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(kubeflow_python, plane, CONTAINER, tmp_path, timeout=180)
    assert out["listed"]["greeter"] == "TrainingRuntime"
    assert out["status"] == "Complete"
    assert out["spec"] == {"image": "docker.io/library/python:3.12", "numNodes": 2,
                           "env": [{"name": "GREETING", "value": "hello"}]}
    assert out["logs"] == {"node-0": ["hello from node 0 of 2"], "node-1": ["hello from node 1 of 2"]}
