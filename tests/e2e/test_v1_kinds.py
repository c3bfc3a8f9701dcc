"""XGBoostJob, JAXJob and PaddleJob (kubeflow.org/v1): each operator's environment, proved by a
real distributed run of the framework's own collective; their refusals at apply; Katib trials of
an XGBoostJob and of a JobSet."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.builders import container, replica, schema_errors
from tests.conftest import shared_plane
from tests.helpers import pod_network_on
from trimaran.api import ManifestError, validate

plane = shared_plane("v1kinds")


XGBOOST = textwrap.dedent("""
    import hashlib, os, socket, sys
    import xgboost as xgb
    from sklearn.datasets import load_digits
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tracker = None
    if rank == 0:  # the Master runs rabit's tracker, on its own port
        tracker = RabitTracker(n_workers=world, host_ip=socket.gethostbyname(host), port=port)
        tracker.start()
    X, y = load_digits(return_X_y=True)
    with collective.CommunicatorContext(dmlc_tracker_uri=host, dmlc_tracker_port=port, dmlc_task_id=str(rank)):
        shard = slice(collective.get_rank(), None, collective.get_world_size())
        params = {"objective": "multi:softmax", "num_class": 10, "tree_method": "hist", "max_depth": depth,
                  "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(X[shard], y[shard]), num_boost_round=4)
    accuracy = float((booster.predict(xgb.DMatrix(X)) == y).mean())
    model = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
    print(f"rank={rank} world={world} workers={os.environ['WORKER_ADDRS']} model={model}", flush=True)
    print(f"accuracy={accuracy:.4f}", flush=True)
    if tracker is not None:
        tracker.wait_for()
""")

JAX = textwrap.dedent("""
    import os
    import jax, jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    pid, n = int(os.environ["PROCESS_ID"]), int(os.environ["NUM_PROCESSES"])
    jax.distributed.initialize(f"{os.environ['COORDINATOR_ADDRESS']}:{os.environ['COORDINATOR_PORT']}",
                               num_processes=n, process_id=pid)
    total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([pid + 1.0]))
    print(f"process={pid} count={jax.process_count()} sum={float(total[0])}", flush=True)
""")

PADDLE = textwrap.dedent("""
    import paddle
    import paddle.distributed as dist
    paddle.set_device("cpu")
    dist.init_parallel_env()
    x = paddle.to_tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(x)
    print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={float(x.numpy()[0])}", flush=True)
""")


def _job(kind: str, key: str, name: str, specs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name}, "spec": {key: specs}}


def _replica(container_name: str, command: list[str], replicas: int = 1) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": container_name, "image": "x", "command": command}]}}}


def _apply(plane, tmp_path, obj: dict[str, Any]) -> None:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    plane.cli("apply", "-f", str(path))


def _env(plane, pod: str) -> dict[str, Any]:
    """A replica's environment as its pod spec carries it (what the operator appended)."""
    spec = plane.client().get("Pod", "default", pod)["spec"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["containers"][0].get("env") or []
            if e["name"] != "PADDLE_DISTRI_BACKEND"}


def _logs(plane, pod: str) -> str:
    return plane.cli("logs", pod).stdout


@pytest.mark.heavy
def test_xgboost_job_trains_across_master_and_worker_with_rabit(plane, tmp_path):
    command = ["python", "-c", XGBOOST]
    _apply(plane, tmp_path, _job("XGBoostJob", "xgbReplicaSpecs", "xgb", {
        "Master": _replica("xgboost", command), "Worker": _replica("xgboost", command)}))
    plane.cli("wait", "xgboostjob/xgb", "--for=condition=Succeeded", "--timeout=120s")
    master, worker = _env(plane, "xgb-master-0"), _env(plane, "xgb-worker-0")
    assert list(master) == ["MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED",
                            "WORKER_PORT", "WORKER_ADDRS"]
    assert (master["MASTER_ADDR"], master["WORLD_SIZE"], master["RANK"], worker["RANK"]) == ("xgb-master-0", "2",
                                                                                             "0", "1")
    assert master["MASTER_PORT"] == worker["MASTER_PORT"] and master["PYTHONUNBUFFERED"] == "0"
    assert worker["WORKER_ADDRS"] == "xgb-worker-0"
    outputs = [_logs(plane, pod) for pod in ("xgb-master-0", "xgb-worker-0")]
    models = {re.search(r"model=(\w+)", out).group(1) for out in outputs}
    assert len(models) == 1, f"both replicas must build the same model: {outputs}"
    assert all(float(re.search(r"accuracy=([\d.]+)", out).group(1)) > 0.8 for out in outputs)
    job = plane.get("xgboostjob", "xgb")
    succeeded = next(c for c in job["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "XGBoostJobSucceeded"
    assert succeeded["message"] == "XGBoostJob xgb is successfully completed."


@pytest.mark.heavy
def test_jax_job_all_reduces_across_two_processes(plane, tmp_path):
    _apply(plane, tmp_path, _job("JAXJob", "jaxReplicaSpecs", "jx", {
        "Worker": _replica("jax", ["python", "-c", JAX], replicas=2)}))
    plane.cli("wait", "jaxjob/jx", "--for=condition=Succeeded", "--timeout=120s")
    envs = [_env(plane, f"jx-worker-{i}") for i in range(2)]
    assert list(envs[0]) == ["PYTHONUNBUFFERED", "COORDINATOR_PORT", "COORDINATOR_ADDRESS", "NUM_PROCESSES",
                             "PROCESS_ID"]
    assert [e["PROCESS_ID"] for e in envs] == ["0", "1"]
    assert all(e["COORDINATOR_ADDRESS"] == "jx-worker-0" and e["NUM_PROCESSES"] == "2" for e in envs)
    for i in range(2):
        assert f"process={i} count=2 sum=3.0" in _logs(plane, f"jx-worker-{i}")
    pod = plane.client().get("Pod", "default", "jx-worker-0")
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert pod["metadata"]["labels"]["training.kubeflow.org/operator-name"] == "jaxjob-controller"


@pytest.mark.heavy
def test_paddle_job_collective_launch_across_two_workers(plane, tmp_path):
    command = ["sh", "-c", f"cat > /tmp/train.py <<'EOF'\n{PADDLE}EOF\n"
               "exec python -m paddle.distributed.launch --log_dir /tmp/paddle-log /tmp/train.py"]
    workers = _replica("paddle", command, replicas=2)
    # Paddle's CPU wheel takes its collective (ProcessGroup) path only for an explicit gloo backend.
    workers["template"]["spec"]["containers"][0]["env"] = [{"name": "PADDLE_DISTRI_BACKEND", "value": "gloo"}]
    _apply(plane, tmp_path, _job("PaddleJob", "paddleReplicaSpecs", "pd", {"Worker": workers}))
    plane.cli("wait", "paddlejob/pd", "--for=condition=Succeeded", "--timeout=150s")
    first, second = _env(plane, "pd-worker-0"), _env(plane, "pd-worker-1")
    port = second["PADDLE_MASTER"].rsplit(":", 1)[1]
    assert first["PADDLE_MASTER"] == f"$(POD_IP_DUMMY):{port}"
    assert first["POD_IP_DUMMY"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert second["PADDLE_MASTER"] == f"pd-worker-0:{port}" and "POD_IP_DUMMY" not in second
    assert (first["PADDLE_NNODES"], first["PADDLE_JOB_ID"]) == ("2", "pd")
    labels = plane.client().get("Pod", "default", "pd-worker-0")["metadata"]["labels"]
    assert "training.kubeflow.org/job-role" not in labels, "a collective PaddleJob has no master role"
    outputs = _logs(plane, "pd-worker-0") + _logs(plane, "pd-worker-1")
    assert sorted(re.findall(r"rank=(\d) world=2 sum=3.0", outputs)) == ["0", "1"], outputs


def test_paddle_job_in_parameter_server_mode_points_every_replica_at_the_master(plane, tmp_path):
    echo = ["python", "-c", "import os; print(os.environ['PADDLE_MASTER'])"]
    _apply(plane, tmp_path, _job("PaddleJob", "paddleReplicaSpecs", "ps", {
        "Master": _replica("paddle", echo), "Worker": _replica("paddle", echo, replicas=2)}))
    plane.cli("wait", "paddlejob/ps", "--for=condition=Succeeded", "--timeout=60s")
    master, worker0 = _env(plane, "ps-master-0"), _env(plane, "ps-worker-0")
    port = worker0["PADDLE_MASTER"].rsplit(":", 1)[1]
    assert master["PADDLE_MASTER"] == f"$(POD_IP_DUMMY):{port}" and master["PADDLE_SERVER_NUM"] == "1"
    assert worker0["PADDLE_MASTER"] == f"ps-master-0:{port}" and worker0["PADDLE_TRAINER_NUM"] == "1"
    assert master["PADDLE_NNODES"] == "3" and "PADDLE_SERVER_NUM" not in worker0
    own_ip = plane.get("Pod", "ps-master-0")["status"]["podIP"] if pod_network_on(plane.home) else "127.0.0.1"
    assert _logs(plane, "ps-master-0").strip() == f"{own_ip}:{port}", "$(POD_IP_DUMMY) expands to the pod's IP"
    pod = plane.client().get("Pod", "default", "ps-master-0")
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"


@pytest.mark.parametrize(("kind", "key", "name"), [("JAXJob", "jaxReplicaSpecs", "jax"),
                                                  ("PaddleJob", "paddleReplicaSpecs", "paddle")])
def test_jax_and_paddle_jobs_have_the_scale_subresource(plane, tmp_path, kind, key, name):
    job = _job(kind, key, "scaled", {"Worker": _replica(name, ["true"], replicas=2)})
    job["spec"]["runPolicy"] = {"suspend": True}  # no process needed to read and write the count
    _apply(plane, tmp_path, job)
    client = plane.client()
    path = f"/apis/kubeflow.org/v1/namespaces/default/{kind.lower()}s/scaled/scale"
    scale = json.loads(client.request("GET", path).read())
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 2)
    client.request("PUT", path, {**scale, "spec": {"replicas": 3}}).read()
    assert client.get(kind, "default", "scaled")["spec"][key]["Worker"]["replicas"] == 3


@pytest.mark.heavy
def test_xgboost_job_trials_reach_succeeded_with_metrics_from_stdout(plane, tmp_path):
    command = ["python", "-c", XGBOOST, "${trialParameters.depth}"]
    trial_spec = _job("XGBoostJob", "xgbReplicaSpecs", "unused", {
        "Master": _replica("xgboost", command), "Worker": _replica("xgboost", command)})
    del trial_spec["metadata"]
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "xgbtune"},
                  "spec": {
                      "objective": {"type": "maximize", "objectiveMetricName": "accuracy"},
                      "algorithm": {"algorithmName": "grid"},
                      "maxTrialCount": 2, "parallelTrialCount": 1,
                      "parameters": [{"name": "depth", "parameterType": "int",
                                      "feasibleSpace": {"min": "2", "max": "3"}}],
                      "trialTemplate": {"primaryContainerName": "xgboost",
                                        "trialParameters": [{"name": "depth", "reference": "depth"}],
                                        "trialSpec": trial_spec}}}
    _apply(plane, tmp_path, experiment)
    plane.cli("wait", "experiment/xgbtune", "--for=condition=Succeeded", "--timeout=240s")
    trials = plane.client().list("Trial", "default", "katib.kubeflow.org/experiment=xgbtune")
    assert len(trials) == 2
    for trial in trials:
        conditions = [c["type"] for c in trial["status"]["conditions"] if c["status"] == "True"]
        assert conditions[-1] == "Succeeded", trial["status"]
        accuracy = next(m for m in trial["status"]["observation"]["metrics"] if m["name"] == "accuracy")
        assert float(accuracy["latest"]) > 0.8


def test_jobset_trials_read_jobsets_conditions_and_their_pods_metrics(plane, tmp_path):
    script = "import sys; print(f'score={float(sys.argv[1]) * 2:.2f}', flush=True)"
    pod = {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "x", "command": ["python", "-c", script, "${trialParameters.level}"]}]}
    trial_spec = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": [
        {"name": "node", "replicas": 1, "template": {"spec": {"backoffLimit": 0, "template": {"spec": pod}}}}]}}
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "jstune"},
                  "spec": {
                      "objective": {"type": "maximize", "objectiveMetricName": "score"},
                      "algorithm": {"algorithmName": "grid"},
                      "maxTrialCount": 2, "parallelTrialCount": 2,
                      "parameters": [{"name": "level", "parameterType": "discrete",
                                      "feasibleSpace": {"list": ["1", "3"]}}],
                      "trialTemplate": {"primaryContainerName": "main",
                                        "trialParameters": [{"name": "level", "reference": "level"}],
                                        "trialSpec": trial_spec}}}
    _apply(plane, tmp_path, experiment)
    plane.cli("wait", "experiment/jstune", "--for=condition=Succeeded", "--timeout=120s")
    trials = plane.client().list("Trial", "default", "katib.kubeflow.org/experiment=jstune")
    scores = sorted(float(next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")["latest"])
                    for t in trials)
    assert scores == [2.0, 6.0]
    best = plane.get("experiment", "jstune")["status"]["currentOptimalTrial"]["observation"]["metrics"][0]
    assert float(best["latest"]) == 6.0


def test_trial_templates_of_the_v1_kinds_get_kubeflow_defaults():
    def defaulted(kind: str, key: str, name: str, rtypes: tuple[str, ...]) -> dict[str, Any]:
        pod = replica([container(name, command=["python", "-c", "pass", "${trialParameters.lr}"])])
        trial_spec = {"apiVersion": "kubeflow.org/v1", "kind": kind, "spec": {key: {rt: pod for rt in rtypes}}}
        experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "e"},
                      "spec": {"objective": {"type": "maximize", "objectiveMetricName": "score"},
                               "algorithm": {"algorithmName": "random"},
                               "parameters": [{"name": "lr", "parameterType": "double",
                                               "feasibleSpace": {"min": "0.1", "max": "1"}}],
                               "trialTemplate": {"primaryContainerName": name,
                                                 "trialParameters": [{"name": "lr", "reference": "lr"}],
                                                 "trialSpec": trial_spec}}}
        return validate(experiment).object["spec"]["trialTemplate"]

    master = {"training.kubeflow.org/job-role": "master"}
    xgb = defaulted("XGBoostJob", "xgbReplicaSpecs", "xgboost", ("Master", "Worker"))
    assert xgb["primaryPodLabels"] == master
    assert xgb["successCondition"] == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    assert defaulted("JAXJob", "jaxReplicaSpecs", "jax", ("Worker",))["primaryPodLabels"] == master  # worker 0
    assert "primaryPodLabels" not in defaulted("PaddleJob", "paddleReplicaSpecs", "paddle", ("Worker",))
    assert defaulted("PaddleJob", "paddleReplicaSpecs", "paddle", ("Master", "Worker"))["primaryPodLabels"] == master


# --- refusals -------------------------------------------------------------------------------------

KINDS = [("XGBoostJob", "xgbReplicaSpecs", "xgboost"), ("JAXJob", "jaxReplicaSpecs", "jax"),
         ("PaddleJob", "paddleReplicaSpecs", "paddle")]


def _problems(obj: dict[str, Any]) -> list[str]:
    """The refusal's problems, each without its ``Kind "name": `` prefix."""
    with pytest.raises(ManifestError) as info:
        validate(obj)
    prefix = f'{obj["kind"]} "{obj["metadata"]["name"]}": '
    return [p.removeprefix(prefix) for p in info.value.problems]


@pytest.mark.parametrize(("kind", "key", "name"), KINDS)
def test_defaults_add_the_kinds_port_and_restart_policy(kind, key, name):
    job = validate(_job(kind, key, "ok", {"worker": replica([container(name)])}) if kind != "XGBoostJob" else
                   _job(kind, key, "ok", {"Master": replica([container(name)])})).object
    spec = next(iter(job["spec"][key].values()))
    ports = spec["template"]["spec"]["containers"][0]["ports"]
    expected = {"XGBoostJob": ("xgboostjob-port", 9999, "Never"), "JAXJob": ("jaxjob-port", 6666, "Never"),
                "PaddleJob": ("master", 36543, "OnFailure")}[kind]
    assert (ports[0]["name"], ports[0]["containerPort"], spec["restartPolicy"]) == expected
    assert spec["replicas"] == 1 and list(job["spec"][key]) in (["Worker"], ["Master"])


@pytest.mark.parametrize(("kind", "key", "name"), KINDS)
def test_stored_objects_validate_against_the_crd_schema(kind, key, name):
    crd = Path("/work/shared/schemas/kubeflow-training") / f"kubeflow.org_{kind.lower()}s.yaml"
    if not crd.exists():
        pytest.skip("no CRD schema here")
    [served] = yaml.safe_load(crd.read_text())["spec"]["versions"]
    specs = {"Master": replica([container(name)])} if kind != "JAXJob" else {}
    specs["Worker"] = replica([container(name, env=[{"name": "A", "value": "b"}])], replicas=2)
    job = _job(kind, key, "full", specs)
    job["spec"]["runPolicy"] = {"backoffLimit": 2, "ttlSecondsAfterFinished": 60, "suspend": True}
    if kind == "PaddleJob":
        job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    assert schema_errors(validate(job).object, served["schema"]["openAPIV3Schema"]) == []


@pytest.mark.parametrize(("kind", "key", "name"), KINDS)
def test_bad_replica_specs_are_refused_with_their_field_paths(kind, key, name):
    missing = {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "bad"}, "spec": {}}
    assert any(p.startswith(f"spec.{key}: Required value") for p in _problems(missing)), _problems(missing)
    assert any(p.startswith(f"spec.{key}: Required value")
               for p in _problems(_job(kind, key, "bad", {})))
    unknown = _problems(_job(kind, key, "bad", {"Master": replica([container(name)]),
                                                "Chief": replica([container(name)])}))
    assert any(p.startswith(f'spec.{key}.Chief: Unsupported value: "Chief"') for p in unknown), unknown
    negative = _problems(_job(kind, key, "bad", {"Worker": replica([container(name)], replicas=-1)}))
    assert any(p.startswith(f"spec.{key}.Worker.replicas: Invalid value: -1") for p in negative), negative
    nameless = _problems(_job(kind, key, "bad", {"Worker": replica([container("main")])}))
    assert f"spec.{key}.Worker.template.spec.containers: Required value: must have at least one container " \
           f"with name {name}" in nameless


def test_xgboost_job_needs_exactly_one_master():
    workers_only = _problems(_job("XGBoostJob", "xgbReplicaSpecs", "bad", {"Worker": replica([container("xgboost")])}))
    assert "spec.xgbReplicaSpecs.Master: Required value: must be present" in workers_only
    two = _problems(_job("XGBoostJob", "xgbReplicaSpecs", "bad",
                         {"Master": replica([container("xgboost")], replicas=2)}))
    assert "spec.xgbReplicaSpecs.Master.replicas: Forbidden: must be 1" in two


def test_jax_job_refused_at_apply_leaves_nothing_stored(plane, tmp_path):
    bad = _job("JAXJob", "jaxReplicaSpecs", "badjax", {"Master": _replica("jax", ["true"])})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    refused = plane.cli("apply", "-f", str(path), check=False)
    assert refused.returncode != 0
    assert 'spec.jaxReplicaSpecs.Master: Unsupported value: "Master"' in refused.stderr + refused.stdout
    assert [j for j in plane.client().list("JAXJob", "default") if j["metadata"]["name"] == "badjax"] == []
