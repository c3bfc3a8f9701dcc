"""A JobSet on the pod network, as upstream's: its headless Service, and pods that reach each other
as ``<host>.<subdomain>`` through the cluster DNS at their own IPs. A real control plane, real
network namespaces and dnsmasq; skipped where the control plane runs without a pod network (not
root, no CNI plugins)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.helpers import pod_network_on, poll

PORT = 7000  # fixed: each pod binds its own address, as on a cluster
# Pod index 0 serves once; pod index 1 connects to it by <host>.<subdomain>, tries again until the
# name resolves (pod 0's address joins the cluster DNS once it runs), and prints what it was told.
SCRIPT = textwrap.dedent(f"""
    import os, socket, time
    if os.environ["JOB_COMPLETION_INDEX"] == "0":
        server = socket.create_server(("0.0.0.0", {PORT}))
        server.settimeout(90)
        conn, peer = server.accept()
        conn.sendall(("from " + socket.getfqdn() + " to " + peer[0]).encode()); conn.close()
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection(("dns-peers-0-0.mesh", {PORT}), timeout=2); break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        print(conn.recv(256).decode(), "via", conn.getpeername()[0], "as", conn.getsockname()[0], flush=True)
""")


@pytest.fixture
def network_plane(plane):
    if not pod_network_on(plane.home):
        pytest.skip("this control plane runs without a pod network (needs root and the CNI plugins)")
    return plane


def test_jobset_pods_reach_each_other_by_hostname_through_the_cluster_dns(network_plane, tmp_path: Path) -> None:
    plane = network_plane
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "dns"},
              "spec": {"network": {"subdomain": "mesh"}, "replicatedJobs": [{"name": "peers", "template": {"spec": {
                  "completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                  "template": {"spec": {"restartPolicy": "Never", "containers": [
                      {"name": "main", "image": "python", "command": ["python", "-c", SCRIPT]}]}}}}}]}}
    path = tmp_path / "jobset.json"
    path.write_text(json.dumps(jobset))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "jobset/dns", "--for=condition=Completed", "--timeout=120s")

    svc = plane.get("Service", "mesh")
    owner = plane.get("JobSet", "dns")["metadata"]["uid"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "dns"}
    assert [(o["kind"], o["uid"]) for o in svc["metadata"]["ownerReferences"]] == [("JobSet", owner)]

    pods = {p["spec"]["hostname"]: p for p in json.loads(plane.cli("get", "pods", "-o", "json").stdout)["items"]}
    assert sorted(pods) == ["dns-peers-0-0", "dns-peers-0-1"]
    assert {p["spec"]["subdomain"] for p in pods.values()} == {"mesh"}
    server, client = (pods[h]["status"]["podIP"] for h in ("dns-peers-0-0", "dns-peers-0-1"))
    assert server != client
    # No loopback names were handed down: the name was the cluster DNS's answer, the server's own IP.
    for pod in pods.values():
        assert "dns-peers-0-0.mesh" not in json.loads(pod["metadata"]["annotations"].get("trimaran.io/hosts") or "{}")
    said = plane.log(pods["dns-peers-0-1"]["metadata"]["name"]).strip()
    # The server's own name is the kubelet's fully qualified one, from its /etc/hosts (hostname -f).
    assert said == f"from dns-peers-0-0.mesh.default.svc.cluster.local to {client} via {server} as {client}", said

    plane.cli("delete", "jobset", "dns", "--wait", timeout=120)

    def service_gone() -> bool:
        return plane.cli("get", "service", "mesh", check=False).returncode != 0
    poll(service_gone, timeout=60, what="the JobSet's headless Service removed with it")
