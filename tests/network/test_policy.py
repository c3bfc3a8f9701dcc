"""NetworkPolicy enforced by nftables between pods' network namespaces: real nft, real traffic."""

from __future__ import annotations

import os

import pytest

from tests.network.netlab import Lab
from trimaran.runtime.network import (
    ProxiedService,
    ServicePort,
    apply_table,
    delete_table,
    ensure_bridge_netfilter,
    policy_rules,
    proxy_rules,
)
from trimaran.runtime.network._nft import table_exists

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft and network namespaces")

BLOCKED = ["TimeoutError"]  # dropped, as upstream implementations do


def _pod(lab: Lab, name: str, namespace: str, labels: dict[str, str], port: int = 8080) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"phase": "Running", "podIP": lab.ip(name)}}


def _ns(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def _policy(name: str, namespace: str, spec: dict) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


class World:
    def __init__(self, lab: Lab, table: str) -> None:
        self.lab, self.table = lab, table
        self.pods = []
        for name, ns, labels in (("a0", "team-a", {"app": "web"}), ("a1", "team-a", {"app": "other"}),
                                 ("b0", "team-b", {"role": "client"}), ("b1", "team-b", {})):
            lab.add_pod(name)
            lab.serve(name, 8080)
            self.pods.append(_pod(lab, name, ns, labels))
        self.namespaces = [_ns("team-a", team="a"), _ns("team-b", team="b")]
        self.vip = lab.service_ip(20)

    def enforce(self, *policies: dict) -> None:
        backend = ((self.lab.ip("a0"), 8080),)
        services = [ProxiedService("team-a", "web", self.vip, (ServicePort(80, endpoints=backend),))]
        apply_table(self.table, proxy_rules(services, bridge=self.lab.bridge, pod_cidr=self.lab.pod_cidr)
                    + policy_rules(list(policies), self.pods, self.namespaces))

    def reach(self, source: str, target: str, port: int = 8080) -> bool:
        got = self.lab.connect(source, self.lab.ip(target), port, timeout=1.5)
        assert got == BLOCKED or got[0].startswith(target), got
        return got != BLOCKED


@pytest.fixture
def world():
    lab = Lab()
    table = f"trimaran-test-{lab.tag}"
    ensure_bridge_netfilter()
    try:
        yield World(lab, table)
    finally:
        delete_table(table)
        lab.close()
    assert not table_exists(table)
    assert lab.leftovers() == []


def test_deny_all_ingress_isolates_a_namespace_while_allowed_peers_connect(world):
    deny = _policy("deny-all", "team-a", {"podSelector": {}, "policyTypes": ["Ingress"]})
    world.enforce()
    assert world.reach("b0", "a0") and world.reach("a1", "a0")  # no policy: all allowed

    world.enforce(deny)
    assert not world.reach("b0", "a0")
    assert not world.reach("b1", "a1")
    assert not world.reach("a1", "a0")  # same namespace too
    assert world.reach("a0", "b0")  # team-b is not isolated; the reply passes
    assert world.lab.connect(None, world.lab.ip("a0"), 8080)[0].startswith("a0")  # the node reaches its pods
    # Through the Service, the pod behind it decides.
    assert world.lab.connect("b0", world.vip, 80, timeout=1.0) == BLOCKED

    # Policies add up: clients of team-b on the named port "http"; team-a's own pods to app=web.
    allow = _policy("allow-clients", "team-a", {
        "podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}},
                       "podSelector": {"matchLabels": {"role": "client"}}}],
             "ports": [{"protocol": "TCP", "port": "http"}]},
            {"from": [{"podSelector": {}}]},
        ]})
    world.enforce(deny, allow)
    assert world.reach("b0", "a0")
    assert world.lab.connect("b0", world.vip, 80)[0].startswith("a0")
    assert not world.reach("b1", "a0")  # in team-b, but not role=client
    assert world.reach("a1", "a0")  # same namespace, podSelector {}
    assert not world.reach("b0", "a1")  # a1 is only under deny-all


def test_ports_and_ip_blocks(world):
    lab = world.lab
    lab.serve("a0", 9090)
    only_9000s = _policy("ports", "team-a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [
        {"ports": [{"protocol": "TCP", "port": 9000, "endPort": 9100}]}]})
    world.enforce(only_9000s)
    assert world.reach("b0", "a0", 9090)
    assert not world.reach("b0", "a0", 8080)

    udp_only = _policy("udp", "team-a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [
        {"ports": [{"protocol": "UDP", "port": 8080}]}]})
    world.enforce(udp_only)
    assert not world.reach("b0", "a0", 8080)

    block = _policy("block", "team-a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [
        {"from": [{"ipBlock": {"cidr": lab.pod_cidr, "except": [f"{lab.ip('b1')}/32"]}}]}]})
    world.enforce(block)
    assert world.reach("b0", "a0")
    assert not world.reach("b1", "a0")


def test_egress_deny_blocks_and_egress_allow_opens(world):
    deny = _policy("deny-egress", "team-b", {"podSelector": {}, "policyTypes": ["Egress"]})
    world.enforce(deny)
    assert not world.reach("b0", "a0")
    assert not world.reach("b0", "b1")
    assert world.reach("a0", "b0")  # ingress to team-b is open; replies pass

    to_web = _policy("to-web", "team-b", {"podSelector": {"matchLabels": {"role": "client"}}, "egress": [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
                 "podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "http"}]}]})
    world.enforce(deny, to_web)
    assert world.reach("b0", "a0")
    assert not world.reach("b0", "a1")
    assert not world.reach("b1", "a0")


def test_policy_naming_nothing_selects_nothing(world):
    nothing = _policy("nothing", "team-a", {"podSelector": {"matchLabels": {"app": "absent"}},
                                            "policyTypes": ["Ingress", "Egress"]})
    peers_nothing = _policy("peers", "team-a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "absent"}}}]}]})
    world.enforce(nothing)
    assert world.reach("b0", "a0") and world.reach("a0", "b0")
    world.enforce(peers_nothing)
    assert not world.reach("b0", "a0") and not world.reach("a1", "a0")
    assert world.reach("b0", "a1")
