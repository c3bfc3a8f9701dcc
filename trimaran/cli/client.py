"""The CLI's and SDK's client of the Kubernetes API, on the standard library so the CLI starts fast.

It speaks only what kube-apiserver speaks (discovery, resource paths, server-side apply, watch,
``pods/log``), so the same ``trimaran`` commands work against a local control plane and a real
cluster. Where to connect comes from a kubeconfig, as for kubectl: ``--kubeconfig``, else
``KUBECONFIG``, else ``$TRIMARAN_HOME/kubeconfig`` (starting the local control plane if none runs).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

FIELD_MANAGER = "trimaran"
_DISCOVERY_TTL = 6 * 3600.0  # as kubectl's discovery cache
_BUSY_AFTER = 2.0  # seconds before a user waiting on the local control plane is told it is busy


class KindRef(NamedTuple):
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{urllib.parse.quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


class APIError(Exception):
    """A request the API refused (``status`` is the HTTP code, ``body`` the Status object)."""

    def __init__(self, status: int, message: str, body: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}


def _status_message(status: int, raw: bytes) -> tuple[str, dict | None]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip() or f"HTTP {status}", None
    if isinstance(parsed, dict):
        return str(parsed.get("message") or parsed.get("detail") or raw.decode()), parsed
    return raw.decode(), None


class Client:
    """One connection to one API server (kept open for the calls of a command)."""

    def __init__(self, url: str, token: str | None = None, ca_pem: bytes | None = None,
                 namespace: str | None = None, insecure: bool = False, cache_dir: Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.namespace = namespace or "default"
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or (443 if self._https else 80)
        self._context: ssl.SSLContext | None = None
        if self._https:
            if insecure:
                self._context = ssl._create_unverified_context()
            elif ca_pem:
                # Only the kubeconfig's CA: loading the system's whole store costs a CLI call ~50 ms.
                self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                self._context.load_verify_locations(cadata=ca_pem.decode())
            else:
                self._context = ssl.create_default_context()
        self._conn: http.client.HTTPConnection | None = None
        self._cache_dir = cache_dir
        self._resources: list[KindRef] | None = None
        # The pid of the local control plane this client talks to, if it is one: a request it does
        # not answer soon gets a "busy" notice (once), and is waited for.
        self.busy_pid: int | None = None
        self._told_busy = False

    @classmethod
    def connect(cls, home: Path | None = None, autostart: bool = True, kubeconfig: str | None = None,
                context: str | None = None) -> Client:
        """The client of ``kubeconfig`` (or ``KUBECONFIG``), else of the local control plane of
        ``home``, started when none runs and ``autostart``."""
        from trimaran.server.daemon import home_dir, lock_holder, read_server_info, start_server, wait_for_server
        from trimaran.server.kubeconfig import kubeconfig_path, read_endpoint

        home = home or home_dir()
        chosen = kubeconfig or os.environ.get("KUBECONFIG")
        busy_pid = None
        if not chosen:
            # The home's lock says whether a control plane lives, not a probe: a slow one is waited
            # for, never replaced by a second one on the same store.
            holder = lock_holder(home)
            if holder is None:
                if not autostart:
                    raise APIError(503, "no control plane is running: start one with `trimaran server start`")
                try:
                    holder = start_server(home=home)["pid"]
                except RuntimeError as exc:
                    raise APIError(503, str(exc)) from None
            else:
                info = read_server_info(home)
                if info is None or info.get("pid") != holder:  # still starting
                    try:
                        holder = wait_for_server(home, holder)["pid"]
                    except RuntimeError as exc:
                        raise APIError(503, str(exc)) from None
            busy_pid = holder
            chosen = str(kubeconfig_path(home))
        try:
            endpoint = read_endpoint(Path(chosen), context)
        except (LookupError, OSError, ValueError) as exc:
            raise APIError(503, f"cannot use kubeconfig {chosen}: {exc}") from None
        client = cls(endpoint.server, endpoint.token, endpoint.ca_pem, endpoint.namespace, endpoint.insecure,
                     cache_dir=home / "cache")
        client.busy_pid = busy_pid
        return client

    def close(self) -> None:
        """Close the kept-alive connection: a control plane that is stopping waits for open ones."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # HTTP ---------------------------------------------------------------------------------

    def _connection(self, timeout: float = 60.0) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(self, method: str, path: str, body: object | None = None, params: dict | None = None,
                content_type: str = "application/json", stream: bool = False, timeout: float = 60.0,
                accept: str = "application/json") -> http.client.HTTPResponse:
        """Send a request; raise APIError for an error status. A ``stream`` gets its own connection."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        target = path + (f"?{query}" if query else "")
        headers = {"Accept": accept, "User-Agent": "trimaran"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        for attempt in range(2):
            if stream:
                conn = self._connection(timeout=timeout)
            else:
                if self._conn is None:
                    self._conn = self._connection(timeout=timeout)
                conn = self._conn
            notice = self._busy_notice()
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                break
            except (ConnectionError, http.client.HTTPException) as exc:
                # A kept-alive connection the server closed, or whose last answer a caller left
                # unread: one more try on a new one.
                conn.close()
                self._conn = None
                if attempt or stream:
                    raise APIError(503, f"cannot reach the API server at {self.url}: {exc}") from None
            except OSError as exc:
                conn.close()
                self._conn = None
                raise APIError(503, f"cannot reach the API server at {self.url}: {exc}") from None
            finally:
                if notice is not None:
                    notice.cancel()
        if resp.status >= 400:
            raw = resp.read()
            message, parsed = _status_message(resp.status, raw)
            raise APIError(resp.status, message, parsed)
        return resp

    def _busy_notice(self) -> threading.Timer | None:
        if self.busy_pid is None or self._told_busy:
            return None

        def tell() -> None:
            self._told_busy = True
            print(f"the control plane (pid {self.busy_pid}) is busy; waiting...", file=sys.stderr, flush=True)

        timer = threading.Timer(_BUSY_AFTER, tell)
        timer.daemon = True
        timer.start()
        return timer

    def _json(self, method: str, path: str, body: object | None = None, params: dict | None = None,
              content_type: str = "application/json") -> Any:
        return json.loads(self.request(method, path, body, params, content_type).read())

    # Discovery ----------------------------------------------------------------------------

    def _cache_file(self) -> Path | None:
        if self._cache_dir is None:
            return None
        return self._cache_dir / f"discovery-{self._host}-{self._port}.json"

    def resources(self, refresh: bool = False) -> list[KindRef]:
        """Every kind the server serves (its discovery, cached on disk like kubectl's)."""
        if self._resources is not None and not refresh:
            return self._resources
        cache = self._cache_file()
        if cache is not None and not refresh:
            try:
                if time.time() - cache.stat().st_mtime < _DISCOVERY_TTL:
                    self._resources = [KindRef(**{**r, "short_names": tuple(r["short_names"])})
                                       for r in json.loads(cache.read_text())]
                    return self._resources
            except (OSError, ValueError, TypeError, KeyError):
                pass
        found: list[KindRef] = []
        lists = [self._json("GET", "/api/v1")]
        for group in self._json("GET", "/apis").get("groups") or []:
            for version in group.get("versions") or []:
                try:
                    lists.append(self._json("GET", f"/apis/{version['groupVersion']}"))
                except APIError:
                    continue
        for rl in lists:
            group, _, version = rl["groupVersion"].rpartition("/")
            for r in rl.get("resources") or []:
                if "/" in r["name"]:
                    continue
                found.append(KindRef(r["kind"], group, version, r["name"], bool(r.get("namespaced")),
                                     tuple(r.get("shortNames") or ())))
        self._resources = found
        if cache is not None:
            try:
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps([r._asdict() for r in found]))
                os.replace(tmp, cache)
            except OSError:
                pass
        return found

    def _find(self, match: Any) -> KindRef | None:
        for refresh in (False, True):  # a miss in the cache looks once more at the server
            for ref in self.resources(refresh):
                if match(ref):
                    return ref
        return None

    def resolve(self, name: str) -> KindRef:
        """The kind a user's word names: kind, plural, singular, short name, ``plural.group``."""
        word = name.lower()

        def names(ref: KindRef) -> set[str]:
            out = {ref.kind.lower(), ref.plural, *ref.short_names}
            if ref.group:
                out |= {f"{ref.plural}.{ref.group}", f"{ref.kind.lower()}.{ref.group}",
                        f"{ref.plural}.{ref.version}.{ref.group}"}
            return out

        found = self._find(lambda r: word in names(r))
        if found is None:
            every = sorted({n for r in self.resources() for n in names(r)})
            import difflib  # here: only a misspelt kind needs it

            close = difflib.get_close_matches(word, every, n=1, cutoff=0.75)
            hint = f'; did you mean "{close[0]}"?' if close else ""
            raise APIError(404, f'the server doesn\'t have a resource type "{name}"{hint}')
        return found

    def kind_for(self, api_version: str, kind: str) -> KindRef:
        """The kind of a manifest, by its exact apiVersion and kind."""
        group, _, version = api_version.rpartition("/")
        found = self._find(lambda r: r.kind == kind and r.group == group and r.version == version)
        if found is not None:
            return found
        message = f'no matches for kind "{kind}" in version "{api_version}"'
        refs = self.resources()
        same = [r.api_version for r in refs if r.kind == kind]
        if same:
            raise APIError(404, message + f" (known versions: {', '.join(same)})")
        by_lower = {r.kind.lower(): r.kind for r in refs}
        import difflib

        close = difflib.get_close_matches(kind.lower(), list(by_lower), n=1, cutoff=0.75)
        served: dict[str, list[str]] = {}
        for r in refs:
            served.setdefault(r.api_version, []).append(r.kind)
        listing = "; ".join(f"{v}: {', '.join(ks)}" for v, ks in served.items())
        hint = f'; did you mean "{by_lower[close[0]]}"?' if close else "."
        raise APIError(404, f"{message}{hint} The server serves these kinds: {listing}")

    def _ref(self, kind: str | KindRef) -> KindRef:
        if isinstance(kind, KindRef):
            return kind
        found = self._find(lambda r: r.kind == kind)
        return found if found is not None else self.resolve(kind)

    # Objects ------------------------------------------------------------------------------

    def list(self, kind: str | KindRef, namespace: str | None = None, selector: str | None = None,
             field_selector: str | None = None) -> list[dict]:
        ref = self._ref(kind)
        return self._json("GET", ref.path(namespace), params={"labelSelector": selector,
                                                              "fieldSelector": field_selector})["items"]

    def get(self, kind: str | KindRef, namespace: str | None, name: str) -> dict:
        ref = self._ref(kind)
        return self._json("GET", ref.path(namespace or self.namespace, name))

    def create(self, kind: str | KindRef, namespace: str | None, obj: dict) -> dict:
        """POST a new object (a ``generateName`` is expanded by the server); the stored object comes back."""
        ref = self._ref(kind)
        return self._json("POST", ref.path(namespace or self.namespace), obj)

    def delete(self, kind: str | KindRef, namespace: str | None, name: str, propagation: str = "Background"
               ) -> dict:
        """Delete an object; return its ``uid`` (and the object while it is still being deleted)."""
        ref = self._ref(kind)
        answer = self._json("DELETE", ref.path(namespace or self.namespace, name),
                            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
        uid = answer.get("metadata", {}).get("uid") or (answer.get("details") or {}).get("uid")
        return {"kind": ref.kind, "namespace": namespace, "name": name, "uid": uid}

    def scale(self, kind: str | KindRef, namespace: str | None, name: str, replicas: int) -> dict:
        """Set the replica count through the kind's scale subresource (as ``kubectl scale``); the
        autoscaling/v1 Scale comes back."""
        ref = self._ref(kind)
        return self._json("PATCH", ref.path(namespace, name, "scale"), {"spec": {"replicas": replicas}},
                          content_type="application/merge-patch+json")

    def events(self, kind: str | None = None, namespace: str | None = None, name: str | None = None) -> list[dict]:
        selector = ",".join(f"involvedObject.{k}={v}" for k, v in (("kind", kind), ("name", name)) if v)
        path = f"/api/v1/namespaces/{namespace}/events" if namespace else "/api/v1/events"
        items = self._json("GET", path, params={"fieldSelector": selector or None})["items"]
        return sorted(items, key=lambda e: e.get("lastTimestamp") or "")

    def observations(self, namespace: str, trials: list[str] | None = None, metric: str | None = None) -> list[dict]:
        """Every stored observation of these trials (Trimaran's own route: Katib keeps them in a database)."""
        return self._json("GET", f"/trimaran/v1/namespaces/{namespace}/observations",
                          params={"trial": trials, "metric": metric})["items"]

    def log(self, namespace: str, pod: str, container: str | None = None, previous: bool = False,
            follow: bool = False, tail_lines: int | None = None) -> Iterator[bytes]:
        params = {"container": container, "previous": str(previous).lower(), "follow": str(follow).lower(),
                  "tailLines": tail_lines}
        resp = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", params=params, stream=follow,
                            timeout=3600 if follow else 60)
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                return
            yield chunk

    # Apply --------------------------------------------------------------------------------

    def _server_side_apply(self, ref: KindRef, obj: dict, dry_run: bool) -> tuple[dict, list[str]]:
        meta = obj["metadata"]
        resp = self.request("PATCH", ref.path(meta.get("namespace"), meta["name"]), obj,
                            params={"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Warn",
                                    "dryRun": "All" if dry_run else None},
                            content_type="application/apply-patch+yaml")
        warnings = _warnings(resp.getheader("Warning") or "")
        return json.loads(resp.read()), warnings

    def apply(self, manifests: list[dict], namespace: str | None = None, dry_run: bool = False) -> dict:
        """Server-side apply every manifest (``{"location", "object"}``), all or none.

        Every object is applied as a dry run first, so one that the server refuses stores nothing;
        an object created by this call is deleted again when a later one fails after all.
        Namespaces go first, for real: the objects in them are judged by their labels (Pod
        Security) and need them to exist; a namespace this call created is deleted again if the
        rest is refused (labels it changed on an existing one stay).
        Returns ``{"results": [{kind, group, namespace, name, action}], "warnings": [...]}``.
        """
        namespaces = [m for m in manifests if _is_namespace(m["object"])]
        if namespaces and len(namespaces) < len(manifests) and not dry_run:
            first = self.apply(namespaces)
            try:
                rest = self.apply([m for m in manifests if not _is_namespace(m["object"])], namespace)
            except APIError:
                for r in first["results"]:
                    if r["action"] == "created":
                        try:
                            self.delete("Namespace", None, r["name"])
                        except APIError:
                            pass
                raise
            return {"results": first["results"] + rest["results"], "warnings": first["warnings"] + rest["warnings"]}
        planned: list[tuple[str, KindRef, dict, str | None]] = []
        problems: list[str] = []
        warnings: list[str] = []
        for m in manifests:
            obj, location = m["object"], m.get("location", "-")
            try:
                ref = self.kind_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            except APIError as exc:
                problems.append(f"{location}: {exc}")
                continue
            obj = json.loads(json.dumps(obj))
            meta = obj.setdefault("metadata", {})
            if ref.namespaced:
                meta["namespace"] = meta.get("namespace") or namespace or self.namespace
            if not meta.get("name"):
                problems.append(f'{location}: {obj["kind"]}: metadata.name: Required value: name is required')
                continue
            try:
                current = self.get(ref, meta.get("namespace"), meta["name"])
                version = current["metadata"].get("resourceVersion")
            except APIError as exc:
                if exc.status != 404:
                    problems.append(f"{location}: {exc}")
                    continue
                version = None
            try:
                _, said = self._server_side_apply(ref, obj, dry_run=True)
                warnings += [f"{location}: Warning: {w}" for w in said]
            except APIError as exc:
                problems += [f"{location}: {line}" for line in _problem_lines(exc, obj)]
                continue
            planned.append((location, ref, obj, version))
        if problems:
            raise APIError(422, "\n".join(problems), {"warnings": warnings})
        results, created = [], []
        for location, ref, obj, version in planned:
            meta = obj["metadata"]
            if dry_run:
                action = "created (dry run)" if version is None else "configured (dry run)"
            else:
                try:
                    stored, said = self._server_side_apply(ref, obj, dry_run=False)
                    # New ones too: a namespace applied with this object may have changed its Pod Security.
                    warnings += [w for w in (f"{location}: Warning: {x}" for x in said) if w not in warnings]
                except APIError as exc:
                    for done_ref, done in created:
                        try:
                            self.delete(done_ref, done["metadata"].get("namespace"), done["metadata"]["name"])
                        except APIError:
                            pass
                    raise APIError(exc.status, "\n".join(f"{location}: {line}" for line in _problem_lines(exc, obj))
                                   + ("\nnothing was applied" if created or len(planned) > 1 else ""),
                                   {"warnings": warnings}) from None
                if version is None:
                    created.append((ref, stored))
                    action = "created"
                else:
                    action = "unchanged" if stored["metadata"].get("resourceVersion") == version else "configured"
            results.append({"kind": ref.kind, "group": ref.group, "namespace": meta.get("namespace", ""),
                            "name": meta["name"], "action": action})
        return {"results": results, "warnings": warnings}


def _is_namespace(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") == "v1" and obj.get("kind") == "Namespace"


def _warnings(header: str) -> list[str]:
    """The texts of a ``Warning`` header (``299 - "text", 299 - "text"``)."""
    out = []
    i = 0
    while True:
        start = header.find('"', i)
        if start < 0:
            return out
        j, text = start + 1, []
        while j < len(header) and header[j] != '"':
            if header[j] == "\\" and j + 1 < len(header):
                j += 1
            text.append(header[j])
            j += 1
        out.append("".join(text))
        i = j + 1


def _problem_lines(exc: APIError, obj: dict) -> list[str]:
    """One line per problem of a refused object, each naming the field, as `trimaran apply` prints them."""
    causes = (exc.body.get("details") or {}).get("causes") if exc.body.get("reason") == "Invalid" else None
    if not causes:
        return [str(exc)]
    label = f'{obj.get("kind")} "{(obj.get("metadata") or {}).get("name", "")}"'
    return [f"{label}: {c['field']}: {c['message']}" if c.get("field") else f"{label}: {c.get('message', '')}"
            for c in causes]


def owned_by(obj: dict, uid: str) -> bool:
    """Whether ``obj`` lists the object with ``uid`` among its owners."""
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])
