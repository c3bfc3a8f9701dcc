"""The official ``kubernetes`` Python client (the one every Kubeflow SDK is built on) against a real
control plane: custom objects, their watch, typed Pods and pod logs, plain and followed.

It runs from the project's own environment (``.venv`` has ``kubernetes``), as a separate process that
knows the control plane only through the kubeconfig it writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.server.sdk import run_client
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

CUSTOM_OBJECTS = r'''
import json, sys, threading
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config()
api = client.CustomObjectsApi()
G, V, NS, P = "kubeflow.org", "v1", "default", "pytorchjobs"
release = sys.argv[1]
# The job's pods read a host directory, which the default (baseline) Pod Security level forbids.
client.CoreV1Api().patch_namespace(NS, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
job = {
    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
    "metadata": {"name": "tiny", "labels": {"team": "a"}},
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "python:3.11",
                        "command": ["python", "-c",
                                    "import os, time\n"
                                    "while not os.path.exists('/release/go'): time.sleep(0.1)\n"],
                        "volumeMounts": [{"name": "release", "mountPath": "/release"}]}],
        "volumes": [{"name": "release", "hostPath": {"path": release}}]}}}}},
}
events, started = [], threading.Event()


def follow():
    w = watch.Watch()
    for event in w.stream(api.list_namespaced_custom_object, G, V, NS, P, timeout_seconds=240):
        obj = event["object"]
        events.append({"type": event["type"], "name": obj["metadata"]["name"],
                       "labels": obj["metadata"].get("labels", {}),
                       "rv": obj["metadata"]["resourceVersion"],
                       "conditions": [c["type"] for c in (obj.get("status") or {}).get("conditions", [])]})
        if event["type"] == "DELETED":
            w.stop()


watcher = threading.Thread(target=follow)
watcher.start()
created = api.create_namespaced_custom_object(G, V, NS, P, job)
try:
    api.create_namespaced_custom_object(G, V, NS, P, job)
    duplicate = None
except ApiException as exc:
    duplicate = {"status": exc.status, "reason": json.loads(exc.body)["reason"]}
got = api.get_namespaced_custom_object(G, V, NS, P, "tiny")
listed = api.list_namespaced_custom_object(G, V, NS, P, label_selector="team in (a,b)")
unselected = api.list_namespaced_custom_object(G, V, NS, P, label_selector="team=c")
patched = api.patch_namespaced_custom_object(G, V, NS, P, "tiny", {"metadata": {"labels": {"stage": "two"}}})
deleted = api.delete_namespaced_custom_object(G, V, NS, P, "tiny")
watcher.join(timeout=240)
try:
    api.get_namespaced_custom_object(G, V, NS, P, "tiny")
    missing = None
except ApiException as exc:
    missing = {"status": exc.status, "reason": json.loads(exc.body)["reason"]}
print(json.dumps({
    "created": {"kind": created["kind"], "uid": created["metadata"]["uid"],
                "generation": created["metadata"]["generation"]},
    "duplicate": duplicate, "got_uid": got["metadata"]["uid"],
    "listed": {"kind": listed["kind"], "names": [i["metadata"]["name"] for i in listed["items"]],
               "rv": listed["metadata"]["resourceVersion"]},
    "unselected": [i["metadata"]["name"] for i in unselected["items"]],
    "patched_labels": patched["metadata"]["labels"],
    "deleted": {"kind": deleted.get("kind"), "status": deleted.get("status"),
                "uid": (deleted.get("details") or deleted.get("metadata") or {}).get("uid")},
    "missing": missing, "watch_alive": watcher.is_alive(), "events": events,
}))
'''

PODS_AND_LOGS = r'''
import datetime, json, os, sys, threading, time
from kubernetes import client, config, watch

config.load_kube_config()
core, api = client.CoreV1Api(), client.CustomObjectsApi()
release = sys.argv[1]
core.patch_namespace("default", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
code = ("import os, sys, time\n"
        "print('waiting for the release', flush=True)\n"
        "while not os.path.exists('/release/go'): time.sleep(0.05)\n"
        "for i in range(5):\n"
        "    print(f'line {i}', flush=True); time.sleep(0.2)\n")
replica = lambda: {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
    "containers": [{"name": "pytorch", "image": "python:3.11", "command": ["python", "-c", code],
                    "volumeMounts": [{"name": "release", "mountPath": "/release"}]}],
    "volumes": [{"name": "release", "hostPath": {"path": release}}]}}}
api.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", {
    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "logs"},
    "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}})

selector = "training.kubeflow.org/job-name=logs,training.kubeflow.org/replica-type in (master)"
deadline = time.monotonic() + 180
while True:
    pods = core.list_namespaced_pod("default", label_selector=selector).items
    if pods and pods[0].status.phase == "Running" and "waiting" in core.read_namespaced_pod_log(
            pods[0].metadata.name, "default"):
        break
    assert time.monotonic() < deadline, [p.status.phase for p in pods]
    time.sleep(0.1)
everyone = core.list_namespaced_pod("default", label_selector="training.kubeflow.org/job-name=logs").items
pod = pods[0]
name = pod.metadata.name
plain_before = core.read_namespaced_pod_log(name, "default", container="pytorch")

streamed, opened = [], threading.Event()


def follow():
    w = watch.Watch()
    opened.set()
    for line in w.stream(core.read_namespaced_pod_log, name=name, namespace="default", container="pytorch"):
        streamed.append(line)


follower = threading.Thread(target=follow)
follower.start()
opened.wait()
time.sleep(0.5)  # let the stream reach the server before the pod goes on (it would still see every line)
open(os.path.join(release, "go"), "w").close()
follower.join(timeout=120)
final = core.read_namespaced_pod(name, "default")
print(json.dumps({
    "types": sorted({type(p).__name__ for p in everyone}),
    "pods": sorted(p.metadata.name for p in everyone),
    "selected": [p.metadata.name for p in pods],
    "labels": pod.metadata.labels, "container": pod.spec.containers[0].name,
    "command": pod.spec.containers[0].command[:2],
    "created_is_datetime": isinstance(pod.metadata.creation_timestamp, datetime.datetime),
    "started_is_datetime": isinstance(pod.status.start_time, datetime.datetime),
    "phase": pod.status.phase, "owner": [(o.kind, o.name) for o in pod.metadata.owner_references or []],
    "plain_before": plain_before, "streamed": streamed, "follow_ended": not follower.is_alive(),
    "tail": core.read_namespaced_pod_log(name, "default", tail_lines=2),
    "final_phase": final.status.phase,
}))
'''

TYPED_BUILTINS = r'''
import json, time
from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config()
core, batch, api = client.CoreV1Api(), client.BatchV1Api(), client.CustomObjectsApi()
meta = client.V1ObjectMeta
# Typed models as most programs write them: no api_version or kind (the server takes the endpoint's).
ns = core.create_namespace(client.V1Namespace(metadata=meta(name="typed")))
cm = core.create_namespaced_config_map("typed", client.V1ConfigMap(metadata=meta(name="settings"), data={"a": "1"}))
pvc = core.create_namespaced_persistent_volume_claim("typed", client.V1PersistentVolumeClaim(
    metadata=meta(name="data"), spec=client.V1PersistentVolumeClaimSpec(
        access_modes=["ReadWriteOnce"], resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))))
job = batch.create_namespaced_job("typed", client.V1Job(metadata=meta(name="once"), spec=client.V1JobSpec(
    backoff_limit=0, template=client.V1PodTemplateSpec(spec=client.V1PodSpec(restart_policy="Never", containers=[
        client.V1Container(name="main", image="python:3.11", command=["python", "-c", "print('done')"])])))))
deadline = time.monotonic() + 120
while not (batch.read_namespaced_job_status("once", "typed").status.succeeded or 0):
    assert time.monotonic() < deadline, "the job did not succeed"
    time.sleep(0.1)
finished = batch.read_namespaced_job("once", "typed")
# A new pod is stored Pending; a deleted Service comes back as the object, as kube-apiserver answers.
pod = core.create_namespaced_pod("typed", client.V1Pod(metadata=meta(name="idle"), spec=client.V1PodSpec(
    containers=[client.V1Container(name="main", image="python:3.11", command=["sleep", "60"])])))
core.create_namespaced_service("typed", client.V1Service(metadata=meta(name="front"), spec=client.V1ServiceSpec(
    selector={"app": "none"}, ports=[client.V1ServicePort(port=80)])))
gone = core.delete_namespaced_service("front", "typed")
try:
    api.create_namespaced_custom_object("kubeflow.org", "v1", "typed", "pytorchjobs",
                                        {"metadata": {"name": "kindless"}, "spec": {}})
    kindless = None
except ApiException as exc:
    kindless = exc.status
print(json.dumps({
    "kinds": [type(o).__name__ for o in (ns, cm, pvc, job)],
    "namespace": ns.metadata.name, "data": core.read_namespaced_config_map("settings", "typed").data,
    "claim": [pvc.metadata.name, pvc.spec.access_modes],
    "job": {"succeeded": finished.status.succeeded, "completions": finished.spec.completions,
            "conditions": [c.type for c in finished.status.conditions]},
    "job_pods": [p.metadata.name.startswith("once-")
                 for p in core.list_namespaced_pod("typed", label_selector="batch.kubernetes.io/job-name=once").items],
    "log": core.read_namespaced_pod_log(core.list_namespaced_pod(
        "typed", label_selector="batch.kubernetes.io/job-name=once").items[0].metadata.name, "typed"),
    "kindless": kindless,
    "new_pod_phase": pod.status.phase,
    "deleted_service": [type(gone).__name__, gone.metadata.name],
}))
'''


PARTIAL_LINES = r"""
import json, os, sys, threading, time
from kubernetes import client, config, watch

config.load_kube_config()
core = client.CoreV1Api()
release = sys.argv[1]
core.create_namespace({"metadata": {"name": "partial",
                                    "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
# One write holds a whole line and the start of the next; the rest of that line comes only when
# the test says so, and the last line never ends.
code = ("import os, time\n"
        "os.write(1, b'first\\nbegun')\n"
        "open('/release/written', 'w').close()\n"
        "while not os.path.exists('/release/go'): time.sleep(0.05)\n"
        "os.write(1, b' ended\\nlast')\n")
core.create_namespaced_pod("partial", {"metadata": {"name": "p"}, "spec": {
    "restartPolicy": "Never",
    "containers": [{"name": "c", "image": "python:3.11", "command": ["python", "-c", code],
                    "volumeMounts": [{"name": "release", "mountPath": "/release"}]}],
    "volumes": [{"name": "release", "hostPath": {"path": release}}]}})
deadline = time.monotonic() + 180
while not os.path.exists(os.path.join(release, "written")):
    assert time.monotonic() < deadline
    time.sleep(0.05)
while not (running := core.read_namespaced_pod_log("p", "partial")):
    assert time.monotonic() < deadline
    time.sleep(0.05)
running_tail = core.read_namespaced_pod_log("p", "partial", tail_lines=1)

streamed, opened = [], threading.Event()


def follow():
    response = core.read_namespaced_pod_log("p", "partial", follow=True, _preload_content=False)
    opened.set()
    for chunk in response.stream(16):
        streamed.append(chunk.decode())


follower = threading.Thread(target=follow)
follower.start()
opened.wait()
open(os.path.join(release, "go"), "w").close()
follower.join(timeout=120)
print(json.dumps({"running": running, "running_tail": running_tail, "streamed": "".join(streamed),
                  "follow_ended": not follower.is_alive(),
                  "ended": core.read_namespaced_pod_log("p", "partial"),
                  "ended_tail": core.read_namespaced_pod_log("p", "partial", tail_lines=1)}))
"""


def test_custom_objects_crud_and_watch(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    release = tmp_path / "release"
    release.mkdir()
    out = run_client(sys.executable, plane, CUSTOM_OBJECTS, tmp_path, str(release))
    assert out["created"]["kind"] == "PyTorchJob" and out["created"]["generation"] == 1
    assert out["duplicate"] == {"status": 409, "reason": "AlreadyExists"}
    assert out["got_uid"] == out["created"]["uid"]
    assert out["listed"]["kind"] == "PyTorchJobList" and out["listed"]["names"] == ["tiny"]
    assert out["listed"]["rv"]
    assert out["unselected"] == []
    assert out["patched_labels"] == {"team": "a", "stage": "two"}
    assert out["deleted"]["uid"] == out["created"]["uid"]
    assert out["missing"] == {"status": 404, "reason": "NotFound"}
    assert not out["watch_alive"]
    events = out["events"]
    assert {e["name"] for e in events} == {"tiny"}
    assert events[0]["type"] == "ADDED" and events[-1]["type"] == "DELETED"
    types = [e["type"] for e in events]
    assert types.count("ADDED") == 1 and types.count("DELETED") == 1
    assert any(e["type"] == "MODIFIED" and e["labels"].get("stage") == "two" for e in events)
    rvs = [int(e["rv"]) for e in events]
    assert rvs == sorted(rvs)


def test_typed_pods_and_logs_plain_and_followed(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    release = tmp_path / "release"
    release.mkdir()
    out = run_client(sys.executable, plane, PODS_AND_LOGS, tmp_path, str(release))
    assert out["types"] == ["V1Pod"]
    assert out["pods"] == ["logs-master-0", "logs-worker-0"]
    assert out["selected"] == ["logs-master-0"]
    assert out["labels"]["training.kubeflow.org/job-role"] == "master"
    assert out["labels"]["training.kubeflow.org/replica-index"] == "0"
    assert out["container"] == "pytorch" and out["command"] == ["python", "-c"]
    assert out["created_is_datetime"] and out["started_is_datetime"]
    assert out["phase"] == "Running"
    assert out["owner"] == [["PyTorchJob", "logs"]]
    assert out["plain_before"] == "waiting for the release\n"
    assert out["follow_ended"]
    assert out["streamed"] == ["waiting for the release"] + [f"line {i}" for i in range(5)]
    assert out["tail"] == "line 3\nline 4\n"
    assert out["final_phase"] == "Succeeded"


def test_a_line_is_logged_once_it_ends_as_a_cri_runtime_logs_it(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    release = tmp_path / "release"
    release.mkdir()
    release.chmod(0o777)  # the pod, no one's root on the host, leaves a mark there
    out = run_client(sys.executable, plane, PARTIAL_LINES, tmp_path, str(release))
    assert out["running"] == "first\n"  # "begun" is in the file, but its line has not ended
    assert out["running_tail"] == "first\n"
    assert out["follow_ended"]
    assert out["streamed"] == "first\nbegun ended\nlast"  # the container's end ends its last line
    assert out["ended"] == "first\nbegun ended\nlast"
    assert out["ended_tail"] == "last"


def test_typed_builtins_without_api_version_or_kind(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(sys.executable, plane, TYPED_BUILTINS, tmp_path)
    assert out["kinds"] == ["V1Namespace", "V1ConfigMap", "V1PersistentVolumeClaim", "V1Job"]
    assert out["namespace"] == "typed" and out["data"] == {"a": "1"}
    assert out["claim"] == ["data", ["ReadWriteOnce"]]
    assert out["job"]["succeeded"] == 1 and out["job"]["completions"] == 1
    assert "Complete" in out["job"]["conditions"]
    assert out["job_pods"] == [True]
    assert out["log"] == "done\n"
    assert out["kindless"] == 400  # a custom resource must say what it is, as on a cluster
    assert out["new_pod_phase"] == "Pending"
    assert out["deleted_service"] == ["V1Service", "front"]
