"""The router: Knative's ingress, activator and queue-proxy for InferenceServices on one machine.

It reads a routes file the serving controller writes (re-read when it changes) and serves each
service on its own port and on a shared ingress port by ``Host`` header (``NAME.NAMESPACE.<domain>``),
and V2 gRPC on a port of the service's own (`_grpc`: unary calls forwarded as raw bytes). For each
request, HTTP or gRPC alike, it:

- picks a revision by the service's traffic split (percentages);
- holds the request while the revision has no ready replica (scale from zero, a replica
  restarting), up to the activation timeout;
- sends it to the ready replica with the fewest requests in flight, never above the revision's
  containerConcurrency (requests wait for a free slot instead);
- retries on another replica when the connection to one fails before a response (a replica
  killed or stopping): inference has no side effects, so no request is lost to a dying replica;
- counts concurrency (time-averaged per second) and requests per revision, which the controller
  reads from the admin port (``GET /stats``) to autoscale.

Every pod shares this machine's network, so ``/stats`` (which names every namespace's revisions and
their load) answers only a request that carries the routes file's ``adminToken`` as a bearer token;
the file is the controller's, and only the router's pod mounts it.

Replicas are probed (``GET /v2/health/ready`` for the model server, a TCP connect for custom
containers without a readiness probe); only replicas that answered 200 get traffic.

A service whose route carries a ``graph`` (an InferenceGraph's router service) has its POSTs run by the
graph here (`trimaran.serving.graph.server.GraphRouter`): a step calling a service this router serves
(its ``http://127.0.0.1:PORT`` URL) is routed in-process, so a graph adds no loopback hop to its steps.
Other requests (health, metadata) still reach the graph's replicas.

A port it cannot listen on (another process holds it) does not stop the rest: it is reported in
``/stats`` (``bindErrors``, ``grpcBindErrors``, ``listenErrors`` for the ingress) for the controller
to show on the InferenceService and move, and tried again on every reload tick.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import grpc
import grpc.aio
import httptools

from trimaran._aio import within
from trimaran.serving.router import _grpc
from trimaran.serving.router._http import Request, RequestReader, Response, UpstreamError, UpstreamPool, render_response

if TYPE_CHECKING:  # the graph module imports this package's _http: imported where used, not here
    from trimaran.serving.graph.server import Answer, GraphRouter, Step

__all__ = ["Router"]

log = logging.getLogger(__name__)

RELOAD_SECONDS = 0.2
PROBE_READY_SECONDS = 0.5
PROBE_UNREADY_SECONDS = 0.1
MAX_ATTEMPTS = 4
BUCKETS_KEPT = 120
REVISION_HEADER = b"x-trimaran-revision"
# A retired replica's gRPC channel is closed once its calls are answered; none outlives a request's timeout.
CHANNEL_CLOSE_GRACE = 600.0
T = TypeVar("T")


class Stats:
    """A revision's in-flight count, and per-second buckets of its time-averaged concurrency and
    request count (what Knative's queue-proxy reports to the autoscaler)."""

    def __init__(self) -> None:
        self.inflight = 0
        self._area = 0.0
        self._requests = 0
        self._last = time.monotonic()
        self._bucket_start = self._last
        self.buckets: deque[tuple[int, float, int]] = deque(maxlen=BUCKETS_KEPT)

    def change(self, delta: int) -> None:
        now = time.monotonic()
        self._area += self.inflight * (now - self._last)
        self._last = now
        self.inflight += delta
        if delta > 0:
            self._requests += delta

    def roll(self, second: int) -> None:
        """Close the bucket of wall-clock ``second``."""
        self.change(0)
        elapsed = max(self._last - self._bucket_start, 1e-6)
        self.buckets.append((second, self._area / elapsed, self._requests))
        self._area, self._requests, self._bucket_start = 0.0, 0, self._last


@dataclass
class Endpoint:
    """One replica of a revision."""

    address: str
    pool: UpstreamPool
    grpc_address: str | None = None
    ready: bool = False
    inflight: int = 0
    probe: asyncio.Task | None = None
    channel: grpc.aio.Channel | None = None

    def grpc_channel(self) -> grpc.aio.Channel:
        """The replica's one gRPC channel, opened on first use."""
        if self.channel is None:
            assert self.grpc_address is not None
            self.channel = _grpc.open_channel(self.grpc_address)
        return self.channel


@dataclass
class Revision:
    """A revision's replicas, limits and metrics."""

    name: str
    probe_path: str | None
    container_concurrency: int = 0
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    draining: dict[str, Endpoint] = field(default_factory=dict)
    stats: Stats = field(default_factory=Stats)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        """Wake every request waiting for a ready replica or a free slot."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()


@dataclass
class Service:
    """One routable service (an InferenceService's entry component, or its predictor behind a transformer)."""

    key: str
    port: int
    hosts: list[str]
    traffic: list[tuple[str, float]]
    timeout: float
    activation_timeout: float
    grpc_port: int | None = None
    # An ingress path prefix (a SeldonDeployment's ``/seldon/NS/NAME/``) this service answers on the ingress
    # port beside its host, with its share of that path's traffic; a shadow gets a copy, its answer dropped.
    path: str | None = None
    path_weight: float = 100.0
    shadow: bool = False
    graph: GraphRouter | None = None  # POSTs run this graph in the router (an InferenceGraph's service)
    graph_spec: dict | None = None
    awaiting_traffic: int = 0  # requests held until the traffic names a routed revision


class Unroutable(Exception):
    """No replica answered: ``status`` is the HTTP status that says why (503 none ready, 502 every attempt
    failed, 504 timed out, 501 the revision serves no gRPC)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# How a request the router could not place is answered over gRPC.
_GRPC_CODES = {501: grpc.StatusCode.UNIMPLEMENTED, 502: grpc.StatusCode.UNAVAILABLE,
               503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED}


class Router:
    """Serves the routes in ``config_path`` until cancelled. The file is JSON::

        {"ingressPort": 8080, "adminPort": 8081,
         "services": {"default/iris": {
             "port": 20100, "grpcPort": 20101, "hosts": ["iris.default.example.com"], "timeout": 300,
             "activationTimeout": 60, "traffic": [{"revisionName": "iris-predictor-00001", "percent": 100}],
             "revisions": {"iris-predictor-00001": {"endpoints": ["127.0.0.1:20102"], "containerConcurrency": 0,
                                                    "grpcEndpoints": {"127.0.0.1:20102": "127.0.0.1:20103"},
                                                    "probePath": "/v2/health/ready"}}}}}

    A replica is known by its HTTP address (probed there); ``grpcEndpoints`` maps it to its gRPC address.
    """

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.services: dict[str, Service] = {}
        self.revisions: dict[str, Revision] = {}
        self.by_host: dict[str, Service] = {}
        self.by_path: dict[bytes, list[Service]] = {}
        self.by_address: dict[str, Service] = {}  # "127.0.0.1:PORT" -> the service on that port
        self._shadows: set[asyncio.Task] = set()
        self._reloaded = asyncio.Event()  # set (and replaced) by every reload: what held requests wait for
        self._stamp: tuple[float, int] | None = None
        self._servers: dict[str, asyncio.base_events.Server] = {}
        self._ports: dict[str, int] = {}
        self.routes_version = 0
        self.listen_hosts: list[str] = ["127.0.0.1"]  # from the routes file (`listen`)
        self.bind_errors: dict[str, str] = {}
        self._grpc_servers: dict[str, tuple[int, grpc.aio.Server]] = {}
        self.grpc_bind_errors: dict[str, str] = {}
        # The shared ports it could not listen on: "admin"/"ingress" -> {"port": N, "error": "..."}.
        self.listen_errors: dict[str, dict] = {}
        self._closing: set[asyncio.Task] = set()
        self.loaded_version = -1  # the routes file's "version" once every route of it is in place
        self.admin_token = b""  # none yet: /stats answers no one

    # -- lifecycle ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until cancelled, re-reading the routes file every RELOAD_SECONDS."""
        roller = asyncio.create_task(self._roll_loop())
        try:
            while True:
                try:
                    await self._reload()
                except Exception:  # an invalid file: keep serving the last good routes
                    log.exception("reloading %s", self.config_path)
                await asyncio.sleep(RELOAD_SECONDS)
        finally:
            roller.cancel()
            for _, server in self._grpc_servers.values():
                await server.stop(0)
            for rev in self.revisions.values():
                for ep in [*rev.endpoints.values(), *rev.draining.values()]:
                    if ep.channel is not None:
                        await ep.channel.close()

    async def _roll_loop(self) -> None:
        while True:
            now = time.time()
            await asyncio.sleep(1.0 - (now % 1.0))
            second = int(time.time()) - 1
            for rev in self.revisions.values():
                rev.stats.roll(second)

    async def _listen(self, name: str, port: int, service: Service | None) -> None:
        if self._ports.get(name) == port:
            return
        old = self._servers.pop(name, None)
        self._ports.pop(name, None)
        if old is not None:
            old.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve_connection(reader, writer, service if name not in ("ingress", "admin") else None,
                                         admin=name == "admin")

        # The admin port (stats, the controller's) stays on loopback; what clients call is also served
        # on the addresses the routes file lists (the pod network's gateway: pods call it there).
        hosts = ["127.0.0.1"] if name == "admin" else self.listen_hosts
        self._servers[name] = await asyncio.start_server(handle, hosts, port, reuse_address=True)
        self._ports[name] = port

    async def _listen_grpc(self, service: Service) -> None:
        current = self._grpc_servers.get(service.key)
        if current is not None and current[0] == service.grpc_port:
            return
        if current is not None:
            del self._grpc_servers[service.key]
            await current[1].stop(None)
        if service.grpc_port:
            key = service.key

            async def forward(method: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await self._route_grpc(key, method, request, context)

            self._grpc_servers[key] = (service.grpc_port, await _grpc.start_server(service.grpc_port, forward))

    async def _reload(self) -> None:
        try:
            st = self.config_path.stat()
        except FileNotFoundError:
            return
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return
        config = json.loads(self.config_path.read_text())
        self.listen_hosts = [str(h) for h in config.get("listen") or ["127.0.0.1"]]
        self.routes_version = int(config.get("version", 0))
        self.admin_token = str(config.get("adminToken") or "").encode()
        for name in ("admin", "ingress"):
            # A port another process holds must not stop the rest from being served, nor go unsaid:
            # the controller reads these errors (and an admin port that answers as someone else).
            port = int(config[f"{name}Port"])
            try:
                await self._listen(name, port, None)
                self.listen_errors.pop(name, None)
            except OSError as exc:
                self._failed(self.listen_errors, name, {"port": port, "error": exc.strerror or str(exc)})
        wanted = config.get("services") or {}
        for key in [k for k in self.services if k not in wanted]:
            self.services.pop(key)
            self.bind_errors.pop(key, None)
            self.grpc_bind_errors.pop(key, None)
            server = self._servers.pop(f"svc:{key}", None)
            self._ports.pop(f"svc:{key}", None)
            if server is not None:
                server.close()
            grpc_server = self._grpc_servers.pop(key, None)
            if grpc_server is not None:
                await grpc_server[1].stop(None)
        live_revisions: set[str] = set()
        for key, spec in wanted.items():
            svc = self.services.get(key)
            traffic = [(t["revisionName"], float(t.get("percent", 0))) for t in spec.get("traffic") or []]
            if svc is None:
                svc = Service(key, int(spec["port"]), list(spec.get("hosts") or []), traffic,
                              float(spec.get("timeout", 300)), float(spec.get("activationTimeout", 60)))
                self.services[key] = svc
            svc.port, svc.hosts, svc.traffic = int(spec["port"]), list(spec.get("hosts") or []), traffic
            svc.timeout = float(spec.get("timeout", 300))
            svc.activation_timeout = float(spec.get("activationTimeout", 60))
            svc.grpc_port = int(spec["grpcPort"]) if spec.get("grpcPort") else None
            path = spec.get("path") or {}
            svc.path = path.get("prefix")
            svc.path_weight, svc.shadow = float(path.get("weight", 100)), bool(path.get("shadow"))
            graph = spec.get("graph")
            if graph != svc.graph_spec:
                from trimaran.serving.graph.server import GraphRouter

                svc.graph_spec = graph
                for pool in (svc.graph.pools.values() if svc.graph is not None else ()):
                    pool.close()  # the replaced graph's idle connections to steps outside this router
                svc.graph = GraphRouter(graph, local=self._local_step) if graph else None
            try:
                await self._listen(f"svc:{key}", svc.port, svc)
                self.bind_errors.pop(key, None)
            except OSError as exc:
                # Another process took the port: serve the rest, and tell the controller (it moves the service).
                self._failed(self.bind_errors, key, f"port {svc.port}: {exc.strerror or exc}")
            try:
                await self._listen_grpc(svc)
                self.grpc_bind_errors.pop(key, None)
            except OSError as exc:
                self._failed(self.grpc_bind_errors, key, f"gRPC port {svc.grpc_port}: {exc}")
            for name, rspec in (spec.get("revisions") or {}).items():
                live_revisions.add(name)
                self._update_revision(name, rspec)
        for name in [n for n in self.revisions if n not in live_revisions]:
            # A revision out of the routes keeps reporting the requests still in flight on its replicas
            # (as draining), so the controller stops them only once those are answered.
            rev = self.revisions[name]
            self._update_revision(name, {"endpoints": [], "probePath": rev.probe_path})
            if not rev.draining:
                del self.revisions[name]
        self.by_host = {h: s for s in self.services.values() for h in s.hosts}
        self.by_address = {f"{host}:{s.port}": s for s in self.services.values() for host in ("127.0.0.1", "localhost")}
        self.by_path = {}
        for svc in self.services.values():
            if svc.path:
                self.by_path.setdefault(svc.path.rstrip("/").encode() + b"/", []).append(svc)
        for rev in self.revisions.values():
            rev.notify()
        self.loaded_version = self.routes_version
        reloaded, self._reloaded = self._reloaded, asyncio.Event()
        reloaded.set()
        # Only now: a reload that failed half-way is tried again. So is one that could not listen
        # everywhere: the port may be free on the next tick, and the file may not change before then.
        self._stamp = None if self.listen_errors or self.bind_errors or self.grpc_bind_errors else stamp

    @staticmethod
    def _failed(errors: dict, key: str, error: object) -> None:
        """Record why ``key`` could not listen; logged once, not on every retry."""
        if errors.get(key) != error:
            log.error("cannot listen for %s: %s", key, error)
        errors[key] = error

    def _update_revision(self, name: str, spec: dict) -> None:
        rev = self.revisions.get(name)
        if rev is None:
            rev = self.revisions[name] = Revision(name, spec.get("probePath"))
        rev.container_concurrency = int(spec.get("containerConcurrency") or 0)
        rev.probe_path = spec.get("probePath")
        wanted = list(spec.get("endpoints") or [])
        grpc_addresses = spec.get("grpcEndpoints") or {}
        for address in [a for a in rev.endpoints if a not in wanted]:
            ep = rev.endpoints.pop(address)
            self._stop(ep)
            if ep.inflight:
                rev.draining[address] = ep
        for address in wanted:
            ep = rev.endpoints.get(address)
            if ep is not None and ep.grpc_address != grpc_addresses.get(address):
                self._retire_channel(ep)
            if ep is None:
                ep = Endpoint(address, UpstreamPool(address))
                ep.probe = asyncio.create_task(self._probe_loop(rev, ep))
                rev.endpoints[address] = ep
            ep.grpc_address = grpc_addresses.get(address)
        for address in [a for a, ep in rev.draining.items() if not ep.inflight]:
            del rev.draining[address]

    # -- probing -----------------------------------------------------------------------------------
    async def _probe_loop(self, rev: Revision, ep: Endpoint) -> None:
        while True:
            ok = await _probe(ep.address, rev.probe_path)
            if ok != ep.ready:
                ep.ready = ok
                if not ok:
                    ep.pool.close()
                else:
                    # A channel that saw the replica die backs off before reconnecting (up to minutes):
                    # the replica is back, so start afresh.
                    self._retire_channel(ep)
                rev.notify()
            await asyncio.sleep(PROBE_READY_SECONDS if ok else PROBE_UNREADY_SECONDS)

    # -- serving -----------------------------------------------------------------------------------
    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                service: Service | None, admin: bool) -> None:
        parser = RequestReader()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                try:
                    requests = parser.feed(data)
                except (httptools.HttpParserError, ValueError) as exc:
                    writer.write(render_response(400, [], _error(f"bad request: {exc}"), False))
                    return
                for request in requests:
                    if admin:
                        response = self._admin(request)
                    else:
                        response = await self._route(request, service)
                    writer.write(render_response(response.status, response.headers, response.body,
                                                 request.keep_alive))
                    if not request.keep_alive:
                        await writer.drain()
                        return
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def _route(self, request: Request, service: Service | None) -> Response:
        if service is None and request.target.startswith(b"/seldon/"):
            service = self._by_path(request)
        if service is None:
            host = (request.header(b"host") or b"").decode("latin-1").rsplit(":", 1)[0].lower()
            service = self.by_host.get(host)
            if service is None:
                return Response(404, _JSON, _error(f"no InferenceService serves host {host!r}"))
        if service.graph is not None and request.method == b"POST":
            answer = await service.graph.answer(request.body)
            return Response(answer.status, _JSON, answer.body)
        rev = self._choose(service)
        if rev is None:
            rev = await self._await_traffic(service)
            if rev is None:
                return Response(503, _JSON, _error(f"{service.key} has no ready revision yet"))
        return await self._proxy(service, rev, request)

    def _local_step(self, step: Step, body: bytes) -> Awaitable[Answer] | None:
        """A graph step to a service of this router, routed in-process; None for anything else."""
        service = self.by_address.get(step.address)
        if service is None:
            return None
        return self._step_answer(service, Request(b"POST", step.target, [(b"host", step.host)] + _JSON, body, True))

    async def _step_answer(self, service: Service, request: Request) -> Answer:
        from trimaran.serving.graph.server import Answer

        response = await self._route(request, service)
        return Answer(response.status, response.body)

    def _by_path(self, request: Request) -> Service | None:
        """The service for an ingress path (``/seldon/NS/NAME/...``) by the weights of its services; a copy of
        the request goes to each shadow, whose answer nobody waits for."""
        prefix = b"/".join(request.target.split(b"/", 4)[:4]) + b"/"
        services = self.by_path.get(prefix)
        if not services:
            return None
        for shadow in (s for s in services if s.shadow):
            rev = self._choose(shadow)
            if rev is not None:
                task = asyncio.get_running_loop().create_task(self._proxy(shadow, rev, request))
                self._shadows.add(task)
                task.add_done_callback(self._shadows.discard)
        live = [s for s in services if not s.shadow and s.path_weight > 0]
        if not live:
            return None
        point = random.random() * sum(s.path_weight for s in live)
        for svc in live:
            point -= svc.path_weight
            if point < 0:
                return svc
        return live[-1]

    async def _await_traffic(self, service: Service) -> Revision | None:
        """Hold a request to a service whose traffic names no routed revision yet (just created: the
        controller writes its traffic once a revision is ready, and this router reads it on its next
        reload) until it does, as Knative's activator holds one; None after the activation timeout or
        once the service is gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + service.activation_timeout
        service.awaiting_traffic += 1
        try:
            while self.services.get(service.key) is service:
                rev = self._choose(service)
                if rev is not None:
                    return rev
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                try:
                    await within(self._reloaded.wait(), remaining)
                except asyncio.TimeoutError:
                    return None
            return None
        finally:
            service.awaiting_traffic -= 1

    def _choose(self, service: Service) -> Revision | None:
        targets = [(self.revisions[name], pct) for name, pct in service.traffic if name in self.revisions and pct > 0]
        if not targets:
            return None
        point = random.random() * sum(p for _, p in targets)
        for rev, pct in targets:
            point -= pct
            if point < 0:
                return rev
        return targets[-1][0]

    async def _proxy(self, service: Service, rev: Revision, request: Request) -> Response:
        host = (request.header(b"host") or b"localhost").split(b":")[0]

        async def send(rev: Revision, ep: Endpoint, timeout: float) -> Response:
            response = await ep.pool.send(request, host, timeout)
            response.headers.append((REVISION_HEADER, rev.name.encode()))
            return response

        try:
            return await self._dispatch(service, rev, service.timeout, send)
        except Unroutable as exc:
            return Response(exc.status, _JSON, _error(str(exc)))

    async def _route_grpc(self, key: str, method: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        service = self.services.get(key)
        rev = self._choose(service) if service is not None else None
        if service is not None and rev is None:
            rev = await self._await_traffic(service)
        if service is None or rev is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{key} has no ready revision yet")
        remaining = context.time_remaining()
        timeout = service.timeout if remaining is None else min(service.timeout, remaining)
        metadata = _grpc.forwarded_metadata(context)

        async def send(rev: Revision, ep: Endpoint, timeout: float) -> _grpc.GrpcReply:
            reply = await _grpc.call_upstream(ep.grpc_channel(), method, request, timeout, metadata)
            reply.trailing += ((REVISION_HEADER.decode(), rev.name),)
            return reply

        try:
            reply = await self._dispatch(service, rev, timeout, send, grpc_only=True)
        except Unroutable as exc:
            await context.abort(_GRPC_CODES[exc.status], str(exc))
        if reply.response is None:
            await context.abort(reply.code, reply.details, reply.trailing)
        context.set_trailing_metadata(reply.trailing)
        return reply.response

    async def _dispatch(self, service: Service, rev: Revision, timeout: float,
                        send: Callable[[Revision, Endpoint, float], Awaitable[T]], grpc_only: bool = False) -> T:
        """Send a request to a ready replica of ``rev`` with ``send(revision, endpoint, seconds left)``, holding
        it while none is ready and retrying where ``send`` raises UpstreamError. Raises Unroutable."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout
        activation_deadline = min(deadline, start + service.activation_timeout)
        failed: set[str] = set()
        last_error = ""
        rev.stats.change(+1)
        try:
            for _ in range(MAX_ATTEMPTS):
                if last_error and rev.name not in {name for name, _ in service.traffic}:
                    # The revision left the routes while this request was on it (a rollout): send the
                    # retry where the service's traffic goes now.
                    current = self._choose(service)
                    if current is not None and current is not rev:
                        rev.stats.change(-1)
                        rev, failed = current, set()
                        rev.stats.change(+1)
                ep = await self._pick(rev, activation_deadline, failed, grpc_only)
                if ep is None:
                    raise Unroutable(503, f"revision {rev.name} has no ready replica after "
                                          f"{service.activation_timeout:.0f}s"
                                          + (f" (last error: {last_error})" if last_error else ""))
                ep.inflight += 1
                try:
                    return await send(rev, ep, max(0.001, deadline - loop.time()))
                except UpstreamError as exc:
                    # The replica is gone or going: stop sending to it until its probe passes again.
                    last_error = str(exc)
                    failed.add(ep.address)
                    if ep.ready:
                        ep.ready = False
                        ep.pool.close()
                    continue
                except asyncio.TimeoutError:
                    raise Unroutable(504, f"request timed out after {timeout:g}s") from None
                finally:
                    ep.inflight -= 1
                    rev.notify()
            raise Unroutable(502, f"every attempt failed: {last_error}")
        finally:
            rev.stats.change(-1)

    async def _pick(self, rev: Revision, deadline: float, failed: set[str], grpc_only: bool) -> Endpoint | None:
        loop = asyncio.get_running_loop()
        limit = rev.container_concurrency
        while True:
            event = rev.changed
            ready = [ep for ep in rev.endpoints.values() if ep.ready and ep.address not in failed]
            if not ready and failed:
                failed.clear()  # every other replica failed too: any that is ready again may be tried
                ready = [ep for ep in rev.endpoints.values() if ep.ready]
            if grpc_only and ready:
                ready = [ep for ep in ready if ep.grpc_address]
                if not ready:
                    # Ready replicas without a gRPC port: a custom container (a transformer) serving HTTP only.
                    raise Unroutable(501, f"revision {rev.name} does not serve gRPC")
            free = [ep for ep in ready if not limit or ep.inflight < limit]
            if free:
                low = min(ep.inflight for ep in free)
                return random.choice([ep for ep in free if ep.inflight == low])
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await within(event.wait(), remaining)
            except asyncio.TimeoutError:
                return None

    def _stop(self, ep: Endpoint) -> None:
        if ep.probe is not None:
            ep.probe.cancel()
        ep.pool.close()
        self._retire_channel(ep)

    def _retire_channel(self, ep: Endpoint) -> None:
        """Close ``ep``'s gRPC channel once the calls on it are answered; the next call opens a new one."""
        if ep.channel is None:
            return
        task = asyncio.create_task(ep.channel.close(CHANNEL_CLOSE_GRACE))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        ep.channel = None

    # -- admin -------------------------------------------------------------------------------------
    def _admin(self, request: Request) -> Response:
        path = request.target.split(b"?")[0]
        if path == b"/healthz":
            return Response(200, _JSON, b'{"ok":true}')
        if path == b"/stats":
            scheme, _, given = (request.header(b"authorization") or b"").partition(b" ")
            if not (self.admin_token and scheme.lower() == b"bearer"
                    and hmac.compare_digest(given.strip(), self.admin_token)):
                return Response(401, _JSON, _error("the routes file's admin token is required"))
            return Response(200, _JSON, json.dumps(self.stats()).encode())
        return Response(404, _JSON, _error("unknown admin path"))

    def stats(self) -> dict:
        """What the controller reads: per revision, replicas by readiness, in-flight counts and
        the per-second buckets ``[second, average concurrency, requests]``."""
        return {
            "pid": os.getpid(),
            "routesVersion": self.loaded_version,
            "bindErrors": dict(self.bind_errors),
            "grpcBindErrors": dict(self.grpc_bind_errors),
            "listenErrors": dict(self.listen_errors),
            "awaitingTraffic": {key: svc.awaiting_traffic for key, svc in self.services.items()
                                if svc.awaiting_traffic},
            "revisions": {
                name: {
                    "inflight": rev.stats.inflight,
                    "ready": sorted(a for a, ep in rev.endpoints.items() if ep.ready),
                    "notReady": sorted(a for a, ep in rev.endpoints.items() if not ep.ready),
                    "draining": sorted(a for a, ep in rev.draining.items() if ep.inflight),
                    "buckets": list(rev.stats.buckets),
                }
                for name, rev in self.revisions.items()
            },
        }


_JSON = [(b"content-type", b"application/json")]


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


async def _probe(address: str, path: str | None) -> bool:
    host, _, port = address.rpartition(":")
    try:
        reader, writer = await within(asyncio.open_connection(host, int(port)), 1.0)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        if path is None:
            return True
        writer.write(b"GET %s HTTP/1.1\r\nhost: %s\r\nconnection: close\r\n\r\n" % (path.encode(), host.encode()))
        line = await within(reader.readline(), 1.0)
        parts = line.split()
        return len(parts) >= 2 and parts[1] == b"200"
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()
