"""networking.k8s.io/v1 NetworkPolicy, defaulted and validated as the Kubernetes API server does
(``SetDefaults_NetworkPolicy``, ``ValidateNetworkPolicy``); enforced by `trimaran.runtime.network`."""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

import ipaddress
from typing import Any

from pydantic import Field

from trimaran.api.errors import FieldError
from trimaran.api.meta import ApiModel, Int32, LabelSelector, Resource
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "NETWORKPOLICY_COLUMNS", "NetworkPolicy", "format_selector"]

API_VERSION = "networking.k8s.io/v1"
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_POLICY_TYPES = ("Egress", "Ingress")


class IPBlock(ApiModel):
    cidr: str
    except_: list[str] | None = Field(default=None, alias="except")


class NetworkPolicyPeer(ApiModel):
    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None


class NetworkPolicyPort(ApiModel):
    protocol: str | None = None
    port: int | str | None = None
    end_port: Int32 | None = None


class NetworkPolicyIngressRule(ApiModel):
    from_: list[NetworkPolicyPeer] | None = Field(default=None, alias="from")
    ports: list[NetworkPolicyPort] | None = None


class NetworkPolicyEgressRule(ApiModel):
    to: list[NetworkPolicyPeer] | None = None
    ports: list[NetworkPolicyPort] | None = None


class NetworkPolicySpec(ApiModel):
    pod_selector: LabelSelector | None = None
    ingress: list[NetworkPolicyIngressRule] | None = None
    egress: list[NetworkPolicyEgressRule] | None = None
    policy_types: list[str] | None = None


class NetworkPolicy(Resource):
    """networking.k8s.io/v1 NetworkPolicy."""

    spec: NetworkPolicySpec | None = None

    def set_defaults(self) -> None:
        """``podSelector`` is required but may be empty ({}: every pod of the namespace); ports'
        protocol is TCP; ``policyTypes`` is Ingress, plus Egress when there are egress rules."""
        if self.spec is None:
            self.spec = NetworkPolicySpec()
        spec = self.spec
        if spec.pod_selector is None:
            spec.pod_selector = LabelSelector()
        for rule in [*(spec.ingress or []), *(spec.egress or [])]:
            for port in rule.ports or []:
                if port.protocol is None:
                    port.protocol = "TCP"
        if not spec.policy_types:
            spec.policy_types = ["Ingress", *(["Egress"] if spec.egress else [])]

    def check(self) -> list[FieldError]:
        errors = super().check()
        spec = self.spec or NetworkPolicySpec()
        for i, kind in enumerate(spec.policy_types or []):
            if kind not in _POLICY_TYPES:
                errors.append(FieldError.not_supported(f"spec.policyTypes[{i}]", kind, _POLICY_TYPES))
        for direction, rules, peers_key in (("ingress", spec.ingress, "from"), ("egress", spec.egress, "to")):
            for i, rule in enumerate(rules or []):
                path = f"spec.{direction}[{i}]"
                for j, port in enumerate(rule.ports or []):
                    errors += _port_errors(f"{path}.ports[{j}]", port)
                peers = rule.from_ if isinstance(rule, NetworkPolicyIngressRule) else rule.to
                for j, peer in enumerate(peers or []):
                    errors += _peer_errors(f"{path}.{peers_key}[{j}]", peer)
        return errors


def _port_errors(path: str, port: NetworkPolicyPort) -> list[FieldError]:
    errors = []
    if port.protocol not in _PROTOCOLS:
        errors.append(FieldError.not_supported(f"{path}.protocol", port.protocol, _PROTOCOLS))
    if isinstance(port.port, int) and not 1 <= port.port <= 65535:
        errors.append(FieldError.invalid(f"{path}.port", port.port, "must be between 1 and 65535, inclusive"))
    if isinstance(port.port, str) and not port.port:
        errors.append(FieldError.invalid(f"{path}.port", port.port, "must contain at least one letter (a-z)"))
    if port.end_port is not None:
        if not isinstance(port.port, int):
            errors.append(FieldError.required(f"{path}.port", "must be specified when endPort is specified")
                          if port.port is None else
                          FieldError.invalid(f"{path}.endPort", port.end_port,
                                             "may not be specified when `port` is non-numeric"))
        elif port.end_port < port.port:
            errors.append(FieldError.invalid(f"{path}.endPort", port.end_port,
                                             "must be greater than or equal to `port`"))
        elif port.end_port > 65535:
            errors.append(FieldError.invalid(f"{path}.endPort", port.end_port,
                                             "must be between 1 and 65535, inclusive"))
    return errors


def _peer_errors(path: str, peer: NetworkPolicyPeer) -> list[FieldError]:
    selectors = peer.pod_selector is not None or peer.namespace_selector is not None
    if not selectors and peer.ip_block is None:
        return [FieldError.required(path, "must specify a peer")]
    if selectors and peer.ip_block is not None:
        return [FieldError.forbidden(path, "may not specify more than 1 peer")]
    if peer.ip_block is None:
        return []
    try:
        cidr = ipaddress.ip_network(peer.ip_block.cidr, strict=False)
    except ValueError:
        return [FieldError.invalid(f"{path}.ipBlock.cidr", peer.ip_block.cidr, "must be a valid CIDR")]
    errors = []
    for k, text in enumerate(peer.ip_block.except_ or []):
        try:
            inner = ipaddress.ip_network(text, strict=False)
        except ValueError:
            errors.append(FieldError.invalid(f"{path}.ipBlock.except[{k}]", text, "must be a valid CIDR"))
            continue
        if inner.version != cidr.version or not inner.subnet_of(cidr) or inner == cidr:
            errors.append(FieldError.invalid(f"{path}.ipBlock.except[{k}]", text,
                                             "must be a strict subset of `cidr`"))
    return errors


def format_selector(selector: dict[str, Any] | None) -> str:
    """A label selector as kubectl prints it (``metav1.FormatLabelSelector``): ``<none>`` when empty."""
    selector = selector or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        op, key, values = req.get("operator"), req.get("key"), ",".join(req.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}.get(op, key))
    return ",".join(parts) or "<none>"


NETWORKPOLICY_COLUMNS = (
    PrinterColumn("Pod-Selector", value=lambda o: format_selector((o.get("spec") or {}).get("podSelector"))),
    AGE)
