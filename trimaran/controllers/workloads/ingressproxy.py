"""The Ingresses' data path: one HTTP/1.1 listener (its own asyncio loop and thread) that routes each
request by its ``Host`` and path, as the Ingress API defines matching, to a Service's ready endpoints.

It speaks HTTP with the router's pieces (`trimaran.serving.router._http`: httptools parsing, keep-alive
upstream pools; bodies are buffered whole). Matching, per the API's rules:

- hosts: an exact host first, then a wildcard (``*.example.com`` matches one label more), then rules
  without a host; a request that no path of a more specific host matches tries the next;
- paths: ``Exact`` is the whole path; ``Prefix`` (and ``ImplementationSpecific``, read as Prefix) matches
  element by element (``/foo`` matches ``/foo`` and ``/foo/bar``, not ``/foobar``; a trailing ``/`` is
  ignored); the longest match wins, ``Exact`` over ``Prefix`` at equal length, the older Ingress at a tie;
- nothing matches: the oldest ``defaultBackend`` among the Ingresses, else 404.

The same routes are served over TLS on a second port, each host with the certificate of the Secret its
Ingress's ``tls`` section names, chosen by the client's SNI (an exact host, then a wildcard one); a
name no certificate covers fails the handshake.

A backend with no ready endpoint answers 503, one whose every endpoint refused 502, one that took longer
than the timeout 504; an endpoint that refuses is skipped for the next (round-robin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

from trimaran.serving.router._http import Request, RequestReader, UpstreamError, UpstreamPool, render_response

__all__ = ["Backend", "IngressProxy", "PathRule", "RouteTable"]

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT = 60.0  # ingress-nginx's proxy-read-timeout


@dataclass(frozen=True)
class Backend:
    """Where a rule sends requests: ``ip:port`` of each ready endpoint, and what it is (for answers)."""

    addresses: tuple[str, ...]
    what: str


@dataclass(frozen=True)
class PathRule:
    path_type: str  # Exact, Prefix, ImplementationSpecific
    path: str
    backend: Backend

    def score(self, path: str) -> tuple[int, int] | None:
        """How well ``path`` matches: (matched length, 1 for Exact), or None for no match."""
        if self.path_type == "Exact":
            return (len(self.path), 1) if path == self.path else None
        wanted = [e for e in (self.path or "/").split("/") if e]
        given = [e for e in path.split("/") if e]
        if given[:len(wanted)] != wanted:
            return None
        return (len("/".join(wanted)), 0)


@dataclass
class RouteTable:
    """Every served Ingress's rules, merged; the rules of older Ingresses come first."""

    exact: dict[str, list[PathRule]] = field(default_factory=dict)
    wildcard: dict[str, list[PathRule]] = field(default_factory=dict)  # "example.com" for "*.example.com"
    anyhost: list[PathRule] = field(default_factory=list)
    default: Backend | None = None

    def add(self, host: str | None, rule: PathRule) -> None:
        if not host:
            self.anyhost.append(rule)
        elif host.startswith("*."):
            self.wildcard.setdefault(host[2:], []).append(rule)
        else:
            self.exact.setdefault(host, []).append(rule)

    def route(self, host: str, path: str) -> Backend | None:
        host = _hostname(host)
        candidates = [self.exact.get(host) or []]
        _, dot, parent = host.partition(".")
        if dot:
            candidates.append(self.wildcard.get(parent) or [])
        candidates.append(self.anyhost)
        for rules in candidates:
            best: tuple[tuple[int, int], PathRule] | None = None
            for rule in rules:
                score = rule.score(path)
                if score is not None and (best is None or score > best[0]):
                    best = (score, rule)
            if best is not None:
                return best[1].backend
        return self.default

    def addresses(self) -> set[str]:
        rules = [*self.anyhost, *(r for rs in self.exact.values() for r in rs),
                 *(r for rs in self.wildcard.values() for r in rs)]
        backends = [r.backend for r in rules] + ([self.default] if self.default else [])
        return {a for b in backends for a in b.addresses}


def _hostname(host: str) -> str:
    """The Host header without its port, lower-case (``[::1]:80`` keeps its brackets' content)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class IngressProxy:
    """The listener and its route table; ``listen``, ``set_table`` and ``close`` are called from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self.table = RouteTable()
        self._servers: list[asyncio.base_events.Server] = []
        self._certs: dict[str, ssl.SSLContext] = {}  # host (or "*.parent") -> its certificate's context
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.sni_callback = self._pick_certificate
        self._pools: dict[str, UpstreamPool] = {}
        self._turn = 0
        self._tasks: set[asyncio.Task] = set()  # the loop holds tasks weakly
        self._thread = threading.Thread(target=self._loop.run_forever, name="ingress-proxy", daemon=True)
        self._thread.start()

    def listen(self, hosts: list[str], port: int, tls_port: int) -> None:
        """Serve HTTP on ``port`` and HTTPS on ``tls_port`` at each of ``hosts`` (instead of where it
        served). Raises OSError when one cannot be bound; then it serves nowhere."""
        asyncio.run_coroutine_threadsafe(self._listen(hosts, port, tls_port), self._loop).result(timeout=10)

    def set_table(self, table: RouteTable, certs: dict[str, ssl.SSLContext]) -> None:
        """The routes, and the TLS certificates by host (``*.example.com`` for a wildcard)."""
        self._loop.call_soon_threadsafe(self._replace, table, certs)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._listen([], 0, 0), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _pick_certificate(self, sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> int | None:
        """SNI: the certificate of the host the client asks for; none covering it fails the handshake."""
        name = (name or "").lower()
        _, dot, parent = name.partition(".")
        context = self._certs.get(name) or (self._certs.get(f"*.{parent}") if dot else None)
        if context is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        sock.context = context
        return None

    def _replace(self, table: RouteTable, certs: dict[str, ssl.SSLContext]) -> None:
        self.table = table
        self._certs = certs
        kept = table.addresses()
        for address in [a for a in self._pools if a not in kept]:
            self._pools.pop(address).close()

    async def _listen(self, hosts: list[str], port: int, tls_port: int) -> None:
        for server in self._servers:
            server.close()
        self._servers = []
        try:
            for host in hosts:
                self._servers.append(await asyncio.start_server(self._accept, host, port, reuse_address=True))
                self._servers.append(await asyncio.start_server(self._accept, host, tls_port, reuse_address=True,
                                                                ssl=self._tls))
        except OSError:
            for server in self._servers:
                server.close()
            self._servers = []
            raise

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self._loop.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = RequestReader()
        peer = (writer.get_extra_info("peername") or ("", 0))[0]
        scheme = b"https" if writer.get_extra_info("sslcontext") is not None else b"http"
        try:
            while data := await reader.read(65536):
                try:
                    requests = parser.feed(data)
                except (httptools.HttpParserError, ValueError):
                    writer.write(render_response(400, [], b"400 bad request\n", False))
                    return
                for request in requests:
                    status, headers, body = await self._answer(request, str(peer), scheme)
                    writer.write(render_response(status, headers, body, request.keep_alive))
                    await writer.drain()
                    if not request.keep_alive:
                        return
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, request: Request, peer: str, scheme: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        host = (request.header(b"host") or b"").decode("latin-1")
        path = urlsplit(request.target.decode("latin-1")).path or "/"
        backend = self.table.route(host, path)
        if backend is None:
            return 404, [(b"content-type", b"text/plain")], b"404 page not found\n"
        if not backend.addresses:
            return 503, [(b"content-type", b"text/plain")], f"503 no ready endpoint of {backend.what}\n".encode()
        forwarded = [h for h in request.headers if not h[0].startswith(b"x-forwarded-")]
        forwarded += [(b"x-forwarded-for", peer.encode()), (b"x-forwarded-host", host.encode("latin-1")),
                      (b"x-forwarded-proto", scheme)]
        request = Request(request.method, request.target, forwarded, request.body, request.keep_alive)
        self._turn += 1
        start = self._turn % len(backend.addresses)
        for address in backend.addresses[start:] + backend.addresses[:start]:
            pool = self._pools.setdefault(address, UpstreamPool(address))
            try:
                response = await pool.send(request, host.encode("latin-1"), UPSTREAM_TIMEOUT)
            except UpstreamError:
                continue
            except asyncio.TimeoutError:
                return 504, [(b"content-type", b"text/plain")], f"504 {backend.what} did not answer\n".encode()
            return response.status, response.headers, response.body
        return 502, [(b"content-type", b"text/plain")], f"502 no endpoint of {backend.what} answered\n".encode()
