"""apps/v1 Deployments, v1 Services and container probes on a real control plane.

One control plane serves the module; each test uses names of its own. The servers are small
Python scripts run as host processes (the pods' default path).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_plane
from tests.helpers import pod_network_on, poll
from trimaran.cli.client import APIError, Client

NS = "default"

# Answers "<VERSION> <pod>" on every path but /ready, which says 503 until READY_AFTER seconds
# have passed; on SIGTERM it finishes what it serves for a second before exiting, as servers do.
SERVER = """
import http.server, os, signal, threading, time
began = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/ready" and time.monotonic() - began < float(os.environ.get("READY_AFTER", "0")):
            self.send_response(503); self.end_headers(); return
        body = (os.environ.get("VERSION", "v1") + " " + os.environ["HOSTNAME"]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), H)
signal.signal(signal.SIGTERM, lambda *a: threading.Timer(1.0, os._exit, (0,)).start())
server.serve_forever()
"""


plane = shared_plane("workloads")


def deployment(name: str, replicas: int = 1, version: str = "v1", ready_after: float = 0,
               **spec: Any) -> dict:
    container = {"name": "web", "image": "python", "command": ["python", "-c", SERVER, "--port=$(PORT)"],
                 "ports": [{"name": "http", "containerPort": 8080}],
                 "env": [{"name": "VERSION", "value": version}, {"name": "READY_AFTER", "value": str(ready_after)}],
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, **spec,
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}}}


def service(name: str, selector: dict[str, str] | None = None, port: int = 80) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": selector or {"app": name}, "ports": [{"port": port, "targetPort": "http"}]}}


def _pod_network() -> bool:
    return pod_network_on(Path(os.environ["TRIMARAN_HOME"]))


def apply(api: Client, *objects: dict) -> None:
    api.apply([{"object": o} for o in objects])


def rolled_out(api: Client, name: str, replicas: int, timeout: float = 40.0) -> dict:
    """Wait as `kubectl rollout status` does: the spec observed, every replica updated and available."""
    def done() -> dict | None:
        d = api.get("Deployment", NS, name)
        s = d.get("status") or {}
        ok = s.get("observedGeneration", 0) >= d["metadata"]["generation"] and \
            s.get("updatedReplicas") == s.get("replicas") == s.get("availableReplicas") == replicas
        return d if ok else None
    return poll(done, timeout=timeout, interval=0.2, what=f"deployment {name} to roll out {replicas} replicas")


def pods_of(api: Client, name: str) -> list[dict]:
    return [p for p in api.list("Pod", NS, selector=f"app={name}") if not p["metadata"].get("deletionTimestamp")]


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def test_deployment_scales_1_3_1_through_the_scale_subresource(api: Client) -> None:
    apply(api, deployment("scaled"))
    rolled_out(api, "scaled", 1)
    api.scale("Deployment", NS, "scaled", 3)
    deploy = rolled_out(api, "scaled", 3)
    pods = pods_of(api, "scaled")
    ports = {p["spec"]["containers"][0]["ports"][0]["containerPort"] for p in pods}
    if _pod_network():
        assert ports == {8080}, "each replica keeps the declared port, at its own pod's address"
        assert len({p["status"]["podIP"] for p in pods}) == 3
    else:
        assert len(ports) == 3, "each replica gets a port of its own"
    conditions = {c["type"]: c["reason"] for c in deploy["status"]["conditions"]}
    assert conditions == {"Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}
    api.scale("Deployment", NS, "scaled", 1)
    rolled_out(api, "scaled", 1)
    poll(lambda: len(api.list("Pod", NS, selector="app=scaled")) == 1, timeout=20, what="scaled-down pods gone")


def test_rolling_update_keeps_the_service_answering(api: Client) -> None:
    apply(api, deployment("rolling", replicas=2), service("rolling"))
    rolled_out(api, "rolling", 2)
    ip = api.get("Service", NS, "rolling")["spec"]["clusterIP"]
    poll(lambda: _answers(f"http://{ip}/"), timeout=20, what="the service to answer")
    answers: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                answers.append(get_text(f"http://{ip}/"))
            except (OSError, urllib.error.URLError) as exc:
                failures.append(repr(exc))
            time.sleep(0.01)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        apply(api, deployment("rolling", replicas=2, version="v2"))
        deploy = rolled_out(api, "rolling", 2)
        poll(lambda: answers and answers[-1].startswith("v2"), timeout=10, what="answers from v2")
    finally:
        stop.set()
        worker.join()
    assert not failures, f"{len(failures)} of {len(answers) + len(failures)} requests failed: {failures[:3]}"
    assert {a.split()[0] for a in answers} == {"v1", "v2"}
    assert deploy["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert all(p["metadata"]["labels"]["pod-template-hash"] for p in pods_of(api, "rolling"))


def test_revisions_are_replica_sets_kept_to_the_history_limit(api: Client) -> None:
    def records() -> dict[str, str]:
        return {rs["metadata"]["labels"]["pod-template-hash"]: rs["metadata"]["annotations"][
            "deployment.kubernetes.io/revision"] for rs in api.list("ReplicaSet", NS, selector="app=history")}

    hashes = []
    for version in ("v1", "v2", "v3"):
        apply(api, deployment("history", version=version, revisionHistoryLimit=1))
        rolled_out(api, "history", 1)
        hashes.append(pods_of(api, "history")[0]["metadata"]["labels"]["pod-template-hash"])
    assert poll(lambda: records() == {hashes[1]: "2", hashes[2]: "3"} or None, timeout=10,
                what=f"revisions 2 and 3 only, not {records()}")
    # Going back to an earlier template (what `kubectl rollout undo` sends) reuses its ReplicaSet.
    apply(api, deployment("history", version="v2", revisionHistoryLimit=1))
    rolled_out(api, "history", 1)
    assert poll(lambda: records() == {hashes[1]: "4", hashes[2]: "3"} or None, timeout=10,
                what=f"revision 2's ReplicaSet as revision 4, not {records()}")
    rs = api.get("ReplicaSet", NS, f"history-{hashes[1]}")
    assert rs["spec"]["replicas"] == 1 and rs["status"]["availableReplicas"] == 1
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"


def test_recreate_stops_old_pods_before_new_ones_start(api: Client) -> None:
    apply(api, deployment("recreate", replicas=2, strategy={"type": "Recreate"}))
    first = rolled_out(api, "recreate", 2)
    old_hash = pods_of(api, "recreate")[0]["metadata"]["labels"]["pod-template-hash"]
    apply(api, deployment("recreate", replicas=2, version="v2", strategy={"type": "Recreate"}))
    overlap = []

    def new_running() -> bool:
        pods = api.list("Pod", NS, selector="app=recreate")
        hashes = {p["metadata"]["labels"]["pod-template-hash"] for p in pods
                  if (p.get("status") or {}).get("phase") == "Running"}
        if old_hash in hashes and len(hashes) > 1:
            overlap.append(hashes)
        return len(hashes - {old_hash}) == 1 and len([p for p in pods if p["metadata"]["labels"][
            "pod-template-hash"] != old_hash and p["status"].get("phase") == "Running"]) == 2

    poll(new_running, timeout=30, interval=0.05, what="the new pods to run")
    assert not overlap, "old and new pods ran at once"
    assert first["metadata"]["uid"] == api.get("Deployment", NS, "recreate")["metadata"]["uid"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


def test_service_reached_by_name_from_inside_a_pod(api: Client) -> None:
    # Off the pod network, a port of its own, not a usual one such as 8000: pods share the host's network,
    # and a process that listens there on every address (another control plane's pod) would take it.
    port = _free_port()
    apply(api, deployment("named"), service("named", port=port))
    rolled_out(api, "named", 1)
    script = ("import urllib.request\n"
              "for host in ('named', 'named.default', 'named.default.svc', 'named.default.svc.cluster.local'):\n"
              f"    print(host, urllib.request.urlopen(f'http://{{host}}:{port}/', timeout=5).read().decode())\n")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "named-client", "namespace": NS},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "python", "command": ["python", "-c", script]}]}}
    apply(api, pod)
    done = poll(lambda: (p := api.get("Pod", NS, "named-client")).get("status", {}).get("phase") in
                ("Succeeded", "Failed") and p, timeout=30, what="the client pod to finish")
    log = b"".join(api.log(NS, "named-client")).decode()
    assert done["status"]["phase"] == "Succeeded", log
    assert log.count("v1 named-") == 4, log

    # Another namespace resolves the qualified names only, as cluster DNS searches the pod's own.
    ip = api.get("Service", NS, "named")["spec"]["clusterIP"]
    lookup = ("import socket\n"
              "print(socket.gethostbyname('named.default.svc'))\n"
              "try:\n    socket.gethostbyname('named')\nexcept OSError:\n    print('short name unknown')\n")
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    apply(api, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lookup", "namespace": "elsewhere"},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "python", "command": ["python", "-c", lookup]}]}})
    poll(lambda: api.get("Pod", "elsewhere", "lookup").get("status", {}).get("phase") == "Succeeded", timeout=30,
         what="the lookup pod to finish")
    assert b"".join(api.log("elsewhere", "lookup")).decode().split() == [ip, "short", "name", "unknown"]


def test_a_service_port_another_process_holds_is_reported_with_what_it_means(api: Client) -> None:
    if _pod_network():
        pytest.skip("on the pod network a ClusterIP is an nftables rule in a range of its own: no host port to hold")
    with socket.socket() as holder:  # as `python -m http.server PORT` holds it: every address, SO_REUSEADDR
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        apply(api, deployment("crowded"), service("crowded", port=port))
        event = poll(lambda: next((e for e in api.list("Event", NS) if e.get("reason") == "FailedToListen"
                                   and e["involvedObject"]["name"] == "crowded"), None),
                     timeout=40, what="the Service's FailedToListen event")
    ip = api.get("Service", NS, "crowded")["spec"]["clusterIP"]
    assert event["type"] == "Warning"
    assert event["message"].startswith(f"{ip}:{port}: port {port} is held by another process"), event["message"]
    assert f"a pod that calls crowded:{port} reaches that process instead" in event["message"]


def test_readiness_gates_the_endpoints(api: Client) -> None:
    apply(api, deployment("gated", ready_after=4), service("gated"))
    ip = poll(lambda: api.get("Service", NS, "gated")["spec"].get("clusterIP"), timeout=10, what="a cluster IP")
    pod = poll(lambda: next((p for p in pods_of(api, "gated") if p["status"].get("phase") == "Running"), None),
               timeout=20, what="the pod to run")
    assert pod["status"]["containerStatuses"][0]["ready"] is False
    endpoints = poll(lambda: (e := _existing(api, "Endpoints", "gated")) and e.get("subsets") and e, timeout=10,
                     what="the service's Endpoints")
    assert [a["targetRef"]["name"] for a in endpoints["subsets"][0]["notReadyAddresses"]] == [
        pod["metadata"]["name"]]
    assert "addresses" not in endpoints["subsets"][0]
    with pytest.raises(OSError):
        get_text(f"http://{ip}/")  # no ready endpoint: refused, as kube-proxy rejects
    deploy = api.get("Deployment", NS, "gated")
    assert (deploy.get("status") or {}).get("availableReplicas", 0) == 0
    rolled_out(api, "gated", 1, timeout=30)
    assert poll(lambda: _answers(f"http://{ip}/"), timeout=10, what="the ready pod behind the service")
    own_port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    ready = poll(lambda: "addresses" in api.get("Endpoints", NS, "gated")["subsets"][0] and
                 api.get("Endpoints", NS, "gated")["subsets"][0], timeout=10, what="the pod among ready addresses")
    assert ready["ports"] == [{"port": own_port, "protocol": "TCP"}]


def test_liveness_failure_restarts_the_container(api: Client) -> None:
    script = ("import os, time; open('/tmp/healthy', 'w').close(); time.sleep(2); os.remove('/tmp/healthy'); "
              "time.sleep(600)")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "liveness-exec", "namespace": NS},
           "spec": {"containers": [{"name": "liveness", "image": "python", "command": ["python", "-c", script],
                                    "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                                                      "periodSeconds": 1, "failureThreshold": 2}}]}}
    apply(api, pod)
    restarted = poll(lambda: (p := api.get("Pod", NS, "liveness-exec"))["status"].get("containerStatuses", [{}])[0]
                     .get("restartCount", 0) >= 1 and p, timeout=40, what="a restart after the liveness failure")
    assert restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137
    messages = [(e["reason"], e["message"]) for e in api.events("Pod", NS, "liveness-exec")]
    assert any(r == "Unhealthy" and m.startswith("Liveness probe failed: cat: /tmp/healthy") for r, m in messages), \
        messages
    assert ("Killing", "Container liveness failed liveness probe, will be restarted") in messages


def test_an_exec_probe_runs_as_the_containers_user(api: Client) -> None:
    """As the kubelet's exec probe through the CRI: the command is the container's user (here
    1000, with no capability), so it may write what that user may; it passes only then."""
    probe = ("id -u > /tmp/probed && grep -E '^(CapEff|NoNewPrivs):' /proc/self/status >> /tmp/probed && "
             "grep -q '^CapEff:.0000000000000000$' /proc/self/status")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed-as-user", "namespace": NS},
           "spec": {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                    "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                                    "securityContext": {"allowPrivilegeEscalation": False},
                                    "readinessProbe": {"exec": {"command": ["sh", "-c", probe]},
                                                       "periodSeconds": 1}}]}}
    apply(api, pod)
    ready = poll(lambda: (p := api.get("Pod", NS, "probed-as-user"))["status"].get("containerStatuses", [{}])[0]
                 .get("ready") and p, timeout=40, what="the exec readiness probe to pass")
    assert ready["status"]["containerStatuses"][0]["ready"] is True
    assert not [e["message"] for e in api.events("Pod", NS, "probed-as-user") if e["reason"] == "Unhealthy"]


# A gRPC server answering grpc.health.v1.Health/Check with the status its argument names
# (1 SERVING, 2 NOT_SERVING), as the response's bytes: field 1, varint.
GRPC_HEALTH = """
import sys, time
from concurrent import futures
import grpc
answer = bytes([0x08, int(sys.argv[2])])
def check(request, context):
    return answer
handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
    "Check": grpc.unary_unary_rpc_method_handler(check)})
server = grpc.server(futures.ThreadPoolExecutor(2), handlers=[handler])
server.add_insecure_port("0.0.0.0:" + sys.argv[1])  # the kubelet probes the pod's IP
server.start()
time.sleep(600)
"""


@pytest.mark.parametrize("status, ready", [(1, True), (2, False)])
def test_startup_then_grpc_readiness_probes(api: Client, status: int, ready: bool) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"grpc-health-{status}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
           "spec": {"containers": [{"name": "server", "image": "python",
                                    "command": ["python", "-c", GRPC_HEALTH, str(port), str(status)],
                                    "startupProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1,
                                                     "failureThreshold": 30},
                                    "readinessProbe": {"grpc": {"port": port}, "periodSeconds": 1}}]}}
    apply(api, pod)

    def probed() -> dict | None:
        p = api.get("Pod", NS, name)
        statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
        return p if statuses[0].get("started") else None

    started = poll(probed, timeout=30, what="the startup probe to pass")
    assert started["status"]["containerStatuses"][0]["restartCount"] == 0
    if ready:
        poll(lambda: api.get("Pod", NS, name)["status"]["containerStatuses"][0]["ready"], timeout=15,
             what="the gRPC readiness probe to pass")
        return
    event = poll(lambda: next((e for e in api.events("Pod", NS, name) if e["reason"] == "Unhealthy" and
                               e["message"].startswith("Readiness")), None),
                 timeout=15, what="the gRPC readiness probe to fail")
    assert event["message"] == 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")'
    assert api.get("Pod", NS, name)["status"]["containerStatuses"][0]["ready"] is False


def test_bad_input_is_refused_in_the_api_servers_words(api: Client) -> None:
    mismatched = deployment("mismatched")
    mismatched["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(APIError) as refused:
        apply(api, mismatched)
    assert "spec.template.metadata.labels: Invalid value" in str(refused.value)
    assert "`selector` does not match template `labels`" in str(refused.value)
    fixed = deployment("fixed", replicas=2)
    fixed["spec"]["template"]["spec"]["containers"][0]["command"] = ["python", "-m", "http.server", "5000"]
    if _pod_network():
        apply(api, fixed)  # each replica binds its own pod's address, as on a cluster
        api.delete("Deployment", NS, "fixed")
    else:
        with pytest.raises(APIError) as refused:
            apply(api, fixed)
        assert "spec.replicas: Invalid value: 2" in str(refused.value)
        assert "binds containerPort 8080 as written" in str(refused.value)
    with pytest.raises(APIError):
        api.get("Deployment", NS, "mismatched")
    standalone = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "mine", "namespace": NS},
                  "spec": deployment("mine")["spec"]}
    with pytest.raises(APIError) as refused:
        apply(api, standalone)
    assert "ReplicaSets are made by Deployments here" in str(refused.value)


def test_service_selecting_nothing_says_so(api: Client) -> None:
    apply(api, service("lonely", selector={"app": "nobody"}))
    event = poll(lambda: next((e for e in api.events("Service", NS, "lonely") if e["reason"] == "NoEndpoints"), None),
                 timeout=10, what="a NoEndpoints event")
    assert event["type"] == "Warning"
    assert "selector app=nobody matches no pods" in event["message"]


def _existing(api: Client, kind: str, name: str) -> dict | None:
    try:
        return api.get(kind, NS, name)
    except APIError:
        return None


def _answers(url: str) -> bool:
    try:
        return bool(get_text(url))
    except OSError:
        return False
