"""Services, cluster DNS and NetworkPolicy on a real control plane with the pod network on: a
Deployment of 3 behind a ClusterIP and a LoadBalancer, names from the cluster DNS, and a namespace
that denies ingress, tried from inside another namespace's pods. Skipped where the control plane
runs without a pod network (not root, no CNI plugins)."""

from __future__ import annotations

import json
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import dns.message
import dns.query
import pytest

from tests.helpers import poll
from trimaran.runtime.network import table_name

SERVER = textwrap.dedent("""
    import http.server, os
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = os.environ["POD_NAME"].encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
""")
# Connects to each address given and prints one JSON line: address -> "ok" or the error's name.
# With --until-ok, tries again for a while: a new pod's address joins the policies' peer sets
# when the control plane sees it, a moment after the pod may already try (as with any CNI's policy).
CLIENT = textwrap.dedent("""
    import json, socket, sys, time
    retry = sys.argv[1] == "--until-ok"
    targets = sys.argv[2:] if retry else sys.argv[1:]
    deadline = time.monotonic() + 30
    while True:
        out = {}
        for target in targets:
            host, port = target.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=2).close(); out[target] = "ok"
            except OSError as e:
                out[target] = type(e).__name__
        if not retry or set(out.values()) == {"ok"} or time.monotonic() > deadline:
            break
    print(json.dumps(out))
""")


@pytest.fixture
def network_plane(plane):
    if not (plane.home / "network.json").exists():
        pytest.skip("this control plane runs without a pod network (needs root and the CNI plugins)")
    return plane


def _apply(plane, tmp_path: Path, *objs: dict) -> None:
    path = tmp_path / "objs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    plane.cli("apply", "-f", str(path))


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode()
    except OSError:
        return None


def _ask(server: str, name: str) -> set[str]:
    answer = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=3)
    return {r.to_text() for rrset in answer.answer for r in rrset}


def _enforced(plane, text: str) -> None:
    """Wait for the policy reconciler to have written ``text`` into the home's table."""
    table = table_name(str(plane.home))
    poll(lambda: text in subprocess.run(["nft", "list", "table", "inet", table], capture_output=True,
                                        text=True).stdout, timeout=30, what=f"{text!r} in {table}")


def _probe_from_pod(plane, tmp_path: Path, name: str, namespace: str, targets: list[str],
                    labels: dict | None = None) -> dict:
    labels = {"role": "client"} if labels is None else labels
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "c", "image": "python", "command": ["python", "-c", CLIENT, *targets]}]}}}}
    _apply(plane, tmp_path, job)
    plane.cli("wait", f"job/{name}", "-n", namespace, "--for=condition=Complete", "--timeout=120s")
    return json.loads(plane.cli("logs", f"job/{name}", "-n", namespace).stdout.strip().splitlines()[-1])


def test_services_dns_and_network_policy_on_the_pod_network(network_plane, tmp_path):
    plane = network_plane
    plan = json.loads((plane.home / "network.json").read_text())
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"team": n}}}
                  for n in ("team-a", "team-b")]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{
                           "name": "web", "image": "python", "command": ["python", "-c", SERVER],
                           "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                           "ports": [{"containerPort": 8080}],
                           "readinessProbe": {"httpGet": {"port": 8080}, "periodSeconds": 1}}]}}}}
    services = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "team-a"},
                 "spec": {"type": kind, "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
                for name, kind in (("web", "ClusterIP"), ("web-lb", "LoadBalancer"))]
    _apply(plane, tmp_path, *namespaces, deploy, *services)
    plane.cli("wait", "deployment/web", "-n", "team-a", "--for=condition=Available", "--timeout=120s")

    web = plane.get("Service", "web", "team-a")
    vip = web["spec"]["clusterIP"]
    seen: set[str] = set()

    def all_three() -> bool:
        seen.add(_get(f"http://{vip}/") or "")
        return len({s for s in seen if s.startswith("web-")}) == 3
    poll(all_three, timeout=60, interval=0.02, what="the ClusterIP balancing over the 3 replicas")

    lb = poll(lambda: ((plane.get("Service", "web-lb", "team-a").get("status") or {}).get("loadBalancer") or {})
              .get("ingress"), timeout=30, what="the LoadBalancer's address")
    assert (_get(f"http://{lb[0]['ip']}/") or "").startswith("web-")

    assert _ask(plan["gateway"], "web.team-a.svc.cluster.local") == {vip}
    assert _ask(plan["gateway"], "kubernetes.default.svc.cluster.local") == {plan["api_ip"]}

    # From a pod of another namespace: the Service, the API at the `kubernetes` Service, DNS.
    targets = [f"{vip}:80", f"{plan['api_ip']}:443", f"{plan['dns_ip']}:53"]
    assert _probe_from_pod(plane, tmp_path, "before", "team-b", targets) == dict.fromkeys(targets, "ok")

    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-ingress", "namespace": "team-a"}, "spec": {"podSelector": {}}}
    _apply(plane, tmp_path, deny)
    _enforced(plane, "jump ingress-")
    pod_ip = plane.client().list("Pod", "team-a", "app=web")[0]["status"]["podIP"]
    got = _probe_from_pod(plane, tmp_path, "denied", "team-b", [f"{vip}:80", f"{pod_ip}:8080",
                                                                 f"{plan['api_ip']}:443"])
    assert got == {f"{vip}:80": "TimeoutError", f"{pod_ip}:8080": "TimeoutError", f"{plan['api_ip']}:443": "ok"}

    allow = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "from-b-clients", "namespace": "team-a"},
             "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [
                 {"namespaceSelector": {"matchLabels": {"team": "team-b"}},
                  "podSelector": {"matchLabels": {"role": "client"}}}]}]}}
    _apply(plane, tmp_path, allow)
    assert _probe_from_pod(plane, tmp_path, "allowed", "team-b", ["--until-ok", f"{vip}:80"]) == {f"{vip}:80": "ok"}
    # Another namespace's pods without role=client stay out.
    got = _probe_from_pod(plane, tmp_path, "unlabelled", "team-b", [f"{vip}:80"], labels={})
    assert got == {f"{vip}:80": "TimeoutError"}
