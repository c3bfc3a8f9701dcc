"""core v1 Service (ClusterIP): a loopback address of its own, names in every sandbox, a proxy.

Each Service gets ``spec.clusterIP`` in 127.1.0.1-127.254.255.254 (a digest of the home and the
Service's namespace/name, the next free one on a clash), so its ports are its own even where
another Service, or a pod, uses the same number. ``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc`` and
``<svc>.<ns>.svc.cluster.local`` resolve to it in every sandbox (``<svc>`` in the Service's own
namespace, as cluster DNS searches it): they go into the hosts of pods started later (the kubelet
asks `hosts_for`), and the hosts files of running pods are rewritten in place (they are bound into
the sandbox by inode).

Traffic to ``clusterIP:port`` goes through `ServiceProxy` to the ready pods behind the selector
(round-robin), at each pod's ``targetPort``: a number, or a container port's name, as the pod
declares it (a Deployment's per-pod port stands in for the declared number). When a selected pod
binds the Service's port itself (``port`` = ``targetPort``, a port fixed in its command), it
already answers on the Service's address through its wildcard bind, and the proxy stays out of
its way (binding there would take the port from the pod). A Service with no ready endpoint refuses
connections, as kube-proxy's reject rule does.
"""

from __future__ import annotations

import errno
import hashlib
import logging
from pathlib import Path

from trimaran.api.apps import selector_matches
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.pods import LOOPBACK, is_terminating, owner_reference, phase
from trimaran.controllers.probes import resolve_port
from trimaran.controllers.workloads.deployment import is_available
from trimaran.controllers.workloads.proxy import Address, ServiceProxy
from trimaran.runtime import LocalRuntime
from trimaran.store import AlreadyExists, Conflict, NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["ServiceReconciler", "cluster_ip_candidates", "service_names"]

log = logging.getLogger(__name__)

_SECOND, _THIRD, _FOURTH = 254, 256, 254
_MARK = "  # trimaran service"


def service_names(name: str, namespace: str) -> list[str]:
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def cluster_ip_candidates(home: Path, namespace: str, name: str) -> list[str]:
    """Addresses to try for a Service, first the one its digest names."""
    digest = int.from_bytes(hashlib.sha256(f"{home}\0{namespace}/{name}".encode()).digest()[:8], "big")
    space = _SECOND * _THIRD * _FOURTH
    out = []
    for step in range(64):
        n = (digest + step * 7919) % space
        out.append(f"127.{1 + n // (_THIRD * _FOURTH)}.{n // _FOURTH % _THIRD}.{1 + n % _FOURTH}")
    return out


class ServiceReconciler(Reconciler):
    name = "service"
    kinds = ("Service",)
    watches = ("Pod",)

    def __init__(self, store: Store, runtime: LocalRuntime) -> None:
        super().__init__(store)
        self.runtime = runtime
        self.proxy = ServiceProxy()
        self._listening: dict[Key, set[Address]] = {}
        self._names: dict[Key, str] = {}  # the Services whose names are published, and their address
        self._said_empty: set[Key] = set()
        # Each Service's selector, kept from the watch: pod events are many, and mapping each to its
        # Services must not cost the watch thread a store query.
        self._selectors: dict[Key, dict[str, str]] = {}

    def initial_keys(self) -> list[Key]:
        services = self.store.list("Service", shared=True)
        self._selectors = {key_of(s): (s.get("spec") or {}).get("selector") or {} for s in services}
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
        labels = obj["metadata"].get("labels") or {}
        return [key for key, selector in list(self._selectors.items())
                if key.namespace == namespace and selector and selector_matches({"matchLabels": selector}, labels)]

    def reconcile(self, key: Key) -> float | None:
        try:
            svc = self.store.get("Service", key.namespace, key.name)
        except NotFound:
            self._forget(key)
            return None
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            self._forget(key)
            return None
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
            return None  # endpoints are the user's to manage; nothing to forward
        pods = [p for p in self.store.list("Pod", key.namespace, shared=True)
                if selector_matches({"matchLabels": selector}, p["metadata"].get("labels")) and not is_terminating(p)]
        self._say_if_empty(svc, selector, pods)
        self._write_endpoints(svc, pods)
        wanted: set[Address] = set()
        for port in spec.get("ports") or []:
            address = (ip, int(port["port"]))
            target = port.get("targetPort", port["port"])
            if any(resolve_port(p, target) == address[1] and _pod_address(p) == LOOPBACK for p in pods):
                continue  # the pod binds this port itself and answers on every loopback address
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
            address = {"ip": _pod_address(pod), "hostname": meta["name"], "nodeName": "localhost", "targetRef": {
                "kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}
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

    def _assign_ip(self, svc: dict) -> str | None:
        meta = svc["metadata"]
        taken = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service", shared=True)}
        ip = next((c for c in cluster_ip_candidates(self.runtime.home, meta["namespace"], meta["name"])
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
        for address in self._listening.pop(key, set()):
            self.proxy.drop(address)
        self._said_empty.discard(key)
        if self._names.pop(key, None):
            self._rewrite_hosts()

    def _rewrite_hosts(self) -> None:
        """Bring the Services' lines of every running pod's /etc/hosts up to date, in place."""
        for uid in self.runtime.running_pods():
            identity = self.runtime.pod_identity(uid)
            if identity is None:
                continue
            lines = [f"{ip}\t{name}{_MARK}\n" for name, ip in self.hosts_for(identity[0]).items()]
            for hosts in (self.runtime.home / "pods" / uid / "runs").glob("*/hosts"):
                try:
                    with open(hosts, "r+", encoding="utf-8") as handle:
                        kept = [line for line in handle if not line.endswith(_MARK + "\n")]
                        handle.seek(0)
                        handle.write("".join(kept + lines))
                        handle.truncate()
                except OSError as exc:
                    log.warning("cannot update %s: %s", hosts, exc)

    def shutdown(self) -> None:
        self.proxy.close()


def _listen_failure(svc: dict, address: Address, exc: OSError) -> str:
    """Why the Service's address cannot be listened on, and what it means for the pods that call it."""
    ip, port = address
    if exc.errno != errno.EADDRINUSE:
        return f"{ip}:{port}: {exc.strerror or exc}"
    # Pods share the host's network: a process that listens on every address takes this one too.
    return (f"{ip}:{port}: port {port} is held by another process on this machine (a pod of another "
            f"control plane, or a server listening on every address); a pod that calls "
            f"{svc['metadata']['name']}:{port} reaches that process instead. Give the Service another port.")


def _pod_address(pod: dict) -> str:
    """Where a pod answers: its ``status.podIP`` on the pod network, loopback on the host's."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return LOOPBACK
    return (pod.get("status") or {}).get("podIP") or LOOPBACK
