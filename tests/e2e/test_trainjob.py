"""TrainJob (Kubeflow Trainer v2) on a real control plane: the built-in runtimes run real
distributed training (torch DDP, jax.distributed, xgboost's collective) across two nodes, and a
TrainJob's lifecycle (failure, suspend/resume, deadline, deletion) follows upstream's conditions."""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import pytest

from tests.conftest import shared_plane
from tests.helpers import host_ip, pod_network_on, pod_processes_of, poll

plane = shared_plane("trainjob")


TORCH_DDP = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from sklearn.datasets import load_digits
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    X, y = load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for step in range(80):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[rank::world]), y[rank::world])
        loss.backward()
        opt.step()
    accuracy = (model(X).argmax(1) == y).float().mean().item()
    print(f"rank={rank} world={world} node={os.environ['PET_NODE_RANK']} accuracy={accuracy:.4f}", flush=True)
    # Leave together and skip gloo's teardown, which can abort a rank whose peer has gone (as the examples do).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)
""")

JAX = textwrap.dedent("""
    import os
    import jax, jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    pid, n = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
    jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], num_processes=n, process_id=pid)
    total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([pid + 1.0]))
    print(f"process={pid} count={jax.process_count()} sum={float(total[0])}", flush=True)
""")

XGBOOST = textwrap.dedent("""
    import hashlib, os, socket
    import xgboost as xgb
    from sklearn.datasets import load_digits
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    rank, world = int(os.environ["DMLC_TASK_ID"]), int(os.environ["DMLC_NUM_WORKER"])
    host, port = os.environ["DMLC_TRACKER_URI"], int(os.environ["DMLC_TRACKER_PORT"])
    tracker = None
    if rank == 0:  # node 0 runs rabit's tracker at the address every node is given
        tracker = RabitTracker(n_workers=world, host_ip=socket.gethostbyname(host), port=port)
        tracker.start()
    X, y = load_digits(return_X_y=True)
    with collective.CommunicatorContext(dmlc_tracker_uri=host, dmlc_tracker_port=port, dmlc_task_id=str(rank)):
        shard = slice(collective.get_rank(), None, collective.get_world_size())
        params = {"objective": "multi:softmax", "num_class": 10, "tree_method": "hist", "max_depth": 3, "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(X[shard], y[shard]), num_boost_round=4)
    accuracy = float((booster.predict(xgb.DMatrix(X)) == y).mean())
    model = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
    print(f"rank={rank} world={world} model={model} accuracy={accuracy:.4f}", flush=True)
    if tracker is not None:
        tracker.wait_for()
""")


def _script(body: str, runner: str) -> list[str]:
    """The trainer command the kubeflow SDK builds: the code written to a file, then run."""
    return ["bash", "-c", f"cat > /tmp/train.py <<'EOM'\n{body}EOM\n{runner} /tmp/train.py"]


def _trainjob(name: str, runtime: str, trainer: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer, **spec}}


def _apply(plane, tmp_path, obj: dict[str, Any], check: bool = True):
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    return plane.cli("apply", "-f", str(path), check=check)


def _node_pods(plane, job: str) -> list[dict]:
    pods = plane.client().list("Pod", "default", selector=f"jobset.sigs.k8s.io/jobset-name={job}")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _named(plane, kind: str, *names: str) -> list[dict]:
    """The objects of ``kind`` in the default namespace named one of ``names``: the test's own."""
    return [o for o in plane.client().list(kind, "default") if o["metadata"]["name"] in names]


def _logs(plane, job: str) -> str:
    return "".join(plane.cli("logs", p["metadata"]["name"]).stdout for p in _node_pods(plane, job))


def _env(pod: dict) -> dict[str, Any]:
    node = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in node.get("env") or []}


def _condition(job: dict, ctype: str) -> dict | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


@pytest.mark.heavy
def test_torch_distributed_trains_ddp_across_two_nodes(plane, tmp_path):
    _apply(plane, tmp_path, _trainjob("ddp", "torch-distributed",
                                      {"numNodes": 2, "command": _script(TORCH_DDP, "torchrun")}))
    plane.cli("wait", "trainjob/ddp", "--for=condition=Complete", "--timeout=300s")
    pods = _node_pods(plane, "ddp")
    assert [p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0", "1"]
    assert all(p["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer" for p in pods)
    env = _env(pods[0])
    port = env["PET_MASTER_PORT"]
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert {k: v for k, v in env.items() if k.startswith("PET_")} == {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "ddp-node-0-0.ddp", "PET_MASTER_PORT": port,
        "PET_NODE_RANK": index}
    if pod_network_on(plane.home):
        assert port == "29500", "upstream's port, at each node's own pod address"
        # PET_MASTER_ADDR resolved through the cluster DNS: the JobSet's headless Service names node 0.
        svc = plane.get("Service", "ddp")
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "ddp"}
        assert "ddp-node-0-0.ddp" not in json.loads(pods[1]["metadata"]["annotations"].get("trimaran.io/hosts") or "{}")
    else:
        assert port != "29500" and int(port) >= 20000, "each TrainJob gets a port of its own"
    out = _logs(plane, "ddp")
    ranks = re.findall(r"rank=(\d) world=2 node=(\d) accuracy=([\d.]+)", out)
    assert sorted((r, n) for r, n, _ in ranks) == [("0", "0"), ("1", "1")], out
    assert all(float(a) > 0.9 for _, _, a in ranks), out
    job = plane.get("trainjob", "ddp")
    complete = _condition(job, "Complete")
    assert (complete["reason"], complete["message"]) == ("AllJobsCompleted", "jobset completed successfully")
    assert job["status"]["jobsStatus"] == [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0,
                                            "suspended": 0}]


@pytest.mark.heavy
def test_jax_distributed_all_reduces_across_two_nodes(plane, tmp_path):
    _apply(plane, tmp_path, _trainjob("jx", "jax-distributed", {"numNodes": 2, "command": _script(JAX, "python")}))
    plane.cli("wait", "trainjob/jx", "--for=condition=Complete", "--timeout=240s")
    env = _env(_node_pods(plane, "jx")[1])
    assert env["JAX_NUM_PROCESSES"] == "2" and env["JAX_COORDINATOR_ADDRESS"].startswith("jx-node-0-0.jx:")
    out = _logs(plane, "jx")
    assert sorted(re.findall(r"process=(\d) count=2 sum=3.0", out)) == ["0", "1"], out


@pytest.mark.heavy
def test_xgboost_distributed_trains_one_model_across_two_nodes(plane, tmp_path):
    _apply(plane, tmp_path, _trainjob("xg", "xgboost-distributed",
                                      {"numNodes": 2, "command": _script(XGBOOST, "python")}))
    plane.cli("wait", "trainjob/xg", "--for=condition=Complete", "--timeout=240s")
    env = _env(_node_pods(plane, "xg")[0])
    assert (env["DMLC_TRACKER_URI"], env["DMLC_NUM_WORKER"]) == ("xg-node-0-0.xg", "2")
    out = _logs(plane, "xg")
    results = re.findall(r"rank=(\d) world=2 model=(\w+) accuracy=([\d.]+)", out)
    assert sorted(r for r, _, _ in results) == ["0", "1"], out
    assert len({m for _, m, _ in results}) == 1, f"both nodes build the same model: {out}"
    assert all(float(a) > 0.8 for _, _, a in results), out


def test_a_failing_trainer_fails_the_trainjob_and_deleting_it_leaves_no_pods(plane, tmp_path):
    failing = ["python", "-c", "import sys; print('about to fail', flush=True); sys.exit(3)"]
    job = _trainjob("bad", "torch-distributed", {"command": failing})
    job["spec"]["runtimePatches"] = [{"manager": "test", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "env": [{"name": "FROM_PATCH", "value": "yes"}]}]}}}}}]}}}}]
    _apply(plane, tmp_path, job)
    plane.cli("wait", "trainjob/bad", "--for=condition=Failed", "--timeout=60s")
    failed = _condition(plane.get("trainjob", "bad"), "Failed")
    assert failed["reason"] == "FailedJobs"
    assert failed["message"].startswith("jobset failed due to one or more job failures")
    assert "about to fail" in _logs(plane, "bad")
    assert _env(_node_pods(plane, "bad")[0])["FROM_PATCH"] == "yes"
    plane.cli("delete", "trainjob", "bad")
    poll(lambda: not _node_pods(plane, "bad") and not _named(plane, "JobSet", "bad"), timeout=30,
         what="the TrainJob's JobSet and pods to go")
    assert not pod_processes_of(plane, "default", "bad-")


def test_suspended_trainjob_makes_no_pods_until_resumed(plane, tmp_path):
    _apply(plane, tmp_path, _trainjob("sus", "torch-distributed", {"command": ["python", "-c", "print('ran')"]},
                                      suspend=True))
    plane.cli("wait", "trainjob/sus", "--for=condition=Suspended", "--timeout=60s")
    suspended = _condition(plane.get("trainjob", "sus"), "Suspended")
    assert (suspended["reason"], suspended["message"]) == ("Suspended", "TrainJob is suspended")
    assert plane.get("jobset", "sus")["spec"]["suspend"] is True and not _node_pods(plane, "sus")
    _apply(plane, tmp_path, _trainjob("sus", "torch-distributed", {"command": ["python", "-c", "print('ran')"]},
                                      suspend=False))
    plane.cli("wait", "trainjob/sus", "--for=condition=Complete", "--timeout=60s")
    resumed = _condition(plane.get("trainjob", "sus"), "Suspended")
    assert (resumed["status"], resumed["reason"], resumed["message"]) == ("False", "Resumed", "TrainJob is resumed")
    assert "ran" in _logs(plane, "sus")
    table = plane.cli("get", "trainjobs").stdout
    assert re.search(r"^sus\s+Complete\s", table, re.M), table
    overview, page = _dashboard(plane, "/dashboard/"), _dashboard(plane, "/dashboard/jobs/TrainJob/default/sus")
    assert "/dashboard/jobs/TrainJob/default/sus" in overview
    assert _node_pods(plane, "sus")[0]["metadata"]["name"] in page and "<h2>Jobs</h2>" in page


def test_patches_given_while_suspended_reach_the_jobset(plane, tmp_path):
    echo = {"command": ["python", "-c", "print('ran')"]}
    _apply(plane, tmp_path, _trainjob("kq", "torch-distributed", echo, suspend=True))
    plane.cli("wait", "trainjob/kq", "--for=condition=Suspended", "--timeout=60s")
    patch = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"zone": "b"}}}}}}]}}}}
    _apply(plane, tmp_path, _trainjob("kq", "torch-distributed", echo, suspend=True, runtimePatches=[patch]))
    node = lambda: plane.get("jobset", "kq")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]  # noqa: E731
    poll(lambda: node()["spec"].get("nodeSelector") == {"zone": "b"}, timeout=30,
         what="the suspended JobSet to take the patch")


def _dashboard(plane, path: str) -> str:
    import http.client
    import urllib.parse

    url, token, context = plane.endpoint()
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10, context=context)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read().decode()
        assert resp.status == 200, (resp.status, body[:300])
        return body
    finally:
        conn.close()


def test_active_deadline_fails_the_trainjob_and_stops_its_pods(plane, tmp_path):
    _apply(plane, tmp_path, _trainjob("slow", "torch-distributed",
                                      {"command": ["python", "-c", "import time; time.sleep(120)"]},
                                      activeDeadlineSeconds=3))
    plane.cli("wait", "trainjob/slow", "--for=condition=Failed", "--timeout=60s")
    failed = _condition(plane.get("trainjob", "slow"), "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    poll(lambda: not _node_pods(plane, "slow"), timeout=30, what="the deadline's pods to stop")


def test_trainjob_naming_a_missing_runtime_is_refused_at_apply(plane, tmp_path):
    refused = _apply(plane, tmp_path, _trainjob("orphan", "no-such-runtime", {"numNodes": 1}), check=False)
    assert refused.returncode != 0
    assert ('spec.runtimeRef: Invalid value: "object": clustertrainingruntimes.trainer.kubeflow.org '
            '"no-such-runtime" not found: specified clusterTrainingRuntime must be created before the TrainJob is '
            'created') in refused.stderr
    reserved = _apply(plane, tmp_path, _trainjob("pet", "torch-distributed", {
        "env": [{"name": "PET_NNODES", "value": "4"}, {"name": "PET_MASTER_PORT", "value": "1"}]}), check=False)
    assert ("spec.trainer.env: Invalid value: \"array\": must not have reserved envs, invalid envs configured: "
            "[PET_MASTER_PORT PET_NNODES]") in reserved.stderr
    assert not _named(plane, "TrainJob", "orphan", "pet")
    runtimes = {r["metadata"]["name"]: r for r in plane.client().list("ClusterTrainingRuntime", "")}
    assert set(runtimes) == {"torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed",
                             "xgboost-distributed"}
    assert runtimes["deepspeed-distributed"]["metadata"]["labels"] == {"trainer.kubeflow.org/framework": "deepspeed"}


def test_dataset_initializer_fetches_into_the_workspace_before_the_nodes_start(plane, tmp_path):
    import http.server
    import io
    import tarfile
    import threading

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"x,y\n1,2\n"
        info = tarfile.TarInfo("digits.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "data.tar.gz").write_bytes(archive.getvalue())
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer((host_ip(), 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://{host_ip()}:{server.server_address[1]}/data.tar.gz"
        read = ["python", "-c", "print(open('/workspace/dataset/digits.csv').read().splitlines()[1])"]
        _apply(plane, tmp_path, _trainjob("init", "torch-distributed", {"command": read},
                                          initializer={"dataset": {"storageUri": uri}}))
        plane.cli("wait", "trainjob/init", "--for=condition=Complete", "--timeout=60s")
    finally:
        server.shutdown()
    pods = {p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]: p for p in _node_pods(plane, "init")}
    assert set(pods) == {"dataset-initializer", "node"}
    assert pods["dataset-initializer"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == \
        "dataset-initializer"
    assert plane.cli("logs", pods["node"]["metadata"]["name"]).stdout.strip() == "1,2"
    assert "1 files in /workspace/dataset" in plane.cli("logs", pods["dataset-initializer"]["metadata"]["name"]).stdout


def test_an_unreachable_model_fails_the_trainjob_before_any_node_starts(plane, tmp_path):
    offline = {"storageUri": "hf://nobody/nothing", "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]}
    _apply(plane, tmp_path, _trainjob("offline", "torch-distributed", {"command": ["true"]},
                                      initializer={"model": offline}))
    plane.cli("wait", "trainjob/offline", "--for=condition=Failed", "--timeout=60s")
    [pod] = _node_pods(plane, "offline")
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "model-initializer"
    log = plane.cli("logs", pod["metadata"]["name"]).stdout
    assert "model-initializer: cannot fetch hf://nobody/nothing" in log, log


MPI_ALLREDUCE = textwrap.dedent("""
    import socket
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    print(f"rank={comm.rank} size={comm.size} host={socket.gethostname()} sum={comm.allreduce(comm.rank + 1)}",
          flush=True)
""")


@pytest.mark.heavy
def test_deepspeed_distributed_runs_mpirun_across_the_launcher_and_a_node(plane, tmp_path):
    # The kubeflow SDK's MPI command: every rank writes the code under /home/mpiuser and runs it.
    script = f"cat > /home/mpiuser/train.py <<'EOM'\n{MPI_ALLREDUCE}EOM\npython /home/mpiuser/train.py"
    command = ["mpirun", "--hostfile", "/etc/mpi/hostfile", "bash", "-c", script]
    _apply(plane, tmp_path, _trainjob("ds", "deepspeed-distributed", {"numNodes": 2, "command": command}))
    plane.cli("wait", "trainjob/ds", "--for=condition=Complete", "--timeout=180s")
    hostfile = plane.client().get("ConfigMap", "default", "ds-mpi-hostfile")["data"]["hostfile"]
    assert hostfile == "ds-launcher-0-0 slots=1\nds-node-0-0.ds slots=1\n"
    launcher = next(p for p in _node_pods(plane, "ds")
                    if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "launcher")
    env = _env(launcher)
    assert (env["OMPI_MCA_orte_default_hostfile"], env["OMPI_MCA_orte_set_default_slots"]) == ("/etc/mpi/hostfile", "1")
    out = plane.cli("logs", launcher["metadata"]["name"]).stdout
    ranks = dict(re.findall(r"rank=(\d) size=2 host=(\S+) sum=3", out))
    assert ranks == {"0": "ds-launcher-0-0", "1": "ds-node-0-0"}, out
    poll(lambda: not _exec_servers(plane, "ds-"), timeout=30, what="the node's exec server to end with the job")


def _exec_servers(plane, prefix: str) -> list:
    import psutil

    found = []
    for proc in pod_processes_of(plane, "default", prefix):
        try:
            if "podexec" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            pass  # ended meanwhile
    return found


def test_kubectl_serves_the_trainer_kinds(plane, tmp_path):
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), HOME=str(tmp_path),
               KUBECACHEDIR=str(tmp_path / "kcache"))

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([kubectl, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120)

    resources = run("api-resources", "--api-group=trainer.kubeflow.org").stdout
    scopes = {line.split()[0]: line.split()[-2] for line in resources.splitlines()[1:]}
    assert scopes == {"clustertrainingruntimes": "false", "trainingruntimes": "true", "trainjobs": "true"}
    assert "torch-distributed" in run("get", "clustertrainingruntimes").stdout
    refused = run("apply", "-f", "-", stdin=json.dumps(_trainjob("k", "nowhere", {"numNodes": 1})))
    assert refused.returncode != 0 and 'spec.runtimeRef: Invalid value: "object": clustertrainingruntimes' \
        '.trainer.kubeflow.org "nowhere" not found' in refused.stderr
    applied = run("apply", "--server-side", "-f", "-", stdin=json.dumps(
        _trainjob("k", "torch-distributed", {"command": ["python", "-c", "print(1)"]})))
    assert applied.returncode == 0, applied.stderr
    assert run("wait", "--for=condition=Complete", "trainjob/k", "--timeout=60s").returncode == 0
    assert re.search(r"^k\s+Complete\s", run("get", "trainjobs").stdout, re.M)


WAITER = "import os, time\nwhile not os.path.exists('/state/go'):\n    time.sleep(0.1)\nprint('finished', flush=True)"


def test_a_killed_control_plane_keeps_the_trainjobs_jobset_and_port(fresh_plane, tmp_path):
    import fcntl
    import os
    import signal

    from trimaran.controllers.ports import REGISTRY
    from trimaran.server.daemon import read_server_info, start_server

    plane = fresh_plane
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "state"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}
    _apply(plane, tmp_path, claim)
    job = _trainjob("survivor", "torch-distributed", {"command": ["python", "-c", WAITER]})
    job["spec"]["runtimePatches"] = [{"manager": "test", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "state"}}],
            "containers": [{"name": "node", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}}}}}]}}}}]
    _apply(plane, tmp_path, job)
    poll(lambda: [p for p in _node_pods(plane, "survivor") if p["status"].get("phase") == "Running"], timeout=30,
         what="the node to run")
    own_network = pod_network_on(plane.home)  # then upstream's 29500 at the node's own address: nothing held
    annotations = plane.get("trainjob", "survivor")["metadata"].get("annotations") or {}
    port = None if own_network else annotations["trimaran.io/trainer-port"]
    jobset_uid = plane.get("jobset", "survivor")["metadata"]["uid"]

    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    start_server(home=plane.home)
    if port is not None:
        fd = os.open(REGISTRY, os.O_RDWR)
        try:
            with pytest.raises(OSError):  # the new control plane holds the recorded port again
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(port))
        finally:
            os.close(fd)
    (plane.home / "volumes/default/state/go").write_text("")
    plane.cli("wait", "trainjob/survivor", "--for=condition=Complete", "--timeout=60s")
    assert plane.get("jobset", "survivor")["metadata"]["uid"] == jobset_uid, "the JobSet is not made again"
    assert "finished" in _logs(plane, "survivor")


def test_runtime_patches_cannot_get_past_pod_security(plane, tmp_path):
    job = _trainjob("escape", "torch-distributed", {"command": ["true"]})
    job["spec"]["runtimePatches"] = [{"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "node", "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]}}}}}]}}}}]
    _apply(plane, tmp_path, job)
    plane.cli("wait", "trainjob/escape", "--for=condition=Failed", "--timeout=60s")
    failed = _condition(plane.get("trainjob", "escape"), "Failed")
    assert failed["reason"] == "FailedCreate"
    assert failed["message"] == ('jobsets.jobset.x-k8s.io "escape" is forbidden: violates PodSecurity '
                                 '"baseline:latest": spec.replicatedJobs[0].template.spec.template: hostPath volumes '
                                 '(volume "root")')
    assert not _named(plane, "JobSet", "escape") and not _node_pods(plane, "escape")


def test_a_one_node_mpi_trainjob_keeps_a_node_beside_its_launcher_as_upstream(plane, tmp_path):
    hostname = "import socket; print(socket.gethostname(), flush=True)"
    command = ["mpirun", "--hostfile", "/etc/mpi/hostfile", "python", "-c", hostname]
    _apply(plane, tmp_path, _trainjob("solo", "mlx-distributed", {"numNodes": 1, "command": command}))
    plane.cli("wait", "trainjob/solo", "--for=condition=Complete", "--timeout=120s")
    hostfile = plane.client().get("ConfigMap", "default", "solo-mpi-hostfile")["data"]["hostfile"]
    assert hostfile == "solo-launcher-0-0 slots=1\nsolo-node-0-0.solo slots=1\n"
    out = plane.cli("logs", "solo").stdout  # the launcher's, where mpirun gathers every rank's output
    assert sorted(out.split()) == ["solo-launcher-0-0", "solo-node-0-0"], out


def test_a_namespaced_plain_runtime_runs_every_node(plane, tmp_path):
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "plain", "labels": {"trainer.kubeflow.org/framework": "plainml"}},
               "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
                   "name": "node", "template": {"metadata": {"labels": {
                       "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                           "name": "node", "image": "python:3.11", "command": ["python", "-c", "print('default')"]
                       }]}}}}}]}}}}
    _apply(plane, tmp_path, runtime)
    rank = "import os; print('node', os.environ['JOB_COMPLETION_INDEX'])"
    _apply(plane, tmp_path, _trainjob("plain", "plain", {"numNodes": 2, "command": ["python", "-c", rank]},
                                      runtimeRef={"name": "plain", "kind": "TrainingRuntime"}))
    plane.cli("wait", "trainjob/plain", "--for=condition=Complete", "--timeout=60s")
    pods = _node_pods(plane, "plain")
    assert sorted(plane.cli("logs", p["metadata"]["name"]).stdout.strip() for p in pods) == ["node 0", "node 1"]
    assert not [k for k in _env(pods[0]) if k.startswith(("PET_", "JAX_", "DMLC_"))], "plain ML injects nothing"
    assert plane.cli("logs", "plain").stdout.strip() == "node 0", "a TrainJob's log is its node 0's"
    second = plane.cli("logs", "trainjob/plain", "--replica-type", "node", "--replica-index", "1").stdout
    assert second.strip() == "node 1"
    described = plane.cli("describe", "trainjob", "plain").stdout
    assert all(p["metadata"]["name"] in described for p in pods), described
    assert "plain" in plane.cli("get", "trainingruntimes").stdout
    assert "torch-distributed" in plane.cli("get", "clustertrainingruntimes").stdout
