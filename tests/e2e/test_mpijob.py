"""MPIJob end to end: mpirun on the launcher starts real OpenMPI ranks in the worker pods, which
allreduce with mpi4py; the job follows the launcher, and nothing is left running afterwards."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import shared_plane
from tests.helpers import EXAMPLES, pod_network_on, pod_processes_of, poll
from trimaran.runtime import podexec

# One control plane for the file: each test's job has its own name, and its check that nothing
# is left running looks at that job's processes.
plane = shared_plane("mpijob")


TRAIN = textwrap.dedent("""
    # Data-parallel least squares: each rank takes its shard, gradients are averaged by allreduce.
    import os, socket
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0])
    xs, ys = np.array_split(x, comm.size)[comm.rank], np.array_split(y, comm.size)[comm.rank]
    w = np.zeros(4)
    for _ in range(200):
        grad = 2 * xs.T @ (xs @ w - ys) / len(ys)
        w -= 0.1 * comm.allreduce(grad) / comm.size
    total = comm.allreduce(comm.rank + 1)
    print(f"rank={comm.rank} size={comm.size} host={socket.gethostname()} sum={total} "
          f"role={os.environ.get('ROLE')} w={json.dumps(np.round(w, 3).tolist())}", flush=True)
""").replace("import os, socket", "import json, os, socket")


def _manifest(tmp_path, name: str, version: str, launcher_args: list[str], extra_spec: str = "") -> str:
    code = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-code"},
            "data": {"train.py": TRAIN}}
    command = ["mpirun", "--allow-run-as-root", "-np", "2", "-bind-to", "none", "-map-by", "slot",
               "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib", *launcher_args]
    volume = f"volumes: [{{name: code, configMap: {{name: {name}-code}}}}]"
    mount = "volumeMounts: [{name: code, mountPath: /app}]"
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(code) + "\n---\n" + textwrap.dedent(f"""
        apiVersion: kubeflow.org/{version}
        kind: MPIJob
        metadata:
          name: {name}
        spec:
          slotsPerWorker: 1
        {textwrap.indent(extra_spec, "  ")}
          mpiReplicaSpecs:
            Launcher:
              replicas: 1
              restartPolicy: Never
              template:
                spec:
                  containers:
                  - name: launcher
                    image: mpi
                    workingDir: /app
                    command: {json.dumps(command)}
                    env: [{{name: ROLE, value: launcher}}]
                    {mount}
                  {volume}
            Worker:
              replicas: 2
              template:
                spec:
                  containers:
                  - name: worker
                    image: mpi
                    workingDir: /app
                    env: [{{name: ROLE, value: worker}}]
                    {mount}
                  {volume}
    """))
    return str(path)


def _mpi_processes(plane, job: str) -> list:
    """The job's pods' processes, and any MPI process (orted, mpirun, ranks) started from them; one
    whose pod is no longer known counts as the job's."""
    import psutil

    mpi = []
    for proc in psutil.process_iter(["name", "environ"]):
        try:
            env = proc.info["environ"] or {}
        except psutil.Error:
            continue
        if proc.info["name"] in ("orted", "mpirun") and env.get("TRIMARAN_HOME") == str(plane.home):
            mpi.append(proc)
    return pod_processes_of(plane, "default", f"{job}-", extra=mpi)


def _ranks(log: str) -> dict[int, dict]:
    # Ranks share the launcher's stdout: two lines may run together, so each match stops at its "]".
    lines = re.findall(r"rank=(\d) size=(\d) host=(\S+) sum=(\d+) role=(\S+) w=(\[[^\]]*\])", log)
    return {int(r): {"size": int(s), "host": h, "sum": int(t), "role": role, "w": json.loads(w)}
            for r, s, h, t, role, w in lines}


def test_v2beta1_ranks_run_in_the_workers_and_allreduce(plane, tmp_path):
    plane.cli("apply", "-f", _manifest(tmp_path, "avg", "v2beta1", ["python", "train.py"]))
    plane.cli("wait", "mpijob/avg", "--for=condition=Succeeded", "--timeout=60s")
    ranks = _ranks(plane.cli("logs", "avg-launcher").stdout)
    assert sorted(ranks) == [0, 1]
    assert {r["host"] for r in ranks.values()} == {"avg-worker-0", "avg-worker-1"}
    # Ranks run with the worker's environment (mpirun sets their directory: its own, /app).
    assert all(r["size"] == 2 and r["sum"] == 3 and r["role"] == "worker" for r in ranks.values())
    assert ranks[0]["w"] == ranks[1]["w"] == pytest.approx([1.0, -2.0, 0.5, 3.0], abs=0.01)
    job = plane.get("mpijob", "avg")
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
    # cleanPodPolicy None keeps the pods: the idle workers were ended, not deleted.
    poll(lambda: plane.get("pod", "avg-worker-1")["status"]["phase"] == "Succeeded", timeout=20,
         what="the idle worker to end")
    poll(lambda: not _mpi_processes(plane, "avg"), timeout=20, what="no process of the job left")


def test_v1_seed_style_job_with_clean_pod_policy_running(plane, tmp_path):
    path = _manifest(tmp_path, "seedlike", "v1", ["-x", "NCCL_DEBUG=INFO", "python", "/app/train.py"],
                     extra_spec="cleanPodPolicy: Running")
    plane.cli("apply", "-f", path)
    plane.cli("wait", "mpijob/seedlike", "--for=condition=Succeeded", "--timeout=60s")
    ranks = _ranks(plane.cli("logs", "mpijob/seedlike").stdout)
    assert {r["host"] for r in ranks.values()} == {"seedlike-worker-0", "seedlike-worker-1"}
    assert all(r["sum"] == 3 for r in ranks.values())
    worker = lambda: [p for p in json.loads(plane.cli("get", "pods", "-o", "json").stdout)["items"]  # noqa: E731
                      if p["metadata"]["name"].startswith("seedlike-worker")]
    poll(lambda: not worker(), timeout=30, what="cleanPodPolicy Running to delete the workers")
    poll(lambda: not _mpi_processes(plane, "seedlike"), timeout=20, what="no process of the job left")


def test_a_failing_launcher_fails_the_job(plane, tmp_path):
    plane.cli("apply", "-f", _manifest(tmp_path, "bad", "v1", ["python", "-c", "import sys; sys.exit(3)"]))
    plane.cli("wait", "mpijob/bad", "--for=condition=Failed", "--timeout=60s")
    job = plane.get("mpijob", "bad")
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"][0]
    assert failed["reason"] == "MPIJobFailed" and "launcher failed" in failed["message"]
    assert job["status"]["replicaStatuses"]["Launcher"]["failed"] == 1
    poll(lambda: not _mpi_processes(plane, "bad"), timeout=20, what="no process of the job left")


def test_the_example_trains_and_its_configmap_carries_the_script(plane):
    d = EXAMPLES / "mpi-allreduce"  # its ConfigMap is checked by make_configmap.py --check in CI
    plane.cli("apply", "-f", str(d))
    plane.cli("wait", "mpijob/digits-mpi", "--for=condition=Succeeded", "--timeout=120s")
    log = plane.cli("logs", "mpijob/digits-mpi").stdout
    accuracies = [float(a) for a in re.findall(r"test_accuracy=([0-9.]+)", log)]
    assert len(accuracies) == 2 and min(accuracies) > 0.9, log[-2000:]
    assert "ranks=2" in log
    poll(lambda: not _mpi_processes(plane, "digits-mpi"), timeout=30, what="no process of the job left")


def test_a_pod_of_another_namespace_cannot_exec_in_a_worker(plane, tmp_path):
    # Every pod sees the workers' abstract socket names (/proc/net/unix) and runs as the same uid.
    victim = tmp_path / "victim.yaml"
    victim.write_text(textwrap.dedent("""
        apiVersion: kubeflow.org/v2beta1
        kind: MPIJob
        metadata: {name: victim}
        spec:
          mpiReplicaSpecs:
            Launcher:
              template: {spec: {containers: [{name: l, image: mpi, command: [sleep, "120"]}]}}
            Worker:
              replicas: 1
              template: {spec: {containers: [{name: w, image: mpi}]}}
    """))
    plane.cli("apply", "-f", str(victim))
    poll(lambda: plane.get("pod", "victim-worker-0")["status"]["phase"] == "Running", timeout=60,
         what="the victim's worker to run")
    uid = plane.get("mpijob", "victim")["metadata"]["uid"]
    attack = textwrap.dedent(f"""
        import json, socket, sys
        sys.path.insert(0, {str(Path(podexec.__file__).parent)!r})
        import podexec
        for token in (None, "guess"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(podexec.socket_name({uid!r}, "victim-worker-0"))
                except ConnectionRefusedError:  # in a network namespace of its own: no such socket
                    print("answer", json.dumps({{"error": "unreachable"}}), flush=True)
                    continue
                s.sendall(json.dumps({{"op": "exec", "command": "echo owned", "token": token}}).encode() + b"\\n")
                print("answer", s.makefile().readline().strip(), flush=True)
    """)
    attacker = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "attacker", "namespace": "other"},
                "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "a", "image": "python", "command": ["python", "-c", attack]}]}}}}
    for doc in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}, attacker):
        plane.cli("apply", "-f", "-", input=json.dumps(doc))
    plane.cli("wait", "job/attacker", "-n", "other", "--for=condition=Complete", "--timeout=60s")
    answers = re.findall(r"answer (.*)", plane.cli("logs", "job/attacker", "-n", "other").stdout)
    worker_log = plane.cli("logs", "victim-worker-0").stdout
    if pod_network_on(plane.home):
        # The attacker has a network namespace of its own: the workers' abstract sockets are not in it.
        assert answers == ['{"error": "unreachable"}'] * 2, answers
        assert "owned" not in worker_log and "podexec: refused a request" not in worker_log
    else:
        assert len(answers) == 2 and all("refused" in json.loads(a)["error"] for a in answers), answers
        assert "owned" not in worker_log and worker_log.count("podexec: refused a request") == 2
    assert plane.get("secret", "victim-podexec")["type"] == "Opaque"
    plane.cli("delete", "mpijob", "victim")
    poll(lambda: not _mpi_processes(plane, "victim"), timeout=30, what="no process of the job left")
