"""Services forwarded by nftables (kube-proxy's nftables mode): real nft, real network namespaces."""

from __future__ import annotations

import collections
import os
import subprocess

import pytest

from tests.network.netlab import Lab, host_address
from trimaran.runtime.network import (
    ProxiedService,
    ServicePort,
    apply_table,
    proxy_rules,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft and network namespaces")


def _apply(lab: Lab, table: str, services: list[ProxiedService]) -> None:
    apply_table(table, proxy_rules(services, bridge=lab.bridge, pod_cidr=lab.pod_cidr))


def test_cluster_ip_balances_across_backends_from_host_and_pods(lab):
    lab, table = lab
    backends = []
    for name in ("b0", "b1", "b2"):
        lab.add_pod(name)
        lab.serve(name, 8080)
        backends.append((lab.ip(name), 8080))
    lab.add_pod("client")
    vip = lab.service_ip(10)
    _apply(lab, table, [ProxiedService("ns", "web", vip, (ServicePort(80, endpoints=tuple(backends)),))])

    from_host = lab.connect(None, vip, 80, n=30)
    assert collections.Counter(a.split()[0] for a in from_host).keys() == {"b0", "b1", "b2"}, from_host
    from_pod = lab.connect("client", vip, 80, n=30)
    assert collections.Counter(a.split()[0] for a in from_pod).keys() == {"b0", "b1", "b2"}, from_pod
    # A pod's own address reaches the backend unchanged (no SNAT between pods).
    assert {a.split()[1] for a in from_pod} == {lab.ip("client")}

    # Hairpin: a backend reaching its own Service, and landing on itself, is answered (masqueraded).
    answers = lab.connect("b0", vip, 80, n=40)
    assert all(a.split()[0] in {"b0", "b1", "b2"} for a in answers), answers
    assert "b0" in {a.split()[0] for a in answers}

    # A port the Service does not have is refused, not black-holed.
    assert lab.connect("client", vip, 81) == ["ConnectionRefusedError"]

    # Endpoints follow: one left.
    _apply(lab, table, [ProxiedService("ns", "web", vip, (ServicePort(80, endpoints=(backends[1],)),))])
    assert {a.split()[0] for a in lab.connect("client", vip, 80, n=10)} == {"b1"}


def test_service_without_endpoints_refuses(lab):
    lab, table = lab
    lab.add_pod("client")
    vip = lab.service_ip(11)
    _apply(lab, table, [ProxiedService("ns", "empty", vip, (ServicePort(80, node_port=30999),))])
    assert lab.connect(None, vip, 80) == ["ConnectionRefusedError"]
    assert lab.connect("client", vip, 80) == ["ConnectionRefusedError"]
    assert lab.connect(None, host_address(), 30999) == ["ConnectionRefusedError"]


def test_node_port_and_load_balancer_from_host(lab):
    lab, table = lab
    lab.add_pod("b0")
    lab.serve("b0", 9000)
    lab.add_pod("client")
    vip, lb = lab.service_ip(12), lab.service_ip(200)
    _apply(lab, table, [ProxiedService("ns", "lb", vip, (ServicePort(80, node_port=30123,
                                                                     endpoints=((lab.ip("b0"), 9000),)),),
                                       load_balancer_ips=(lb,))])
    assert lab.connect(None, host_address(), 30123)[0].startswith("b0 ")
    assert lab.connect(None, lb, 80)[0].startswith("b0 ")
    assert lab.connect("client", lb, 80)[0].startswith("b0 ")
    assert lab.connect("client", host_address(), 30123)[0].startswith("b0 ")


def test_client_ip_affinity_sticks(lab):
    lab, table = lab
    backends = []
    for name in ("b0", "b1", "b2"):
        lab.add_pod(name)
        lab.serve(name, 8080)
        backends.append((lab.ip(name), 8080))
    lab.add_pod("client")
    vip = lab.service_ip(13)
    _apply(lab, table, [ProxiedService("ns", "sticky", vip, (ServicePort(80, endpoints=tuple(backends)),),
                                       affinity_timeout=60)])
    assert len({a.split()[0] for a in lab.connect("client", vip, 80, n=15)}) == 1


def test_udp_service(lab):
    lab, table = lab
    lab.add_pod("b0")
    lab.serve("b0", 5300)
    lab.add_pod("client")
    vip = lab.service_ip(14)
    _apply(lab, table, [ProxiedService("ns", "u", vip, (ServicePort(53, "UDP", endpoints=((lab.ip("b0"), 5300),)),))])
    code = ("import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(3);"
            "s.sendto(b'x',(sys.argv[1],53)); print(s.recv(100).decode())")
    out = lab.exec("client", ["python3", "-c", code, vip], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "b0"


def test_failed_load_keeps_the_old_rules(lab):
    lab, table = lab
    lab.add_pod("b0")
    lab.serve("b0", 8080)
    vip = lab.service_ip(15)
    _apply(lab, table, [ProxiedService("ns", "web", vip, (ServicePort(80, endpoints=((lab.ip("b0"), 8080),)),))])
    with pytest.raises(RuntimeError, match="nft"):
        apply_table(table, "chain broken { nonsense }\n")
    assert lab.connect(None, vip, 80)[0].startswith("b0 ")
    assert subprocess.run(["nft", "list", "table", "inet", table], capture_output=True).returncode == 0


def test_what_is_not_an_address_stays_out_of_the_rules():
    text = proxy_rules([ProxiedService("ns", "a", "10.0.0.1 } flush ruleset", (ServicePort(80),)),
                        ProxiedService("ns", "b", "10.0.0.2", (ServicePort(80, endpoints=(("1.2.3.4; x", 80),
                                                                                           ("10.1.0.1", 80))),),
                                       load_balancer_ips=("evil {",))],
                       bridge="br", pod_cidr="10.1.0.0/24")
    assert "flush" not in text and "evil" not in text and "1.2.3.4" not in text and "10.0.0.1" not in text
    assert "dnat ip to 10.1.0.1:80" in text
