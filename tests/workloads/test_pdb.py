"""policy/v1 PodDisruptionBudgets on a real control plane: validation in upstream's words, the status
the disruption controller keeps (int and percent bounds against a Deployment's replicas), the
eviction API's 429 with the DisruptionBudget cause (through the `kubernetes` client), and
`kubectl drain` retrying until the budget allows it, as upstream's drain does."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.api import ManifestError, validate
from trimaran.cli.client import Client
from trimaran.controllers.base import Key
from trimaran.controllers.workloads.pdb import PodDisruptionBudgetReconciler
from trimaran.store import SQLiteStore

NS = "default"
SLEEPER = {"name": "main", "image": "python", "command": ["python", "-c", "import time; time.sleep(3600)"]}
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."

plane = shared_plane("pdb")
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=timeout, input=stdin)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def deployment(name: str, replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [SLEEPER]}}}}


def budget(name: str, app: str, **bounds: object) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": app}}, **bounds}}


def ready_pods(api: Client, app: str, count: int) -> list[dict]:
    def done() -> list[dict] | None:
        pods = [p for p in api.list("Pod", NS, selector=f"app={app}") if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]
        return ready if len(ready) == count == len(pods) else None
    return poll(done, timeout=60, interval=0.2, what=f"{count} ready pods of {app}")


def status_of(api: Client, name: str, **wanted: int) -> dict:
    def done() -> dict | None:
        status = api.get("PodDisruptionBudget", NS, name).get("status") or {}
        return status if all(status.get(k) == v for k, v in wanted.items()) else None
    return poll(done, timeout=30, interval=0.2, what=f"{name}'s status {wanted}")


def test_validation_has_upstreams_words() -> None:
    def refusal(**bounds: object) -> str:
        with pytest.raises(ManifestError) as caught:
            validate(budget("b", "x", **bounds))
        return str(caught.value)
    assert 'spec: Invalid value: "object": minAvailable and maxUnavailable cannot be both set' in \
        refusal(minAvailable=1, maxUnavailable=1)
    assert 'spec.minAvailable: Invalid value: "120%": must not be greater than 100%' in refusal(minAvailable="120%")
    assert "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0" in refusal(maxUnavailable=-1)
    assert ("spec.maxUnavailable: Invalid value: \"half\": a valid percent string must be a numeric string followed "
            "by an ending '%'") in refusal(maxUnavailable="half")


def _ready_pod(store: SQLiteStore, name: str, owner: dict | None = None) -> dict:
    pod = validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS,
                                                                     "labels": {"app": "unit"}},
                    "spec": {"containers": [SLEEPER]}}).object
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                               "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                               "controller": True}]
    made = store.create(pod)
    made["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return store.update_status(made)


def test_disrupted_pods_and_pods_without_a_scale(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    controller = PodDisruptionBudgetReconciler(store)
    key = Key("PodDisruptionBudget", NS, "unit")
    _ready_pod(store, "unit-a")
    _ready_pod(store, "unit-b")
    made = store.create(validate(budget("unit", "unit", minAvailable=1)).object)
    # An eviction named unit-a a moment ago: not healthy while it is expected to go, for two minutes.
    made["status"] = {"observedGeneration": 1, "disruptedPods": {"unit-a": "2099-01-01T00:00:00Z"}}
    store.update_status(made)
    wait = controller.reconcile(key)
    status = store.get("PodDisruptionBudget", NS, "unit")["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"],
            status["disruptionsAllowed"]) == (1, 1, 2, 0)
    assert status["disruptedPods"] == {"unit-a": "2099-01-01T00:00:00Z"} and wait and wait > 60
    # One that was never deleted is forgotten after those two minutes, with upstream's event on the pod.
    pdb = store.get("PodDisruptionBudget", NS, "unit")
    pdb["status"]["disruptedPods"] = {"unit-a": "2000-01-01T00:00:00Z"}
    store.update_status(pdb)
    controller.reconcile(key)
    status = store.get("PodDisruptionBudget", NS, "unit")["status"]
    assert "disruptedPods" not in status and status["disruptionsAllowed"] == 1
    assert [e["reason"] for e in store.list_events("Pod", NS, "unit-a")] == ["NotDeleted"]

    # A percent bound needs the pods' controllers' replica counts: a Job has none.
    job = store.create(validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
                                 "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                                "containers": [SLEEPER]}}}}).object)
    _ready_pod(store, "unit-c", owner=job)
    pdb = store.get("PodDisruptionBudget", NS, "unit")
    pdb["spec"] = {"selector": {"matchLabels": {"app": "unit"}}, "maxUnavailable": "50%"}
    store.update(pdb)
    controller.reconcile(key)
    status = store.get("PodDisruptionBudget", NS, "unit")["status"]
    condition, = status["conditions"]
    assert (condition["status"], condition["reason"], condition["message"], status["disruptionsAllowed"]) == \
        ("False", "SyncFailed", 'found no controllers for pod "unit-c"', 0)
    reasons = [e["reason"] for e in store.list_events("PodDisruptionBudget", NS, "unit")]
    assert "CalculateExpectedPodCountFailed" in reasons


@needs_kubectl
def test_status_and_the_eviction_apis_429(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    from kubernetes import client, config

    api.create("Deployment", NS, deployment("trio", 3))
    pods = ready_pods(api, "trio", 3)
    ok(kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(budget("trio-min", "trio", minAvailable=3))))
    status = status_of(api, "trio-min", currentHealthy=3, desiredHealthy=3, expectedPods=3, disruptionsAllowed=0)
    assert status["observedGeneration"] == 1
    condition, = status["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason", "observedGeneration")} == \
        {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "observedGeneration": 1}
    header, row = ok(kubectl(plane, tmp_path, "get", "pdb", "trio-min")).splitlines()
    assert header.split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert row.split()[:4] == ["trio-min", "3", "N/A", "0"]

    core = client.CoreV1Api(config.new_client_from_config(str(plane.home / "kubeconfig")))
    victim = pods[0]["metadata"]["name"]
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=NS))
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_pod_eviction(victim, NS, eviction)
    assert caught.value.status == 429
    body = json.loads(caught.value.body)
    assert (body["reason"], body["message"]) == ("TooManyRequests", REFUSED)
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget",
                                          "message": "The disruption budget trio-min needs 3 healthy pods and has 3 "
                                                     "currently"}]
    assert api.get("Pod", NS, victim)["metadata"].get("deletionTimestamp") is None

    # A percent bound counts against the Deployment's replicas: 34% of 3, rounded up, may go (made by
    # kubectl's own generator, which sends protobuf).
    ok(kubectl(plane, tmp_path, "delete", "pdb", "trio-min"))
    ok(kubectl(plane, tmp_path, "create", "pdb", "trio-pct", "--selector=app=trio", "--max-unavailable=34%"))
    status = status_of(api, "trio-pct", currentHealthy=3, desiredHealthy=1, expectedPods=3, disruptionsAllowed=2)
    assert status["conditions"][0]["reason"] == "SufficientPods"
    assert ok(kubectl(plane, tmp_path, "get", "pdb", "trio-pct", "--no-headers")).split()[:4] == \
        ["trio-pct", "N/A", "34%", "2"]
    core.create_namespaced_pod_eviction(victim, NS, eviction)
    # Allowed: the pod goes (how long the budget stays spent depends on how soon the Deployment's
    # replacement is Ready, so its count is not read here).
    victim_now = [p for p in api.list("Pod", NS) if p["metadata"]["name"] == victim]
    assert not victim_now or victim_now[0]["metadata"].get("deletionTimestamp")  # being deleted, or gone
    # The Deployment's replacement comes; the controller counts it and forgets the evicted pod.
    ready_pods(api, "trio", 3)
    status = status_of(api, "trio-pct", currentHealthy=3, disruptionsAllowed=2)
    assert "disruptedPods" not in status
    ok(kubectl(plane, tmp_path, "delete", "deployment", "trio"))
    ok(kubectl(plane, tmp_path, "delete", "pdb", "trio-pct"))


@needs_kubectl
def test_drain_retries_until_the_budget_allows(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    api.create("Deployment", NS, deployment("pair", 2))
    ready_pods(api, "pair", 2)
    ok(kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(budget("pair", "pair", maxUnavailable=1))))
    status_of(api, "pair", disruptionsAllowed=1)
    node = ok(kubectl(plane, tmp_path, "get", "nodes", "-o", "name")).strip().removeprefix("node/")
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    drain = subprocess.Popen(["kubectl", "drain", node, "--pod-selector=app=pair", "--ignore-daemonsets",
                              "--timeout=90s"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # One pod goes; its replacement cannot start on the cordoned node, so the other is refused...
        status_of(api, "pair", currentHealthy=1, disruptionsAllowed=0)
        def left() -> list[dict] | None:
            bound = [p for p in api.list("Pod", NS, selector="app=pair")
                     if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")]
            return bound if len(bound) == 1 else None
        refused = poll(left, timeout=30, interval=0.2, what="the one pod drain must wait for")
        # ...until the budget allows it: drain retries and finishes.
        ok(kubectl(plane, tmp_path, "patch", "pdb", "pair", "--type=merge", "-p", '{"spec":{"maxUnavailable":2}}'))
        out, _ = drain.communicate(timeout=90)
        assert drain.returncode == 0, out
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait()
        ok(kubectl(plane, tmp_path, "uncordon", node))
    name = refused[0]["metadata"]["name"]
    assert f'error when evicting pods/"{name}" -n "{NS}" (will retry after 5s): {REFUSED}' in out
    assert f"pod/{name} evicted" in out and f"node/{node} drained" in out
    ok(kubectl(plane, tmp_path, "delete", "deployment", "pair"))
    ok(kubectl(plane, tmp_path, "delete", "pdb", "pair"))
