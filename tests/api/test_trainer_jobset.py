"""The JobSet a TrainJob and its runtime make (`controllers/trainer/trainjob.build_jobset`), from
the built-in runtimes as installed: what goes where, and that the result is a valid JobSet."""

from __future__ import annotations

import copy
from typing import Any

from trimaran.api import validate
from trimaran.controllers.trainer.runtimes import builtin_runtimes
from trimaran.controllers.trainer.trainjob import build_jobset


def _runtime(name: str) -> dict[str, Any]:
    return next(r for r in builtin_runtimes() if r["metadata"]["name"] == name)


def _build(runtime: str | dict, trainer: dict | None = None, port: int | None = 21000, **spec: Any
           ) -> tuple[dict, list[dict]]:
    job = validate({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": "tj", "namespace": "ns"},
                    "spec": {"runtimeRef": {"name": "x"}, "trainer": trainer or {}, **spec}}).object
    job["metadata"]["uid"] = "uid-1"
    jobset, children = build_jobset(job, runtime if isinstance(runtime, dict) else _runtime(runtime), port, False)
    validate(jobset)  # what the controller stores must pass the JobSet's own checks
    return jobset, children


def _rjob(jobset: dict, name: str) -> dict:
    return next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name)


def _node_env(jobset: dict, rjob: str = "node") -> dict[str, Any]:
    node = _rjob(jobset, rjob)["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in node.get("env") or []}


def test_the_trainer_goes_on_the_node_container_and_num_nodes_on_the_node_job():
    jobset, children = _build("torch-distributed", {
        "numNodes": 3, "image": "mine:1", "command": ["torchrun", "t.py"], "args": ["--lr", "1"],
        "env": [{"name": "A", "value": "1"}], "resourcesPerNode": {"limits": {"cpu": "1500m", "memory": "1Gi"}}})
    assert children == []
    assert (jobset["metadata"]["name"], jobset["metadata"]["ownerReferences"][0]["uid"]) == ("tj", "uid-1")
    node = _rjob(jobset, "node")
    assert (node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == (3, 3)
    container = node["template"]["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["command"], container["args"]) == ("mine:1", ["torchrun", "t.py"],
                                                                              ["--lr", "1"])
    assert container["resources"]["limits"] == {"cpu": "1500m", "memory": "1Gi"}
    env = _node_env(jobset)
    assert list(env) == ["A", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                         "PET_MASTER_PORT"]
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == (
        "3", "2", "tj-node-0-0.tj", "21000"), "auto on CPUs is the CPU limit, rounded up"
    labels = node["template"]["spec"]["template"]["metadata"]["labels"]
    assert labels["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"


def test_num_proc_per_node_a_number_or_gpus():
    assert _node_env(_build("torch-distributed", {"numProcPerNode": 4})[0])["PET_NPROC_PER_NODE"] == "4"
    requested = _build("torch-distributed", {"resourcesPerNode": {"requests": {"cpu": "3"}}})[0]
    assert _node_env(requested)["PET_NPROC_PER_NODE"] == "3", "without limits, the CPU request"
    gpus = _build("torch-distributed", {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}})[0]
    assert _node_env(gpus)["PET_NPROC_PER_NODE"] == "auto", "torchrun counts the GPUs itself"


def test_runtime_patches_merge_by_name_in_order():
    patch = {"manager": "kueue", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"annotations": {"note": "x"}},
            "spec": {"nodeSelector": {"disk": "ssd"}, "volumes": [{"name": "data", "emptyDir": {}}],
                     "containers": [{"name": "node", "env": [{"name": "A", "value": "patched"}],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}}]}}}}
    jobset, _ = _build("torch-distributed", {"env": [{"name": "A", "value": "trainer"}]}, runtimePatches=[patch])
    pod = _rjob(jobset, "node")["template"]["spec"]["template"]
    assert jobset["metadata"]["labels"]["team"] == "a" and pod["metadata"]["annotations"] == {"note": "x"}
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert _node_env(jobset)["A"] == "trainer", "the TrainJob's trainer env is applied after the patches"


def test_jax_and_xgboost_environment():
    jax = _node_env(_build("jax-distributed", {"numNodes": 2})[0])
    assert {k: v for k, v in jax.items() if k != "JAX_PROCESS_ID"} == {
        "JAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": "tj-node-0-0.tj:21000", "JAX_COORDINATOR_PORT": "21000",
        "JAX_DISTRIBUTED_BACKEND": "gloo"}
    xgb = _node_env(_build("xgboost-distributed", {"numNodes": 2})[0])
    assert (xgb["DMLC_TRACKER_URI"], xgb["DMLC_TRACKER_PORT"], xgb["DMLC_NUM_WORKER"]) == ("tj-node-0-0.tj",
                                                                                           "21000", "2")
    gpus = _node_env(_build("xgboost-distributed", {"numNodes": 2, "resourcesPerNode": {
        "limits": {"nvidia.com/gpu": "2"}}})[0])
    assert gpus["DMLC_NUM_WORKER"] == "4", "one worker per GPU"
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert jax["JAX_PROCESS_ID"] == xgb["DMLC_TASK_ID"] == index


def test_mpi_launcher_is_node_zero():
    jobset, children = _build("deepspeed-distributed", {"numNodes": 3, "numProcPerNode": 2,
                                                         "command": ["mpirun", "python", "t.py"]}, port=None)
    assert _rjob(jobset, "node")["template"]["spec"]["parallelism"] == 2
    secret, hostfile = children
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", "tj-podexec")
    assert hostfile["data"]["hostfile"] == ("tj-launcher-0-0 slots=2\ntj-node-0-0.tj slots=2\n"
                                            "tj-node-0-1.tj slots=2\n")
    launcher = _node_env(jobset, "launcher")
    assert {k: launcher[k] for k in ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_orte_keep_fqdn_hostnames",
                                     "OMPI_MCA_orte_set_default_slots", "OMPI_MCA_plm_rsh_args")} == {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "2", "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"}
    node = _rjob(jobset, "node")["template"]["spec"]["template"]["spec"]["containers"][0]
    assert "podexec" in node["command"][2] and '"tj-node-0-$JOB_COMPLETION_INDEX"' in node["command"][2]


def test_initializers_run_first_and_share_the_workspace():
    jobset, _ = _build("torch-distributed", initializer={
        "dataset": {"storageUri": "hf://org/data", "secretRef": {"name": "hf"}},
        "model": {"storageUri": "s3://bucket/model", "env": [{"name": "AWS_REGION", "value": "eu"}]}})
    names = [r["name"] for r in jobset["spec"]["replicatedJobs"]]
    assert names == ["dataset-initializer", "model-initializer", "node"]
    assert _rjob(jobset, "model-initializer")["dependsOn"] == [{"name": "dataset-initializer", "status": "Complete"}]
    assert _rjob(jobset, "node")["dependsOn"] == [{"name": "model-initializer", "status": "Complete"}]
    dataset = _rjob(jobset, "dataset-initializer")["template"]["spec"]["template"]["spec"]["containers"][0]
    assert dataset["env"] == [{"name": "STORAGE_URI", "value": "hf://org/data"}]
    assert dataset["envFrom"] == [{"secretRef": {"name": "hf"}}]
    assert _node_env(jobset, "model-initializer")["AWS_REGION"] == "eu"
    [claim] = jobset["spec"]["volumeClaimPolicies"][0]["templates"]
    assert claim["metadata"]["name"] == "initializer"
    node = _rjob(jobset, "node")["template"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "initializer", "mountPath": "/workspace"} in node["volumeMounts"]


def test_a_runtimes_own_initializer_step_gets_the_source():
    runtime = copy.deepcopy(_runtime("torch-distributed"))
    init = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"][0])
    init["name"] = "dataset-initializer"
    init["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = "dataset-initializer"
    init["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "dataset-initializer"
    runtime["spec"]["template"]["spec"]["replicatedJobs"].insert(0, init)
    jobset, _ = _build(runtime, initializer={"dataset": {"storageUri": "hf://org/data"}})
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["dataset-initializer", "node"]
    assert _node_env(jobset, "dataset-initializer") == {"STORAGE_URI": "hf://org/data"}
    assert "volumeClaimPolicies" not in jobset["spec"], "the runtime's own step brings its own storage"


def _stored_trainjob(store, name: str, **spec: Any) -> dict:
    job = validate({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec}}).object
    return store.create(job)


def test_the_reconciler_leaves_others_alone_fails_what_it_cannot_make_and_frees_ports(tmp_path):
    import pytest

    from trimaran.controllers.base import Key
    from trimaran.controllers.ports import PortAllocator
    from trimaran.controllers.trainer import TrainJobReconciler, install_builtin_runtimes
    from trimaran.store import open_store

    store = open_store(tmp_path / "trimaran.db")
    ports = PortAllocator()
    try:
        store.ensure_namespace("default")
        install_builtin_runtimes(store)
        reconciler = TrainJobReconciler(store, ports)
        _stored_trainjob(store, "kueued", managedBy="kueue.x-k8s.io/multikueue")
        assert reconciler.reconcile(Key("TrainJob", "default", "kueued")) is None
        assert store.list("JobSet", "default") == [] and not store.get("TrainJob", "default", "kueued").get("status")

        theirs = validate({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                           "metadata": {"name": "taken", "namespace": "default"},
                           "spec": {"replicatedJobs": [{"name": "x", "template": {"spec": {"template": {"spec": {
                               "containers": [{"name": "c", "image": "i"}]}}}}}]}}).object
        store.create(theirs)
        _stored_trainjob(store, "taken")
        with pytest.raises(RuntimeError, match="JobSet taken exists and is not this TrainJob's"):
            reconciler.reconcile(Key("TrainJob", "default", "taken"))

        long = "a" * 50
        _stored_trainjob(store, long)
        assert reconciler.reconcile(Key("TrainJob", "default", long)) == 0.05
        assert reconciler.reconcile(Key("TrainJob", "default", long)) is None
        [failed] = store.get("TrainJob", "default", long)["status"]["conditions"]
        assert (failed["type"], failed["reason"]) == ("Failed", "FailedCreate")
        assert failed["message"].startswith("the runtime and the TrainJob make an invalid JobSet: JobSet ")
        assert "pod names generated for this JobSet will exceed 63 characters" in failed["message"]

        _stored_trainjob(store, "mine")
        key = Key("TrainJob", "default", "mine")
        passes = [reconciler.reconcile(key) for _ in range(2)]  # the port is recorded, then the JobSet made
        assert passes[0] == 0.05 and passes[1] != 0.05
        port = int(store.get("TrainJob", "default", "mine")["metadata"]["annotations"]["trimaran.io/trainer-port"])
        assert store.get("JobSet", "default", "mine")["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
        store.delete("TrainJob", "default", "mine")
        assert reconciler.reconcile(key) is None
        assert port not in ports._reserved, "a TrainJob that is gone gives its port back"
    finally:
        ports.release(list(ports._reserved))
        store.close()
