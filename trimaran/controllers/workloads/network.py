"""Services, cluster DNS and NetworkPolicy over the home's pod network (when podnet's plan is on).

`ClusterNetwork` holds what the Service and NetworkPolicy reconcilers computed (each Service's
forwarding and DNS records, the policies' chains) and writes it to the node: the home's nftables
table, replaced whole when any part changes (then the UDP flows still DNAT'd to a removed endpoint
are deleted from conntrack, as kube-proxy does), and the cluster DNS's hosts file (its dnsmasq is
started with the control plane and stopped with it). The table stays when the control plane
stops, as kube-proxy's rules do, so pods that outlive it keep their Services; the next control
plane replaces it from the store, and `ClusterNetwork.remove` takes it away with the network.

Addresses are kube-apiserver's: ClusterIPs from the plan's service CIDR (``default/kubernetes`` at
its first address, ``kube-system/kube-dns`` at the plan's ``dns_ip``, others from a digest of the
name, the next free one on a clash), node ports from 30000-32767 (a digest, the next free one). A
LoadBalancer Service gets an address of its own from the upper half of the service CIDR in
``status.loadBalancer.ingress``, forwarded like its ClusterIP: reachable from this machine and its
pods, and two Services (or two control planes) can both serve port 80, which the node's address
(k3s' ServiceLB) would not allow; its node ports serve other machines.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trimaran.api.apps import NODE_PORT_MAX, NODE_PORT_MIN
from trimaran.controllers.base import Key, Reconciler
from trimaran.runtime.network import (
    ClusterDns,
    DnsService,
    NetworkPlan,
    ProxiedService,
    apply_table,
    delete_flows,
    delete_table,
    ensure_bridge_netfilter,
    hosts_text,
    policy_rules,
    proxy_rules,
    stale_tables,
    stale_udp_flows,
    table_name,
)
from trimaran.store import AlreadyExists, Conflict, Store
from trimaran.store.base import WatchEvent

__all__ = ["ClusterNetwork", "NetworkPolicyReconciler", "ensure_system_services"]

log = logging.getLogger(__name__)

NODE_PORTS = range(NODE_PORT_MIN, NODE_PORT_MAX + 1)
_ALL = Key("NetworkPolicy", "", "")


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big")


class ClusterNetwork:
    def __init__(self, home: Path, plan: NetworkPlan) -> None:
        self.home, self.plan = Path(home), plan
        self.table = table_name(str(home))
        self.dns = ClusterDns(self.home / "dns", plan.gateway)
        self._lock = threading.Lock()
        self._services: dict[Key, tuple[ProxiedService | None, DnsService | None]] = {}
        self._policies = ""
        self._applied: str | None = None
        self._forwarded: list[ProxiedService] = []  # what the applied table forwards
        self._started = False
        self._synced = False
        # Marks the table as this range's (the range is this home's alone while it holds the plan).
        self._comment = f"trimaran services {plan.service_cidr} pods {plan.pod_cidr}"

    # -- addresses --------------------------------------------------------------------------------
    def cluster_ip(self, namespace: str, name: str, taken: set[str]) -> str:
        if (namespace, name) == ("default", "kubernetes"):
            return self.plan.api_ip
        if (namespace, name) == ("kube-system", "kube-dns"):
            return self.plan.dns_ip
        return self._free(namespace, name, taken, upper=False)

    def load_balancer_ip(self, namespace: str, name: str, taken: set[str]) -> str:
        return self._free(namespace, name, taken, upper=True)

    def _free(self, namespace: str, name: str, taken: set[str], upper: bool) -> str:
        net = ipaddress.ip_network(self.plan.service_cidr)
        half = net.num_addresses // 2
        reserved = {self.plan.api_ip, self.plan.dns_ip, *taken}
        start, size = (half, half - 1) if upper else (1, half - 1)  # skip the network and broadcast addresses
        first = _digest(str(self.home), namespace, name, str(upper)) % size
        for step in range(size):
            ip = str(net[start + (first + step) % size])
            if ip not in reserved:
                return ip
        raise RuntimeError(f"the service range {net} is full")

    @staticmethod
    def node_port(namespace: str, name: str, port: int, taken: set[int]) -> int:
        first = _digest(namespace, name, str(port)) % len(NODE_PORTS)
        for step in range(len(NODE_PORTS)):
            candidate = NODE_PORTS[(first + step) % len(NODE_PORTS)]
            if candidate not in taken:
                return candidate
        raise RuntimeError("no free node port in 30000-32767")

    # -- the node's state -------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            ensure_bridge_netfilter()
            for stale in stale_tables(self._comment, keep=self.table):
                log.warning("removing nftables table %s: left by a home that held %s before", stale,
                            self.plan.service_cidr)
                delete_table(stale)
            self.dns.start()

    def synced(self) -> None:
        """Every stored Service has been seen once: write the table. Until then the last control
        plane's table stays, so pods that outlived it keep their Services through a restart (as
        kube-proxy waits for its informers before its first sync)."""
        with self._lock:
            if not self._synced:
                self._synced = True
                self._flush()

    def set_service(self, key: Key, proxied: ProxiedService | None, dns: DnsService | None) -> None:
        with self._lock:
            if self._services.get(key) == (proxied, dns):
                return
            self._services[key] = (proxied, dns)
            self._flush()

    def drop_service(self, key: Key) -> None:
        with self._lock:
            if self._services.pop(key, None) is not None:
                self._flush()

    def set_policies(self, text: str) -> None:
        with self._lock:
            if text != self._policies:
                self._policies = text
                self._flush()

    def _flush(self) -> None:
        if not (self._started and self._synced):
            return
        entries = [self._services[k] for k in sorted(self._services, key=str)]
        forwarded = [p for p, _ in entries if p is not None]
        body = proxy_rules(forwarded, bridge=self.plan.bridge, pod_cidr=self.plan.pod_cidr,
                           service_cidr=self.plan.service_cidr) + self._policies
        if body != self._applied:
            apply_table(self.table, body, self._comment)
            self._applied = body
            # After the new rules, so a deleted flow's next packet is DNAT'd by them.
            delete_flows(stale_udp_flows(self._forwarded, forwarded))
        self._forwarded = forwarded
        self.dns.update(hosts_text(d for _, d in entries if d is not None))

    def stop(self) -> None:
        """The control plane stops: DNS goes with it, the rules stay for the pods."""
        self.dns.stop()

    def remove(self) -> None:
        """The pod network goes: no rule of this home is left."""
        self.dns.stop()
        delete_table(self.table)


def ensure_system_services(store: Store, network: ClusterNetwork, api_port: int) -> None:
    """``default/kubernetes`` (443 → the API server at the gateway) and ``kube-system/kube-dns``
    (53 → the cluster DNS at the gateway), with the Endpoints kube-apiserver and CoreDNS would have."""
    plan = network.plan
    store.ensure_namespace("kube-system")
    for namespace, name, ip, ports, target in (
            ("default", "kubernetes", plan.api_ip, [{"name": "https", "port": 443, "protocol": "TCP",
                                                     "targetPort": api_port}], api_port),
            ("kube-system", "kube-dns", plan.dns_ip, [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                                                      {"name": "dns-tcp", "port": 53, "protocol": "TCP",
                                                       "targetPort": 53}], 53)):
        labels = {"component": "apiserver", "provider": "kubernetes"} if name == "kubernetes" else {
            "k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": name, "namespace": namespace, "labels": labels},
                   "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ports": ports,
                            "sessionAffinity": "None"}}
        endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": name, "namespace": namespace, "labels": labels},
                     "subsets": [{"addresses": [{"ip": plan.gateway}],
                                  "ports": [{"name": p["name"], "port": target, "protocol": p["protocol"]}
                                            for p in ports]}]}
        for body in (endpoints, service):  # the Service's first pass finds its endpoints
            try:
                store.create(body)
            except AlreadyExists:
                current = store.get(body["kind"], namespace, name)
                field = "spec" if body["kind"] == "Service" else "subsets"
                if current.get(field) != body[field]:
                    current[field] = body[field]
                    try:
                        store.update(current)
                    except Conflict:
                        log.warning("%s %s/%s changed meanwhile; left as it is", body["kind"], namespace, name)


class NetworkPolicyReconciler(Reconciler):
    """Every NetworkPolicy, over the pods and namespaces they select, as one part of the home's
    table: any change of a policy, a pod or a namespace renders them all again (one key).

    Without a pod network (``network`` None, ``off_reason`` why) nothing can enforce a policy, as on
    a cluster whose network plugin does not: each policy gets a ``NotEnforced`` warning saying so,
    rather than a silence that reads as isolation."""

    name = "networkpolicy"
    kinds = ("NetworkPolicy",)
    watches = ("Pod", "Namespace")

    def __init__(self, store: Store, network: ClusterNetwork | None, off_reason: str | None = None) -> None:
        super().__init__(store)
        self.network = network
        self.off_reason = off_reason
        self._warned: set[str] = set()

    def initial_keys(self) -> Iterable[Key]:
        return [_ALL]

    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        if self.network is None and event.object.get("kind") != "NetworkPolicy":
            return []  # the pods a policy selects matter only where it is enforced
        return [_ALL]

    def reconcile(self, key: Key) -> float | None:
        policies: list[dict[str, Any]] = self.store.list("NetworkPolicy", shared=True)
        if self.network is None:
            self._warn(policies)
            return None
        if not policies:
            self.network.set_policies("")
            return None
        pods = self.store.list("Pod", shared=True)
        namespaces = self.store.list("Namespace", shared=True)
        self.network.set_policies(policy_rules(policies, pods, namespaces))
        return None

    def _warn(self, policies: list[dict[str, Any]]) -> None:
        uids = {p["metadata"]["uid"] for p in policies}
        self._warned &= uids
        for policy in policies:
            if policy["metadata"]["uid"] in self._warned:
                continue
            self.store.record_event(policy, "Warning", "NotEnforced",
                                    f"NetworkPolicy is not enforced on this node: pods share this machine's "
                                    f"network ({self.off_reason})")
            self._warned.add(policy["metadata"]["uid"])
