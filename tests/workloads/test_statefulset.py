"""apps/v1 StatefulSets and their ControllerRevisions on a real control plane, driven by the real
kubectl (apply, get, scale, rollout status|history|undo), and the DaemonSet's revisions for kubectl's
``rollout history|undo ds``.

One control plane serves the module; each test uses names of its own. The pods sleep as host
processes; a readiness probe that passes one second after start makes OrderedReady's waits visible
in the timestamps.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.cli.client import APIError, Client

NS = "default"
SLEEPER = {"name": "main", "image": "python", "command": ["python", "-c", "import time; time.sleep(3600)"],
           "readinessProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": 1, "periodSeconds": 1}}

plane = shared_plane("statefulset")

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def run_kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None
                ) -> subprocess.CompletedProcess[str]:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=120, input=stdin)


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None) -> str:
    done = run_kubectl(plane, tmp_path, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def statefulset(name: str, replicas: int, service: str = "", **spec: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "serviceName": service, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [SLEEPER]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                         "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
                     **spec}}


def pods_of(api: Client, app: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in api.list("Pod", NS, selector=f"app={app}")
            if not p["metadata"].get("deletionTimestamp")}


def ready_time(pod: dict) -> str:
    return next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready")


def image_of(pod: dict) -> str:
    return pod["spec"]["containers"][0]["image"]


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env") or []}


def all_at(api: Client, app: str, count: int, revision: str | None, what: str) -> dict[str, dict]:
    """Wait for ``count`` Running and Ready pods of ``app``, all of ``revision`` when given."""
    def done() -> dict[str, dict] | None:
        pods = pods_of(api, app)
        ok = len(pods) == count and all(
            (p.get("status") or {}).get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            and (revision is None or p["metadata"]["labels"]["controller-revision-hash"] == revision)
            for p in pods.values())
        return pods if ok else None
    return poll(done, timeout=90, interval=0.2, what=what)


def test_ordered_pods_claims_rolling_update_history_undo_and_scale(plane: ControlPlaneHandle, api: Client,
                                                                    tmp_path: Path) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-svc", "namespace": NS},
               "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80, "name": "web"}]}}
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": [service, statefulset("web", 3, "web-svc")]})
    kubectl(plane, tmp_path, "apply", "-f", "-", stdin=manifest)
    out = kubectl(plane, tmp_path, "rollout", "status", "sts/web", "--timeout=90s")
    assert "partitioned roll out complete: 3 new pods have been updated..." in out

    sts = api.get("StatefulSet", NS, "web")
    first = sts["status"]["updateRevision"]
    assert sts["status"] == {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
                             "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": first,
                             "updateRevision": first, "collisionCount": 0}
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    pods = all_at(api, "web", 3, first, "web-0..2 ready")
    assert sorted(pods) == ["web-0", "web-1", "web-2"]
    for ordinal in range(3):
        pod = pods[f"web-{ordinal}"]
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == f"web-{ordinal}"
        assert labels["apps.kubernetes.io/pod-index"] == str(ordinal)
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"web-{ordinal}", "web-svc")
        assert {"name": "data", "persistentVolumeClaim": {"claimName": f"data-web-{ordinal}"}} in pod["spec"]["volumes"]
        if ordinal:  # OrderedReady: each pod made only once the one before it was Ready
            assert pod["metadata"]["creationTimestamp"] >= ready_time(pods[f"web-{ordinal - 1}"])
    if pods["web-1"]["status"].get("podIP") not in (None, "127.0.0.1"):  # the pod network: a name per pod
        resolve = "import socket; print(socket.gethostbyname('web-1.web-svc'))"
        assert kubectl(plane, tmp_path, "exec", "web-0", "--", "python", "-c", resolve).strip() == \
            pods["web-1"]["status"]["podIP"]
    claims = {c["metadata"]["name"]: c for c in api.list("PersistentVolumeClaim", NS)}
    assert {"data-web-0", "data-web-1", "data-web-2"} <= set(claims)
    assert claims["data-web-0"]["metadata"]["labels"] == {"app": "web"}

    table = kubectl(plane, tmp_path, "get", "sts", "web").splitlines()
    assert table[0].split() == ["NAME", "READY", "AGE"] and table[1].split()[:2] == ["web", "3/3"]
    wide = kubectl(plane, tmp_path, "get", "sts", "web", "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"] and wide[1].split()[3:] == \
        ["main", "python"]
    revisions = kubectl(plane, tmp_path, "get", "controllerrevisions", "-l", "app=web").splitlines()
    assert revisions[0].split() == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    assert revisions[1].split()[:3] == [first, "statefulset.apps/web", "1"]

    # A partitioned update: only ordinals at or above the partition take the new template.
    kubectl(plane, tmp_path, "patch", "sts", "web", "-p",
            '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}')
    kubectl(plane, tmp_path, "set", "image", "sts/web", "main=python:3.12")
    second = poll(lambda: api.get("StatefulSet", NS, "web")["status"].get("updateRevision") != first
                  and api.get("StatefulSet", NS, "web")["status"]["updateRevision"], what="a second revision")
    out = kubectl(plane, tmp_path, "rollout", "status", "sts/web", "--timeout=90s")
    assert "partitioned roll out complete: 1 new pods have been updated..." in out
    pods = all_at(api, "web", 3, None, "web-2 updated")
    assert {n: p["metadata"]["labels"]["controller-revision-hash"] for n, p in pods.items()} == \
        {"web-0": first, "web-1": first, "web-2": second}
    assert image_of(pods["web-2"]) == "python:3.12" and image_of(pods["web-0"]) == "python"
    status = api.get("StatefulSet", NS, "web")["status"]
    assert (status["currentRevision"], status["currentReplicas"], status["updatedReplicas"]) == (first, 2, 1)

    # The rest of the roll: highest ordinal first, each once the one above it is Ready again.
    kubectl(plane, tmp_path, "patch", "sts", "web", "-p",
            '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}')
    kubectl(plane, tmp_path, "rollout", "status", "sts/web", "--timeout=90s")
    pods = all_at(api, "web", 3, second, "all at the second revision")
    assert pods["web-0"]["metadata"]["creationTimestamp"] >= ready_time(pods["web-1"])
    status = api.get("StatefulSet", NS, "web")["status"]
    assert (status["currentRevision"], status["updateRevision"], status["currentReplicas"]) == (second, second, 3)

    history = kubectl(plane, tmp_path, "rollout", "history", "sts/web").splitlines()
    assert history[0].strip() == "statefulset.apps/web" and history[1].split() == ["REVISION", "CHANGE-CAUSE"]
    assert [line.split()[0] for line in history[2:] if line.strip()] == ["1", "2"]
    detail = kubectl(plane, tmp_path, "rollout", "history", "sts/web", "--revision=2")
    assert "Image: python:3.12" in " ".join(detail.split())

    # Undo: the first template again, under its old revision, which becomes revision 3.
    assert "rolled back" in kubectl(plane, tmp_path, "rollout", "undo", "sts/web")
    pods = all_at(api, "web", 3, first, "all back at the first revision")
    assert {image_of(p) for p in pods.values()} == {"python"}
    numbers = {r["metadata"]["name"]: r["revision"] for r in api.list("ControllerRevision", NS, selector="app=web")}
    assert numbers == {second: 2, first: 3}

    # Scaling down removes the highest ordinals and keeps their claims (whenScaled: Retain).
    kubectl(plane, tmp_path, "scale", "sts", "web", "--replicas=1")
    poll(lambda: list(pods_of(api, "web")) == ["web-0"]
         and not [p for p in api.list("Pod", NS, selector="app=web") if p["metadata"]["name"] != "web-0"],
         timeout=60, interval=0.2, what="web-1 and web-2 gone")
    assert {"data-web-0", "data-web-1", "data-web-2"} <= {c["metadata"]["name"]
                                                           for c in api.list("PersistentVolumeClaim", NS)}
    assert kubectl(plane, tmp_path, "get", "sts", "web", "-o", "jsonpath={.spec.replicas}") == "1"

    # Deleted with --cascade=orphan and made again: the set takes its pod and its history back.
    kept = api.get("Pod", NS, "web-0")["metadata"]["uid"]
    kubectl(plane, tmp_path, "delete", "sts", "web", "--cascade=orphan")
    again = api.create("StatefulSet", NS, statefulset("web", 1, "web-svc"))
    uid = again["metadata"]["uid"]
    poll(lambda: api.get("Pod", NS, "web-0")["metadata"].get("ownerReferences", [{}])[0].get("uid") == uid,
         timeout=30, interval=0.2, what="web-0 adopted")
    assert api.get("Pod", NS, "web-0")["metadata"]["uid"] == kept
    poll(lambda: {r["metadata"]["ownerReferences"][0]["uid"]
                  for r in api.list("ControllerRevision", NS, selector="app=web")} == {uid},
         timeout=30, interval=0.2, what="the revisions adopted")
    status = poll(lambda: api.get("StatefulSet", NS, "web")["status"].get("readyReplicas") == 1
                  and api.get("StatefulSet", NS, "web")["status"], timeout=30, interval=0.2, what="web ready again")
    assert (status["currentRevision"], status["updateRevision"]) == (first, first)


def test_parallel_pods_and_claims_deleted_with_scale_and_set(plane: ControlPlaneHandle, api: Client,
                                                             tmp_path: Path) -> None:
    made = api.create("StatefulSet", NS, statefulset(
        "par", 2, podManagementPolicy="Parallel",
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Delete"}))
    pods = all_at(api, "par", 2, None, "par-0 and par-1 ready")
    # Parallel: par-1 did not wait for par-0 to be Ready.
    assert pods["par-1"]["metadata"]["creationTimestamp"] < ready_time(pods["par-0"])
    claims = {c["metadata"]["name"]: c for c in api.list("PersistentVolumeClaim", NS, selector="app=par")}
    assert sorted(claims) == ["data-par-0", "data-par-1"]
    assert claims["data-par-0"]["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "par", "uid": made["metadata"]["uid"]}]
    kubectl(plane, tmp_path, "scale", "sts", "par", "--replicas=1")
    poll(lambda: [c["metadata"]["name"] for c in api.list("PersistentVolumeClaim", NS, selector="app=par")]
         == ["data-par-0"], timeout=60, interval=0.2, what="par-1's claim deleted with its pod")
    # The policy changed: the claims' owners follow it.
    def owners() -> list[str]:
        return [r["kind"] for r in api.get("PersistentVolumeClaim", NS, "data-par-0")["metadata"].get(
            "ownerReferences") or []]
    kubectl(plane, tmp_path, "patch", "sts", "par", "-p",
            '{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Retain"}}}')
    poll(lambda: owners() == [], timeout=30, interval=0.2, what="the claim kept whatever becomes of the set")
    kubectl(plane, tmp_path, "patch", "sts", "par", "-p",
            '{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Delete"}}}')
    poll(lambda: owners() == ["StatefulSet"], timeout=30, interval=0.2, what="the claim owned by the set again")
    kubectl(plane, tmp_path, "delete", "sts", "par")
    poll(lambda: not api.list("PersistentVolumeClaim", NS, selector="app=par")
         and not api.list("Pod", NS, selector="app=par"), timeout=60, interval=0.2, what="par's pods and claims gone")


def test_bad_statefulsets_are_refused_with_the_field_path(plane: ControlPlaneHandle, api: Client,
                                                          tmp_path: Path) -> None:
    bad = statefulset("bad", 1)
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    done = run_kubectl(plane, tmp_path, "apply", "-f", "-", stdin=json.dumps(bad))
    assert done.returncode != 0
    assert done.stderr.strip() == ('The StatefulSet "bad" is invalid: spec.template.metadata.labels: Invalid value: '
                                   '{"app":"other"}: `selector` does not match template `labels`')
    with pytest.raises(APIError):
        api.get("StatefulSet", NS, "bad")
    policy = statefulset("bad", 1, podManagementPolicy="Sometimes")
    done = run_kubectl(plane, tmp_path, "apply", "-f", "-", stdin=json.dumps(policy))
    assert 'spec.podManagementPolicy: Invalid value: "Sometimes": must be \'OrderedReady\' or \'Parallel\'' \
        in done.stderr
    api.create("StatefulSet", NS, statefulset("fixed", 0, "one"))
    done = run_kubectl(plane, tmp_path, "patch", "sts", "fixed", "-p", '{"spec":{"serviceName":"two"}}')
    assert "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', " \
           "'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and " \
           "'minReadySeconds' are forbidden" in done.stderr


def test_daemonset_revisions_serve_rollout_history_and_undo(plane: ControlPlaneHandle, api: Client,
                                                            tmp_path: Path) -> None:
    sleeper = {k: v for k, v in SLEEPER.items() if k != "readinessProbe"}
    api.create("DaemonSet", NS, {"apiVersion": "apps/v1", "kind": "DaemonSet",
                                 "metadata": {"name": "agent", "namespace": NS},
                                 "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                          "template": {"metadata": {"labels": {"app": "agent"}},
                                                       "spec": {"containers": [sleeper]}}}})
    first = all_at(api, "agent", 1, None, "the agent's pod")
    first_hash = next(iter(first.values()))["metadata"]["labels"]["controller-revision-hash"]
    kubectl(plane, tmp_path, "set", "env", "ds/agent", "VERSION=v2")
    kubectl(plane, tmp_path, "rollout", "status", "ds/agent", "--timeout=90s")
    pod = next(iter(all_at(api, "agent", 1, None, "the agent's new pod").values()))
    assert env_of(pod) == {"VERSION": "v2"}
    history = kubectl(plane, tmp_path, "rollout", "history", "ds/agent").splitlines()
    assert history[0].strip() == "daemonset.apps/agent"
    assert [line.split()[0] for line in history[2:] if line.strip()] == ["1", "2"]
    revision = api.get("ControllerRevision", NS, f"agent-{first_hash}")
    assert revision["metadata"]["labels"] == {"app": "agent", "controller-revision-hash": first_hash}
    assert revision["data"]["spec"]["template"]["$patch"] == "replace"
    assert "rolled back" in kubectl(plane, tmp_path, "rollout", "undo", "ds/agent")
    all_at(api, "agent", 1, first_hash, "the agent back at its first template")
    assert api.get("ControllerRevision", NS, f"agent-{first_hash}")["revision"] == 3


def test_max_unavailable_rolls_that_many_pods_at_once(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    api.create("StatefulSet", NS, statefulset(
        "wide", 3, podManagementPolicy="Parallel",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}}))
    all_at(api, "wide", 3, None, "wide-0..2 ready")
    kubectl(plane, tmp_path, "set", "image", "sts/wide", "main=python:3.12")
    kubectl(plane, tmp_path, "rollout", "status", "sts/wide", "--timeout=90s")
    pods = all_at(api, "wide", 3, api.get("StatefulSet", NS, "wide")["status"]["updateRevision"], "all rolled")
    # All three went at once: wide-0 came back before wide-2 was Ready (one at a time, it would come after).
    assert pods["wide-0"]["metadata"]["creationTimestamp"] <= ready_time(pods["wide-2"])
    assert {image_of(p) for p in pods.values()} == {"python:3.12"}
