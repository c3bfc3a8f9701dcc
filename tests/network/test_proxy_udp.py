"""UDP and SCTP Service ports, as kube-proxy's nftables mode forwards them, and the deletion of UDP
flows to removed endpoints: real nft, real conntrack, real network namespaces."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.network.netlab import Lab, host_address
from trimaran.runtime.network import ProxiedService, ServicePort, apply_table
from trimaran.runtime.network._nft import list_table
from trimaran.runtime.network._proxy import delete_flows, proxy_rules, sctp_sockets, stale_udp_flows

root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft and network namespaces")


def _apply(lab: Lab, table: str, services: list[ProxiedService]) -> None:
    apply_table(table, proxy_rules(services, bridge=lab.bridge, pod_cidr=lab.pod_cidr,
                                   service_cidr=lab.service_cidr))


def test_rules_key_every_protocol_apart():
    text = proxy_rules([ProxiedService("kube-system", "dns", "10.96.0.10", (
        ServicePort(53, "UDP", 30053, (("10.1.0.5", 5353),)),
        ServicePort(53, "TCP", 30053, (("10.1.0.6", 5353),)),
        ServicePort(3868, "SCTP", endpoints=(("10.1.0.7", 3868),)),
    ))], bridge="br", pod_cidr="10.1.0.0/24")
    for proto in ("udp", "tcp", "sctp"):
        assert f"10.96.0.10 . {proto} . " in text
        assert f"meta l4proto {proto} dnat ip to " in text
    assert "udp . 30053 : goto" in text and "tcp . 30053 : goto" in text
    assert 'comment "kube-system/dns:53/udp"' in text and 'comment "kube-system/dns:53/tcp"' in text


def test_stale_udp_flows_are_the_removed_endpoints_of_udp_ports():
    def svc(udp: tuple, tcp: tuple = ()) -> ProxiedService:
        return ProxiedService("ns", "dns", "10.96.0.10", (ServicePort(53, "UDP", 30053, udp),
                                                          ServicePort(53, "TCP", None, tcp)),
                              load_balancer_ips=("10.96.4.1",))
    a, b = ("10.1.0.5", 5353), ("10.1.0.6", 5353)
    assert stale_udp_flows([svc((a, b), (a,))], [svc((a, b))]) == []  # a TCP endpoint's flows end with it
    assert stale_udp_flows([svc((a,))], [svc((a, b))]) == []
    endpoint = ("--reply-src", "10.1.0.5", "--reply-port-src", "5353")
    expected = [("-p", "udp", "--orig-dst", "10.96.0.10", "--orig-port-dst", "53", *endpoint),
                ("-p", "udp", "--orig-dst", "10.96.4.1", "--orig-port-dst", "53", *endpoint),
                ("-p", "udp", "--orig-port-dst", "30053", *endpoint)]
    assert stale_udp_flows([svc((a, b))], [svc((b,))]) == expected
    assert stale_udp_flows([svc((a,))], []) == expected  # the Service is gone
    # Same pod, another target port: the flows to the old port are stale.
    assert stale_udp_flows([svc((a,))], [svc((("10.1.0.5", 5354),))]) == expected


@root
def test_udp_and_tcp_on_one_port_number_reach_their_own_endpoints(lab):
    lab, table = lab
    for name in ("tcp", "udp"):
        lab.add_pod(name)
        lab.serve(name, 5300)  # each answers both protocols with its name
    lab.add_pod("client")
    vip, lb = lab.service_ip(20), lab.service_ip(200)
    _apply(lab, table, [ProxiedService("ns", "dns", vip, (
        ServicePort(53, "UDP", 30153, ((lab.ip("udp"), 5300),)),
        ServicePort(53, "TCP", 30153, ((lab.ip("tcp"), 5300),)),
    ), load_balancer_ips=(lb,))])
    for source in ("client", None):
        assert lab.ask_udp(source, vip, 53, n=3) == ["udp"] * 3
        assert lab.connect(source, vip, 53)[0].startswith("tcp ")
        assert lab.ask_udp(source, lb, 53) == ["udp"]
    assert lab.ask_udp(None, host_address(), 30153) == ["udp"]
    assert lab.ask_udp("client", host_address(), 30153) == ["udp"]


@root
def test_udp_port_without_endpoints_is_refused(lab):
    lab, table = lab
    lab.add_pod("client")
    vip = lab.service_ip(21)
    _apply(lab, table, [ProxiedService("ns", "empty", vip, (ServicePort(53, "UDP", 30154),))])
    assert lab.ask_udp("client", vip, 53) == ["ConnectionRefusedError"]
    # The host's own datagram is rejected on the output hook, before it leaves: send() fails (EPERM).
    assert lab.ask_udp(None, vip, 53) == ["PermissionError"]
    assert lab.ask_udp(None, host_address(), 30154) == ["PermissionError"]
    assert lab.ask_udp("client", vip, 54) == ["ConnectionRefusedError"]  # a port the Service does not have


@root
@pytest.mark.skipif(shutil.which("conntrack") is None, reason="needs conntrack (Debian's package conntrack)")
def test_a_removed_udp_endpoint_loses_its_flows(lab):
    lab, table = lab
    for name in ("old", "new"):
        lab.add_pod(name)
        lab.serve(name, 5300)
    lab.add_pod("client")
    vip = lab.service_ip(22)
    before = [ProxiedService("ns", "dns", vip, (ServicePort(53, "UDP", endpoints=((lab.ip("old"), 5300),)),))]
    after = [ProxiedService("ns", "dns", vip, (ServicePort(53, "UDP", endpoints=((lab.ip("new"), 5300),)),))]
    _apply(lab, table, before)
    assert lab.ask_udp("client", vip, 53, sport=40053) == ["old"]
    assert lab.ask_udp(None, vip, 53, sport=40054) == ["old"]
    _apply(lab, table, after)
    # The rules alone do not move a flow: its DNAT is in its conntrack entry (why kube-proxy deletes them).
    assert lab.ask_udp("client", vip, 53, sport=40053) == ["old"]
    assert lab.ask_udp("client", vip, 53) == ["new"]  # a new flow follows the rules
    delete_flows(stale_udp_flows(before, after))
    assert lab.ask_udp("client", vip, 53, sport=40053) == ["new"]
    assert lab.ask_udp(None, vip, 53, sport=40054) == ["new"]


@root
def test_sctp_ports_load_and_say_whether_the_kernel_has_sctp(lab):
    lab, table = lab
    lab.add_pod("b0")
    vip = lab.service_ip(23)
    _apply(lab, table, [ProxiedService("ns", "sig", vip, (ServicePort(3868, "SCTP", 30868,
                                                                      ((lab.ip("b0"), 3868),)),))])
    assert f"{vip} . sctp . 3868" in list_table(table)
    # Whether pods can use it at all is the kernel's: without CONFIG_IP_SCTP no SCTP socket opens
    # (the Service reconciler says so in a Warning event); the rules load either way.
    assert sctp_sockets() == os.path.exists("/proc/net/sctp")
