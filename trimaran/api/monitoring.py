"""monitoring.coreos.com/v1 ServiceMonitor and PodMonitor (the Prometheus operator's kinds).

The control plane serves what they select as a Prometheus HTTP service-discovery endpoint
(``server/monitoring.py``) rather than running an operator: a user's own Prometheus reads it. The
fields that pick and shape targets take effect (selector, namespaceSelector, port, targetPort,
path, scheme, params, interval, scrapeTimeout, jobLabel, targetLabels, podTargetLabels,
relabelings); the rest of upstream's fields (metricRelabelings, auth, TLS, limits) are accepted and
kept for a cluster.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

import re
from typing import Any, Literal

from trimaran.api.core import is_valid_port_name
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, LabelSelector, Resource

__all__ = ["API_VERSION", "PodMonitor", "ServiceMonitor"]

API_VERSION = "monitoring.coreos.com/v1"
# Prometheus' duration, as the operator's CRDs pattern it.
_DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
_ACTIONS = ("replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase",
            "keepequal", "dropequal")


class NamespaceSelector(ApiModel):
    any: bool | None = None
    match_names: list[str] | None = None


class RelabelConfig(ApiModel):
    source_labels: list[str] | None = None
    separator: str | None = None
    target_label: str | None = None
    regex: str | None = None
    modulus: int | None = None
    replacement: str | None = None
    action: str | None = None

    def check(self, path: str) -> list[FieldError]:
        errs = []
        if self.action is not None and self.action.lower() not in _ACTIONS:
            errs.append(FieldError.not_supported(join_path(path, "action"), self.action, _ACTIONS))
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                errs.append(FieldError.invalid(join_path(path, "regex"), self.regex, str(exc)))
        return errs


class Endpoint(ApiModel):
    """One scrape endpoint: a ServiceMonitor's ``endpoints[]`` or a PodMonitor's ``podMetricsEndpoints[]``."""

    port: str | None = None
    target_port: int | str | None = None
    path: str | None = None
    scheme: Literal["http", "https"] | None = None
    params: dict[str, list[str]] | None = None
    interval: str | None = None
    scrape_timeout: str | None = None
    honor_labels: bool | None = None
    honor_timestamps: bool | None = None
    relabelings: list[RelabelConfig] | None = None
    metric_relabelings: list[RelabelConfig] | None = None
    bearer_token_file: str | None = None
    authorization: dict[str, Any] | None = None
    basic_auth: dict[str, Any] | None = None
    tls_config: dict[str, Any] | None = None
    follow_redirects: bool | None = None
    enable_http2: bool | None = None
    proxy_url: str | None = None

    def check(self, path: str) -> list[FieldError]:
        errs: list[FieldError] = []
        if self.port is not None:
            errs.extend(FieldError.invalid(join_path(path, "port"), self.port, m)
                        for m in is_valid_port_name(self.port))
        target, target_path = self.target_port, join_path(path, "targetPort")
        if isinstance(target, int) and not 1 <= target <= 65535:
            errs.append(FieldError.invalid(target_path, target, "must be between 1 and 65535, inclusive"))
        elif isinstance(target, str) and not target.isdigit():
            errs.extend(FieldError.invalid(target_path, target, m) for m in is_valid_port_name(target))
        if self.path is not None and not self.path.startswith("/"):
            errs.append(FieldError.invalid(join_path(path, "path"), self.path, "must start with '/'"))
        for field in ("interval", "scrape_timeout"):
            value = getattr(self, field)
            if value is not None and not _DURATION.match(value):
                errs.append(FieldError.invalid(join_path(path, "scrapeTimeout" if field == "scrape_timeout" else field),
                                               value, "must be a Prometheus duration (e.g. 30s, 1m)"))
        for name in ("relabelings", "metric_relabelings"):
            key = "metricRelabelings" if name == "metric_relabelings" else name
            for i, relabel in enumerate(getattr(self, name) or []):
                errs.extend(relabel.check(join_path(path, key, i)))
        return errs


class _MonitorSpec(ApiModel):
    job_label: str | None = None
    pod_target_labels: list[str] | None = None
    selector: LabelSelector
    namespace_selector: NamespaceSelector | None = None
    sample_limit: int | None = None
    target_limit: int | None = None
    label_limit: int | None = None
    label_name_length_limit: int | None = None
    label_value_length_limit: int | None = None
    attach_metadata: dict[str, Any] | None = None


class ServiceMonitorSpec(_MonitorSpec):
    target_labels: list[str] | None = None
    endpoints: list[Endpoint]


class PodMonitorSpec(_MonitorSpec):
    pod_metrics_endpoints: list[Endpoint]


def _check_spec(spec: _MonitorSpec, field: str, endpoints: list[Endpoint]) -> list[FieldError]:
    errs = spec.selector.check("spec.selector")
    for i, endpoint in enumerate(endpoints):
        path = join_path("spec", field, i)
        if endpoint.port is None and endpoint.target_port is None:
            errs.append(FieldError.required(join_path(path, "port"), "port or targetPort names the port to scrape"))
        errs.extend(endpoint.check(path))
    return errs


class ServiceMonitor(Resource):
    """Scrapes the pods behind the Services its selector picks, at each Service port ``endpoints`` name."""

    spec: ServiceMonitorSpec

    def check(self) -> list[FieldError]:
        return super().check() + _check_spec(self.spec, "endpoints", self.spec.endpoints)


class PodMonitor(Resource):
    """Scrapes the pods its selector picks, at the container ports ``podMetricsEndpoints`` name."""

    spec: PodMonitorSpec

    def check(self) -> list[FieldError]:
        return super().check() + _check_spec(self.spec, "podMetricsEndpoints", self.spec.pod_metrics_endpoints)
