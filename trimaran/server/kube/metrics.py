"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics, as metrics-server serves them, so that
``kubectl top nodes`` and ``kubectl top pods`` work (kubectl looks the group up in discovery first:
`trimaran.server.kube` lists :func:`api_group` among its groups).

metrics-server scrapes each kubelet's cumulative counters and serves the rate between two scrapes
over their interval (``window``). Here the node's counters are read through the node interface
(``LocalRuntime.stats``: the machine's from /proc, each container's from its cgroup) when asked
for: a request compares a fresh reading with the previous one, taken by an earlier request at
least :data:`MIN_WINDOW_S` before (waiting out the rest of that, or a first reading, off the event
loop); readings closer together than that share one answer. CPU is in nanocores (``"12345n"``),
memory is the working set in ``Ki``; a pod is listed once every container that runs has a
reading on both sides of the window (a container that just started or restarted has not yet).
Only get and list, namespaced pods and cluster-wide nodes, authorised as reading pods and nodes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from trimaran.runtime.node import Node
from trimaran.runtime.stats import NodeUsage
from trimaran.server.kube.errors import StatusError, status_response
from trimaran.server.kube.selectors import parse_field_selector, parse_label_selector
from trimaran.store import Store

__all__ = ["GROUP", "VERSION", "MIN_WINDOW_S", "Sampler", "api_group", "metrics_routes", "resource_list"]

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
MIN_WINDOW_S = 1.0
# A reading older than this says little about now: a new one is taken and the window waited out.
MAX_AGE_S = 60.0


def api_group() -> dict:
    """The group as discovery (``/apis``) lists it."""
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [version], "preferredVersion": version}


def resource_list() -> dict:
    verbs = ["get", "list"]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [
        {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": verbs},
        {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": verbs},
    ]}


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _usage(cpu_ns: int, window_s: float, memory: int) -> dict[str, str]:
    return {"cpu": f"{max(0, round(cpu_ns / window_s))}n", "memory": f"{memory // 1024}Ki"}


class Sampler:
    """Pairs of readings of ``read`` (``LocalRuntime.stats``) at least :data:`MIN_WINDOW_S` apart."""

    def __init__(self, read: Callable[[], NodeUsage]) -> None:
        self._read = read
        self._last: NodeUsage | None = None
        self._pair: tuple[NodeUsage, NodeUsage] | None = None
        self._lock: asyncio.Lock | None = None

    async def window(self) -> tuple[NodeUsage, NodeUsage]:
        """The previous reading and a fresh one (or the last pair, when that is fresh enough)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pair is not None and time.time() - self._pair[1].timestamp < MIN_WINDOW_S:
                return self._pair
            if self._last is None or time.time() - self._last.timestamp > MAX_AGE_S:
                self._last = await asyncio.to_thread(self._read)
            wait = MIN_WINDOW_S - (time.time() - self._last.timestamp)
            if wait > 0:
                await asyncio.sleep(wait)
            current = await asyncio.to_thread(self._read)
            self._pair = (self._last, current)
            self._last = current
            return self._pair


def node_metrics(node: Node, before: NodeUsage, after: NodeUsage) -> dict:
    window = after.timestamp - before.timestamp
    return {"kind": "NodeMetrics", "apiVersion": GROUP_VERSION,
            "metadata": {"name": node.name, "creationTimestamp": _rfc3339(time.time()), "labels": dict(node.labels)},
            "timestamp": _rfc3339(after.timestamp), "window": f"{window:.3f}s",
            "usage": _usage(after.cpu_ns - before.cpu_ns, window, after.memory_working_set)}


def pod_metrics(pod: dict, before: NodeUsage, after: NodeUsage) -> dict | None:
    """The pod's metrics over the window, or None while it has none (see the module's notes)."""
    meta = pod["metadata"]
    now, then = after.pods.get(meta["uid"]), before.pods.get(meta["uid"])
    if now is None or then is None:
        return None
    window = after.timestamp - before.timestamp
    containers = []
    for container in pod["spec"].get("containers") or []:
        current, previous = now.containers.get(container["name"]), then.containers.get(container["name"])
        if current is None:
            continue  # not running
        if previous is None or previous.attempt != current.attempt or previous.cpu_ns > current.cpu_ns:
            return None
        containers.append({"name": current.name,
                           "usage": _usage(current.cpu_ns - previous.cpu_ns, window, current.memory_working_set)})
    if not containers:
        return None
    return {"kind": "PodMetrics", "apiVersion": GROUP_VERSION,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "creationTimestamp": _rfc3339(time.time()), "labels": dict(meta.get("labels") or {})},
            "timestamp": _rfc3339(after.timestamp), "window": f"{window:.3f}s", "containers": containers}


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


def _listed(kind: str, items: list[dict]) -> dict:
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


def metrics_routes(store: Store, stats: Callable[[], NodeUsage], node: Node) -> list[BaseRoute]:
    """Routes for ``/apis/metrics.k8s.io`` and below (mount them before the Kubernetes API's
    ``/apis/{group}``). ``stats`` reads the node's counters; ``node`` names the node."""
    sampler = Sampler(stats)

    def allow(request: Request, verb: str, namespace: str | None, plural: str) -> None:
        principal = getattr(request.state, "principal", None)
        if principal is None:
            raise StatusError.unauthorized()
        if not principal.allows(verb, namespace, plural, GROUP):
            raise StatusError.forbidden(principal.name, verb, GROUP, plural, namespace)

    def discovery(request: Request) -> None:
        principal = getattr(request.state, "principal", None)
        if principal is None:
            raise StatusError.unauthorized()
        if not principal.may_get_path(request.url.path.rstrip("/")):  # system:discovery's /apis/*
            raise StatusError(403, "Forbidden", f'forbidden: User "{principal.name}" cannot get path '
                              f'"{request.url.path}"')

    async def serve(request: Request) -> Response:
        parts = [p for p in request.path_params.get("rest", "").split("/") if p]
        if request.method != "GET":
            raise StatusError.method_not_allowed("metrics are read-only")
        if not parts:
            discovery(request)
            return _json(api_group())
        if parts[0] != VERSION:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        rest = parts[1:]
        if not rest:
            discovery(request)
            return _json(resource_list())
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if rest[0] == "nodes" and namespace is None and len(rest) <= 2:
            return await nodes(request, rest[1] if len(rest) == 2 else None)
        if rest[0] == "pods" and len(rest) <= 2 and (namespace is not None or len(rest) == 1):
            return await pods(request, namespace, rest[1] if len(rest) == 2 else None)
        raise StatusError(404, "NotFound", "the server could not find the requested resource")

    async def nodes(request: Request, name: str | None) -> Response:
        allow(request, "get" if name else "list", None, "nodes")
        labels = parse_label_selector(request.query_params.get("labelSelector"))
        before, after = await sampler.window()
        item = node_metrics(node, before, after)
        if name is not None:
            if name != node.name:
                raise StatusError.not_found(GROUP, "nodes", name)
            return _json(item)
        return _json(_listed("NodeMetrics", [item] if labels.matches(item) else []))

    async def pods(request: Request, namespace: str | None, name: str | None) -> Response:
        allow(request, "get" if name else "list", namespace, "pods")
        labels = parse_label_selector(request.query_params.get("labelSelector"))
        fields = parse_field_selector(request.query_params.get("fieldSelector"), "Pod")
        listed = await asyncio.to_thread(store.list, "Pod", namespace, labels.equalities() or None)
        chosen = [p for p in listed if (name is None or p["metadata"]["name"] == name)
                  and labels.matches(p) and fields.matches(p)]
        before, after = await sampler.window()
        items = [m for p in chosen if (m := pod_metrics(p, before, after)) is not None]
        if name is not None:
            if not items:
                raise StatusError.not_found(GROUP, "pods", name)
            return _json(items[0])
        return _json(_listed("PodMetrics", items))

    async def guarded(request: Request) -> Response:
        try:
            return await serve(request)
        except StatusError as exc:
            return status_response(exc)

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return [Route(f"/apis/{GROUP}", guarded, methods=methods),
            Route(f"/apis/{GROUP}/{{rest:path}}", guarded, methods=methods)]
