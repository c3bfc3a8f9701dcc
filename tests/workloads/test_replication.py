"""core v1 ReplicationControllers and apps/v1 DaemonSets on a real control plane, driven by kubectl
where kubectl has a verb for it (scale, rollout status, get's columns).

One control plane serves the module; each test uses names of its own. The pods sleep as host processes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.cli.client import APIError, Client

NS = "default"
SLEEPER = {"name": "main", "image": "python", "command": ["python", "-c", "import time; time.sleep(3600)"]}

plane = shared_plane("replication")

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str) -> str:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rc(name: str, replicas: int, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"app": name}, **spec,
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [SLEEPER]}}}}


def daemonset(name: str, version: str = "v1", node_selector: dict[str, str] | None = None) -> dict:
    pod_spec: dict = {"containers": [{**SLEEPER, "env": [{"name": "VERSION", "value": version}]}]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}}


def live_pods(api: Client, app: str) -> list[dict]:
    return [p for p in api.list("Pod", NS, selector=f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def running(api: Client, app: str, count: int, what: str) -> list[dict]:
    def done() -> list[dict] | None:
        pods = live_pods(api, app)
        ok = len(pods) == count and all((p.get("status") or {}).get("phase") == "Running" for p in pods)
        return pods if ok else None
    return poll(done, timeout=40, interval=0.2, what=what)


def gone(api: Client, app: str, what: str) -> None:
    poll(lambda: not api.list("Pod", NS, selector=f"app={app}"), timeout=40, interval=0.2, what=what)


@needs_kubectl
def test_rc_keeps_scales_adopts_and_takes_its_pods_along(plane: ControlPlaneHandle, api: Client,
                                                         tmp_path: Path) -> None:
    orphan = api.create("Pod", NS, {"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": "keeper-orphan", "labels": {"app": "keeper"}},
                                    "spec": {"containers": [SLEEPER]}})
    made = api.create("ReplicationController", NS, rc("keeper", 2))
    assert made["spec"]["replicas"] == 2
    pods = running(api, "keeper", 2, "two pods, the orphan among them")
    assert orphan["metadata"]["name"] in {p["metadata"]["name"] for p in pods}
    for pod in pods:
        ref, = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == \
            ("ReplicationController", "keeper", made["metadata"]["uid"], True)
    kubectl(plane, tmp_path, "scale", "rc", "keeper", "--replicas=3")
    running(api, "keeper", 3, "three pods after kubectl scale")
    poll(lambda: (api.get("ReplicationController", NS, "keeper").get("status") or {}).get("readyReplicas") == 3,
         timeout=20, what="readyReplicas 3")
    table = kubectl(plane, tmp_path, "get", "rc", "keeper").splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert table[1].split()[:4] == ["keeper", "3", "3", "3"]
    kubectl(plane, tmp_path, "scale", "rc", "keeper", "--replicas=1")
    running(api, "keeper", 1, "one pod after scaling down")
    # A pod deleted by hand is replaced.
    api.delete("Pod", NS, live_pods(api, "keeper")[0]["metadata"]["name"])
    running(api, "keeper", 1, "a replacement pod")
    kubectl(plane, tmp_path, "delete", "rc", "keeper")
    gone(api, "keeper", "the RC's pods to go with it")


def test_rc_selector_defaults_to_the_template_labels(api: Client) -> None:
    body = rc("plain", 1)
    del body["spec"]["selector"], body["spec"]["replicas"]
    made = api.create("ReplicationController", NS, body)
    assert made["spec"]["selector"] == {"app": "plain"}
    assert made["spec"]["replicas"] == 1
    assert made["metadata"]["labels"] == {"app": "plain"}
    assert made["status"] == {"replicas": 0}, "replicas is not omitempty: clients (the Python client) require it"
    running(api, "plain", 1, "one pod by default")
    api.delete("ReplicationController", NS, "plain")
    gone(api, "plain", "the pod of the deleted RC")


def test_bad_selectors_are_refused_in_upstream_words(api: Client) -> None:
    body = rc("mismatch", 1)
    body["spec"]["selector"] = {"app": "other"}
    with pytest.raises(APIError) as refused:
        api.create("ReplicationController", NS, body)
    assert refused.value.status == 422
    assert "spec.template.metadata.labels: Invalid value" in str(refused.value)
    assert "selector does not match labels in spec.template" in str(refused.value)
    ds = daemonset("mismatch")
    ds["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(APIError) as refused:
        api.create("DaemonSet", NS, ds)
    assert "spec.template.metadata.labels: Invalid value" in str(refused.value)
    assert "`selector` does not match template `labels`" in str(refused.value)
    ds = daemonset("noselector")
    del ds["spec"]["selector"]
    with pytest.raises(APIError) as refused:
        api.create("DaemonSet", NS, ds)
    assert "spec.selector: Required value" in str(refused.value)


@needs_kubectl
def test_daemonset_runs_one_pod_on_the_node_and_rolls_it(plane: ControlPlaneHandle, api: Client,
                                                        tmp_path: Path) -> None:
    node = api.list("Node", None)[0]["metadata"]["name"]
    made = api.create("DaemonSet", NS, daemonset("agent"))
    assert made["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert made["status"] == {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                              "numberReady": 0}, "the four counts clients require, before the controller's first pass"
    first, = running(api, "agent", 1, "the daemon pod")
    assert first["spec"]["nodeName"] == node
    assert first["metadata"]["name"].startswith("agent-") and len(first["metadata"]["name"]) == len("agent-") + 5
    assert first["metadata"]["labels"]["pod-template-generation"] == "1"
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in \
        first["spec"]["tolerations"]
    kubectl(plane, tmp_path, "rollout", "status", "ds/agent", "--timeout=60s")
    status = api.get("DaemonSet", NS, "agent")["status"]
    assert {k: status.get(k) for k in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                       "updatedNumberScheduled", "numberAvailable", "numberMisscheduled")} == \
        {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberReady": 1, "updatedNumberScheduled": 1,
         "numberAvailable": 1, "numberMisscheduled": 0}
    table = kubectl(plane, tmp_path, "get", "ds", "agent").splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE",
                                "SELECTOR", "AGE"]
    assert table[1].split()[:7] == ["agent", "1", "1", "1", "1", "1", "<none>"]
    # A new template replaces the pod.
    api.apply([{"object": daemonset("agent", version="v2")}])
    kubectl(plane, tmp_path, "rollout", "status", "ds/agent", "--timeout=60s")
    second, = running(api, "agent", 1, "the new daemon pod")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["metadata"]["labels"]["controller-revision-hash"] != \
        first["metadata"]["labels"]["controller-revision-hash"]
    assert second["metadata"]["labels"]["pod-template-generation"] == "2"
    assert second["spec"]["containers"][0]["env"] == [{"name": "VERSION", "value": "v2"}]
    kubectl(plane, tmp_path, "delete", "ds", "agent")
    gone(api, "agent", "the daemon pod to go with its DaemonSet")


def test_daemonset_whose_node_selector_the_node_fails_runs_nothing(api: Client) -> None:
    api.create("DaemonSet", NS, daemonset("elsewhere", node_selector={"disktype": "tape"}))

    def observed() -> dict | None:
        ds = api.get("DaemonSet", NS, "elsewhere")
        status = ds.get("status") or {}
        return status if status.get("observedGeneration") == ds["metadata"]["generation"] else None

    status = poll(observed, timeout=20, what="the DaemonSet's status")
    assert status["desiredNumberScheduled"] == 0 and status["currentNumberScheduled"] == 0
    assert not api.list("Pod", NS, selector="app=elsewhere")
    api.delete("DaemonSet", NS, "elsewhere")
