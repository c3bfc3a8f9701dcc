"""networking.k8s.io/v1 Ingress, served on this machine as an ingress controller serves it on a cluster.

At start it installs the IngressClass ``trimaran`` (controller ``trimaran.dev/ingress``, the default
class), and serves every Ingress of that class, or of none (the API gives a new Ingress without a class
the default class, as kube-apiserver's DefaultIngressClass admission does: `default_class_name`),
through one HTTP listener (`IngressProxy`) on ``127.0.0.1:PORT`` (and on the pod network's gateway,
for pods): ``TRIMARAN_INGRESS_HTTP_PORT``, else a port picked once and kept in the home. Its rules'
backends are Services, resolved to their ready endpoints (the Endpoints object the Service controller
keeps: a pod's IP on the pod network, loopback and the pod's own port on the host's), and followed as
they change. ``status.loadBalancer.ingress`` says where it is served: ``127.0.0.1`` and the port.

An Ingress naming a class that does not exist is not served (a Warning event says so), nor one of a
class of another controller (nothing here serves it, as on a cluster without that controller). TLS
sections are stored, not served: an event says so, and the Ingress is served over plain HTTP.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from trimaran.api.ingress import DEFAULT_CLASS_ANNOTATION, LEGACY_CLASS_ANNOTATION
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.workloads.ingressproxy import Backend, IngressProxy, PathRule, RouteTable
from trimaran.store import AlreadyExists, Conflict, NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["CLASS_NAME", "CONTROLLER", "IngressReconciler", "default_class_name", "set_default_class"]

log = logging.getLogger(__name__)

CLASS_NAME = "trimaran"
CONTROLLER = "trimaran.dev/ingress"
PORT_ENV = "TRIMARAN_INGRESS_HTTP_PORT"
LOOPBACK = "127.0.0.1"
_SAID_KEPT = 10_000


def default_class_name(store: Store) -> str | None:
    """The IngressClass a new Ingress naming none gets: the newest of those annotated default, as
    kube-apiserver's DefaultIngressClass admission picks it (None: there is none)."""
    defaults = [c for c in store.list("IngressClass", shared=True)
                if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
    if not defaults:
        return None
    newest = max(defaults, key=lambda c: (c["metadata"].get("creationTimestamp") or "", c["metadata"]["name"]))
    return newest["metadata"]["name"]


def set_default_class(ingress: dict, store: Store) -> None:
    """kube-apiserver's DefaultIngressClass admission, on create: an Ingress that names no class (neither
    ``spec.ingressClassName`` nor the legacy annotation) gets the default class, where there is one."""
    spec = ingress.setdefault("spec", {})
    if spec.get("ingressClassName") or LEGACY_CLASS_ANNOTATION in (ingress["metadata"].get("annotations") or {}):
        return
    name = default_class_name(store)
    if name is not None:
        spec["ingressClassName"] = name


def _class_object() -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": CLASS_NAME, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
                         "labels": {"app.kubernetes.io/managed-by": "trimaran"}},
            "spec": {"controller": CONTROLLER}}


class IngressReconciler(Reconciler):
    name = "ingress"
    kinds = ("Ingress",)
    watches = ("IngressClass", "Service", "Endpoints")

    def __init__(self, store: Store, home: Path, ports: PortAllocator, gateway: str = LOOPBACK) -> None:
        """``gateway``: the pod network's gateway address, where pods reach the host (loopback without one)."""
        super().__init__(store)
        self.home = home
        self.ports = ports
        self.hosts = sorted({LOOPBACK, gateway})
        self.proxy = IngressProxy()
        self.port = 0
        self._installed = False
        # Per served Ingress: its place in the merged table (creation, namespace, name) and its rules.
        self._rules: dict[Key, tuple[tuple[str, str, str], list[tuple[str | None, PathRule]], Backend | None]] = {}
        self._services: dict[Key, set[str]] = {}  # the Services each Ingress names, for their events
        self._said: set[tuple[str, str, str]] = set()  # (uid, reason, message) already recorded

    # -- start -------------------------------------------------------------------------------------
    def initial_keys(self) -> list[Key]:
        if not self._installed:
            try:
                self.store.create(_class_object())
            except AlreadyExists:
                pass
            self._installed = True
        if not self.port:
            self._listen()
        return [key_of(i) for i in self.store.list("Ingress", shared=True)]

    def _listen(self) -> None:
        """Listen at the chosen port, else the recorded one, else a new one (recorded); a recorded port
        another process took is given up for a new one."""
        record = self.home / "ingress" / "port"
        wanted = int(os.environ.get(PORT_ENV, "0") or 0)
        try:
            recorded = int(record.read_text())
        except (OSError, ValueError):
            recorded = 0
        if not wanted and recorded:
            self.ports.reserve([recorded])
        for _ in range(3):
            port = wanted or recorded or self.ports.allocate(1)[0]
            try:
                self.proxy.listen(self.hosts, port)
            except OSError as exc:
                if wanted:
                    log.error("the ingress cannot listen on %s port %d (%s): Ingresses are not served",
                              PORT_ENV, port, exc.strerror)
                    return
                recorded = 0
                continue
            self.port = port
            if port != wanted:
                record.parent.mkdir(parents=True, exist_ok=True)
                record.write_text(str(port))
            return
        log.error("the ingress found no port to listen on: Ingresses are not served")

    # -- events ------------------------------------------------------------------------------------
    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if obj["kind"] == "Ingress":
            return [key_of(obj)]
        if obj["kind"] == "IngressClass":  # a class made, removed or made default: every Ingress may change
            return [key_of(i) for i in self.store.list("Ingress", shared=True)]
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        return [key for key, names in list(self._services.items()) if key.namespace == namespace and name in names]

    # -- reconcile ---------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        try:
            ingress = self.store.get("Ingress", key.namespace, key.name)
        except NotFound:
            self._forget(key)
            return None
        spec = ingress.get("spec") or {}
        self._services[key] = _service_names(spec)
        why_not = self._not_ours(ingress)
        if why_not is not None:
            self._forget(key, keep_services=True)
            if why_not:
                self._say(ingress, "Warning", "IngressClassNotFound", why_not)
            return self._settle(ingress, {})
        rules: list[tuple[str | None, PathRule]] = []
        for rule in spec.get("rules") or []:
            for path in (rule.get("http") or {}).get("paths") or []:
                rules.append((rule.get("host"), PathRule(path.get("pathType") or "Prefix", path.get("path") or "/",
                                                         self._backend(ingress, path.get("backend") or {}))))
        default = self._backend(ingress, spec["defaultBackend"]) if spec.get("defaultBackend") else None
        meta = ingress["metadata"]
        self._rules[key] = ((meta.get("creationTimestamp") or "", key.namespace, key.name), rules, default)
        self._publish()
        if spec.get("tls"):
            self._say(ingress, "Warning", "TLSNotServed",
                      f"spec.tls is stored but not served: Trimaran's ingress serves plain HTTP on "
                      f"{LOOPBACK}:{self.port}")
        self._say(ingress, "Normal", "Sync", "Scheduled for sync")
        if not self.port:
            return self._settle(ingress, {})
        return self._settle(ingress, {"ingress": [{"ip": LOOPBACK, "ports": [{"port": self.port, "protocol": "TCP"}]}]})

    def _not_ours(self, ingress: dict) -> str | None:
        """None when this controller serves ``ingress``; else why not: a message for an event, or ""
        when another controller's class is named (not ours to speak of)."""
        spec = ingress.get("spec") or {}
        name = spec.get("ingressClassName") or (ingress["metadata"].get("annotations") or {}).get(
            LEGACY_CLASS_ANNOTATION) or default_class_name(self.store)
        if name is None:
            return "the Ingress names no IngressClass and there is no default class"
        try:
            ingress_class = self.store.get("IngressClass", "", name)
        except NotFound:
            return f'IngressClass "{name}" not found: the Ingress is not served'
        return None if (ingress_class.get("spec") or {}).get("controller") == CONTROLLER else ""

    def _backend(self, ingress: dict, backend: dict) -> Backend:
        """The ready endpoints of a backend's Service port (none for a resource backend: nothing here
        serves one)."""
        namespace = ingress["metadata"]["namespace"]
        ref = backend.get("service")
        if not ref:
            resource = backend.get("resource") or {}
            return Backend((), f"resource {resource.get('kind')}/{resource.get('name')}")
        wanted = ref.get("port") or {}
        what = f"service {namespace}/{ref['name']}:{wanted.get('number') or wanted.get('name')}"
        try:
            service = self.store.get("Service", namespace, ref["name"])
        except NotFound:
            self._say(ingress, "Warning", "ServiceNotFound", f'Service "{namespace}/{ref["name"]}" does not exist')
            return Backend((), what)
        port = next((p for p in (service.get("spec") or {}).get("ports") or []
                     if (wanted.get("number") and p.get("port") == wanted["number"])
                     or (wanted.get("name") and p.get("name") == wanted["name"])), None)
        if port is None:
            self._say(ingress, "Warning", "ServicePortNotFound",
                      f'Service "{namespace}/{ref["name"]}" has no port {wanted.get("number") or wanted.get("name")}')
            return Backend((), what)
        try:
            endpoints = self.store.get("Endpoints", namespace, ref["name"])
        except NotFound:
            return Backend((), what)
        addresses = []
        for subset in endpoints.get("subsets") or []:
            number = next((p["port"] for p in subset.get("ports") or [] if p.get("name") == port.get("name")), None)
            if number is not None:
                addresses += [f"{a['ip']}:{number}" for a in subset.get("addresses") or [] if a.get("ip")]
        return Backend(tuple(sorted(addresses)), what)

    def _publish(self) -> None:
        """The merged table of every served Ingress, older Ingresses' rules first, to the proxy."""
        table = RouteTable()
        for _, rules, default in sorted(self._rules.values(), key=lambda entry: entry[0]):
            for host, rule in rules:
                table.add(host, rule)
            if table.default is None:
                table.default = default
        self.proxy.set_table(table)

    def _forget(self, key: Key, keep_services: bool = False) -> None:
        if not keep_services:
            self._services.pop(key, None)
        if self._rules.pop(key, None) is not None:
            self._publish()

    def _say(self, ingress: dict, kind: str, reason: str, message: str) -> None:
        """Record an event once per Ingress (uid) and message, as a controller that does not repeat itself."""
        meta = ingress["metadata"]
        said = (meta.get("uid", ""), reason, f"{meta.get('generation')}:{message}")
        if said in self._said:
            return
        if len(self._said) > _SAID_KEPT:
            self._said.clear()  # at worst an event is said again
        self._said.add(said)
        self.store.record_event(ingress, kind, reason, message)  # type: ignore[arg-type]

    def _settle(self, ingress: dict, load_balancer: dict) -> float | None:
        status = ingress.get("status") or {}
        if (status.get("loadBalancer") or {}) == load_balancer:
            return None
        ingress["status"] = {**status, "loadBalancer": load_balancer}
        try:
            self.write_status(ingress)
        except Conflict:
            return 0.05
        except NotFound:
            pass
        return None


def _service_names(spec: dict) -> set[str]:
    backends = [spec.get("defaultBackend") or {}]
    backends += [p.get("backend") or {} for r in spec.get("rules") or []
                 for p in (r.get("http") or {}).get("paths") or []]
    return {b["service"]["name"] for b in backends if (b.get("service") or {}).get("name")}
