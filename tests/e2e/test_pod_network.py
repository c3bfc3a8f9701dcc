"""The pod network: a network namespace and an IP per pod by the CNI plugins (trimaran.runtime.network).

Real plugins (/usr/lib/cni), real network namespaces, real control planes; the machine must allow
them (root, the plugins, ip, nft, iptables), else the file is skipped.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.runtime.network import NETNS_DIR, POOL_PREFIX, NetworkPlan, PodNetwork, home_digest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/lib/cni/bridge").exists(),
    reason="the pod network needs root and the CNI plugins (containernetworking-plugins)")

# Answers GET with the pod's name and the address it was reached at.
SERVER = textwrap.dedent("""
    import http.server, os
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (os.environ["POD_NAME"] + " " + self.connection.getsockname()[0]).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
""")
POD_NAME_ENV = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


def _apply(plane, tmp_path: Path, obj: dict) -> None:
    path = tmp_path / f"{obj['kind']}-{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    plane.cli("apply", "-f", str(path))


def _server_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "web", "image": "python", "command": ["python", "-c", SERVER],
                                     "env": [POD_NAME_ENV], "ports": [{"containerPort": 8080}],
                                     "readinessProbe": {"httpGet": {"port": 8080}, "periodSeconds": 1}}]}}


def _get(ip: str, port: int = 8080) -> str:
    with urllib.request.urlopen(f"http://{ip}:{port}/", timeout=5) as answer:
        return answer.read().decode()


def _answers(ip: str) -> str | None:
    try:
        return _get(ip)
    except OSError:
        return None


def _plan(plane) -> dict:
    return json.loads((plane.home / "network.json").read_text())


def _left_behind(home: Path, pool: bool = True) -> list[str]:
    """Whatever of the home's pods' networks is on the machine: netns, veths on its bridge, IPAM
    entries; with ``pool``, the namespaces waiting for the next pods (and as many veths, their
    addresses) aside, which the control plane holds while it runs."""
    plan = json.loads((home / "network.json").read_text())
    prefix = f"trm-{home_digest(home)}-"
    names = [n for n in os.listdir(NETNS_DIR) if n.startswith(prefix)] if NETNS_DIR.exists() else []
    pooled = [n for n in names if pool and n.startswith(prefix + POOL_PREFIX)]
    left = [f"netns {n}" for n in names if n not in pooled]
    links = json.loads(subprocess.run(["ip", "-j", "link", "show", "master", plan["bridge"]],
                                      capture_output=True, text=True).stdout or "[]")
    left += [f"veth {link['ifname']}" for link in links[len(pooled):]]
    records = {p.stem: json.loads(p.read_text()) for p in (home / "network" / "pods").glob("*.json")}
    held = {data.get("container_id") for name, data in records.items() if pool and name.startswith(POOL_PREFIX)}
    ipam = home / "network" / "ipam" / "trimaran"
    left += [f"IPAM {p.name}" for p in ipam.glob("*")
             if p.name[0].isdigit() and p.read_text().split()[0] not in held] if ipam.exists() else []
    left += [f"record {name}.json" for name in records if not (pool and name.startswith(POOL_PREFIX))]
    return left


def _running(plane, name: str, namespace: str = "default") -> dict:
    def ready() -> dict | None:
        pod = plane.get("Pod", name, namespace)
        status = pod.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return pod if status.get("phase") == "Running" and conditions.get("Ready") == "True" else None
    return poll(ready, timeout=60, what=f"pod {name} Running and Ready")


def test_two_pods_bind_the_same_port_each_at_its_own_ip(plane, tmp_path):
    for name in ("web-a", "web-b"):
        _apply(plane, tmp_path, _server_pod(name))
    pods = [_running(plane, name) for name in ("web-a", "web-b")]
    plan = _plan(plane)
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 2
    for pod, ip in zip(pods, ips, strict=True):
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(plan["pod_cidr"])
        assert pod["status"]["podIPs"] == [{"ip": ip}]
        assert pod["status"]["hostIP"] == plan["gateway"]
        # Both bound 0.0.0.0:8080 at once; each answers at its own address.
        assert _get(ip) == f"{pod['metadata']['name']} {ip}"
    # A pod's /etc/hosts names its own hostname at its own IP.
    hosts = next((plane.home / "pods" / pods[0]["metadata"]["uid"] / "runs").glob("*/hosts")).read_text()
    assert f"{ips[0]}\tweb-a" in hosts

    uids = [p["metadata"]["uid"] for p in pods]
    for name in ("web-a", "web-b"):
        plane.cli("delete", "pod", name, "--wait", timeout=120)
    for uid in uids:
        assert not (NETNS_DIR / f"trm-{home_digest(plane.home)}-{uid}").exists()
    assert _left_behind(plane.home) == []


def test_a_deployment_scales_on_a_fixed_container_port(plane, tmp_path):
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fixed"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "fixed"}},
                       "template": {"metadata": {"labels": {"app": "fixed"}},
                                    "spec": _server_pod("x")["spec"]}}}
    _apply(plane, tmp_path, deploy)
    plane.cli("wait", "deployment/fixed", "--for=condition=Available", "--timeout=120s")

    def three_ready() -> list[dict] | None:
        pods = [p for p in plane.client().list("Pod", "default", "app=fixed")
                if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
        return pods if len(pods) == 3 else None
    pods = poll(three_ready, timeout=60, what="3 replicas Running")
    assert len({p["status"]["podIP"] for p in pods}) == 3
    for pod in pods:
        ip = pod["status"]["podIP"]
        assert poll(lambda ip=ip: _answers(ip), timeout=30, what=f"{ip}:8080") == f"{pod['metadata']['name']} {ip}"
    plane.cli("delete", "deployment", "fixed")
    poll(lambda: not plane.client().list("Pod", "default", "app=fixed"), timeout=60, what="the replicas gone")
    poll(lambda: _left_behind(plane.home) == [], timeout=30, what="nothing of the replicas' networks left")


PROBE = textwrap.dedent("""
    import json, os, socket, ssl, urllib.request
    def connects(host, port):
        try:
            socket.create_connection((host, port), timeout=3).close()
            return True
        except OSError as exc:
            return str(exc)
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    context = ssl.create_default_context(cafile=sa + "/ca.crt")
    request = urllib.request.Request(f"https://{host}:{port}/version",
                                     headers={"Authorization": "Bearer " + open(sa + "/token").read()})
    version = json.load(urllib.request.urlopen(request, context=context, timeout=10))
    print(json.dumps({"loopback": connects("127.0.0.1", int(os.environ["HOST_PORT"])),
                      "api_host": host, "version": version.get("gitVersion")}))
""")


def test_a_pod_cannot_reach_host_loopback_and_reaches_the_api(plane, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"},
               "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                   {"name": "main", "image": "python", "command": ["python", "-c", PROBE],
                    "env": [{"name": "HOST_PORT", "value": str(listener.getsockname()[1])}]}]}}}}
        _apply(plane, tmp_path, job)
        plane.cli("wait", "job/probe", "--for=condition=Complete", "--timeout=120s")
    finally:
        listener.close()
    pod = plane.client().list("Pod", "default", "batch.kubernetes.io/job-name=probe")[0]
    out = json.loads(plane.cli("logs", pod["metadata"]["name"]).stdout.strip().splitlines()[-1])
    assert out["loopback"] is not True and "refused" in out["loopback"]
    assert out["api_host"] == _plan(plane)["api_ip"]  # the `kubernetes` Service, forwarded to the gateway
    assert out["version"]


def test_two_homes_get_their_own_bridges_and_ranges(plane_with, tmp_path):
    first, second = plane_with(), plane_with()
    plans = [_plan(first), _plan(second)]
    assert plans[0]["bridge"] != plans[1]["bridge"]
    ranges = [ipaddress.ip_network(p[k]) for p in plans for k in ("pod_cidr", "service_cidr")]
    assert all(not a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1:])
    for plan in plans:
        link = subprocess.run(["ip", "-j", "addr", "show", plan["bridge"]], capture_output=True, text=True)
        assert f'"local":"{plan["gateway"]}"' in link.stdout
    # Nothing else on the machine in those ranges (eth0's 192.0.2.0/24 among them).
    for entry in json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout):
        if entry["ifname"] in (plans[0]["bridge"], plans[1]["bridge"]):
            continue
        for info in entry["addr_info"]:
            net = ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)
            assert not any(net.overlaps(r) for r in ranges), (entry["ifname"], net)


def test_a_missing_plugin_is_the_pods_reason_and_leaves_nothing(plane_with, tmp_path):
    plugins = tmp_path / "cni"
    plugins.mkdir()
    for name in ("bridge", "host-local", "loopback", "portmap", "tuning"):  # no "firewall"
        (plugins / name).symlink_to(f"/usr/lib/cni/{name}")
    plane = plane_with(TRIMARAN_CNI_PATH=str(plugins))
    _apply(plane, tmp_path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lonely"},
                             "spec": {"restartPolicy": "Never", "containers": [
                                 {"name": "main", "image": "python", "command": ["python", "-c", "pass"]}]}})
    pod = poll(lambda: (p := plane.get("Pod", "lonely"))["status"].get("phase") == "Failed" and p,
               timeout=60, what="the pod failed")
    assert pod["status"]["reason"] == "FailedCreatePodSandBox"
    assert pod["status"]["message"].startswith("Failed to create pod sandbox: ")
    assert f'failed to find plugin "firewall" in path [{plugins}]' in pod["status"]["message"]
    events = plane.cli("get", "events", "-o", "json").stdout
    assert "FailedCreatePodSandBox" in events
    assert _left_behind(plane.home) == []


def test_the_networks_of_pods_gone_while_the_control_plane_was_down_are_swept(plane, tmp_path):
    # The home's own plan, as the control plane holds it (a pod it set up, then forgot).
    network = PodNetwork(plane.home, NetworkPlan(**_plan(plane)), ["/usr/lib/cni"], ensure=False)
    address = network.setup("00000000-dead-beef-0000-000000000000", "default", "ghost")
    assert Path(address.netns).exists() and _left_behind(plane.home)
    plane.cli("server", "stop")
    plane.cli("server", "start")
    poll(lambda: _left_behind(plane.home) == [], timeout=30, what="the orphan's network swept")


DDP = textwrap.dedent("""
    import os, socket
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    x = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(x)
    print(f"rank={dist.get_rank()} sum={x.item()} master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
          f"at={socket.gethostbyname(os.environ['MASTER_ADDR'])}", flush=True)
    dist.barrier()
    dist.destroy_process_group()  # else gloo's threads may abort the exit ("terminate called ...")
""")


def test_a_pytorchjob_rendezvous_on_the_default_master_port(plane, tmp_path):
    def replica() -> dict:
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "command": ["python", "-c", DDP]}]}}}
    _apply(plane, tmp_path, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
                             "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}})
    plane.cli("wait", "pytorchjob/ddp", "--for=condition=Succeeded", "--timeout=180s")
    master_ip = plane.get("Pod", "ddp-master-0")["status"]["podIP"]
    for rank, pod in enumerate(("ddp-master-0", "ddp-worker-0")):
        out = plane.cli("logs", pod).stdout
        assert f"rank={rank} sum=3.0 master=ddp-master-0:23456 at={master_ip}" in out, out
    plane.cli("delete", "pytorchjob", "ddp", "--wait")
    poll(lambda: _left_behind(plane.home) == [], timeout=60, what="nothing of the replicas' networks left")


KATIB_CALL = textwrap.dedent("""
    import grpc
    # Katib's GetObservationLog, its request (trial_name, field 1) encoded by hand: the pod needs grpc only.
    name = b"nobody-has-it"
    call = grpc.insecure_channel("katib-db-manager.kubeflow:6789").unary_unary(
        "/api.v1.beta1.DBManager/GetObservationLog")
    try:
        call(b"\\x0a" + bytes([len(name)]) + name, timeout=10)
        print("answer OK", flush=True)
    except grpc.RpcError as exc:
        print("answer", exc.code().name, exc.details(), flush=True)
""")


def test_a_pod_reaches_katibs_db_manager_at_the_gateway_as_itself(plane, tmp_path):
    _apply(plane, tmp_path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "katib-caller"},
                             "spec": {"restartPolicy": "Never", "containers": [
                                 {"name": "main", "image": "python", "command": ["python", "-c", KATIB_CALL]}]}})
    pod = poll(lambda: (p := plane.get("Pod", "katib-caller"))["status"].get("phase") in ("Succeeded", "Failed") and p,
               timeout=60, what="the pod to finish")
    log = plane.cli("logs", "katib-caller").stdout
    assert pod["status"]["phase"] == "Succeeded", log
    # Its name resolves to the gateway, and the DB manager knows the caller by its pod IP (a pod of
    # "default"), not as an unauthenticated stranger.
    assert "answer OK" in log, log
    hosts = next((plane.home / "pods" / pod["metadata"]["uid"] / "runs").glob("*/hosts")).read_text()
    assert f"{_plan(plane)['gateway']}\tkatib-db-manager.kubeflow" in hosts, hosts


def test_an_exhausted_range_is_cnis_error_and_leaves_nothing(tmp_path):
    from dataclasses import asdict, replace

    from trimaran.runtime.network import NetworkError
    from trimaran.runtime.network._plan import release_plan, reserve_plan

    home = tmp_path / "home"
    home.mkdir()
    plan = reserve_plan(home)
    # The home's slot, its pod range cut to a /26: host-local hands out .2 to .30 (the top 32 are spare).
    small = replace(plan, pod_cidr=str(ipaddress.ip_network(plan.pod_cidr).subnets(new_prefix=26).__next__()))
    (home / "network.json").write_text(json.dumps(asdict(small)))
    network = PodNetwork(home, small, ["/usr/lib/cni"])
    try:
        uids = [f"pod-{i}" for i in range(29)]
        ips = {network.setup(uid, "default", uid).ip for uid in uids}
        assert len(ips) == 29
        with pytest.raises(NetworkError) as exhausted:
            network.setup("one-too-many", "default", "one-too-many")
        assert str(exhausted.value).startswith('failed to setup network for sandbox "one-too-many": '
                                               'plugin type="bridge" failed (add): ')
        assert "no IP addresses available in range set" in str(exhausted.value)
        assert "one-too-many" not in network.known(), "nothing of the failed pod is left"
        for uid in uids:
            network.teardown(uid)
        assert _left_behind(home) == []
    finally:
        network.sweep(())
        network.close()
        release_plan(plan)
    assert subprocess.run(["ip", "link", "show", plan.bridge], capture_output=True).returncode != 0
    assert f"trimaran-nat-{home_digest(home)}" not in subprocess.run(["nft", "list", "tables"], capture_output=True,
                                                                   text=True).stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_a_host_port_reaches_the_pod_at_the_nodes_address(plane, tmp_path, kind):
    """portmap's hostPort, for a pod of its own and for a Job's (whose network the kubelet makes
    before its start, with the replicas' names: the mappings must be made then too)."""
    namespace = f"hostport-{kind.lower()}"
    _apply(plane, tmp_path, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    host_port = _free_port()
    pod = _server_pod("published")
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": host_port}]
    if kind == "Job":
        pod["spec"]["restartPolicy"] = "Never"
        _apply(plane, tmp_path, {"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": "published", "namespace": namespace},
                                 "spec": {"template": {"metadata": {"labels": {"app": "published"}},
                                                       "spec": pod["spec"]}}})
        name = poll(lambda: next((p["metadata"]["name"] for p in json.loads(plane.cli(
            "get", "pods", "-n", namespace, "-o", "json").stdout)["items"]), None), timeout=60, what="the Job's pod")
    else:
        _apply(plane, tmp_path, pod)
        name = "published"
    running = _running(plane, name, namespace)
    node_ip = running["status"]["hostIP"]
    assert poll(lambda: _answers_at(node_ip, host_port), timeout=30, what="the hostPort") == \
        f"{name} {running['status']['podIP']}"


def test_no_host_port_takes_the_apis_address(plane, tmp_path):
    """A hostPort DNATs every connection to its port: on the API's, it would take the API from its
    clients. The pod waits, as kube-scheduler's NodePorts filter words it, and the API answers."""
    namespace = "hostport-api"
    _apply(plane, tmp_path, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    api_port = int(plane.endpoint()[0].rsplit(":", 1)[1])
    pod = _server_pod("squatter")
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": api_port}]
    _apply(plane, tmp_path, pod)
    said = poll(lambda: next((e["message"] for e in json.loads(plane.cli(
        "get", "events", "-n", namespace, "-o", "json").stdout)["items"] if e["reason"] == "FailedScheduling"), None),
        timeout=60, what="the pod's FailedScheduling event")
    assert said == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    got = json.loads(plane.cli("get", "pod", "squatter", "-n", namespace, "-o", "json").stdout)
    assert got["status"]["phase"] == "Pending"  # and the API still answered that


def _answers_at(ip: str, port: int) -> str | None:
    try:
        return _get(ip, port)
    except OSError:
        return None
