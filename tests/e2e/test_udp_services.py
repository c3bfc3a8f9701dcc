"""A UDP Service on a real control plane with the pod network on: an echo server behind a ClusterIP
Service's UDP port, asked from another pod by the Service's DNS name (a query of the cluster DNS,
itself a UDP Service) and by its ClusterIP, from one socket; after the echo pod is replaced the same
socket reaches the new pod (its flow to the old one is deleted from conntrack, as kube-proxy does).
Without the pod network (pods share the host's), a UDP port is served where its pod binds the
Service's own port number, and any other is a Warning event. Pods run only the stdlib."""

from __future__ import annotations

import json
import shutil
import socket
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.helpers import pod_network_on, poll

T = TypeVar("T")
NS = "udp-e2e"
# Echoes each datagram with the pod's name; a TCP listener only for the readiness probe.
ECHO = textwrap.dedent("""
    import os, socket, threading
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 5353))
    t = socket.socket(); t.bind(("0.0.0.0", 8081)); t.listen(8)
    def probes():
        while True:
            t.accept()[0].close()
    threading.Thread(target=probes, daemon=True).start()
    while True:
        data, peer = u.recvfrom(2048); u.sendto(os.environ["POD_NAME"].encode() + b" " + data, peer)
""")
# Every 0.3 s: NAME's A record from the nameserver of resolv.conf (a DNS query by hand), then one
# datagram to that address and one to the ClusterIP given, both from one socket bound to one port
# (as a resolver keeps its socket), printing one JSON line of what came back.
CLIENT = textwrap.dedent("""
    import json, random, socket, struct, sys, time
    name, cluster_ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    server = next(l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver"))

    def resolve(name):
        ident = random.randrange(65536)
        query = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + b"".join(
            bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0" + struct.pack(">HH", 1, 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as q:
            q.settimeout(2); q.sendto(query, (server, 53)); answer = q.recv(512)
        if answer[:2] != query[:2] or struct.unpack(">H", answer[6:8])[0] == 0:
            return None
        return socket.inet_ntoa(answer[-4:])  # one A record, last in the message

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 40053)); s.settimeout(1)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        out = {}
        try:
            out["dns"] = resolve(name)
        except OSError as e:
            out["dns"] = type(e).__name__
        for label, host in (("by_name", out["dns"]), ("by_ip", cluster_ip)):
            try:
                s.sendto(label.encode(), (host, port))
                while True:  # a late answer to an earlier datagram is skipped
                    data = s.recv(200).decode()
                    if data.endswith(" " + label):
                        out[label] = data.split()[0]
                        break
            except (OSError, TypeError) as e:
                out[label] = type(e).__name__
        print(json.dumps(out), flush=True)
        time.sleep(0.3)
""")


def _apply(plane, tmp_path: Path, *objs: dict) -> None:
    path = tmp_path / "objs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    plane.cli("apply", "-f", str(path))


def _lines(plane) -> list[dict]:
    out = plane.cli("logs", "pod/client", "-n", NS, check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _poll_lines(plane, predicate: Callable[[], T], what: str) -> T:
    try:
        return poll(predicate, timeout=90, interval=1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the client's last lines: {_lines(plane)[-3:]}") from None


@pytest.mark.skipif(shutil.which("conntrack") is None, reason="needs conntrack (Debian's package conntrack)")
def test_udp_service_echo_survives_the_pod_being_replaced(plane, tmp_path):
    if not pod_network_on(plane.home):
        pytest.skip("this control plane runs without a pod network (needs root and the CNI plugins)")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    echo = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo", "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "echo"}},
                     "template": {"metadata": {"labels": {"app": "echo"}}, "spec": {"containers": [{
                         "name": "echo", "image": "python", "command": ["python", "-c", ECHO],
                         "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                         "ports": [{"containerPort": 5353, "protocol": "UDP"}, {"containerPort": 8081}],
                         "readinessProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1}}]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": NS},
               "spec": {"selector": {"app": "echo"}, "ports": [
                   {"name": "echo", "port": 53, "protocol": "UDP", "targetPort": 5353},
                   {"name": "probe", "port": 53, "protocol": "TCP", "targetPort": 8081}]}}
    _apply(plane, tmp_path, namespace, echo, service)
    plane.cli("wait", "deployment/echo", "-n", NS, "--for=condition=Available", "--timeout=120s")
    vip = poll(lambda: plane.get("Service", "echo", NS)["spec"].get("clusterIP"), timeout=30, what="a ClusterIP")
    assert "53/UDP,53/TCP" in plane.cli("get", "svc", "echo", "-n", NS).stdout
    first = plane.client().list("Pod", NS, "app=echo")[0]["metadata"]["name"]

    client = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": NS},
              "spec": {"restartPolicy": "Never", "containers": [{
                  "name": "c", "image": "python",
                  "command": ["python", "-c", CLIENT, f"echo.{NS}.svc.cluster.local", vip, "53"]}]}}
    _apply(plane, tmp_path, client)
    answered = {"dns": vip, "by_name": first, "by_ip": first}
    _poll_lines(plane, lambda: answered in _lines(plane), f"{answered} from the client")

    plane.cli("delete", "pod", first, "-n", NS)
    plane.cli("wait", "deployment/echo", "-n", NS, "--for=condition=Available", "--timeout=120s")

    def the_new_pod() -> bool:
        return any(line["dns"] == vip and line.get("by_name") == line.get("by_ip") != first
                   and line["by_ip"].startswith("echo-") for line in _lines(plane))
    _poll_lines(plane, the_new_pod, "answers of the new echo pod, by name and by ClusterIP, on the client's socket")


def test_udp_without_the_pod_network_is_served_by_pods_binding_the_port_or_said_not_to_be(plane_with, tmp_path):
    plane = plane_with(TRIMARAN_POD_NETWORK="off")
    port = 47653  # a port of this machine: pods share its network
    echo = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "echo"}},
                     "template": {"metadata": {"labels": {"app": "echo"}}, "spec": {"containers": [{
                         "name": "echo", "image": "python",
                         # No readiness probe: its TCP listener takes any free port of the machine.
                         "command": ["python", "-c", ECHO.replace("5353", str(port)).replace("8081", "0")],
                         "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                         "ports": [{"containerPort": port, "protocol": "UDP"}]}]}}}}
    served = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": "default"},
              "spec": {"selector": {"app": "echo"}, "ports": [{"port": port, "protocol": "UDP"}]}}
    unserved = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo-53", "namespace": "default"},
                "spec": {"selector": {"app": "echo"}, "ports": [{"port": 53, "protocol": "UDP", "targetPort": port}]}}
    _apply(plane, tmp_path, echo, served, unserved)
    plane.cli("wait", "deployment/echo", "--for=condition=Available", "--timeout=120s")
    vip = poll(lambda: plane.get("Service", "echo")["spec"].get("clusterIP"), timeout=30, what="a ClusterIP")

    def echoed() -> str | None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1)
            s.sendto(b"hi", (vip, port))
            try:
                return s.recv(200).decode()
            except OSError:
                return None
    assert poll(echoed, timeout=30, what=f"an echo at {vip}:{port}").startswith("echo-")

    def warnings(name: str) -> list[str]:
        return [e["message"] for e in plane.client().events("Service", "default", name)
                if e["reason"] == "UnsupportedProtocol"]
    said = poll(lambda: warnings("echo-53"), timeout=30, what="echo-53's UnsupportedProtocol event")
    assert said[0].startswith("port 53/UDP is not forwarded: without the pod network"), said
    assert warnings("echo") == []

    # Through the API: 53/TCP beside 53/UDP is accepted, 53/UDP twice refused at its field path.
    dns = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "default"},
           "spec": {"selector": {"app": "dns"}, "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                          {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}
    _apply(plane, tmp_path, dns)
    assert "53/UDP,53/TCP" in plane.cli("get", "svc", "dns").stdout
    dns["metadata"]["name"] = "dns-twice"
    dns["spec"]["ports"][1]["protocol"] = "UDP"
    (tmp_path / "twice.json").write_text(json.dumps(dns))
    refused = plane.cli("apply", "-f", str(tmp_path / "twice.json"), check=False)
    assert refused.returncode != 0
    assert 'spec.ports[1]: Duplicate value: {"Name":"","Protocol":"UDP","AppProtocol":null,"Port":53' in (
        refused.stderr), refused.stderr
