"""core v1 Service (ClusterIP): a loopback address of its own, names in every sandbox, a proxy.

Each Service gets ``spec.clusterIP`` in 127.1.0.1-127.254.255.254 (a digest of the home and the
Service's namespace/name, the next free one on a clash), so its ports are its own even where
another Service, or a pod, uses the same number. ``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc`` and
``<svc>.<ns>.svc.cluster.local`` resolve to it in every sandbox (``<svc>`` in the Service's own
namespace, as cluster DNS searches it): they go into the hosts of pods started later (the kubelet
asks `hosts_for`), and the node rewrites the hosts files of running pods in place
(``NodeAPI.update_service_hosts``: they are bound into the sandbox by inode).

Traffic to ``clusterIP:port`` goes through `ServiceProxy` to the ready pods behind the selector
(round-robin), at each pod's ``targetPort``: a number, or a container port's name, as the pod
declares it (a Deployment's per-pod port stands in for the declared number). When a selected pod
binds the Service's port itself (``port`` = ``targetPort``, a port fixed in its command), it
already answers on the Service's address through its wildcard bind, and the proxy stays out of
its way (binding there would take the port from the pod). A Service with no ready endpoint refuses
connections, as kube-proxy's reject rule does.

When the home has a pod network (podnet's plan: a ``ClusterNetwork`` is given), none of the above:
Services get addresses from the service CIDR, node ports and LoadBalancer addresses, and are
forwarded by nftables to ready pods' IPs, with cluster DNS for their names (see `network`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
from pathlib import Path

from trimaran.api.apps import selector_matches
from trimaran.api.discovery import MANAGED_BY_MIRRORING, MANAGED_BY_SLICES
from trimaran.api.labels import (
    ENDPOINTSLICE_MANAGED_BY_LABEL,
    HEADLESS_SERVICE_LABEL,
    SERVICE_NAME_LABEL,
    SKIP_MIRROR_LABEL,
)
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.conditions import is_true
from trimaran.controllers.pods import LOOPBACK, is_terminating, owner_reference, phase
from trimaran.controllers.probes import resolve_port
from trimaran.controllers.workloads.deployment import is_available
from trimaran.controllers.workloads.network import ClusterNetwork
from trimaran.controllers.workloads.proxy import Address, ServiceProxy
from trimaran.runtime import NodeAPI
from trimaran.runtime.network import DnsService, ProxiedService, ServicePort, sctp_sockets
from trimaran.store import AlreadyExists, Conflict, NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["ServiceReconciler", "cluster_ip_candidates", "service_names"]

log = logging.getLogger(__name__)

_SECOND, _THIRD, _FOURTH = 254, 256, 254
_SLICE_MANAGERS = (MANAGED_BY_SLICES, MANAGED_BY_MIRRORING)


def service_names(name: str, namespace: str) -> list[str]:
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def cluster_ip_candidates(home: Path | None, namespace: str, name: str) -> list[str]:
    """Addresses to try for a Service, first the one its digest (of the home and the name) names."""
    digest = int.from_bytes(hashlib.sha256(f"{home or ''}\0{namespace}/{name}".encode()).digest()[:8], "big")
    space = _SECOND * _THIRD * _FOURTH
    out = []
    for step in range(64):
        n = (digest + step * 7919) % space
        out.append(f"127.{1 + n // (_THIRD * _FOURTH)}.{n // _FOURTH % _THIRD}.{1 + n % _FOURTH}")
    return out


class ServiceReconciler(Reconciler):
    name = "service"
    kinds = ("Service",)
    # Endpoints: a Service without a selector forwards to (and mirrors into slices) those its owner writes.
    watches = ("Pod", "Endpoints")

    def __init__(self, store: Store, runtime: NodeAPI, network: ClusterNetwork | None = None, *,
                 home: Path | None = None) -> None:
        """``home`` (the control plane's) seeds the digest loopback clusterIPs are drawn by, so two
        homes on one machine pick apart."""
        super().__init__(store)
        self.runtime = runtime
        self.home = home
        self.network = network
        self.proxy = ServiceProxy()
        self._listening: dict[Key, set[Address]] = {}
        self._names: dict[Key, str] = {}  # the Services whose names are published, and their address
        self._said_empty: set[Key] = set()
        self._said_protocols: dict[Key, str] = {}
        self._unsynced: set[Key | None] | None = None  # stored Services not yet seen since start
        # Each Service's selector, kept from the watch: pod events are many, and mapping each to its
        # Services must not cost the watch thread a store query.
        self._selectors: dict[Key, dict[str, str]] = {}

    def initial_keys(self) -> list[Key]:
        if self.network is not None:
            self.network.start()
        services = self.store.list("Service", shared=True)
        self._selectors = {key_of(s): (s.get("spec") or {}).get("selector") or {} for s in services}
        self._unsynced = set(self._selectors)
        self._seen(None)
        return list(self._selectors)

    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if obj["kind"] == "Service":
            if event.type == "DELETED":
                self._selectors.pop(key_of(obj), None)
            else:
                self._selectors[key_of(obj)] = (obj.get("spec") or {}).get("selector") or {}
            return [key_of(obj)]
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] == "Endpoints":
            key = Key("Service", namespace, obj["metadata"]["name"])
            return [key] if self._selectors.get(key) == {} else []
        labels = obj["metadata"].get("labels") or {}
        return [key for key, selector in list(self._selectors.items())
                if key.namespace == namespace and selector and selector_matches({"matchLabels": selector}, labels)]

    def reconcile(self, key: Key) -> float | None:
        try:
            svc = self.store.get("Service", key.namespace, key.name)
        except NotFound:
            self._forget(key)
            self._seen(key)
            return None
        try:
            return self._reconcile(key, svc)
        finally:
            self._seen(key)

    def _seen(self, key: Key | None) -> None:
        """On the pod network: tell it once every Service stored at start has had its pass."""
        if self.network is None or self._unsynced is None:
            return
        self._unsynced.discard(key)
        if not self._unsynced:
            self._unsynced = None
            self.network.synced()

    def _reconcile(self, key: Key, svc: dict) -> float | None:
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            self._forget(key)
            return None
        if self.network is not None:
            return self._reconcile_on_network(key, svc)
        ip = spec.get("clusterIP")
        if not ip:
            ip = self._assign_ip(svc)
            if ip is None:
                return 0.05
        self._publish_names(key, LOOPBACK if ip == "None" else ip)
        if ip == "None":  # headless: the names lead to the pods, which all share loopback
            return None
        selector = spec.get("selector")
        if not selector:
            self._mirror_slices(svc)
            return None  # endpoints are the user's to manage; nothing to forward
        selected = [p for p in self.store.list("Pod", key.namespace, shared=True)
                    if selector_matches({"matchLabels": selector}, p["metadata"].get("labels"))]
        pods = [p for p in selected if not is_terminating(p)]
        self._say_if_empty(svc, selector, pods)
        self._write_endpoints(svc, pods)
        self._write_slices(svc, selected)
        wanted: set[Address] = set()
        unforwarded: list[str] = []
        for port in spec.get("ports") or []:
            address = (ip, int(port["port"]))
            target = port.get("targetPort", port["port"])
            if any(resolve_port(p, target) == address[1] and _pod_address(p) == LOOPBACK for p in pods):
                continue  # the pod binds this port itself and answers on every loopback address
            protocol = port.get("protocol", "TCP")
            if protocol != "TCP":
                # The proxy pipes TCP connections; a UDP or SCTP port is served only by pods that
                # bind the Service's own port number (above, once they run; a port name says which
                # number only once there are pods).
                if target != address[1] and (pods or isinstance(target, int)):
                    unforwarded.append(
                        f"port {address[1]}/{protocol} is not forwarded: without the pod network Services are "
                        f"served by a proxy of the control plane that forwards TCP only; a pod reaches this port "
                        f"only where the Service's pods bind port {address[1]} themselves (targetPort = port), "
                        f"or on the pod network (a root control plane with the CNI plugins)")
                continue
            ready = [p for p in pods if phase(p) == "Running" and
                     (spec.get("publishNotReadyAddresses") or is_available(p))]
            backends = [(_pod_address(p), t) for p, t in ((p, resolve_port(p, target)) for p in ready) if t]
            if backends:
                try:
                    self.proxy.set(address, backends)
                except OSError as exc:
                    self.store.record_event(svc, "Warning", "FailedToListen", _listen_failure(svc, address, exc))
                    continue
                wanted.add(address)
        for address in self._listening.get(key, set()) - wanted:
            self.proxy.drop(address)
        self._listening[key] = wanted
        self._say_protocols(svc, unforwarded + _sctp_notes(spec))
        return None

    def _write_endpoints(self, svc: dict, pods: list[dict]) -> None:
        """The Service's Endpoints object, as the endpoints controller keeps it: pods grouped by the
        ports they serve, ready ones under ``addresses``, the rest under ``notReadyAddresses``."""
        spec = svc["spec"]
        groups: dict[tuple, dict[str, list]] = {}
        for pod in pods:
            if phase(pod) != "Running":
                continue
            ports = tuple((p.get("name"), resolve_port(pod, p.get("targetPort", p["port"])), p.get("protocol", "TCP"))
                          for p in spec.get("ports") or [])
            if any(port is None for _, port, _ in ports):
                continue
            meta = pod["metadata"]
            address = {"ip": _pod_address(pod), "hostname": meta["name"],
                       "nodeName": (pod.get("spec") or {}).get("nodeName") or "localhost", "targetRef": {
                "kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}
            if self.network is not None:  # the pod's own address; a hostname only as upstream gives one
                pod_spec = pod.get("spec") or {}
                address["ip"] = (pod.get("status") or {}).get("podIP")
                if not address["ip"]:
                    continue
                address.pop("hostname")
                if pod_spec.get("hostname") and pod_spec.get("subdomain") == svc["metadata"]["name"]:
                    address["hostname"] = pod_spec["hostname"]
            ready = spec.get("publishNotReadyAddresses") or is_available(pod)
            group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
            group["addresses" if ready else "notReadyAddresses"].append(address)
        subsets = []
        for ports, group in groups.items():
            subset = {k: v for k, v in group.items() if v}
            subset["ports"] = [{**({"name": n} if n else {}), "port": port, "protocol": proto}
                               for n, port, proto in ports]
            subsets.append(subset)
        meta = svc["metadata"]
        try:
            current = self.store.get("Endpoints", meta["namespace"], meta["name"])
        except NotFound:
            current = None
        if current is not None and (current.get("subsets") or []) == subsets:
            return
        labels = dict(meta.get("labels") or {})
        body = {"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels,
                             "ownerReferences": [owner_reference(svc)]},
                "subsets": subsets}
        try:
            if current is None:
                self.store.create(body)
            else:
                current["subsets"] = subsets
                self.store.update(current)
        except (Conflict, AlreadyExists):
            self.wake(key_of(svc))  # written meanwhile: compare again

    def _write_slices(self, svc: dict, pods: list[dict]) -> None:
        """The Service's EndpointSlices, as the EndpointSlice controller keeps them beside Endpoints:
        one per address type and set of ports its pods serve (a placeholder without endpoints when
        none does), named ``<svc>-<random>``; every live pod that has an address is an endpoint,
        ready, serving and terminating as upstream's conditions say."""
        spec, meta = svc["spec"], svc["metadata"]
        # (address type, its ports' keys) -> (its ports, its endpoints)
        wanted: dict[tuple, tuple[list[dict], list[dict]]] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            address = self._slice_address(pod)
            if address is None:
                continue
            ports = [_slice_port(p, target) for p in spec.get("ports") or []
                     if (target := resolve_port(pod, p.get("targetPort", p["port"]))) is not None]
            serving = bool(spec.get("publishNotReadyAddresses")) or is_true(pod.get("status") or {}, "Ready")
            terminating = is_terminating(pod)
            pod_meta, pod_spec = pod["metadata"], pod.get("spec") or {}
            endpoint: dict = {"addresses": [address], "conditions": {
                "ready": bool(spec.get("publishNotReadyAddresses")) or serving and not terminating,
                "serving": serving, "terminating": terminating}}
            if pod_spec.get("hostname") and pod_spec.get("subdomain") == meta["name"]:
                endpoint["hostname"] = pod_spec["hostname"]
            endpoint["targetRef"] = {"kind": "Pod", "namespace": pod_meta["namespace"], "name": pod_meta["name"],
                                     "uid": pod_meta["uid"]}
            if pod_spec.get("nodeName"):
                endpoint["nodeName"] = pod_spec["nodeName"]
            family = "IPv6" if ":" in address else "IPv4"
            wanted.setdefault((family, tuple(map(_slice_port_key, ports))), (ports, []))[1].append(endpoint)
        if not wanted:  # upstream's placeholder: the Service's address type, no ports, no endpoints
            wanted[("IPv6" if ":" in (spec.get("clusterIP") or "") else "IPv4", ())] = ([], [])
        labels = {**(meta.get("labels") or {}), ENDPOINTSLICE_MANAGED_BY_LABEL: MANAGED_BY_SLICES}
        if spec.get("clusterIP") == "None":
            labels[HEADLESS_SERVICE_LABEL] = ""
        self._sync_slices(svc, wanted, labels, svc)

    def _mirror_slices(self, svc: dict) -> None:
        """A Service without a selector: its Endpoints (its owner's to write) mirrored into slices, as
        upstream's EndpointSlice mirroring controller does (owned by the Endpoints), unless they say
        ``skip-mirror``."""
        meta = svc["metadata"]
        try:
            endpoints = self.store.get("Endpoints", meta["namespace"], meta["name"])
        except NotFound:
            endpoints = {"metadata": {}}
        ep_labels = endpoints["metadata"].get("labels") or {}
        wanted: dict[tuple, tuple[list[dict], list[dict]]] = {}
        for subset in [] if ep_labels.get(SKIP_MIRROR_LABEL) == "true" else endpoints.get("subsets") or []:
            ports = [_slice_port(p, p["port"]) for p in subset.get("ports") or []]
            for ready, field in ((True, "addresses"), (False, "notReadyAddresses")):
                for address in subset.get(field) or []:
                    endpoint: dict = {"addresses": [address["ip"]], "conditions": {"ready": ready}}
                    endpoint.update({k: address[k] for k in ("hostname", "nodeName", "targetRef") if address.get(k)})
                    family = "IPv6" if ":" in address["ip"] else "IPv4"
                    wanted.setdefault((family, tuple(map(_slice_port_key, ports))), (ports, []))[1].append(endpoint)
        labels = {k: v for k, v in ep_labels.items() if k != SKIP_MIRROR_LABEL}
        self._sync_slices(svc, wanted, {**labels, ENDPOINTSLICE_MANAGED_BY_LABEL: MANAGED_BY_MIRRORING}, endpoints)

    def _sync_slices(self, svc: dict, wanted: dict[tuple, tuple[list[dict], list[dict]]], labels: dict,
                     owner: dict) -> None:
        """Make the Service's slices of one manager (``labels`` say which) those ``wanted`` (address
        type and port keys -> ports and endpoints): a slice that matches one is updated in place, a new
        one (owned by ``owner``) is created by ``generateName`` ``<svc>-``; the rest of the Service's
        slices are deleted."""
        meta = svc["metadata"]
        labels = {**labels, SERVICE_NAME_LABEL: meta["name"]}
        ours = labels[ENDPOINTSLICE_MANAGED_BY_LABEL]
        existing = [s for s in self.store.list("EndpointSlice", meta["namespace"],
                                               label_selector={SERVICE_NAME_LABEL: meta["name"]})
                    if (s["metadata"].get("labels") or {}).get(ENDPOINTSLICE_MANAGED_BY_LABEL) in _SLICE_MANAGERS]
        try:
            for current in existing:
                group = (current.get("addressType"), tuple(map(_slice_port_key, current.get("ports") or [])))
                mine = current["metadata"]["labels"][ENDPOINTSLICE_MANAGED_BY_LABEL] == ours
                if not mine or group not in wanted:
                    self.store.delete("EndpointSlice", meta["namespace"], current["metadata"]["name"])
                    continue
                endpoints = wanted.pop(group)[1] or None
                if current.get("endpoints") != endpoints or current["metadata"].get("labels") != labels:
                    current["endpoints"] = endpoints
                    current["metadata"]["labels"] = labels
                    self.store.update(current)
            for (family, _), (ports, endpoints) in wanted.items():
                self.store.create({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"], "labels": labels,
                                 "ownerReferences": [owner_reference(owner)]},
                    "addressType": family, "endpoints": endpoints or None, "ports": list(ports)})
        except (Conflict, AlreadyExists, NotFound):
            self.wake(key_of(svc))  # written meanwhile: compare again

    def _slice_address(self, pod: dict) -> str | None:
        """Where an endpoint is: on the pod network its IP once it has one, else loopback once it runs."""
        if phase(pod) in ("Succeeded", "Failed"):
            return None
        if self.network is not None:
            return (pod.get("status") or {}).get("podIP") or None
        return _pod_address(pod) if phase(pod) == "Running" else None

    def _assign_ip(self, svc: dict) -> str | None:
        meta = svc["metadata"]
        taken = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service", shared=True)}
        ip = next((c for c in cluster_ip_candidates(self.home, meta["namespace"], meta["name"])
                   if c not in taken), None)
        if ip is None:
            raise RuntimeError("no free loopback address for the Service")
        svc["spec"]["clusterIP"] = ip
        svc["spec"]["clusterIPs"] = [ip]
        try:
            self.store.update(svc)
        except (Conflict, NotFound):
            return None
        return ip

    def _say_protocols(self, svc: dict, notes: list[str]) -> None:
        """A Warning event for ports this node cannot serve, once per change of what it says."""
        key, message = key_of(svc), "; ".join(notes)
        if self._said_protocols.get(key, "") == message:
            return
        self._said_protocols[key] = message
        if message:
            self.store.record_event(svc, "Warning", "UnsupportedProtocol", message)

    def _say_if_empty(self, svc: dict, selector: dict[str, str], pods: list[dict]) -> None:
        key = key_of(svc)
        if pods:
            self._said_empty.discard(key)
            return
        if key not in self._said_empty:
            self._said_empty.add(key)
            words = ",".join(f"{k}={v}" for k, v in selector.items())
            self.store.record_event(svc, "Warning", "NoEndpoints",
                                    f"selector {words} matches no pods in namespace {key.namespace}: "
                                    f"the service has no endpoints")

    # -- names ------------------------------------------------------------------------------------
    def hosts_for(self, namespace: str) -> dict[str, str]:
        """Every Service's names a pod of ``namespace`` resolves: qualified ones, and the short
        names of its own namespace's Services."""
        out: dict[str, str] = {}
        for key, ip in list(self._names.items()):
            for name in service_names(key.name, key.namespace)[0 if key.namespace == namespace else 1:]:
                out[name] = ip
        return out

    def _publish_names(self, key: Key, ip: str) -> None:
        if self._names.get(key) == ip:
            return
        self._names[key] = ip
        self._rewrite_hosts()

    def _forget(self, key: Key) -> None:
        if self.network is not None:
            self.network.drop_service(key)
        for address in self._listening.pop(key, set()):
            self.proxy.drop(address)
        self._said_empty.discard(key)
        self._said_protocols.pop(key, None)
        if self._names.pop(key, None):
            self._rewrite_hosts()

    def _rewrite_hosts(self) -> None:
        """Bring the Services' lines of every running pod's /etc/hosts up to date."""
        for uid in self.runtime.running_pods():
            identity = self.runtime.pod_identity(uid)
            if identity is not None:
                self.runtime.update_service_hosts(uid, self.hosts_for(identity[0]))

    def shutdown(self) -> None:
        self.proxy.close()
        if self.network is not None:
            self.network.stop()

    # -- on the pod network -----------------------------------------------------------------------
    def _reconcile_on_network(self, key: Key, svc: dict) -> float | None:
        spec = svc["spec"]
        if self._allocate(svc):
            return None  # the write's event brings the Service back
        ip = spec["clusterIP"]
        selector = spec.get("selector")
        ports = spec.get("ports") or []
        # Per Service port: the ready endpoints; and every ready address (with its hostname) for DNS.
        targets: list[tuple[tuple[str, int], ...]] = []
        addresses: dict[str, str | None] = {}
        if selector:
            selected = [p for p in self.store.list("Pod", key.namespace, shared=True)
                        if selector_matches({"matchLabels": selector}, p["metadata"].get("labels"))]
            pods = [p for p in selected if not is_terminating(p)]
            self._say_if_empty(svc, selector, pods)
            self._write_endpoints(svc, pods)
            self._write_slices(svc, selected)
        else:
            self._mirror_slices(svc)
        subsets = self._endpoint_subsets(key)
        for port in ports:
            found = set()
            for subset in subsets:
                for sport in subset.get("ports") or []:
                    if sport.get("name") == port.get("name") and sport.get("protocol", "TCP") == port.get(
                            "protocol", "TCP"):
                        found |= {(a["ip"], int(sport["port"])) for a in subset.get("addresses") or []}
            targets.append(tuple(sorted(found)))
        for subset in subsets:
            for a in subset.get("addresses") or []:
                addresses[a["ip"]] = a.get("hostname")
        proxied = None
        if ip != "None":
            # Also in the pods' /etc/hosts, as off the pod network: names resolve even where a pod's
            # resolv.conf does not lead to the cluster DNS (hostNetwork pods, dnsPolicy Default).
            self._publish_names(key, ip)
            affinity = spec.get("sessionAffinity") == "ClientIP"
            timeout = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}).get("timeoutSeconds", 10800)
            lb = [i["ip"] for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
                  if i.get("ip")]
            proxied = ProxiedService(key.namespace, key.name, ip, tuple(
                ServicePort(int(p["port"]), p.get("protocol", "TCP"), p.get("nodePort"), t)
                for p, t in zip(ports, targets, strict=True)), tuple(lb), timeout if affinity else None)
        dns = DnsService(key.namespace, key.name, None if ip == "None" else ip,
                         tuple(sorted(addresses.items(), key=lambda a: a[0])))
        self.network.set_service(key, proxied, dns)
        self._say_protocols(svc, _sctp_notes(spec))
        return None

    def _endpoint_subsets(self, key: Key) -> list[dict]:
        try:
            return self.store.get("Endpoints", key.namespace, key.name).get("subsets") or []
        except NotFound:
            return []

    def _allocate(self, svc: dict) -> bool:
        """Give the Service what kube-apiserver would have at its creation: a ClusterIP from the
        service CIDR, node ports for NodePort and LoadBalancer; and a LoadBalancer its address in
        the status, as a cloud provider does. Whether the spec was written (and so comes back)."""
        spec, meta = svc["spec"], svc["metadata"]
        network = self.network
        changed = False
        if not spec.get("clusterIP"):
            taken = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service", shared=True)}
            ip = network.cluster_ip(meta["namespace"], meta["name"], taken)
            spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
            changed = True
        if spec.get("type") in ("NodePort", "LoadBalancer") and any(not p.get("nodePort") for p in spec["ports"]):
            taken_ports = {p.get("nodePort") for s in self.store.list("Service", shared=True)
                           for p in (s.get("spec") or {}).get("ports") or []}
            for port in spec["ports"]:
                if not port.get("nodePort"):
                    # Ports of one number (53/TCP, 53/UDP) share a node port, as kube-apiserver gives them.
                    shared = next((p["nodePort"] for p in spec["ports"]
                                   if p["port"] == port["port"] and p.get("nodePort")), None)
                    port["nodePort"] = shared or network.node_port(meta["namespace"], meta["name"], port["port"],
                                                                   taken_ports)
                    taken_ports.add(port["nodePort"])
            changed = True
        if changed:
            try:
                self.store.update(svc)
            except (Conflict, NotFound):
                pass  # changed or gone meanwhile: its event brings it back
            return True
        status = svc.get("status") or {}
        if spec.get("type") == "LoadBalancer" and not (status.get("loadBalancer") or {}).get("ingress"):
            taken = {i.get("ip") for s in self.store.list("Service", shared=True)
                     for i in (((s.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [])}
            taken |= {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service", shared=True)}
            lb_ip = network.load_balancer_ip(meta["namespace"], meta["name"], taken)
            svc["status"] = {**status, "loadBalancer": {"ingress": [{"ip": lb_ip, "ipMode": "VIP"}]}}
            try:
                svc.update(self.write_status(svc))
            except (Conflict, NotFound):
                return True
        return False


def _sctp_notes(spec: dict) -> list[str]:
    """What to say of the Service's SCTP ports where the kernel has no SCTP: the rules would forward
    them, but no pod could open an SCTP socket to serve or call one."""
    ports = [f"{p['port']}/SCTP" for p in spec.get("ports") or [] if p.get("protocol") == "SCTP"]
    if not ports or sctp_sockets():
        return []
    which = f"{'ports' if len(ports) > 1 else 'port'} {', '.join(ports)}"
    return [f"{which}: this machine's kernel has no SCTP (built without CONFIG_IP_SCTP, or no "
            f"sctp module), so no pod can open an SCTP socket to serve or call the Service there"]


def _listen_failure(svc: dict, address: Address, exc: OSError) -> str:
    """Why the Service's address cannot be listened on, and what it means for the pods that call it."""
    ip, port = address
    if exc.errno != errno.EADDRINUSE:
        return f"{ip}:{port}: {exc.strerror or exc}"
    # Pods share the host's network: a process that listens on every address takes this one too.
    return (f"{ip}:{port}: port {port} is held by another process on this machine (a pod of another "
            f"control plane, or a server listening on every address); a pod that calls "
            f"{svc['metadata']['name']}:{port} reaches that process instead. Give the Service another port.")


def _slice_port(port: dict, number: int) -> dict:
    """An EndpointSlice's port for a Service port served at ``number`` (a name always, "" for none)."""
    out = {"name": port.get("name") or "", "port": number, "protocol": port.get("protocol", "TCP")}
    if port.get("appProtocol"):
        out["appProtocol"] = port["appProtocol"]
    return out


def _slice_port_key(port: dict) -> tuple:
    return (port.get("name") or "", port.get("port"), port.get("protocol", "TCP"), port.get("appProtocol"))


def _pod_address(pod: dict) -> str:
    """Where a pod answers: its ``status.podIP`` on the pod network, loopback on the host's."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return LOOPBACK
    return (pod.get("status") or {}).get("podIP") or LOOPBACK
