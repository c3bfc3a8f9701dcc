"""The Service and NetworkPolicy reconcilers on a pod network: a real store, real nft rules, a real
dnsmasq and real network namespaces standing for the pods the store lists (nothing runs them
through the kubelet here: podnet does that)."""

from __future__ import annotations

import os
from pathlib import Path

import dns.message
import dns.query
import pytest

from tests.network.netlab import Lab, host_address, set_pod_ready, wait_until
from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.workloads.network import ClusterNetwork, NetworkPolicyReconciler, ensure_system_services
from trimaran.controllers.workloads.service import ServiceReconciler
from trimaran.runtime import LocalRuntime
from trimaran.runtime.network import apply_table, delete_table
from trimaran.runtime.network._nft import list_table, table_exists
from trimaran.store import SQLiteStore
from trimaran.store.base import WatchEvent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nft, dnsmasq and network namespaces")


def _pod(store: SQLiteStore, lab: Lab, name: str, labels: dict, ready: bool = True, **spec) -> None:
    lab.add_pod(name)
    lab.serve(name, 8080)
    container = {"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
    store.create(validate({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "team-a", "labels": labels},
                           "spec": {"containers": [container], **spec}}).object)
    set_pod_ready(store, lab, name, ready)



def _ask(server: str, name: str) -> set[str]:
    answer = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=3)
    return {r.to_text() for rrset in answer.answer for r in rrset}


def _settle(reconciler, key: Key) -> dict:
    for _ in range(5):  # each pass that writes the Service comes back once
        reconciler.reconcile(key)
    return reconciler.store.get(key.kind, key.namespace, key.name)


def test_services_dns_and_policies_on_the_pod_network(tmp_path: Path):
    lab = Lab()
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace("default")
    store.ensure_namespace("team-a")
    plan = lab.plan()
    network = ClusterNetwork(tmp_path / "home", plan)
    services = ServiceReconciler(store, LocalRuntime(tmp_path / "home"), network)
    policies = NetworkPolicyReconciler(store, network)
    dnsmasq = None
    # A table a dead home left for the same ranges (the ranges are reserved machine-wide, so it is stale).
    stale = f"trimaran-test-stale-{lab.tag}"
    apply_table(stale, "", network._comment)
    try:
        for i in range(3):
            _pod(store, lab, f"web-{i}", {"app": "web"})
        _pod(store, lab, "trainer-0", {"job": "t"}, hostname="trainer-0", subdomain="workers")
        lab.add_pod("client")
        ensure_system_services(store, network, api_port=6443)
        list(services.initial_keys())
        dnsmasq = network.dns.pid
        assert not table_exists(stale)
        for name, spec in (("web", {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}),
                           ("web-lb", {"type": "LoadBalancer", "selector": {"app": "web"},
                                       "ports": [{"port": 80, "targetPort": 8080}]}),
                           ("workers", {"clusterIP": "None", "selector": {"job": "t"}, "ports": [{"port": 8080}]})):
            store.create(validate({"apiVersion": "v1", "kind": "Service",
                                   "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}).object)
        for key in (Key("Service", "kube-system", "kube-dns"), Key("Service", "default", "kubernetes")):
            _settle(services, key)
        web = _settle(services, Key("Service", "team-a", "web"))
        lb = _settle(services, Key("Service", "team-a", "web-lb"))
        _settle(services, Key("Service", "team-a", "workers"))

        vip = web["spec"]["clusterIP"]
        assert network._comment in list_table(network.table)
        assert vip in {lab.service_ip(n) for n in range(2, 128)}
        endpoints = store.get("Endpoints", "team-a", "web")
        assert {a["ip"] for s in endpoints["subsets"] for a in s["addresses"]} == {
            lab.ip(f"web-{i}") for i in range(3)}
        assert {a.split()[0] for a in lab.connect("client", vip, 80, n=30)} == {"web-0", "web-1", "web-2"}

        # Readiness: a pod that is not Ready gets no traffic.
        set_pod_ready(store, lab, "web-2", False)
        for name in ("web", "web-lb"):  # the pod's event wakes both
            _settle(services, Key("Service", "team-a", name))
        assert {a.split()[0] for a in lab.connect("client", vip, 80, n=20)} == {"web-0", "web-1"}

        # LoadBalancer: its own address and a node port, from the host.
        lb_ip = lb["status"]["loadBalancer"]["ingress"][0]["ip"]
        node_port = lb["spec"]["ports"][0]["nodePort"]
        assert lb_ip in {lab.service_ip(n) for n in range(128, 255)} and 30000 <= node_port <= 32767
        assert lab.connect(None, lb_ip, 80)[0].split()[0] in {"web-0", "web-1"}
        assert lab.connect(None, host_address(), node_port)[0].split()[0] in {"web-0", "web-1"}

        # DNS, at the kube-dns ClusterIP from a pod (through the DNAT) and at the gateway.
        code = ("import dns.message, dns.query, sys; a = dns.query.udp(dns.message.make_query(sys.argv[1], 'A'), "
                "sys.argv[2], timeout=3); print(' '.join(sorted(r.to_text() for s in a.answer for r in s)))")
        wait_until(lambda: _ask(lab.gateway, "web.team-a.svc.cluster.local") == {vip})
        out = lab.exec("client", [str(Path(".venv/bin/python").absolute()), "-c", code,
                                  "web.team-a.svc.cluster.local", plan.dns_ip], capture_output=True, text=True)
        assert out.stdout.split() == [vip], out.stderr
        assert _ask(lab.gateway, "kubernetes.default.svc.cluster.local") == {plan.api_ip}
        assert _ask(lab.gateway, "workers.team-a.svc.cluster.local") == {lab.ip("trainer-0")}
        assert _ask(lab.gateway, "trainer-0.workers.team-a.svc.cluster.local") == {lab.ip("trainer-0")}

        # A Service without a selector follows the Endpoints its owner writes (their event wakes it).
        store.create(validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "manual", "namespace":
                               "team-a"}, "spec": {"ports": [{"port": 81, "targetPort": 8080}]}}).object)
        manual = Key("Service", "team-a", "manual")
        services.keys_for_event(WatchEvent("ADDED", store.get("Service", "team-a", "manual"), 0))
        manual_ip = _settle(services, manual)["spec"]["clusterIP"]
        assert lab.connect("client", manual_ip, 81) == ["ConnectionRefusedError"]
        endpoints = store.create({"apiVersion": "v1", "kind": "Endpoints",
                                  "metadata": {"name": "manual", "namespace": "team-a"},
                                  "subsets": [{"addresses": [{"ip": lab.ip("web-1")}], "ports": [{"port": 8080}]}]})
        assert services.keys_for_event(WatchEvent("ADDED", endpoints, 0)) == [manual]
        assert services.keys_for_event(WatchEvent("ADDED", store.get("Endpoints", "team-a", "web"), 0)) == []
        services.reconcile(manual)
        assert lab.connect("client", manual_ip, 81)[0].startswith("web-1 ")

        # NetworkPolicy: deny all ingress in team-a; the client (no pod of the store: the host's
        # idea of "another namespace's pod" is any other address) is cut off.
        store.create(validate({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                               "metadata": {"name": "deny", "namespace": "team-a"},
                               "spec": {"podSelector": {}}}).object)
        policies.reconcile(next(iter(policies.initial_keys())))
        assert lab.connect("client", vip, 80, timeout=1.0) == ["TimeoutError"]  # dropped: no such address
        store.delete("NetworkPolicy", "team-a", "deny")
        policies.reconcile(next(iter(policies.initial_keys())))
        assert lab.connect("client", vip, 80)[0].split()[0] in {"web-0", "web-1"}

        # The Service goes, and its forwarding with it.
        store.delete("Service", "team-a", "web")
        services.reconcile(Key("Service", "team-a", "web"))
        assert lab.connect("client", vip, 80, timeout=1.0) == ["TimeoutError"]  # dropped: no such address
    finally:
        services.shutdown()
        network.remove()
        delete_table(stale)
        store.close()
        lab.close()
    assert not table_exists(network.table)
    assert dnsmasq is not None and _gone(dnsmasq)
    assert lab.leftovers() == []


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_restarted_control_plane_keeps_the_services_until_it_has_seen_them(tmp_path: Path):
    """Pods outlive their control plane: its table stays, and the next one replaces it only once every
    stored Service has had a pass (an empty table in between would cut the pods' Services)."""
    lab = Lab()
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace("team-a")
    plan = lab.plan()
    first = ClusterNetwork(tmp_path / "home", plan)
    second = ClusterNetwork(tmp_path / "home", plan)
    try:
        _pod(store, lab, "web-0", {"app": "web"})
        lab.add_pod("client")
        spec = {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
        store.create(validate({"apiVersion": "v1", "kind": "Service",
                               "metadata": {"name": "web", "namespace": "team-a"}, "spec": spec}).object)
        services = ServiceReconciler(store, LocalRuntime(tmp_path / "home"), first)
        keys = list(services.initial_keys())
        vip = _settle(services, keys[0])["spec"]["clusterIP"]
        assert lab.connect("client", vip, 80)[0].startswith("web-0 ")
        services.shutdown()  # the control plane stops; its pods and their Services stay

        again = ServiceReconciler(store, LocalRuntime(tmp_path / "home"), second)
        keys = list(again.initial_keys())
        assert lab.connect("client", vip, 80)[0].startswith("web-0 ")  # not yet synced: the old table
        again.reconcile(keys[0])
        assert lab.connect("client", vip, 80)[0].startswith("web-0 ")
        again.shutdown()
    finally:
        second.remove()
        store.close()
        lab.close()
    assert not table_exists(first.table)
    assert lab.leftovers() == []
