"""UDP and SCTP Service ports through the Service reconciler: on a pod network (a real store, real
nft rules, real conntrack, real network namespaces standing for the store's pods) and on the
host's network, where the control plane's proxy forwards TCP only and says so."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.network.netlab import Lab, host_address, set_pod_ready
from trimaran.api import validate
from trimaran.api.apps import SERVICE_COLUMNS
from trimaran.controllers.base import Key
from trimaran.controllers.workloads.network import ClusterNetwork
from trimaran.controllers.workloads.service import ServiceReconciler
from trimaran.runtime import LocalRuntime
from trimaran.runtime.network._proxy import sctp_sockets
from trimaran.store import SQLiteStore

DNS = {"selector": {"app": "dns"}, "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5300},
                                             {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5300}]}


def _pod(store: SQLiteStore, lab: Lab, name: str, ready: bool = True) -> None:
    lab.add_pod(name)
    lab.serve(name, 5300)  # answers TCP and UDP with its name
    store.create(validate({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "team-a", "labels": {"app": "dns"}},
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}).object)
    set_pod_ready(store, lab, name, ready)



def _settle(reconciler: ServiceReconciler, key: Key) -> dict:
    for _ in range(5):  # each pass that writes the Service comes back once
        reconciler.reconcile(key)
    return reconciler.store.get(key.kind, key.namespace, key.name)


def _create(store: SQLiteStore, name: str, spec: dict) -> Key:
    store.create(validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "team-a"},
                           "spec": spec}).object)
    return Key("Service", "team-a", name)


def _warnings(store: SQLiteStore, name: str) -> list[str]:
    return [e["message"] for e in store.list_events("Service", "team-a", name) if e["reason"] == "UnsupportedProtocol"]


@dataclass
class PodNetworkServices:
    lab: Lab
    store: SQLiteStore
    services: ServiceReconciler


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PodNetworkServices]:
    """The Service controller on a real store, writing real nft rules for a lab of pod namespaces."""
    lab = Lab()
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace("team-a")
    plan = lab.plan()
    network = ClusterNetwork(tmp_path / "home", plan)
    services = ServiceReconciler(store, LocalRuntime(tmp_path / "home"), network)
    try:
        yield PodNetworkServices(lab, store, services)
    finally:
        services.shutdown()
        network.remove()
        store.close()
        lab.close()
    assert lab.leftovers() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft and network namespaces")
@pytest.mark.skipif(shutil.which("conntrack") is None, reason="needs conntrack (Debian's package conntrack)")
def test_udp_service_on_the_pod_network(cluster: PodNetworkServices):
    lab, store, services = cluster.lab, cluster.store, cluster.services
    _pod(store, lab, "dns-0")
    _pod(store, lab, "dns-1", ready=False)
    lab.add_pod("client")
    list(services.initial_keys())
    key = _create(store, "dns", {**DNS, "type": "NodePort"})
    svc = _settle(services, key)
    vip, (udp, tcp) = svc["spec"]["clusterIP"], svc["spec"]["ports"]
    assert udp["nodePort"] == tcp["nodePort"]  # one number, one node port, as kube-apiserver gives
    assert SERVICE_COLUMNS[3].value(svc) == f"53:{udp['nodePort']}/UDP,53:{udp['nodePort']}/TCP"  # PORT(S)
    subsets = store.get("Endpoints", "team-a", "dns")["subsets"]
    assert [(p["name"], p["port"], p["protocol"]) for s in subsets for p in s["ports"]] == [
        ("dns", 5300, "UDP"), ("dns-tcp", 5300, "TCP")]

    assert lab.ask_udp("client", vip, 53, n=3, sport=40053) == ["dns-0"] * 3
    assert lab.connect("client", vip, 53)[0].startswith("dns-0 ")
    assert lab.ask_udp(None, host_address(), udp["nodePort"]) == ["dns-0"]

    # The endpoint is replaced: the client's flow (same socket) moves with it, by the conntrack flush.
    set_pod_ready(store, lab, "dns-0", False)
    set_pod_ready(store, lab, "dns-1", True)
    _settle(services, key)
    assert lab.ask_udp("client", vip, 53, n=3, sport=40053) == ["dns-1"] * 3
    assert _warnings(store, "dns") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft and network namespaces")
def test_sctp_service_says_when_the_kernel_has_no_sctp(cluster: PodNetworkServices):
    store, services = cluster.store, cluster.services
    list(services.initial_keys())
    _settle(services, _create(store, "sig", {"selector": {"app": "sig"},
                                             "ports": [{"port": 3868, "protocol": "SCTP"}]}))
    warnings = _warnings(store, "sig")
    if sctp_sockets():
        assert warnings == []
    else:
        assert warnings == ["port 3868/SCTP: this machine's kernel has no SCTP (built without CONFIG_IP_SCTP, "
                            "or no sctp module), so no pod can open an SCTP socket to serve or call the Service "
                            "there"]


def test_udp_on_the_hosts_network_is_served_only_by_pods_binding_the_port(tmp_path: Path):
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace("team-a")
    services = ServiceReconciler(store, LocalRuntime(tmp_path / "home"))
    try:
        list(services.initial_keys())
        _settle(services, _create(store, "dns", DNS))
        assert _warnings(store, "dns") == [
            "port 53/UDP is not forwarded: without the pod network Services are served by a proxy of the control "
            "plane that forwards TCP only; a pod reaches this port only where the Service's pods bind port 53 "
            "themselves (targetPort = port), or on the pod network (a root control plane with the CNI plugins)"]
        # Said once, not at every pass.
        _settle(services, Key("Service", "team-a", "dns"))
        assert [e["count"] for e in store.list_events("Service", "team-a", "dns")
                if e["reason"] == "UnsupportedProtocol"] == [1]
        # The pods bind 53/UDP themselves and answer on the Service's loopback address: nothing to say.
        _settle(services, _create(store, "direct", {"selector": {"app": "dns"}, "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}))
        assert _warnings(store, "direct") == []
        # A port name says which number only once pods declare it: nothing to say before.
        _settle(services, _create(store, "named", {"selector": {"app": "dns"}, "ports": [
            {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}))
        assert _warnings(store, "named") == []
    finally:
        services.shutdown()
        store.close()
