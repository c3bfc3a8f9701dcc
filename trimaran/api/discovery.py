"""discovery.k8s.io/v1 EndpointSlice: a Service's endpoints in slices per address type and ports, as
the EndpointSlice controller writes them beside Endpoints; validated as ``ValidateEndpointSlice``."""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

import ipaddress
from typing import Any

from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, Int32, Resource, is_dns1123_subdomain
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "ENDPOINTSLICE_COLUMNS", "MANAGED_BY_MIRRORING", "MANAGED_BY_SLICES", "EndpointSlice"]

API_VERSION = "discovery.k8s.io/v1"
# The value of labels.ENDPOINTSLICE_MANAGED_BY_LABEL on the slices the EndpointSlice controller keeps...
MANAGED_BY_SLICES = "endpointslice-controller.k8s.io"
# ...and on those the mirroring controller copies from a selectorless Service's Endpoints.
MANAGED_BY_MIRRORING = "endpointslicemirroring-controller.k8s.io"
_ADDRESS_TYPES = ("IPv4", "IPv6", "FQDN")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_MAX_ADDRESSES = 100
_MAX_ENDPOINTS = 1000
_MAX_PORTS = 20000


class EndpointConditions(ApiModel):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class EndpointReference(ApiModel):
    """core v1 ObjectReference, as an endpoint's ``targetRef``."""

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    api_version: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class Endpoint(ApiModel):
    addresses: list[str]
    conditions: EndpointConditions | None = None
    hostname: str | None = None
    target_ref: EndpointReference | None = None
    deprecated_topology: dict[str, str] | None = None
    node_name: str | None = None
    zone: str | None = None
    hints: dict[str, Any] | None = None


class EndpointPort(ApiModel):
    name: str | None = None
    protocol: str | None = None
    port: Int32 | None = None
    app_protocol: str | None = None


class EndpointSlice(Resource):
    """discovery.k8s.io/v1 EndpointSlice (no spec: its fields sit at the top)."""

    address_type: str
    endpoints: list[Endpoint] | None = None
    ports: list[EndpointPort] | None = None

    def set_defaults(self) -> None:
        """``SetDefaults_EndpointPort``: a port's protocol is TCP, its name empty."""
        for port in self.ports or []:
            if port.protocol is None:
                port.protocol = "TCP"
            if port.name is None:
                port.name = ""

    def check(self) -> list[FieldError]:
        errs = super().check()
        if self.address_type not in _ADDRESS_TYPES:
            errs.append(FieldError.not_supported("addressType", self.address_type, _ADDRESS_TYPES))
        endpoints = self.endpoints or []
        if len(endpoints) > _MAX_ENDPOINTS:
            errs.append(FieldError.invalid("endpoints", len(endpoints), f"must have at most {_MAX_ENDPOINTS} items"))
        for i, endpoint in enumerate(endpoints):
            path = join_path("endpoints", i, "addresses")
            if not endpoint.addresses:
                errs.append(FieldError.required(path, "must contain at least 1 address"))
            elif len(endpoint.addresses) > _MAX_ADDRESSES:
                errs.append(FieldError.invalid(path, endpoint.addresses,
                                               f"must contain at most {_MAX_ADDRESSES} addresses"))
            for j, address in enumerate(endpoint.addresses):
                errs += _address_errors(join_path(path, j), address, self.address_type)
            if endpoint.hostname:
                errs += [FieldError.invalid(join_path("endpoints", i, "hostname"), endpoint.hostname, e)
                         for e in is_dns1123_subdomain(endpoint.hostname)[:1]]
        names: set[str] = set()
        ports = self.ports or []
        if len(ports) > _MAX_PORTS:
            errs.append(FieldError.invalid("ports", len(ports), f"must have at most {_MAX_PORTS} items"))
        for i, port in enumerate(ports):
            path = join_path("ports", i)
            if port.name:
                if port.name in names:
                    errs.append(FieldError.duplicate(join_path(path, "name"), port.name))
                names.add(port.name)
            if port.protocol not in _PROTOCOLS:
                errs.append(FieldError.not_supported(join_path(path, "protocol"), port.protocol, _PROTOCOLS))
            if port.port is not None and not 1 <= port.port <= 65535:
                errs.append(FieldError.invalid(join_path(path, "port"), port.port,
                                               "must be between 1 and 65535, inclusive"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """``addressType`` is immutable."""
        if old.get("addressType") != new.get("addressType"):
            return [FieldError.invalid("addressType", new.get("addressType"), "field is immutable")]
        return []


def _address_errors(path: str, address: str, address_type: str) -> list[FieldError]:
    if address_type == "FQDN":
        return [FieldError.invalid(path, address, e) for e in is_dns1123_subdomain(address)[:1]]
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        parsed = None
    wanted = 4 if address_type == "IPv4" else 6
    if parsed is None or parsed.version != wanted:
        return [FieldError.invalid(path, address, f"must be a valid {address_type} address")]
    return []


def _listed(items: list[str], count: int, most: int = 3) -> str:
    """kubectl's ``listWithMoreString``: three, then ``+ N more...``; ``<unset>`` for none."""
    text = ",".join(items[:most])
    if count > most:
        return f"{text} + {count - most} more..."
    return text or "<unset>"


def _ports(obj: dict) -> str:
    ports = obj.get("ports") or []
    shown = [str(p["port"]) if p.get("port") is not None else p["name"] if p.get("name") is not None else "*"
             for p in ports]
    return _listed(shown, len(ports))


def _endpoints(obj: dict) -> str:
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    return _listed(addresses, len(addresses))


# kube-apiserver's printEndpointSlice columns.
ENDPOINTSLICE_COLUMNS = (
    PrinterColumn("AddressType", value=lambda o: o.get("addressType", "")),
    PrinterColumn("Ports", value=_ports),
    PrinterColumn("Endpoints", value=_endpoints),
    AGE,
)
