"""Prometheus: what ServiceMonitors and PodMonitors select, and the control plane's own metrics.

* ``GET /trimaran/v1/prometheus/targets`` answers Prometheus' HTTP service discovery
  (``http_sd_configs``): one target group per selected pod port, with the labels the Prometheus
  operator's generated configuration would give it (``job``, ``namespace``, ``pod``, ``container``,
  ``endpoint``, ``service``, ``__metrics_path__``, ...), after each endpoint's ``relabelings``
  (`relabel`, Prometheus' rules). It reads the store at request time, so a
  monitor applied now is scraped at Prometheus' next refresh, and lists only the namespaces the
  caller's token may list.
* `write_prometheus_config` writes ``$TRIMARAN_HOME/prometheus/prometheus.yml``: one job reading
  that endpoint with a view token and the home's CA, so ``prometheus --config.file=...`` scrapes.
* `ControlPlaneCollector` adds to ``/metrics``: objects by kind and phase, pods by phase,
  reconcile latency and queue depth per reconciler, GPUs allocated, Katib trials created, the
  node's time per part of a pod's start and end (``trimaran_node_part_seconds``).

Every target is ``<the pod's IP>:<port>`` (``status.podIP``: its own address on the pod network,
127.0.0.1 where pods share this machine's network): a
named or numbered port resolves as a Service's ``targetPort`` does (a Deployment pod's per-pod
port, an InferenceService replica's HTTP port stand in for the declared number).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily

from trimaran.api.apps import selector_matches
from trimaran.api.kinds import all_kinds
from trimaran.controllers.base import ControllerManager
from trimaran.controllers.pods import LOOPBACK, is_terminating, phase
from trimaran.controllers.probes import resolve_port
from trimaran.controllers.tuning.experiment import TRIALS_CREATED
from trimaran.runtime.node import Node
from trimaran.runtime.nodeapi import NodeAPI
from trimaran.server.kube import principal_of
from trimaran.server.tokens import TokenStore, write_private
from trimaran.store import NotFound, Store

__all__ = ["SD_PATH", "ControlPlaneCollector", "monitoring_router", "prometheus_config_path", "relabel",
           "scrape_targets", "write_prometheus_config"]

SD_PATH = "/trimaran/v1/prometheus/targets"
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
_TOKEN_NAME = "prometheus"
_GROUP_REFERENCE = re.compile(r"\$\$|\$\{(\w+)\}|\$(\w+)")
_VALID_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_DEFAULT_TIMEOUT_SECONDS = 10.0
_DURATION_PART = re.compile(r"([0-9]+)(ms|y|w|d|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _seconds(duration: str) -> float:
    """A Prometheus duration (``1m30s``; validated by the API) in seconds."""
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(duration))


def _label_name(key: str) -> str:
    """A Kubernetes label key as Prometheus' Kubernetes discovery spells it in ``__meta_*`` names."""
    return _LABEL_CHARS.sub("_", key)


def _monitor_namespaces(monitor: dict, namespaces: list[str]) -> list[str]:
    """The namespaces a monitor looks in: its own by default, ``any`` or ``matchNames`` otherwise."""
    chosen = (monitor["spec"].get("namespaceSelector") or {})
    if chosen.get("any"):
        return namespaces
    if chosen.get("matchNames"):
        return [n for n in chosen["matchNames"] if n in namespaces]
    return [monitor["metadata"]["namespace"]]


def _scrape_labels(endpoint: dict) -> dict[str, str]:
    labels = {"__metrics_path__": endpoint.get("path") or "/metrics", "__scheme__": endpoint.get("scheme") or "http"}
    if endpoint.get("interval"):
        labels["__scrape_interval__"] = endpoint["interval"]
    if endpoint.get("scrapeTimeout"):
        labels["__scrape_timeout__"] = endpoint["scrapeTimeout"]
    elif endpoint.get("interval") and _seconds(endpoint["interval"]) < _DEFAULT_TIMEOUT_SECONDS:
        # Prometheus refuses a target whose timeout (its 10 s default) exceeds its interval, where a
        # configuration file's job would have its timeout lowered to the interval: lower it here.
        labels["__scrape_timeout__"] = endpoint["interval"]
    for name, values in (endpoint.get("params") or {}).items():
        if values:  # a target label holds one value, as Prometheus' own __param_ relabeling
            labels[f"__param_{name}"] = values[0]
    return labels


def _expand(match: re.Match[str], template: str) -> str:
    """Go's ``Regexp.Expand``, as Prometheus fills ``replacement`` and ``targetLabel``: ``$1``, ``${1}``,
    ``$name``; ``$$`` is a dollar; a group that does not exist is empty."""
    def group(ref: re.Match[str]) -> str:
        if ref.group(0) == "$$":
            return "$"
        name = ref.group(1) or ref.group(2)
        try:
            return match.group(int(name) if name.isdigit() else name) or ""
        except IndexError:
            return ""
    return _GROUP_REFERENCE.sub(group, template)


def relabel(labels: dict[str, str], configs: list[dict]) -> dict[str, str] | None:
    """Prometheus' target relabeling (``relabel_configs``) of one target; ``None`` when it is dropped.

    Applied here because the generated job is one for all monitors: each endpoint's ``relabelings``
    run on its targets' labels, ``__meta_*`` included, as the operator's per-monitor job would."""
    labels = dict(labels)
    for config in configs:
        action = (config.get("action") or "replace").lower()
        regex = re.compile(f"^(?:{config.get('regex', '(.*)')})$")
        value = (config.get("separator") or ";").join(labels.get(n, "") for n in config.get("sourceLabels") or [])
        target = config.get("targetLabel") or ""
        replacement = config.get("replacement", "$1")
        if action == "replace":
            match = regex.match(value)
            if match:
                name = _expand(match, target)
                if _VALID_LABEL.match(name):
                    if new := _expand(match, replacement):
                        labels[name] = new
                    else:
                        labels.pop(name, None)
        elif action in ("keep", "drop"):
            if (regex.match(value) is None) == (action == "keep"):
                return None
        elif action in ("keepequal", "dropequal"):
            if (value == labels.get(target, "")) != (action == "keepequal"):
                return None
        elif action == "hashmod":
            digest = hashlib.md5(value.encode()).digest()  # noqa: S324 - Prometheus' sharding hash, not security
            labels[target] = str(int.from_bytes(digest[8:], "big") % int(config.get("modulus") or 1))
        elif action in ("lowercase", "uppercase"):
            labels[target] = value.lower() if action == "lowercase" else value.upper()
        elif action == "labelmap":
            for name, label_value in list(labels.items()):
                if match := regex.match(name):
                    labels[_expand(match, replacement)] = label_value
        elif action in ("labeldrop", "labelkeep"):
            labels = {k: v for k, v in labels.items() if (regex.match(k) is None) == (action == "labeldrop")}
    return labels


def _pod_labels(pod: dict, extra: list[str]) -> dict[str, str]:
    meta = pod["metadata"]
    own = meta.get("labels") or {}
    labels = {"__meta_kubernetes_namespace": meta["namespace"], "__meta_kubernetes_pod_name": meta["name"],
              "__meta_kubernetes_pod_uid": meta.get("uid", ""), "__meta_kubernetes_pod_phase": phase(pod),
              "__meta_kubernetes_pod_node_name": (pod.get("spec") or {}).get("nodeName") or "localhost",
              "namespace": meta["namespace"], "pod": meta["name"]}
    labels.update({f"__meta_kubernetes_pod_label_{_label_name(k)}": v for k, v in own.items()})
    labels.update({_label_name(k): own[k] for k in extra if k in own})
    return labels


def _container_of(pod: dict, port: int | str) -> tuple[str, str]:
    """(container name, port name) of the container port ``port`` names or numbers, when declared."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == port or str(declared.get("containerPort")) == str(port):
                return container.get("name") or "", declared.get("name") or ""
    return "", ""


def _pod_monitor_targets(store: Store, monitor: dict, namespaces: list[str]) -> Iterator[dict]:
    spec, meta = monitor["spec"], monitor["metadata"]
    for namespace in _monitor_namespaces(monitor, namespaces):
        for pod in store.list("Pod", namespace, shared=True):
            if phase(pod) != "Running" or is_terminating(pod):
                continue
            if not selector_matches(spec.get("selector"), pod["metadata"].get("labels")):
                continue
            own = pod["metadata"].get("labels") or {}
            job = own.get(spec["jobLabel"]) if spec.get("jobLabel") else None
            for endpoint in spec.get("podMetricsEndpoints") or []:
                wanted = endpoint.get("port") or endpoint.get("targetPort")
                number = resolve_port(pod, wanted) if wanted is not None else None
                if number is None:
                    continue
                container, port_name = _container_of(pod, wanted)
                labels = {**_pod_labels(pod, spec.get("podTargetLabels") or []),
                          "__meta_kubernetes_pod_container_name": container,
                          "__meta_kubernetes_pod_container_port_name": port_name,
                          "__meta_kubernetes_pod_container_port_number": str(number),
                          "container": container, "endpoint": str(wanted),
                          "job": job or f"{meta['namespace']}/{meta['name']}", **_scrape_labels(endpoint)}
                host = (LOOPBACK if pod["spec"].get("hostNetwork")
                        else (pod.get("status") or {}).get("podIP") or LOOPBACK)
                yield from _group(f"{host}:{number}", labels, endpoint)


def _service_port_names(service: dict, endpoint: dict) -> set[str]:
    """The Service port names an endpoint picks: by its ``port`` name, or the ports whose targetPort it is."""
    if endpoint.get("port"):
        return {endpoint["port"]}
    target = str(endpoint.get("targetPort"))
    return {p.get("name") or "" for p in (service.get("spec") or {}).get("ports") or []
            if str(p.get("targetPort", p.get("port"))) == target}


def _service_monitor_targets(store: Store, monitor: dict, namespaces: list[str]) -> Iterator[dict]:
    spec = monitor["spec"]
    for namespace in _monitor_namespaces(monitor, namespaces):
        for service in store.list("Service", namespace, shared=True):
            smeta = service["metadata"]
            own = smeta.get("labels") or {}
            if not selector_matches(spec.get("selector"), own):
                continue
            try:
                endpoints = store.get("Endpoints", namespace, smeta["name"])
            except NotFound:
                continue  # no pod behind it yet
            job = own.get(spec["jobLabel"]) if spec.get("jobLabel") else None
            service_labels = {"__meta_kubernetes_service_name": smeta["name"], "service": smeta["name"],
                              **{f"__meta_kubernetes_service_label_{_label_name(k)}": v for k, v in own.items()},
                              **{_label_name(k): own[k] for k in spec.get("targetLabels") or [] if k in own}}
            for endpoint in spec.get("endpoints") or []:
                names = _service_port_names(service, endpoint)
                for subset in endpoints.get("subsets") or []:
                    for port in subset.get("ports") or []:
                        if (port.get("name") or "") not in names:
                            continue
                        for ready, addresses in (("true", subset.get("addresses")),
                                                 ("false", subset.get("notReadyAddresses"))):
                            for address in addresses or []:
                                yield from _endpoint_target(store, namespace, address, port, ready, endpoint,
                                                            spec, {**service_labels, "job": job or smeta["name"]})


def _endpoint_target(store: Store, namespace: str, address: dict, port: dict, ready: str, endpoint: dict,
                     spec: dict, labels: dict[str, str]) -> Iterator[dict]:
    ref = address.get("targetRef") or {}
    out = {**labels, "__meta_kubernetes_namespace": namespace, "namespace": namespace,
           "__meta_kubernetes_endpoint_ready": ready, "__meta_kubernetes_endpoint_port_name": port.get("name") or "",
           "endpoint": port.get("name") or str(port["port"]), **_scrape_labels(endpoint)}
    if ref.get("kind") == "Pod":
        try:
            pod = store.get("Pod", namespace, ref["name"])
        except NotFound:
            return  # gone since the Endpoints were written
        out = {**_pod_labels(pod, spec.get("podTargetLabels") or []), **out}
        out["container"] = _container_of(pod, port["port"])[0]
    yield from _group(f"{address.get('ip') or LOOPBACK}:{port['port']}", out, endpoint)


def _group(target: str, labels: dict[str, str], endpoint: dict) -> Iterator[dict]:
    """One ``http_sd_configs`` target group, after the endpoint's ``relabelings`` (none when they drop it)."""
    kept = relabel({**labels, "__address__": target}, endpoint.get("relabelings") or [])
    if kept is not None:
        address = kept.pop("__address__", "") or target
        yield {"targets": [address], "labels": kept}


def scrape_targets(store: Store, may_list: Callable[[str], bool]) -> list[dict]:
    """Every target the stored monitors select, in namespaces ``may_list`` allows, as ``http_sd_configs`` groups."""
    namespaces = [ns["metadata"]["name"] for ns in store.list("Namespace", shared=True)
                  if may_list(ns["metadata"]["name"])]
    groups: list[dict] = []
    for kind, select in (("PodMonitor", _pod_monitor_targets), ("ServiceMonitor", _service_monitor_targets)):
        for monitor in store.list(kind, shared=True):
            if may_list(monitor["metadata"]["namespace"]):
                groups.extend(select(store, monitor, namespaces))
    return groups


def monitoring_router(store: Store) -> APIRouter:
    """The HTTP service-discovery route; the token middleware has already authenticated the caller."""
    router = APIRouter()

    @router.get(SD_PATH)
    def targets(request: Request) -> Response:
        principal = principal_of(request)
        groups = scrape_targets(store, lambda ns: principal.allows("list", ns, "pods"))
        return Response(json.dumps(groups).encode(), media_type="application/json")

    return router


def prometheus_config_path(home: Path) -> Path:
    return home / "prometheus" / "prometheus.yml"


def _prometheus_token(home: Path, tokens: TokenStore) -> str:
    """A view token for Prometheus, kept across restarts while it stays valid."""
    path = home / "prometheus" / "token"
    try:
        token = path.read_text().strip()
    except OSError:
        token = ""
    if token and tokens.authenticate(token) is not None:
        return token
    # system:monitoring reads /metrics (kube-apiserver's bootstrap binding), view the pods it scrapes.
    return tokens.create("view", None, name=_TOKEN_NAME, groups=["system:monitoring"])


def write_prometheus_config(home: Path, api_url: str, tokens: TokenStore, ca_pem: bytes) -> Path:
    """Write a ready scrape configuration: the monitors' targets, and the control plane's own
    ``/metrics`` (a cluster-wide view token reads both; the CA verifies the API's certificate)."""
    directory = home / "prometheus"
    directory.mkdir(mode=0o700, exist_ok=True)
    token_file, ca_file = directory / "token", directory / "ca.crt"
    write_private(token_file, _prometheus_token(home, tokens).encode())
    write_private(ca_file, ca_pem)
    auth = {"authorization": {"type": "Bearer", "credentials_file": str(token_file)},
            "tls_config": {"ca_file": str(ca_file)}}
    config = {
        "global": {"scrape_interval": "15s"},
        "scrape_configs": [
            {"job_name": "trimaran-monitors",
             "http_sd_configs": [{"url": f"{api_url}{SD_PATH}", "refresh_interval": "5s", **auth}]},
            {"job_name": "trimaran-control-plane", "scheme": "https", **auth,
             "static_configs": [{"targets": [api_url.removeprefix("https://")]}]},
        ],
    }
    # JSON is YAML: Prometheus reads it, and writing it needs no YAML library.
    path = prometheus_config_path(home)
    write_private(path, json.dumps(config, indent=2).encode() + b"\n")
    return path


def _object_phase(obj: dict) -> str:
    """A pod's phase, a state (Katib, Seldon), or the last true condition (the training kinds)."""
    status = obj.get("status") or {}
    if isinstance(status.get("phase"), str):
        return status["phase"]
    if isinstance(status.get("state"), str):
        return status["state"]
    true = [c.get("type", "") for c in status.get("conditions") or [] if c.get("status") == "True"]
    return true[-1] if true else ""


class ControlPlaneCollector:
    """Read at each scrape: the store's objects, the controllers' queues and timings, the node."""

    def __init__(self, store: Store, manager: ControllerManager, node: Node | None,
                 runtime: NodeAPI | None = None) -> None:
        self.store = store
        self.manager = manager
        self.node = node
        self.runtime = runtime

    def collect(self) -> Iterator[Any]:
        objects = GaugeMetricFamily("trimaran_objects", "Stored objects by kind and phase (status.phase, "
                                    "status.state or the last true condition).", labels=["kind", "phase"])
        pods = GaugeMetricFamily("trimaran_pods", "Pods by phase.", labels=["phase"])
        for kind in dict.fromkeys(k.kind for k in all_kinds()):
            counts = Counter(_object_phase(o) for o in self.store.list(kind, shared=True))
            for state, count in sorted(counts.items()):
                objects.add_metric([kind, state], count)
                if kind == "Pod":
                    pods.add_metric([state], count)
        yield objects
        yield pods
        yield from self.manager.reconcile_seconds.collect()
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue.", labels=["name"])
        for name, count in sorted(self.manager.queue_depths().items()):
            depth.add_metric([name], count)
        yield depth
        if self.node is not None:
            capacity = GaugeMetricFamily("trimaran_node_gpus", "GPUs (and MIG slices) on the node.",
                                         labels=["resource"])
            allocated = GaugeMetricFamily("trimaran_node_gpus_allocated", "GPUs held by admitted pods.",
                                          labels=["resource"])
            held = self.node.allocated().gpus
            for resource, count in sorted(self.node.capacity.gpus.items()):
                capacity.add_metric([resource], count)
                allocated.add_metric([resource], held.get(resource, 0))
            yield capacity
            yield allocated
        yield from TRIALS_CREATED.collect()
        if self.runtime is not None:
            parts = SummaryMetricFamily("trimaran_node_part_seconds", "Time the node spent on each part of pods' "
                                        "starts and ends (trimaran.runtime.timings).", labels=["part"])
            for part, (count, total) in sorted(self.runtime.part_timings().items()):
                parts.add_metric([part], count, total)
            yield parts
