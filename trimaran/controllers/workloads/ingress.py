"""networking.k8s.io/v1 Ingress, served on this machine as an ingress controller serves it on a cluster.

At start it installs the IngressClass ``trimaran`` (controller ``trimaran.dev/ingress``, the default
class), and serves every Ingress of that class, or of none (the API gives a new Ingress without a class
the default class, as kube-apiserver's DefaultIngressClass admission does: `default_class_name`),
through one listener (`IngressProxy`) on ``127.0.0.1`` (and on the pod network's gateway, for pods):
HTTP on ``TRIMARAN_INGRESS_HTTP_PORT`` and HTTPS on ``TRIMARAN_INGRESS_HTTPS_PORT``, else ports picked
once and kept in the home. Its rules' backends are Services, resolved to their ready endpoints (the
Endpoints object the Service controller keeps: a pod's IP on the pod network, loopback and the pod's
own port on the host's), and followed as they change. A ``tls`` section's hosts are served over HTTPS
with its Secret's ``tls.crt`` and ``tls.key`` (followed too). ``status.loadBalancer.ingress`` says
where it is served: ``127.0.0.1`` and its ports (HTTP, then HTTPS for an Ingress with TLS).

An Ingress naming a class that does not exist is not served (a Warning event says so), nor one of a
class of another controller (nothing here serves it, as on a cluster without that controller).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
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
TLS_PORT_ENV = "TRIMARAN_INGRESS_HTTPS_PORT"
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
    watches = ("IngressClass", "Service", "Endpoints", "Secret")

    def __init__(self, store: Store, home: Path, ports: PortAllocator, gateway: str = LOOPBACK) -> None:
        """``gateway``: the pod network's gateway address, where pods reach the host (loopback without one)."""
        super().__init__(store)
        self.home = home
        self.ports = ports
        self.hosts = sorted({LOOPBACK, gateway})
        self.proxy = IngressProxy()
        self.port = self.tls_port = 0
        self._installed = False
        # Per served Ingress: its place in the merged table (creation, namespace, name), its rules, its
        # default backend and its certificates by host.
        self._rules: dict[Key, tuple[tuple[str, str, str], list[tuple[str | None, PathRule]], Backend | None,
                                     dict[str, ssl.SSLContext]]] = {}
        # The objects each Ingress names, ("Service" | "Secret", name), for their events (Endpoints: its Service's).
        self._refs: dict[Key, set[tuple[str, str]]] = {}
        self._contexts: dict[tuple[str, str, str], ssl.SSLContext] = {}  # (namespace, secret, resourceVersion)
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
        """Listen at the chosen ports, else the recorded ones, else new ones (recorded); recorded ports
        another process took are given up for new ones."""
        record = self.home / "ingress" / "ports.json"
        fixed = (int(os.environ.get(PORT_ENV) or 0), int(os.environ.get(TLS_PORT_ENV) or 0))
        try:
            kept = json.loads(record.read_text())
            recorded = (int(kept["http"]), int(kept["https"]))
        except (OSError, ValueError, KeyError, TypeError):
            recorded = (0, 0)
        self.ports.reserve([p for p, f in zip(recorded, fixed, strict=True) if p and not f])
        for _ in range(3):
            http, https = (f or r or self.ports.allocate(1)[0] for f, r in zip(fixed, recorded, strict=True))
            try:
                self.proxy.listen(self.hosts, http, https)
            except OSError as exc:
                log.warning("the ingress cannot listen on ports %d and %d (%s)", http, https, exc.strerror)
                recorded = (0, 0)
                continue
            self.port, self.tls_port = http, https
            record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            record.write_text(json.dumps({"http": http, "https": https}))
            return
        log.error("the ingress found no ports to listen on (%s=%d, %s=%d): Ingresses are not served",
                  PORT_ENV, fixed[0], TLS_PORT_ENV, fixed[1])

    # -- events ------------------------------------------------------------------------------------
    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if obj["kind"] == "Ingress":
            return [key_of(obj)]
        if obj["kind"] == "IngressClass":  # a class made, removed or made default: every Ingress may change
            return [key_of(i) for i in self.store.list("Ingress", shared=True)]
        ref = ("Secret" if obj["kind"] == "Secret" else "Service", obj["metadata"]["name"])
        namespace = obj["metadata"].get("namespace")
        return [key for key, refs in list(self._refs.items()) if key.namespace == namespace and ref in refs]

    # -- reconcile ---------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        try:
            ingress = self.store.get("Ingress", key.namespace, key.name)
        except NotFound:
            self._forget(key)
            return None
        spec = ingress.get("spec") or {}
        self._refs[key] = _references(spec)
        why_not = self._not_ours(ingress)
        if why_not is not None:
            self._forget(key, keep_refs=True)
            if not why_not:
                return None  # another controller's: its status is that controller's to write
            self._say(ingress, "Warning", "IngressClassNotFound", why_not)
            return self._settle(ingress, {})
        rules: list[tuple[str | None, PathRule]] = []
        for rule in spec.get("rules") or []:
            for path in (rule.get("http") or {}).get("paths") or []:
                rules.append((rule.get("host"), PathRule(path.get("pathType") or "Prefix", path.get("path") or "/",
                                                         self._backend(ingress, path.get("backend") or {}))))
        default = self._backend(ingress, spec["defaultBackend"]) if spec.get("defaultBackend") else None
        certs: dict[str, ssl.SSLContext] = {}
        rule_hosts = [r["host"] for r in spec.get("rules") or [] if r.get("host")]
        for tls in spec.get("tls") or []:
            context = self._certificate(ingress, tls.get("secretName") or "")
            for host in (tls.get("hosts") or rule_hosts) if context is not None else ():
                certs.setdefault(host, context)
        meta = ingress["metadata"]
        self._rules[key] = ((meta.get("creationTimestamp") or "", key.namespace, key.name), rules, default, certs)
        self._publish()
        self._say(ingress, "Normal", "Sync", "Scheduled for sync")
        if not self.port:
            return self._settle(ingress, {})
        ports = [self.port, *([self.tls_port] if spec.get("tls") else [])]
        return self._settle(ingress, {"ingress": [{"ip": LOOPBACK,
                                                   "ports": [{"port": p, "protocol": "TCP"} for p in ports]}]})

    def _certificate(self, ingress: dict, secret_name: str) -> ssl.SSLContext | None:
        """A TLS section's certificate: its Secret's ``tls.crt`` and ``tls.key`` (None, said in an event,
        when there is none to use: its hosts are then not served over HTTPS)."""
        namespace = ingress["metadata"]["namespace"]
        where = f'Secret "{namespace}/{secret_name}"'
        if not secret_name:
            self._say(ingress, "Warning", "TLSSecretNotFound", "a tls section names no secretName: its hosts are "
                      "not served over HTTPS (Trimaran's ingress has no default certificate)")
            return None
        try:
            secret = self.store.get("Secret", namespace, secret_name)
        except NotFound:
            self._say(ingress, "Warning", "TLSSecretNotFound", f"{where} does not exist: its hosts are not served "
                      "over HTTPS")
            return None
        cached = (namespace, secret_name, secret["metadata"].get("resourceVersion", ""))
        if cached in self._contexts:
            return self._contexts[cached]
        data = secret.get("data") or {}
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            pem = base64.b64decode(data["tls.crt"]) + b"\n" + base64.b64decode(data["tls.key"])
            # load_cert_chain reads files only: a file of its own (0600, in the home), gone once read.
            (self.home / "ingress").mkdir(mode=0o700, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.home / "ingress", suffix=".pem") as held:
                held.write(pem)
                held.flush()
                context.load_cert_chain(held.name)
        except (KeyError, ValueError, ssl.SSLError) as exc:
            self._say(ingress, "Warning", "TLSSecretInvalid", f"{where} holds no usable tls.crt and tls.key "
                      f"({exc}): its hosts are not served over HTTPS")
            return None
        self._contexts = {k: v for k, v in self._contexts.items() if k[:2] != cached[:2]}
        self._contexts[cached] = context
        return context

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
        table, certs = RouteTable(), {}
        for _, rules, default, own_certs in sorted(self._rules.values(), key=lambda entry: entry[0]):
            for host, rule in rules:
                table.add(host, rule)
            if table.default is None:
                table.default = default
            for host, context in own_certs.items():
                certs.setdefault(host, context)
        self.proxy.set_table(table, certs)

    def _forget(self, key: Key, keep_refs: bool = False) -> None:
        if not keep_refs:
            self._refs.pop(key, None)
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


def _references(spec: dict) -> set[tuple[str, str]]:
    """The Services and Secrets an Ingress's spec names."""
    backends = [spec.get("defaultBackend") or {}]
    backends += [p.get("backend") or {} for r in spec.get("rules") or []
                 for p in (r.get("http") or {}).get("paths") or []]
    refs = {("Service", b["service"]["name"]) for b in backends if (b.get("service") or {}).get("name")}
    return refs | {("Secret", t["secretName"]) for t in spec.get("tls") or [] if t.get("secretName")}
