"""The node as kubectl sees it (issue 24): ``get nodes``, ``describe node``, the node's Lease,
``cordon`` / ``uncordon`` / ``taint`` against admission, and ``drain`` through the Eviction
subresource. Real kubectl against a real control plane; the node is cordoned by some tests, so
each one that does uncordons it whatever happens."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from tests.server.test_kubectl import in_namespace, kubectl  # noqa: F401 -- the kubectl fixture
from trimaran.cli.client import APIError

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

plane = shared_plane("kubectl-node")

UNSCHEDULABLE = "0/1 nodes are available: 1 node(s) were unschedulable."


def _pod(name: str, tolerations: list | None = None, node: str | None = None) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "tolerations": tolerations or [],
        **({"nodeName": node} if node else {}),
        "containers": [{"name": "main", "image": "python", "command": ["python", "-c", "import time; time.sleep(600)"],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}})


def _node_name(run) -> str:  # noqa: ANN001
    return run("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout


def _phase(plane: ControlPlaneHandle, namespace: str, name: str) -> str:
    return (plane.get("pods", name, namespace).get("status") or {}).get("phase") or "Pending"


def _unschedulable_message(plane: ControlPlaneHandle, namespace: str, name: str) -> str | None:
    conditions = (plane.get("pods", name, namespace).get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None)
    return found["message"] if found and found.get("reason") == "Unschedulable" else None


@contextmanager
def _cordoned(run, node: str) -> Iterator[None]:  # noqa: ANN001
    assert f"node/{node} cordoned" in run("cordon", node).stdout
    try:
        yield
    finally:
        run("uncordon", node)


def test_get_nodes_shows_the_machine_as_the_kubelet_reports_it(kubectl) -> None:  # noqa: ANN001, F811
    out = kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    name, status, roles, _, version = out[1].split()
    assert status == "Ready" and roles == "control-plane" and version.startswith("v1.32.")
    wide = kubectl("get", "nodes", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                               "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    node = json.loads(kubectl("get", "node", name, "-o", "json").stdout)
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == name and labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] in ("amd64", "arm64") and "node-role.kubernetes.io/control-plane" in labels
    status = node["status"]
    for resource in ("cpu", "memory", "ephemeral-storage", "pods"):
        assert resource in status["capacity"] and resource in status["allocatable"]
    assert status["capacity"]["pods"] == "110"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert {t: conditions[t]["reason"] for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")} == {
        "Ready": "KubeletReady", "MemoryPressure": "KubeletHasSufficientMemory",
        "DiskPressure": "KubeletHasNoDiskPressure", "PIDPressure": "KubeletHasSufficientPID"}
    assert {a["type"] for a in status["addresses"]} == {"InternalIP", "Hostname"}
    info = status["nodeInfo"]
    assert info["kernelVersion"] and info["osImage"] and info["bootID"] and info["kubeletVersion"] == version
    assert info["containerRuntimeVersion"] and info["operatingSystem"] == "linux"
    # Selected by field as kubectl's node listing does.
    assert kubectl("get", "nodes", "--field-selector", "spec.unschedulable=false", "-o", "name").stdout.split() == \
        [f"node/{name}"]


def test_describe_node_lists_its_pods_and_what_they_request(plane, kubectl) -> None:  # noqa: ANN001, F811
    node = _node_name(kubectl)
    kubectl = in_namespace(kubectl, "described")
    kubectl("apply", "-f", "-", input=_pod("sleeper"))
    poll(lambda: _phase(plane, "described", "sleeper") == "Running", timeout=120, interval=0.2,
         what="the pod to run")
    pod = plane.get("pods", "sleeper", "described")
    assert pod["spec"]["nodeName"] == node  # bound at admission, as the scheduler binds
    assert kubectl("get", "pods", "--field-selector", f"spec.nodeName={node}", "-o", "name").stdout.split() == \
        ["pod/sleeper"]
    assert kubectl("get", "pods", "-o", "wide").stdout.splitlines()[1].split()[6] == node
    described = kubectl("describe", "node", node).stdout
    for section in ("Labels:", "Taints:             <none>", "Unschedulable:      false", "Lease:",
                    f"HolderIdentity:  {node}", "Conditions:", "KubeletReady", "Addresses:", "InternalIP:",
                    "Capacity:", "Allocatable:", "System Info:", "Boot ID:", "Kubelet Version:",
                    "Non-terminated Pods:", "Allocated resources:", "Starting kubelet."):
        assert section in described, section
    row = next(line for line in described.splitlines() if "sleeper" in line)
    assert row.split()[:4] == ["described", "sleeper", "10m", "(0%)"]
    kubectl("delete", "pod", "sleeper", timeout=120)


def test_the_node_lease_is_renewed(kubectl) -> None:  # noqa: ANN001, F811
    node = _node_name(kubectl)

    def lease() -> dict:
        return json.loads(kubectl("-n", "kube-node-lease", "get", "lease", node, "-o", "json").stdout)

    first = poll(lambda: lease()["spec"].get("renewTime"), timeout=30, what="the lease")
    spec = lease()["spec"]
    assert spec["holderIdentity"] == node and spec["leaseDurationSeconds"] == 40
    assert lease()["metadata"]["ownerReferences"][0]["kind"] == "Node"
    # Renewed every 10 s: a changed renewTime within a few periods on a busy machine.
    poll(lambda: lease()["spec"]["renewTime"] != first, timeout=45, interval=1.0, what="the lease to be renewed")
    assert "leases" in kubectl("api-resources", "--api-group=coordination.k8s.io").stdout
    # A Node deleted by hand is registered again, and its Lease follows the new one.
    old = json.loads(kubectl("get", "node", node, "-o", "json").stdout)["metadata"]["uid"]
    kubectl("delete", "node", node)

    def registered() -> str | None:
        found = kubectl("get", "node", node, "-o", "jsonpath={.metadata.uid}", check=False).stdout
        return found if found and found != old else None

    uid = poll(registered, timeout=60, interval=0.5, what="the node to register again")

    def owner() -> str | None:  # the old Lease may be collected (its owner is gone) and made again
        found = kubectl("-n", "kube-node-lease", "get", "lease", node, "-o",
                        "jsonpath={.metadata.ownerReferences[0].uid}", check=False)
        return found.stdout if found.returncode == 0 else None

    poll(lambda: owner() == uid, timeout=45, interval=1.0, what="the lease to be owned by the new Node")


def test_cordon_holds_new_pods_until_uncordon(plane, kubectl) -> None:  # noqa: ANN001, F811
    node = _node_name(kubectl)
    kubectl = in_namespace(kubectl, "cordoned")
    with _cordoned(kubectl, node):
        assert "Ready,SchedulingDisabled" in kubectl("get", "nodes").stdout
        spec = json.loads(kubectl("get", "node", node, "-o", "json").stdout)["spec"]
        assert spec["unschedulable"] is True
        assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in spec["taints"]
        kubectl("apply", "-f", "-", input=_pod("waiter"))
        # Pods that tolerate the cordon's taint still start.
        kubectl("apply", "-f", "-", input=_pod("tolerant", [{"key": "node.kubernetes.io/unschedulable",
                                                              "operator": "Exists", "effect": "NoSchedule"}]))
        message = poll(lambda: _unschedulable_message(plane, "cordoned", "waiter"), timeout=60, interval=0.2,
                       what="the scheduler's reason")
        assert message == UNSCHEDULABLE
        # So do pods their creator bound to the node: they bypass the scheduler, as on a cluster.
        kubectl("apply", "-f", "-", input=_pod("bound", node=node))
        for name in ("tolerant", "bound"):
            poll(lambda name=name: _phase(plane, "cordoned", name) == "Running", timeout=120, interval=0.2,
                 what=f"pod {name} to run")
        assert _phase(plane, "cordoned", "waiter") == "Pending" and "nodeName" not in \
            plane.get("pods", "waiter", "cordoned")["spec"]
        assert "FailedScheduling" in kubectl("describe", "pod", "waiter").stdout
        assert "NodeNotSchedulable" in kubectl("describe", "node", node).stdout
    assert "SchedulingDisabled" not in kubectl("get", "nodes").stdout
    poll(lambda: _phase(plane, "cordoned", "waiter") == "Running", timeout=120, interval=0.2,
         what="the held pod to run after uncordon")
    assert "taints" not in json.loads(kubectl("get", "node", node, "-o", "json").stdout)["spec"]
    kubectl("delete", "pod", "waiter", "tolerant", "bound", timeout=120)


def test_no_execute_taints_evict_running_pods_and_hold_new_ones(plane, kubectl) -> None:  # noqa: ANN001, F811
    node = _node_name(kubectl)
    kubectl = in_namespace(kubectl, "tainted")
    kubectl("apply", "-f", "-", input=_pod("plain"))
    kubectl("apply", "-f", "-", input=_pod("ml", [{"key": "dedicated", "value": "ml", "effect": "NoExecute"}]))
    for name in ("plain", "ml"):
        poll(lambda name=name: _phase(plane, "tainted", name) == "Running", timeout=120, interval=0.2,
             what=f"pod {name} to run")
    kubectl("taint", "node", node, "dedicated=ml:NoExecute")
    try:
        # The taint manager deletes the running pod that does not tolerate it; the other stays.
        poll(lambda: kubectl("get", "pod", "plain", check=False).returncode != 0, timeout=120, interval=0.5,
             what="the untolerating pod to be evicted")
        assert _phase(plane, "tainted", "ml") == "Running"
        taint = next(t for t in json.loads(kubectl("get", "node", node, "-o", "json").stdout)["spec"]["taints"]
                     if t["key"] == "dedicated")
        assert taint["effect"] == "NoExecute" and taint["timeAdded"]
        kubectl("apply", "-f", "-", input=_pod("later"))
        message = poll(lambda: _unschedulable_message(plane, "tainted", "later"), timeout=60, interval=0.2,
                       what="the scheduler's reason")
        assert message == "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}."
    finally:
        kubectl("taint", "node", node, "dedicated-")
    poll(lambda: _phase(plane, "tainted", "later") == "Running", timeout=120, interval=0.2,
         what="the pod to run once the taint is gone")
    kubectl("delete", "pod", "ml", "later", timeout=120)


def test_drain_evicts_and_the_deployment_waits_for_uncordon(plane, kubectl) -> None:  # noqa: ANN001, F811
    node = _node_name(kubectl)
    kubectl = in_namespace(kubectl, "drained")
    kubectl("create", "deployment", "web", "--image=python", "--replicas=1", "--",
            "python", "-c", "import time; time.sleep(600)")

    def pods() -> list[dict]:
        return json.loads(kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout)["items"]

    first = poll(lambda: [p for p in pods() if (p.get("status") or {}).get("phase") == "Running"], timeout=120,
                 interval=0.5, what="the deployment's pod to run")[0]["metadata"]["name"]
    try:
        drained = kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                          "--timeout=120s", timeout=180)
        assert f"pod/{first} evicted" in drained.stdout and f"node/{node} drained" in drained.stdout
        assert kubectl("get", "pod", first, check=False).returncode != 0  # drain waits until it is gone

        def replacement() -> str | None:
            found = [p for p in pods() if p["metadata"]["name"] != first]
            return found[0]["metadata"]["name"] if found else None

        second = poll(replacement, timeout=60, interval=0.5, what="the deployment to make a new pod")
        assert poll(lambda: _unschedulable_message(plane, "drained", second), timeout=60, interval=0.2,
                    what="the new pod's reason") == UNSCHEDULABLE
    finally:
        kubectl("uncordon", node)
    poll(lambda: _phase(plane, "drained", second) == "Running", timeout=120, interval=0.2,
         what="the new pod to run after uncordon")
    kubectl("delete", "deployment", "web", timeout=120)


def test_eviction_subresource_answers_as_kube_apiserver(plane, kubectl) -> None:  # noqa: ANN001, F811
    kubectl = in_namespace(kubectl, "evicted")
    api = plane.api()
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "nobody"}}
    with pytest.raises(APIError) as missing:
        api.request("POST", "/api/v1/namespaces/evicted/pods/nobody/eviction", body=eviction, timeout=30)
    assert missing.value.status == 404
    kubectl("apply", "-f", "-", input=_pod("target"))
    with pytest.raises(APIError) as mismatch:
        api.request("POST", "/api/v1/namespaces/evicted/pods/target/eviction", body=eviction, timeout=30)
    assert mismatch.value.status == 400 and "does not match" in str(mismatch.value)
    poll(lambda: _phase(plane, "evicted", "target") == "Running", timeout=120, interval=0.2, what="the pod to run")
    # The kubernetes client's create_namespaced_pod_eviction sends an Eviction without apiVersion and kind.
    from kubernetes import client, config

    answer = client.CoreV1Api(config.new_client_from_config(str(plane.home / "kubeconfig"))) \
        .create_namespaced_pod_eviction("target", "evicted", client.V1Eviction(
            metadata=client.V1ObjectMeta(name="target", namespace="evicted")))
    assert answer.kind == "Status"  # this client reads the answer into its V1Eviction model

    def gone() -> bool:
        return subprocess.run([KUBECTL, "-n", "evicted", "get", "pod", "target"], env=kubectl.env,
                              capture_output=True, timeout=60).returncode != 0

    poll(gone, timeout=120, interval=0.5, what="the evicted pod to go")


def test_gpus_and_mig_profiles_are_capacity_with_product_labels(plane_with, tmp_path) -> None:  # noqa: ANN001
    gpus = plane_with(TRIMARAN_GPUS="NVIDIA-A100-SXM4-40GB:1,mig-1g.5gb:2")
    env = dict(gpus.env, KUBECONFIG=str(gpus.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def described() -> str | None:
        out = subprocess.run([KUBECTL, "describe", "node"], env=env, capture_output=True, text=True, timeout=60)
        return out.stdout if "nvidia.com/gpu.product" in out.stdout else None

    text = poll(described, timeout=60, interval=0.5, what="the node's GPUs")
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB" in text
    node = json.loads(subprocess.run([KUBECTL, "get", "nodes", "-o", "json"], env=env, capture_output=True,
                                     text=True, timeout=60, check=True).stdout)["items"][0]
    for part in ("capacity", "allocatable"):
        assert node["status"][part]["nvidia.com/gpu"] == "1"
        assert node["status"][part]["nvidia.com/mig-1g.5gb"] == "2"
    assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"


def test_a_cordon_outlives_a_control_plane_restart(plane_with, tmp_path) -> None:  # noqa: ANN001
    from trimaran.server.daemon import start_server, stop_server

    own = plane_with()
    env = dict(own.env, KUBECONFIG=str(own.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True, timeout=120,
                              check=True)

    node = _node_name(run)
    run("cordon", node)
    run("apply", "-f", "-", input=_pod("held"))

    def refusals() -> int:
        events = json.loads(run("get", "events", "--field-selector", "involvedObject.name=held,reason=FailedScheduling",
                                "-o", "json").stdout)["items"]
        return sum(e.get("count") or 1 for e in events)

    before = poll(refusals, timeout=60, interval=0.2, what="the pod to be refused")
    stop_server(own.home)
    start_server(home=own.home)
    # The restarted kubelet looks at the pending pod again and still refuses it: the cordon held from the start.
    poll(lambda: refusals() > before, timeout=60, interval=0.5, what="the restarted kubelet's refusal")
    assert _unschedulable_message(own, "default", "held") == UNSCHEDULABLE
    assert "nodeName" not in own.get("pods", "held")["spec"]
    run("uncordon", node)
    poll(lambda: _phase(own, "default", "held") == "Running", timeout=120, interval=0.2, what="the pod to run")
