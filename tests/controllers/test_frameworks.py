"""The operator's per-kind rules, as pure functions: env contract and job outcome from replica counts.

The worked examples are those of training-operator.md §1.1 and §1.2.
"""

from __future__ import annotations

import base64
import json

from trimaran.controllers.conditions import set_training_condition
from trimaran.controllers.training import framework_for
from trimaran.controllers.training.framework import JobView, ReplicaAddress, ReplicaCounts

TF = framework_for("TFJob")
PT = framework_for("PyTorchJob")


def _addrs(job: str, ns: str, counts: dict[str, int], port: int = 2222) -> dict[str, list[ReplicaAddress]]:
    return {rt: [ReplicaAddress(f"{job}-{rt.lower()}-{i}", f"{job}-{rt.lower()}-{i}.{ns}.svc", port)
                 for i in range(n)] for rt, n in counts.items()}


def _spec(key: str, counts: dict[str, int], **extra) -> dict:
    return {key: {rt: {"replicas": n} for rt, n in counts.items()}, **extra}


def test_tf_config_matches_the_worked_example():
    counts = {"PS": 1, "Worker": 2}
    view = JobView("mnist", "default", _spec("tfReplicaSpecs", counts))
    env = TF.env(view, "Worker", 1, _addrs("mnist", "default", counts), {"name": "tensorflow"})
    assert env == [{"name": "TF_CONFIG", "value": (
        '{"cluster":{"ps":["mnist-ps-0.default.svc:2222"],"worker":["mnist-worker-0.default.svc:2222",'
        '"mnist-worker-1.default.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}')}]


def test_tf_config_puts_chief_first_keeps_evaluator_and_skips_other_containers():
    counts = {"Worker": 1, "Chief": 1, "Evaluator": 1}
    view = JobView("j", "ns", _spec("tfReplicaSpecs", counts))
    value = TF.env(view, "Evaluator", 0, _addrs("j", "ns", counts), {"name": "tensorflow"})[0]["value"]
    assert list(json.loads(value)["cluster"]) == ["chief", "evaluator", "worker"]
    assert TF.env(view, "Worker", 0, _addrs("j", "ns", counts), {"name": "sidecar"}) == []


def test_dynamic_worker_tf_config_is_sparse():
    counts = {"PS": 1, "Worker": 2}
    view = JobView("j", "ns", _spec("tfReplicaSpecs", counts, enableDynamicWorker=True))
    config = json.loads(TF.env(view, "Worker", 1, _addrs("j", "ns", counts), {"name": "tensorflow"})[0]["value"])
    assert config == {"cluster": {"worker": {"1": "j-worker-1.ns.svc:2222"}, "ps": ["j-ps-0.ns.svc:2222"]},
                      "task": {"type": "worker", "index": 1}}


def test_pytorch_env_with_nproc_per_node_multiplies_world_size_only():
    counts = {"Master": 1, "Worker": 3}
    view = JobView("ddp", "default", _spec("pytorchReplicaSpecs", counts, nprocPerNode="2"))
    env = {e["name"]: e["value"] for e in PT.env(view, "Worker", 2, _addrs("ddp", "default", counts, 23456), {})}
    assert env["WORLD_SIZE"] == "8" and env["RANK"] == "3" and env["PET_NPROC_PER_NODE"] == "2"
    assert env["MASTER_ADDR"] == "ddp-master-0" and env["MASTER_PORT"] == "23456"


def test_pytorch_elastic_env_matches_the_echo_example():
    counts = {"Worker": 2}
    spec = _spec("pytorchReplicaSpecs", counts, nprocPerNode="auto",
                 elasticPolicy={"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 100})
    view = JobView("elastic-example-echo", "default", spec)
    env = {e["name"]: e["value"]
           for e in PT.env(view, "Worker", 0, _addrs("elastic-example-echo", "default", counts, 23456), {})}
    assert env == {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": "auto",
                   "PET_RDZV_ENDPOINT": "elastic-example-echo-worker-0:23456", "PET_RDZV_BACKEND": "c10d",
                   "PET_NNODES": "1:2", "PET_MAX_RESTARTS": "100",
                   # Beyond upstream: all replicas share loopback, so worker 0 is told it hosts the store
                   # and each node is named by its pod.
                   "PET_RDZV_CONF": "is_host=true", "PET_LOCAL_ADDR": "elastic-example-echo-worker-0",
                   "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _view(key: str, spec_counts: dict[str, int], counts: dict[str, ReplicaCounts], **extra) -> JobView:
    view = JobView("j", "ns", _spec(key, spec_counts, **extra))
    view.counts = counts
    return view


def test_tfjob_without_chief_succeeds_when_worker_0_succeeds_unless_all_workers_policy():
    counts = {"Worker": ReplicaCounts(replicas=2, active=1, succeeded=1)}
    view = _view("tfReplicaSpecs", {"Worker": 2}, counts)
    view.worker0_succeeded = True
    assert TF.status(view)[0] == "Succeeded"
    strict = _view("tfReplicaSpecs", {"Worker": 2}, counts, successPolicy="AllWorkers")
    strict.worker0_succeeded = True
    assert TF.status(strict)[0] == "Running"


def test_tfjob_with_chief_follows_the_chief():
    counts = {"Chief": ReplicaCounts(1, succeeded=1), "PS": ReplicaCounts(1, active=1),
              "Worker": ReplicaCounts(2, active=2)}
    assert TF.status(_view("tfReplicaSpecs", {"Chief": 1, "PS": 1, "Worker": 2}, counts))[0] == "Succeeded"


def test_failed_replicas_fail_the_job_but_not_dynamic_workers():
    counts = {"PS": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, active=1, failed=1)}
    assert TF.status(_view("tfReplicaSpecs", {"PS": 1, "Worker": 2}, counts))[0] == "Failed"
    dynamic = _view("tfReplicaSpecs", {"PS": 1, "Worker": 2}, counts, enableDynamicWorker=True)
    assert TF.status(dynamic)[0] == "Running"


def test_pytorch_master_success_ends_the_job_and_elastic_needs_one_worker():
    counts = {"Master": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(2, active=2)}
    assert PT.status(_view("pytorchReplicaSpecs", {"Master": 1, "Worker": 2}, counts))[0] == "Succeeded"
    elastic = _view("pytorchReplicaSpecs", {"Worker": 3}, {"Worker": ReplicaCounts(3, active=2, succeeded=1)},
                    elasticPolicy={"minReplicas": 1})
    assert PT.status(elastic)[0] == "Succeeded"


def test_conditions_alternate_running_and_restarting_and_freeze_after_failure():
    status: dict = {}
    set_training_condition(status, "Created", "Created", "")
    set_training_condition(status, "Running", "Running", "")
    set_training_condition(status, "Restarting", "Restarting", "")
    assert [c["type"] for c in status["conditions"]] == ["Created", "Restarting"]
    set_training_condition(status, "Running", "Running", "")
    set_training_condition(status, "Failed", "Failed", "boom")
    running = [c for c in status["conditions"] if c["type"] == "Running"][0]
    assert running["status"] == "False" and status["conditions"][-1]["type"] == "Failed"
    assert not set_training_condition(status, "Succeeded", "Succeeded", "")


# --- MPIJob (training-operator.md §1.3, §1.4) -----------------------------------------------------

MPI = framework_for("MPIJob")


def _mpi_view(version: str, workers: int = 2, **spec) -> JobView:
    containers = {"Launcher": [{"name": "launcher", "command": ["mpirun"]}], "Worker": [{"name": "worker"}]}
    specs = {rt: {"replicas": n, "template": {"spec": {"containers": containers[rt]}}}
             for rt, n in (("Launcher", 1), ("Worker", workers))}
    return JobView("pi", "ns", {"mpiReplicaSpecs": specs, "slotsPerWorker": 2, **spec},
                   api_version=f"kubeflow.org/{version}", uid="uid-1")


def _mpi_addrs(workers: int = 2) -> dict[str, list[ReplicaAddress]]:
    out = {"Launcher": [ReplicaAddress("pi-launcher", "pi-launcher.ns.svc", 1)]}
    out["Worker"] = [ReplicaAddress(f"pi-worker-{i}", f"pi-worker-{i}.ns.svc", 2 + i) for i in range(workers)]
    return out


def test_mpi_pod_names_and_labels():
    assert [MPI.pod_name("pi", "Launcher", 0), MPI.pod_name("pi", "Worker", 1)] == ["pi-launcher", "pi-worker-1"]
    v1, v2 = _mpi_view("v1"), _mpi_view("v2beta1")
    assert (MPI.job_role(v1, "Launcher", 0), MPI.job_role(v1, "Worker", 0)) == ("master", None)
    assert (MPI.job_role(v2, "Launcher", 0), MPI.job_role(v2, "Worker", 0)) == ("launcher", "worker")
    assert (MPI.operator_label(v1), MPI.operator_label(v2)) == ("mpijob-controller", "mpi-operator")
    assert MPI.host_aliases(v2, "pi-worker-0") == ["pi-worker-0.pi.ns.svc"] and MPI.host_aliases(v1, "x") == []


def test_mpi_hostfile_per_version_and_implementation():
    def files(view: JobView) -> dict:
        token, config = MPI.children(view, _mpi_addrs())
        assert (token["kind"], token["metadata"]["name"]) == ("Secret", "pi-podexec")
        assert len(base64.b64decode(token["data"]["token"])) == 64
        assert config["metadata"]["name"] == "pi-config"
        return config["data"]

    v1 = files(_mpi_view("v1"))
    assert v1["hostfile"] == "pi-worker-0 slots=2\npi-worker-1 slots=2\n"
    assert v1["discover_hosts.sh"] == "#!/bin/sh\necho pi-worker-0:2\necho pi-worker-1:2\n"
    assert v1["kubexec.sh"].startswith("#!/bin/sh\n") and "podexec.py connect uid-1 \"$@\"" in v1["kubexec.sh"]
    v2 = files(_mpi_view("v2beta1"))
    assert v2["hostfile"] == "pi-worker-0.pi.ns.svc slots=2\npi-worker-1.pi.ns.svc slots=2\n"
    as_worker = files(_mpi_view("v2beta1", runLauncherAsWorker=True, mpiImplementation="Intel"))
    assert as_worker["hostfile"] == "pi-launcher:2\npi-worker-0.pi.ns.svc:2\npi-worker-1.pi.ns.svc:2\n"


def test_mpi_launcher_env_v1_and_v2beta1():
    v1 = {e["name"]: e["value"] for e in MPI.env(_mpi_view("v1"), "Launcher", 0, _mpi_addrs(), {"name": "launcher"})}
    assert v1["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert v1["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert v1["I_MPI_HYDRA_BOOTSTRAP"] == "rsh" and v1["I_MPI_HYDRA_BOOTSTRAP_EXEC"] == "/etc/mpi/kubexec.sh"
    assert v1["NVIDIA_VISIBLE_DEVICES"] == "" and "K_MPI_JOB_ROLE" not in v1
    assert v1["OMPI_MCA_if_base_do_not_resolve"] == "1"
    v2 = {e["name"]: e["value"] for e in MPI.env(_mpi_view("v2beta1"), "Launcher", 0, _mpi_addrs(),
                                                {"name": "launcher"})}
    assert v2["K_MPI_JOB_ROLE"] == "launcher" and v2["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert v2["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10" and v2["OMPI_MCA_orte_set_default_slots"] == "2"
    assert "I_MPI_HYDRA_BOOTSTRAP" not in v2
    assert MPI.env(_mpi_view("v2beta1"), "Worker", 0, _mpi_addrs(), {"name": "worker"}) == [
        {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
    # Only the first container; and the user's own transport choice is left alone.
    assert MPI.env(_mpi_view("v1"), "Launcher", 0, _mpi_addrs(), {"name": "sidecar"}) == []
    mine = {"name": "launcher", "env": [{"name": "OMPI_MCA_btl_tcp_if_exclude", "value": "docker0"}]}
    names = {e["name"] for e in MPI.env(_mpi_view("v1"), "Launcher", 0, _mpi_addrs(), mine)}
    assert "OMPI_MCA_btl_tcp_if_include" not in names and "OMPI_MCA_oob_tcp_if_include" in names


def test_mpi_worker_runs_the_exec_server_around_its_command():
    idle = {"containers": [{"name": "worker"}]}
    MPI.prepare_pod(_mpi_view("v1"), "Worker", 1, idle)
    [c] = idle["containers"]
    assert c["command"][-3:] == ["serve", "uid-1", "pi-worker-1"] and c["command"][-4].endswith("podexec.py")
    assert c["volumeMounts"] == [{"name": "mpi-job-config", "mountPath": "/etc/mpi"}]
    assert c["env"] == [{"name": "TRIMARAN_PODEXEC_TOKEN",
                         "valueFrom": {"secretKeyRef": {"name": "pi-podexec", "key": "token"}}}]
    assert idle["volumes"][0]["configMap"]["name"] == "pi-config"
    busy = {"containers": [{"name": "side"}, {"name": "worker", "command": ["sleep", "1"]}]}
    MPI.prepare_pod(_mpi_view("v1", mainContainer="worker"), "Worker", 0, busy)
    assert busy["containers"][1]["command"][-3:] == ["--", "sleep", "1"] and "command" not in busy["containers"][0]
    launcher = {"containers": [{"name": "launcher", "command": ["mpirun"]}]}
    MPI.prepare_pod(_mpi_view("v1"), "Launcher", 0, launcher)
    assert launcher["containers"][0]["command"] == ["mpirun"]


def test_mpi_outcome_follows_the_launcher():
    view = _mpi_view("v2beta1")
    view.counts = {"Launcher": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, active=2)}
    assert MPI.status(view)[0] == "Running"
    view.counts["Worker"] = ReplicaCounts(2, active=1, failed=1)
    assert MPI.status(view)[0] is None  # a worker failure is mpirun's to report
    view.counts["Launcher"] = ReplicaCounts(1, succeeded=1)
    assert MPI.status(view) == ("Succeeded", "MPIJob ns/pi successfully completed.")
    view.counts["Launcher"] = ReplicaCounts(1, failed=1)
    assert MPI.status(view) == ("Failed", "MPIJob ns/pi has failed because the launcher failed.")


def test_mpi_launcher_waits_for_workers_when_asked():
    view = _mpi_view("v2beta1", launcherCreationPolicy="WaitForWorkersReady")

    def worker(phase: str) -> dict:
        return {"metadata": {"labels": {"training.kubeflow.org/replica-type": "worker"}}, "status": {"phase": phase}}

    assert MPI.holds_back(view, "Launcher", [worker("Running"), worker("Pending")])
    assert not MPI.holds_back(view, "Launcher", [worker("Running"), worker("Running")])
    assert not MPI.holds_back(view, "Worker", [])
    assert not MPI.holds_back(_mpi_view("v2beta1"), "Launcher", [])
    assert MPI.backoff_limit(_mpi_view("v2beta1")) == 6 and MPI.backoff_limit(_mpi_view("v1")) is None
