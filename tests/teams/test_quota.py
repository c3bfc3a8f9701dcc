"""ResourceQuota on a real control plane: admission's refusals in kube-apiserver's words (kubectl and
the `kubernetes` client), the quota controller's ``status``, counts of any kind, controllers' pods
refused with a FailedCreate event and retried, and racing creates that cannot both pass.

One control plane serves the module; each test works in a namespace of its own. Pods sleep as host
processes and ask for little, so the node admits them all.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from tests.teams.conftest import kubectl_for, needs_kubectl
from trimaran.cli.client import APIError, Client

plane = shared_plane("quota")

SLEEP = ["python", "-c", "import time; time.sleep(3600)"]


def pod(name: str, requests: dict | None = None, limits: dict | None = None, command: list | None = None,
        restart: str = "Always") -> dict:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "containers": [
                {"name": "c", "image": "python", "command": command or SLEEP, "resources": resources}]}}


def quota(name: str, hard: dict, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": {"hard": hard, **spec}}


def namespace(api: Client, name: str) -> str:
    api.create("namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def used(api: Client, ns: str, name: str) -> dict:
    return (api.get("resourcequotas", ns, name).get("status") or {}).get("used") or {}


def refusal(api: Client, kind: str, ns: str, obj: dict) -> APIError:
    with pytest.raises(APIError) as caught:
        api.create(kind, ns, obj)
    assert caught.value.status == 403, caught.value
    assert caught.value.body["reason"] == "Forbidden"
    return caught.value


@needs_kubectl
def test_a_pod_past_the_quota_is_refused_in_kube_apiservers_words(plane: ControlPlaneHandle, api: Client,
                                                                  tmp_path: Path) -> None:
    ns = namespace(api, "q-cpu")
    kubectl = kubectl_for(plane, tmp_path, ns)
    kubectl("apply", "-f", "-", input=json.dumps(quota("team-a", {"requests.cpu": "200m", "pods": "10"})))
    kubectl("apply", "-f", "-", input=json.dumps(pod("p1", {"cpu": "100m"})))
    poll(lambda: used(api, ns, "team-a").get("requests.cpu") == "100m", what="used requests.cpu=100m")
    refused = kubectl("apply", "-f", "-", input=json.dumps(pod("p2", {"cpu": "200m"})), check=False)
    assert refused.returncode == 1
    assert ('pods "p2" is forbidden: exceeded quota: team-a, requested: requests.cpu=200m, '
            'used: requests.cpu=100m, limited: requests.cpu=200m') in refused.stderr
    with pytest.raises(APIError):
        api.get("pods", ns, "p2")  # nothing stored
    assert used(api, ns, "team-a") == {"pods": "1", "requests.cpu": "100m"}
    assert api.get("resourcequotas", ns, "team-a")["status"]["hard"] == {"pods": "10", "requests.cpu": "200m"}
    # kubectl get's columns, as printResourceQuota: NAME AGE REQUEST LIMIT, each "resource: used/hard".
    header, row = kubectl("get", "quota").stdout.splitlines()
    assert header.split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert row.startswith("team-a") and row.rstrip().endswith("pods: 1/10, requests.cpu: 100m/200m")
    described = kubectl("describe", "quota", "team-a").stdout
    assert [line.split() for line in described.splitlines()[-2:]] == [["pods", "1", "10"],
                                                                     ["requests.cpu", "100m", "200m"]]
    # kubectl's generator (a protobuf body), with a limits key for the LIMIT column.
    kubectl("create", "quota", "team-b", "--hard=limits.memory=1Gi,secrets=5")
    poll(lambda: used(api, ns, "team-b").get("limits.memory") == "0", what="team-b's status")
    row = next(line for line in kubectl("get", "quota").stdout.splitlines() if line.startswith("team-b"))
    assert row.split()[2:] == ["secrets:", f"{len(api.list('secrets', ns))}/5", "limits.memory:", "0/1Gi"]
    for field in ("resourcequota.spec.hard", "limitrange.spec.limits", "priorityclass.preemptionPolicy"):
        assert "FIELD:" in kubectl("explain", field).stdout


def test_a_quota_on_cpu_needs_every_container_to_state_it(api: Client) -> None:
    ns = namespace(api, "q-specify")
    api.create("resourcequotas", ns, quota("team-a", {"requests.cpu": "1", "limits.cpu": "2"}))
    error = refusal(api, "pods", ns, pod("p"))
    assert str(error.body["message"]) == ('pods "p" is forbidden: failed quota: team-a: must specify limits.cpu '
                                          'for: c; requests.cpu for: c')
    assert error.body["details"] == {"name": "p", "kind": "pods"}


def test_terminal_pods_and_deleted_objects_leave_the_count(api: Client) -> None:
    ns = namespace(api, "q-terminal")
    api.create("resourcequotas", ns, quota("q", {"pods": "1", "count/configmaps": "5"}))
    api.create("pods", ns, pod("done", command=["python", "-c", "pass"], restart="Never"))
    poll(lambda: api.get("pods", ns, "done")["status"].get("phase") == "Succeeded", timeout=60, what="pod done")
    poll(lambda: used(api, ns, "q").get("pods") == "0", what="a finished pod counts nothing")
    api.create("pods", ns, pod("next"))  # the one pod the quota allows
    error = refusal(api, "pods", ns, pod("third"))
    assert "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1" in error.body["message"]

    def counted() -> bool:  # every ConfigMap of the namespace, whatever else makes some there
        return used(api, ns, "q").get("count/configmaps") == str(len(api.list("configmaps", ns)))

    api.create("configmaps", ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    poll(lambda: counted() and used(api, ns, "q")["count/configmaps"] != "0", what="count/configmaps")
    api.delete("configmaps", ns, "c")
    poll(lambda: counted() and all(c["metadata"]["name"] != "c" for c in api.list("configmaps", ns)),
         what="the deleted one gone")


def test_counts_of_any_kind_and_extended_resources(api: Client) -> None:
    ns = namespace(api, "q-count")
    api.create("resourcequotas", ns, quota("q", {"count/deployments.apps": "1", "count/pytorchjobs.kubeflow.org": "0",
                                                  "requests.nvidia.com/gpu": "1"}))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "a"}},
                           "template": {"metadata": {"labels": {"app": "a"}},
                                        "spec": {"containers": [{"name": "c", "image": "python", "command": SLEEP}]}}}}
    api.create("deployments", ns, deployment)
    error = refusal(api, "deployments", ns, {**deployment, "metadata": {"name": "b"}})
    assert error.body["message"] == ('deployments.apps "b" is forbidden: exceeded quota: q, requested: '
                                     'count/deployments.apps=1, used: count/deployments.apps=1, '
                                     'limited: count/deployments.apps=1')
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "pytorch", "image": "python", "command": SLEEP}]}}}}}}
    error = refusal(api, "pytorchjobs", ns, job)
    assert error.body["message"].startswith('pytorchjobs.kubeflow.org "train" is forbidden: exceeded quota: q, '
                                            'requested: count/pytorchjobs.kubeflow.org=1')
    gpus = {"nvidia.com/gpu": "2"}
    error = refusal(api, "pods", ns, pod("g", gpus, gpus))
    assert error.body["message"] == ('pods "g" is forbidden: exceeded quota: q, requested: requests.nvidia.com/gpu=2, '
                                     'used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=1')
    poll(lambda: used(api, ns, "q") == {"count/deployments.apps": "1", "count/pytorchjobs.kubeflow.org": "0",
                                        "requests.nvidia.com/gpu": "0"}, what="the quota's status")


def test_claims_count_their_storage(api: Client) -> None:
    ns = namespace(api, "q-storage")
    api.create("resourcequotas", ns, quota("q", {"requests.storage": "1Gi", "persistentvolumeclaims": "2"}))

    def claim(name: str, size: str) -> dict:
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}

    api.create("persistentvolumeclaims", ns, claim("a", "512Mi"))
    error = refusal(api, "persistentvolumeclaims", ns, claim("b", "1Gi"))
    assert error.body["message"] == ('persistentvolumeclaims "b" is forbidden: exceeded quota: q, requested: '
                                     'requests.storage=1Gi, used: requests.storage=512Mi, limited: '
                                     'requests.storage=1Gi')
    poll(lambda: used(api, ns, "q") == {"persistentvolumeclaims": "1", "requests.storage": "512Mi"},
         what="the claim counted")


def test_a_pytorchjob_whose_gang_the_quota_cuts_makes_none_of_it(api: Client) -> None:
    ns = namespace(api, "q-training")
    api.create("resourcequotas", ns, quota("q", {"pods": "1"}))
    replica = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "python", "command": SLEEP}]}}}
    api.create("pytorchjobs", ns, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"},
                                   "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}}})
    event = poll(lambda: next((e for e in api.events("PyTorchJob", ns, "train") if e["reason"] == "FailedCreate"),
                              None), timeout=30, what="a FailedCreate event on the PyTorchJob")
    assert event["message"] == ('Error creating: pods "train-worker-0" is forbidden: exceeded quota: q, requested: '
                                'pods=1, used: pods=1, limited: pods=1')
    # The master made before the worker was refused goes again each time: the gang is retried whole,
    # so once the quota grows both start (a master left waiting in a gang of two, its worker made
    # later in a gang of its own, would never start).
    grown = {**quota("q", {"pods": "2"}), "metadata": {"name": "q", "namespace": ns}}
    api.apply([{"location": "quota", "object": grown}])
    poll(lambda: sorted(p["metadata"]["name"] for p in api.list("pods", ns)
                        if p["status"].get("phase") == "Running") == ["train-master-0", "train-worker-0"],
         timeout=90, what="the whole gang running, retried once the quota grew")


def test_racing_creates_do_not_both_pass(api: Client, plane: ControlPlaneHandle) -> None:
    ns = namespace(api, "q-race")
    api.create("resourcequotas", ns, quota("q", {"count/leases.coordination.k8s.io": "3"}))
    outcomes: list[int] = []
    lock = threading.Lock()

    def create(i: int) -> None:
        client = plane.client()
        try:
            client.create("leases", ns, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                         "metadata": {"name": f"l{i}"}})
            code = 201
        except APIError as exc:
            code = exc.status
        finally:
            client.close()
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [201] * 3 + [403] * 9
    assert len(api.list("leases", ns)) == 3


def test_a_jobs_pod_refused_by_the_quota_is_a_failed_create_event_and_retried(api: Client) -> None:
    ns = namespace(api, "q-job")
    api.create("resourcequotas", ns, quota("q", {"pods": "1"}))
    api.create("pods", ns, pod("holder"))
    api.create("jobs", ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "work"},
                            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                                {"name": "c", "image": "python", "command": ["python", "-c", "pass"]}]}}}})

    def failed_create() -> dict | None:
        return next((e for e in api.events("Job", ns, "work") if e["reason"] == "FailedCreate"), None)

    event = poll(failed_create, timeout=30, what="a FailedCreate event on the job")
    assert event["type"] == "Warning"
    assert event["message"].startswith('Error creating: pods "work-')
    assert event["message"].endswith('" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, '
                                     'limited: pods=1')
    api.delete("pods", ns, "holder")
    poll(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                     for c in api.get("jobs", ns, "work").get("status", {}).get("conditions") or []),
         timeout=90, what="the job, retried, completes")


def test_the_python_client_reads_the_quota_and_its_refusal(api: Client, plane: ControlPlaneHandle) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    ns = namespace(api, "q-client")
    config = kubernetes.config.new_client_from_config(str(plane.home / "kubeconfig"))
    core = kubernetes.client.CoreV1Api(config)
    core.create_namespaced_resource_quota(ns, kubernetes.client.V1ResourceQuota(
        metadata=kubernetes.client.V1ObjectMeta(name="q"),
        spec=kubernetes.client.V1ResourceQuotaSpec(hard={"requests.memory": "64Mi", "limits.memory": "128Mi"})))
    poll(lambda: (core.read_namespaced_resource_quota("q", ns).status or kubernetes.client.V1ResourceQuotaStatus()
                  ).used == {"limits.memory": "0", "requests.memory": "0"}, what="the quota's status")
    body = pod("big", {"memory": "100Mi"}, {"memory": "100Mi"})
    with pytest.raises(kubernetes.client.ApiException) as caught:
        core.create_namespaced_pod(ns, body)
    assert caught.value.status == 403
    assert json.loads(caught.value.body)["message"] == (
        'pods "big" is forbidden: exceeded quota: q, requested: requests.memory=100Mi, used: requests.memory=0, '
        'limited: requests.memory=64Mi')
    config.close()


def test_scopes_pick_the_pods_a_quota_counts(api: Client) -> None:
    ns = namespace(api, "q-scopes")
    api.create("priorityclasses", None, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                         "metadata": {"name": "gold-q"}, "value": 100})
    api.create("resourcequotas", ns, quota("gold-only", {"pods": "1"}, scopeSelector={"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["gold-q"]}]}))
    api.create("resourcequotas", ns, quota("best-effort", {"pods": "2"}, scopes=["BestEffort"]))
    api.create("pods", ns, pod("plain-1"))
    api.create("pods", ns, pod("plain-2"))
    error = refusal(api, "pods", ns, pod("plain-3"))
    assert "exceeded quota: best-effort, requested: pods=1, used: pods=2, limited: pods=2" in error.body["message"]
    gold = pod("gold-1", {"cpu": "10m"})
    gold["spec"]["priorityClassName"] = "gold-q"
    api.create("pods", ns, gold)  # not BestEffort: only the gold quota counts it
    error = refusal(api, "pods", ns, {**gold, "metadata": {"name": "gold-2"}})
    assert "exceeded quota: gold-only, requested: pods=1, used: pods=1, limited: pods=1" in error.body["message"]
    poll(lambda: (used(api, ns, "gold-only"), used(api, ns, "best-effort")) == ({"pods": "1"}, {"pods": "2"}),
         what="each quota counting its own pods")
