"""The router's routes file and its admin API, as the controller sees them.

The file (``$TRIMARAN_HOME/serving/routes.json``) is the router's whole configuration and the
durable record of the data plane's ports: the shared ingress and admin ports, and each service's
own port (and gRPC port, for a service that fronts a predictor), and the token the router's admin
API wants (made once, kept across restarts). It is replaced atomically (write, then rename), so
the router never reads half a file. It lies in the home (0700), which no pod but the router's sees.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
from pathlib import Path

from trimaran.controllers.ports import PortAllocator

__all__ = ["DOMAIN", "RouterClient", "RoutesFile", "fixed_ingress_port"]

#: KServe's default ingress domain: a service answers ``Host: NAME.NAMESPACE.example.com``.
DOMAIN = os.environ.get("TRIMARAN_INGRESS_DOMAIN", "example.com")


class RoutesFile:
    """Read-modify-write of the routes file; one writer (the serving reconciler's thread)."""

    def __init__(self, directory: Path, ports: PortAllocator, host: str = "127.0.0.1") -> None:
        self.directory = directory
        self.path = directory / "routes.json"
        self.ports = ports
        self.data = self._read()
        # Where the router serves the ingress and the services: loopback, and on the pod network the
        # bridge's gateway too, so pods reach an InferenceService at its status.url as the host does.
        self.host = host
        self.data["listen"] = sorted({"127.0.0.1", host})
        self._written: dict[str, int] = {}  # owner -> the routes version that last changed its services
        reserved = [p for p in (self.data.get("ingressPort"), self.data.get("adminPort")) if p]
        reserved += [s[k] for s in self.data["services"].values() for k in _PORT_FIELDS if s.get(k)]
        ports.reserve(reserved)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        data.setdefault("services", {})
        return data

    def ensure_ports(self) -> tuple[int, int]:
        """The ingress and admin ports: ``TRIMARAN_INGRESS_PORT`` if set, else as recorded, else new ones
        (and the admin token). A change is written at once: the router learns them from the file too."""
        before = (self.data.get("ingressPort"), self.data.get("adminPort"), self.data.get("adminToken"))
        wanted = fixed_ingress_port()
        if wanted and self.data.get("ingressPort") != wanted:
            self.data["ingressPort"] = wanted
        if not self.data.get("ingressPort"):
            self.data["ingressPort"] = self.ports.allocate(1)[0]
        if not self.data.get("adminPort"):
            self.data["adminPort"] = self.ports.allocate(1)[0]
        if not self.data.get("adminToken"):
            self.data["adminToken"] = secrets.token_urlsafe(32)
        if (self.data["ingressPort"], self.data["adminPort"], self.data["adminToken"]) != before:
            self.data["version"] = int(self.data.get("version", 0)) + 1
            self._write()
        return int(self.data["ingressPort"]), int(self.data["adminPort"])

    def move_shared(self, name: str) -> None:
        """Forget the ``ingress`` or ``admin`` port (another process holds it); the next `ensure_ports`
        picks a new one. The old port stays reserved, as in `move`."""
        self.data.pop(f"{name}Port", None)

    def current(self, stats: dict | None) -> bool:
        """Whether the router (by its ``stats``) has loaded the whole file as it is now."""
        return stats is not None and int(stats.get("routesVersion", -1)) >= int(self.data.get("version", 0))

    def service_port(self, key: str, grpc: bool = False) -> int:
        """The HTTP (or gRPC) port of service ``key`` (``namespace/name``), allocated on first use."""
        entry = self.data["services"].get(key)
        field = "grpcPort" if grpc else "port"
        if entry and entry.get(field):
            return int(entry[field])
        return self.ports.allocate(1)[0]

    def move(self, key: str, grpc: bool = False) -> None:
        """Forget service ``key``'s HTTP (or gRPC) port (another process holds it); the next `service_port`
        picks a new one. The old port stays reserved: it is in use."""
        entry = self.data["services"].get(key)
        if entry is not None:
            entry.pop("grpcPort" if grpc else "port", None)

    def set_services(self, owner: str, services: dict[str, dict]) -> None:
        """Replace the services an InferenceService (``namespace/name``) owns; write when changed."""
        current = self.data["services"]
        kept = {k: v for k, v in current.items() if v.get("owner") != owner}
        for entry in services.values():
            entry["owner"] = owner
        released = [v[f] for k, v in current.items() if v.get("owner") == owner
                    for f in _PORT_FIELDS if v.get(f) and v[f] != (services.get(k) or {}).get(f)]
        merged = {**kept, **services}
        if merged != current:
            self.data["services"] = dict(sorted(merged.items()))
            self.data["version"] = int(self.data.get("version", 0)) + 1
            self._written[owner] = self.data["version"]
            self._write()
        if released:
            self.ports.release(released)

    def loaded(self, owner: str, stats: dict | None) -> bool:
        """Whether the router (by its ``stats``) has loaded the last routes written for ``owner``."""
        return stats is not None and int(stats.get("routesVersion", -1)) >= self._written.get(owner, 0)

    def owners(self) -> set[str]:
        """The InferenceServices that have routes."""
        return {v["owner"] for v in self.data["services"].values() if v.get("owner")}

    def _write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


_PORT_FIELDS = ("port", "grpcPort")


def fixed_ingress_port() -> int:
    """The ingress port the user chose (``TRIMARAN_INGRESS_PORT``), or 0: one the controller picks."""
    return int(os.environ.get("TRIMARAN_INGRESS_PORT", "0") or 0)


class RouterClient:
    """The router's admin API (``GET /stats``)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token
        #: Set by `stats` when another process, not the router, answers on the admin port: what it said.
        self.foreign: str | None = None

    def stats(self) -> dict | None:
        """Per-revision readiness and metrics, or None while the router is not answering."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
        self.foreign = None
        try:
            conn.request("GET", "/stats", headers={"Authorization": f"Bearer {self.token}"})
            response = conn.getresponse()
            body = response.read()
        except http.client.HTTPException as exc:  # something listens there, but does not speak HTTP
            self.foreign = f"not HTTP ({type(exc).__name__})"
            return None
        except OSError:  # nothing listens (the router is starting or restarting), or it is stuck
            return None
        finally:
            conn.close()
        try:
            data = json.loads(body) if response.status == 200 else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or "routesVersion" not in data:
            self.foreign = f"HTTP {response.status}, not the router's stats"
            return None
        return data
