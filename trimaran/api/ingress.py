"""networking.k8s.io/v1 Ingress and IngressClass, defaulted and validated as kube-apiserver does
(``ValidateIngressCreate``, ``ValidateIngressClass``), with its printer columns; served by
`trimaran.controllers.workloads.ingress`."""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

import ipaddress
import re

from trimaran.api.core import is_valid_port_name
from trimaran.api.errors import FieldError
from trimaran.api.meta import ApiModel, Int32, Resource, _regex_error, is_dns1035_label, is_dns1123_subdomain
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "DEFAULT_CLASS_ANNOTATION", "INGRESSCLASS_COLUMNS", "INGRESS_COLUMNS",
           "LEGACY_CLASS_ANNOTATION", "PATH_TYPES", "Ingress", "IngressClass", "is_wildcard_dns1123_subdomain"]

API_VERSION = "networking.k8s.io/v1"
#: An IngressClass so annotated is the class of an Ingress that names none (admission's DefaultIngressClass).
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
#: The class as Ingresses named it before ``spec.ingressClassName``; such an Ingress gets no default.
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")
_INVALID_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_SUFFIXES = ("/..", "/.")
_CONTROLLER_MAX = 250
_SCOPES = ("Cluster", "Namespace")
_WILDCARD_FMT = r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_WILDCARD = re.compile(_WILDCARD_FMT)
# apimachinery's httpPathFmt, which the part of a controller name after its domain must match.
_HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"
_HTTP_PATH = re.compile(_HTTP_PATH_FMT)


def is_wildcard_dns1123_subdomain(value: str) -> list[str]:
    """``*.`` then a DNS-1123 subdomain (an Ingress rule's or a TLS section's wildcard host)."""
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _WILDCARD.fullmatch(value):
        errs.append(_regex_error(
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must "
            "consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
            _WILDCARD_FMT, "*.example.com"))
    return errs


def _host_errors(path: str, host: str) -> list[FieldError]:
    rule = is_wildcard_dns1123_subdomain if "*" in host else is_dns1123_subdomain
    return [FieldError.invalid(path, host, m) for m in rule(host)]


class ServiceBackendPort(ApiModel):
    name: str | None = None
    number: Int32 | None = None


class IngressServiceBackend(ApiModel):
    name: str = ""
    port: ServiceBackendPort | None = None


class TypedLocalObjectReference(ApiModel):
    api_group: str | None = None
    kind: str = ""
    name: str = ""


class IngressBackend(ApiModel):
    service: IngressServiceBackend | None = None
    resource: TypedLocalObjectReference | None = None


class HTTPIngressPath(ApiModel):
    path: str | None = None
    path_type: str | None = None
    backend: IngressBackend


class HTTPIngressRuleValue(ApiModel):
    paths: list[HTTPIngressPath] | None = None


class IngressRule(ApiModel):
    host: str | None = None
    http: HTTPIngressRuleValue | None = None


class IngressTLS(ApiModel):
    hosts: list[str] | None = None
    secret_name: str | None = None


class IngressSpec(ApiModel):
    ingress_class_name: str | None = None
    default_backend: IngressBackend | None = None
    tls: list[IngressTLS] | None = None
    rules: list[IngressRule] | None = None


class IngressPortStatus(ApiModel):
    port: Int32
    protocol: str
    error: str | None = None


class IngressLoadBalancerIngress(ApiModel):
    ip: str | None = None
    hostname: str | None = None
    ports: list[IngressPortStatus] | None = None


class IngressLoadBalancerStatus(ApiModel):
    ingress: list[IngressLoadBalancerIngress] | None = None


class IngressStatus(ApiModel):
    load_balancer: IngressLoadBalancerStatus | None = None


def _backend_errors(backend: IngressBackend, path: str) -> list[FieldError]:
    """``validateIngressBackend``: a Service (name and one of port name or number) or a resource."""
    if backend.resource is not None and backend.service is not None:
        return [FieldError.invalid(path, "", "cannot set both resource and service backends")]
    if backend.resource is not None:
        ref, at = backend.resource, f"{path}.resource"
        errs = [FieldError.invalid(f"{at}.apiGroup", ref.api_group, m)
                for m in (is_dns1123_subdomain(ref.api_group) if ref.api_group is not None else [])]
        if not ref.kind:
            errs.append(FieldError.required(f"{at}.kind", "kind is required"))
        if not ref.name:
            errs.append(FieldError.required(f"{at}.name", "name is required"))
        return errs
    if backend.service is None:
        return [FieldError.invalid(path, "", "resource or service backend is required")]
    service, errs = backend.service, []
    if not service.name:
        errs.append(FieldError.required(f"{path}.service.name"))
    else:
        errs += [FieldError.invalid(f"{path}.service.name", service.name, m) for m in is_dns1035_label(service.name)]
    port = service.port or ServiceBackendPort()
    if port.name and port.number:
        errs.append(FieldError.invalid(path, "", "cannot set both port name & port number"))
    elif port.name:
        errs += [FieldError.invalid(f"{path}.service.port.name", port.name, m) for m in is_valid_port_name(port.name)]
    elif port.number:
        if not 1 <= port.number <= 65535:
            errs.append(FieldError.invalid(f"{path}.service.port.number", port.number,
                                           "must be between 1 and 65535, inclusive"))
    else:
        errs.append(FieldError.required(path, "port name or number is required"))
    return errs


def _path_errors(rule_path: HTTPIngressPath, at: str) -> list[FieldError]:
    """``validateHTTPIngressPath``: Exact and Prefix paths are absolute and clean; the type is required."""
    if rule_path.path_type is None:
        return [FieldError.required(f"{at}.pathType", "pathType must be specified")]
    path, errs = rule_path.path or "", []
    if rule_path.path_type in ("Exact", "Prefix"):
        if not path.startswith("/"):
            errs.append(FieldError.invalid(f"{at}.path", path, "must be an absolute path"))
        if path:
            errs += [FieldError.invalid(f"{at}.path", path, f"must not contain '{s}'")
                     for s in _INVALID_SEQUENCES if s in path]
            errs += [FieldError.invalid(f"{at}.path", path, f"cannot end with '{s}'")
                     for s in _INVALID_SUFFIXES if path.endswith(s)]
    elif rule_path.path_type == "ImplementationSpecific":
        if path and not path.startswith("/"):
            errs.append(FieldError.invalid(f"{at}.path", path, "must be an absolute path"))
    else:
        errs.append(FieldError.not_supported(f"{at}.pathType", rule_path.path_type, PATH_TYPES))
    return errs + _backend_errors(rule_path.backend, f"{at}.backend")


class Ingress(Resource):
    """networking.k8s.io/v1 Ingress (no defaults in v1: ``pathType`` is required)."""

    spec: IngressSpec | None = None
    status: IngressStatus | None = None

    def set_defaults(self) -> None:
        if self.spec is None:
            self.spec = IngressSpec()

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec or IngressSpec()
        if not spec.rules and spec.default_backend is None:
            errs.append(FieldError.invalid("spec", spec.rules, "either `defaultBackend` or `rules` must be specified"))
        if spec.default_backend is not None:
            errs += _backend_errors(spec.default_backend, "spec.defaultBackend")
        for i, rule in enumerate(spec.rules or []):
            at = f"spec.rules[{i}]"
            if rule.host:
                try:
                    ipaddress.ip_address(rule.host)
                    errs.append(FieldError.invalid(f"{at}.host", rule.host, "must be a DNS name, not an IP address"))
                except ValueError:
                    pass
                errs += _host_errors(f"{at}.host", rule.host)
            if rule.http is not None:
                if not rule.http.paths:
                    errs.append(FieldError.required(f"{at}.http.paths"))
                for j, rule_path in enumerate(rule.http.paths or []):
                    errs += _path_errors(rule_path, f"{at}.http.paths[{j}]")
        for i, tls in enumerate(spec.tls or []):
            for j, host in enumerate(tls.hosts or []):
                errs += _host_errors(f"spec.tls[{i}].hosts[{j}]", host)
            if tls.secret_name:
                errs += [FieldError.invalid(f"spec.tls[{i}].secretName", tls.secret_name, m)
                         for m in is_dns1123_subdomain(tls.secret_name)]
        if spec.ingress_class_name is not None:
            errs += [FieldError.invalid("spec.ingressClassName", spec.ingress_class_name, m)
                     for m in is_dns1123_subdomain(spec.ingress_class_name)]
        return errs


class IngressClassParametersReference(ApiModel):
    api_group: str | None = None
    kind: str = ""
    name: str = ""
    scope: str | None = None
    namespace: str | None = None


class IngressClassSpec(ApiModel):
    controller: str | None = None
    parameters: IngressClassParametersReference | None = None


def _controller_errors(controller: str) -> list[FieldError]:
    """apimachinery's ``IsDomainPrefixedPath``: ``example.com/name``."""
    at = "spec.controller"
    errs = [FieldError.too_long(at, _CONTROLLER_MAX)] if len(controller) > _CONTROLLER_MAX else []
    if not controller:
        return errs + [FieldError.required(at)]
    host, slash, path = controller.partition("/")
    if not slash or not host or not path:
        return errs + [FieldError.invalid(at, controller, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errs += [FieldError.invalid(at, host, m) for m in is_dns1123_subdomain(host)]
    if not _HTTP_PATH.fullmatch(path):
        errs.append(FieldError.invalid(at, path, _regex_error("Invalid path", _HTTP_PATH_FMT)))
    return errs


class IngressClass(Resource):
    """networking.k8s.io/v1 IngressClass (cluster-scoped): which controller serves an Ingress of it."""

    spec: IngressClassSpec | None = None

    def set_defaults(self) -> None:
        """A parameters reference is cluster-scoped unless it says otherwise (``SetDefaults_IngressClass``)."""
        if self.spec is None:
            self.spec = IngressClassSpec()
        if self.spec.parameters is not None and self.spec.parameters.scope is None:
            self.spec.parameters.scope = "Cluster"

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec or IngressClassSpec()
        errs += _controller_errors(spec.controller or "")
        params, at = spec.parameters, "spec.parameters"
        if params is not None:
            if params.api_group is not None:
                errs += [FieldError.invalid(f"{at}.apiGroup", params.api_group, m)
                         for m in is_dns1123_subdomain(params.api_group)]
            if not params.kind:
                errs.append(FieldError.required(f"{at}.kind", "kind is required"))
            if not params.name:
                errs.append(FieldError.required(f"{at}.name", "name is required"))
            if params.scope not in _SCOPES:
                errs.append(FieldError.not_supported(f"{at}.scope", params.scope, _SCOPES))
            elif params.scope == "Namespace" and not params.namespace:
                errs.append(FieldError.required(f"{at}.namespace", "`parameters.scope` is set to 'Namespace'"))
            elif params.scope == "Cluster" and params.namespace:
                errs.append(FieldError.forbidden(f"{at}.namespace", "`parameters.scope` is set to 'Cluster'"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        before = (old.get("spec") or {}).get("controller")
        after = (new.get("spec") or {}).get("controller")
        if before != after:
            return [FieldError.invalid("spec.controller", after, "field is immutable")]
        return []


# kube-apiserver's printIngress and printIngressClass.
_ADDRESS_WIDTH = 16


def _class(obj: dict) -> str:
    return (obj.get("spec") or {}).get("ingressClassName") or "<none>"


def _hosts(obj: dict) -> str:
    """formatHosts: the first three rules' hosts, ``*`` for none, ``+ N more...`` past three."""
    rules = (obj.get("spec") or {}).get("rules") or []
    hosts, more = [], False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(rule["host"])
    if not hosts:
        return "*"
    text = ",".join(hosts)
    return f"{text} + {len(rules) - 3} more..." if more else text


def _address(obj: dict) -> str:
    """The load balancer's addresses (an IP, else a hostname), sorted, cut at 16 characters."""
    entries = (((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []
    text = ",".join(sorted({e.get("ip") or e.get("hostname") for e in entries if e.get("ip") or e.get("hostname")}))
    return text[:_ADDRESS_WIDTH - 3] + "..." if len(text) > _ADDRESS_WIDTH else text


def _ports(obj: dict) -> str:
    return "80, 443" if (obj.get("spec") or {}).get("tls") else "80"


def _parameters(obj: dict) -> str:
    params = (obj.get("spec") or {}).get("parameters")
    if not params:
        return "<none>"
    kind = params.get("kind", "") + (f".{params['apiGroup']}" if params.get("apiGroup") else "")
    return f"{kind}/{params.get('name', '')}"


INGRESS_COLUMNS = (
    PrinterColumn("Class", value=_class),
    PrinterColumn("Hosts", value=_hosts),
    PrinterColumn("Address", value=_address),
    PrinterColumn("Ports", value=_ports),
    AGE,
)
INGRESSCLASS_COLUMNS = (
    PrinterColumn("Controller", value=lambda o: (o.get("spec") or {}).get("controller") or ""),
    PrinterColumn("Parameters", value=_parameters),
    AGE,
)
