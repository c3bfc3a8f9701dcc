"""A Service's addresses and node ports are checked at admission as kube-apiserver checks them: what
the nftables rules are written from must be an address and a port of the range."""

from __future__ import annotations

import re

import pytest

from trimaran.api import validate
from trimaran.api.errors import ManifestError


def _service(spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize(("spec", "message"), [
    ({"clusterIP": "10.0.0.1 } flush ruleset", "ports": [{"port": 80}]},
     'spec.clusterIP: Invalid value: "10.0.0.1 } flush ruleset": must be a valid IP address'),
    ({"selector": {"app": "a"}}, "spec.ports: Required value"),
    ({"ports": [{"port": 80, "nodePort": 30001}]},
     "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"),
    ({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]},
     "spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. "
     "The range of valid ports is 30000-32767"),
])
def test_refused(spec: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        validate(_service(spec))


def test_accepted() -> None:
    spec = validate(_service({"type": "LoadBalancer", "clusterIP": "10.96.0.20",
                              "ports": [{"port": 80, "nodePort": 30080}]})).object["spec"]
    assert spec["ports"][0]["nodePort"] == 30080 and spec["clusterIP"] == "10.96.0.20"
    assert validate(_service({"clusterIP": "None", "ports": [{"port": 80}]})).object["spec"]["clusterIP"] == "None"
    # A headless Service needs no port (JobSet's has none): its names resolve to the pods' addresses.
    assert "ports" not in validate(_service({"clusterIP": "None", "selector": {"app": "a"}})).object["spec"]


def test_kubectl_columns_show_the_load_balancer_address_and_node_ports() -> None:
    from trimaran.api.apps import SERVICE_COLUMNS

    def row(obj: dict) -> list[str]:
        return [str(c.value(obj)) for c in SERVICE_COLUMNS[:-1]]
    lb = {"spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.20",
                   "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}}
    assert row(lb) == ["LoadBalancer", "10.96.0.20", "<pending>", "80:30080/TCP"]
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "10.96.0.200", "ipMode": "VIP"}]}}
    assert row(lb)[2] == "10.96.0.200"
    assert row({"spec": {"clusterIP": "10.96.0.21", "ports": [{"port": 53, "protocol": "UDP"}]}}) == [
        "ClusterIP", "10.96.0.21", "<none>", "53/UDP"]


def test_one_port_number_serves_tcp_and_udp() -> None:
    ports = validate(_service({"ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                         {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                                         {"name": "sig", "port": 3868, "protocol": "SCTP"}]})).object["spec"]["ports"]
    assert [(p["port"], p["protocol"], p["targetPort"]) for p in ports] == [(53, "UDP", 53), (53, "TCP", 53),
                                                                           (3868, "SCTP", 3868)]


@pytest.mark.parametrize(("ports", "message"), [
    ([{"name": "a", "port": 53, "protocol": "UDP"}, {"name": "b", "port": 53, "protocol": "UDP"}],
     'spec.ports[1]: Duplicate value: {"Name":"","Protocol":"UDP","AppProtocol":null,"Port":53,"TargetPort":0,'
     '"NodePort":0}'),
    # An unset protocol is TCP.
    ([{"name": "a", "port": 80}, {"name": "b", "port": 80, "protocol": "TCP", "targetPort": 8080}],
     'spec.ports[1]: Duplicate value: {"Name":"","Protocol":"TCP"'),
    ([{"port": 53, "protocol": "ICMP"}],
     'spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"'),
])
def test_duplicate_or_unknown_protocol_port_refused(ports: list, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        validate(_service({"ports": ports}))


def test_node_port_repeats_only_across_protocols() -> None:
    both = [{"name": "a", "port": 53, "protocol": "UDP", "nodePort": 30053},
            {"name": "b", "port": 53, "protocol": "TCP", "nodePort": 30053}]
    assert validate(_service({"type": "NodePort", "ports": both}))
    with pytest.raises(ManifestError, match=re.escape("spec.ports[1].nodePort: Duplicate value: 30053")):
        validate(_service({"type": "NodePort", "ports": [both[0], {**both[1], "protocol": "UDP", "port": 54}]}))
