"""Elastic PyTorchJob rules as pure functions: what one shared loopback adds to the operator's
PET_* variables, a rendezvous below minReplicas failing after its join timeout, and the etcd plan."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone

import pytest

from trimaran.controllers.training import framework_for
from trimaran.controllers.training.etcd import ETCD_LABEL, etcd_installed
from trimaran.controllers.training.framework import JobView, ReplicaAddress

PT = framework_for("PyTorchJob")


def _view(workers: int = 2, ports: list[int] | None = None, **policy) -> JobView:
    spec = {"pytorchReplicaSpecs": {"Worker": {"replicas": workers}},
            "elasticPolicy": {"minReplicas": 2, "maxReplicas": 3, **policy}}
    return JobView("el", "default", spec, replica_ports={"Worker": ports or [20001 + i for i in range(workers)]})


def _env(view: JobView, index: int, container: dict | None = None) -> dict[str, str]:
    addresses = {"Worker": [ReplicaAddress(f"el-worker-{i}", f"el-worker-{i}.default.svc", 20001 + i)
                            for i in range(2)]}
    return {e["name"]: e["value"] for e in PT.env(view, "Worker", index, addresses, container or {})}


def _pod(index: int, phase: str, age: float) -> dict:
    created = (datetime.now(timezone.utc) - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": f"el-worker-{index}", "creationTimestamp": created,
                         "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": str(index)}},
            "status": {"phase": phase}}


def test_worker_zero_hosts_the_c10d_store_and_each_node_is_named_by_its_pod():
    conf = [{"key": "last_call_timeout", "value": "1"}]
    first, second = _env(_view(rdzvConf=conf), 0), _env(_view(rdzvConf=conf), 1)
    assert first["PET_RDZV_CONF"] == "last_call_timeout=1,is_host=true"
    assert second["PET_RDZV_CONF"] == "last_call_timeout=1,is_host=false"
    assert (first["PET_LOCAL_ADDR"], second["PET_LOCAL_ADDR"]) == ("el-worker-0", "el-worker-1")
    assert second["PET_RDZV_ENDPOINT"] == "el-worker-0:20001" and second["PET_NNODES"] == "2:3"
    assert second["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


@pytest.mark.parametrize("policy", [{"rdzvHost": "store.example"}, {"rdzvBackend": "etcd"},
                                    {"rdzvConf": [{"key": "is_host", "value": "true"}]}])
def test_is_host_is_left_to_the_user_or_to_other_backends(policy):
    conf = _env(_view(**policy), 1).get("PET_RDZV_CONF", "")
    assert "is_host=false" not in conf


def test_the_users_store_switch_is_kept():
    env = _env(_view(), 1, {"env": [{"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "0"}]})
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env


def test_rendezvous_below_min_fails_after_the_join_timeout_naming_the_missing_workers():
    view = _view(rdzvConf=[{"key": "join_timeout", "value": "5"}])
    message, recheck = PT.stuck(view, [_pod(0, "Running", 10), _pod(1, "Pending", 1)])
    assert message is None and 2.9 < recheck < 4.2  # timestamps have whole seconds
    message, _ = PT.stuck(view, [_pod(0, "Running", 10), _pod(1, "Pending", 6)])
    assert message == ("PyTorchJob default/el has failed because its rendezvous could not complete within the "
                       "join timeout of 5s: 1 of minReplicas 2 workers are running; missing: Worker 1 "
                       "(pod el-worker-1 is Pending)")
    assert PT.stuck(view, [_pod(0, "Running", 10), _pod(1, "Running", 6)]) == (None, None)
    # The default timeout is torch's 600 s; a worker not made yet is named as such.
    assert PT.stuck(_view(), [_pod(0, "Pending", 601)])[0].endswith(
        "missing: Worker 0 (pod el-worker-0 is Pending); Worker 1 (pod el-worker-1 not created)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_etcd_on_a_remote_host_nobody_answers_at_fails_the_job():
    view = _view(rdzvBackend="etcd", rdzvHost="etcd.example.invalid", rdzvPort=2379)
    assert PT.prerequisites(view, []) == ([], False)
    message, _ = PT.stuck(view, [])
    assert "no etcd answers at etcd.example.invalid:2379 (rdzvBackend etcd)" in message


@pytest.mark.skipif(not etcd_installed(), reason="etcd-server is not installed (scripts/bootstrap.sh)")
def test_etcd_on_loopback_is_started_for_the_job_on_worker_zeros_port():
    port = _free_port()
    view = _view(ports=[port, port + 1], rdzvBackend="etcd-v2")
    [pod], ready = PT.prerequisites(view, [])
    assert not ready and pod["metadata"]["name"] == "el-etcd" and pod["metadata"]["labels"] == {ETCD_LABEL: "el"}
    command = pod["spec"]["containers"][0]["command"]
    assert command[0] == "etcd" and f"http://127.0.0.1:{port}" in command and "--enable-v2=true" in command
    pod["status"]["phase"] = "Pending"
    assert PT.prerequisites(view, [pod]) == ([], False)  # made, not answering yet: workers wait
    assert PT.stuck(view, [pod])[0] is None


def test_an_etcd_that_never_answers_fails_the_job_after_the_join_timeout():
    view = _view(rdzvBackend="etcd", rdzvConf=[{"key": "join_timeout", "value": "5"}])
    etcd = {"metadata": {"name": "el-etcd", "labels": {ETCD_LABEL: "el"}, "creationTimestamp": _pod(0, "", 10)[
        "metadata"]["creationTimestamp"]}, "status": {"phase": "Pending"}}
    assert PT.prerequisites(view, [etcd]) == ([], False)
    assert PT.stuck(view, [etcd])[0] == ("PyTorchJob default/el has failed because its etcd did not answer at "
                                         "127.0.0.1:20001 within the join timeout of 5s (pod el-etcd is Pending)")


def test_only_resource_utilization_metrics_drive_the_autoscaler():
    from trimaran.controllers.serving.autoscaling import ResourceSampler

    pods_metric = _view(metrics=[{"type": "Pods", "pods": {"metric": {"name": "qps"},
                                                           "target": {"type": "AverageValue", "averageValue": "1"}}}])
    assert PT.autoscale_period(pods_metric) is None and PT.autoscale(pods_metric, [], ResourceSampler(None)) is None
    cpu = _view(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 50}}}])
    assert PT.autoscale_period(cpu) == 15.0
    assert PT.autoscale(cpu, [], ResourceSampler(None)) is None  # nothing measured yet: nothing decided


def test_the_autoscaler_follows_the_control_planes_hpa_sync_period(monkeypatch):
    cpu = _view(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 50}}}])
    monkeypatch.setenv("TRIMARAN_HPA_SYNC_SECONDS", "2")
    assert PT.autoscale_period(cpu) == 2.0
