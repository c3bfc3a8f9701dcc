"""The Kubernetes REST API for every kind in the registry: one set of handlers, no per-kind routes.

Paths are kube-apiserver's (``/api/v1/namespaces/NS/pods/NAME/log``,
``/apis/kubeflow.org/v1/namespaces/NS/pytorchjobs/NAME/status``); objects, lists, tables, watch
events and errors are its shapes, so kubectl, client-go, the Python client and the Kubeflow SDKs
work unchanged. Writes go through the same validation as ``trimaran apply`` (the kind's model),
and store calls run off the event loop so watches and log follows never wait behind them.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from trimaran.api import ManifestError, kinds, printers, validate
from trimaran.api.crd import is_custom, served_as
from trimaran.api.errors import FieldError
from trimaran.api.kinds import KindInfo, read_path
from trimaran.api.podsecurity import Policy
from trimaran.api.quota import AdmissionRefused
from trimaran.controllers.gc import request_delete
from trimaran.controllers.quota import admit_update
from trimaran.controllers.workloads.ingress import set_default_class
from trimaran.server.kube import patch as patching
from trimaran.server.kube import protobuf, streaming
from trimaran.server.kube.admission import PodSecurityAdmission
from trimaran.server.kube.bodies import load_json, load_yaml
from trimaran.server.kube.errors import StatusError
from trimaran.server.kube.eviction import evict
from trimaran.server.kube.logs import LogOptions, pod_log
from trimaran.server.kube.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from trimaran.server.kube.streaming import STREAMING
from trimaran.server.kube.table import table, wants_table
from trimaran.server.kube.watch import HeldStream, SlowWatcher, WatchHub
from trimaran.server.rbac import access as rbac  # a module: rbac's own modules import this package's
from trimaran.store import AlreadyExists, Conflict, DiskFull, NotFound, Page, Store
from trimaran.store._objects import generated_name
from trimaran.store.base import WatchEvent
from trimaran.store.errors import Expired, Invalid

if TYPE_CHECKING:
    from trimaran.runtime import NodeAPI

__all__ = ["EVENT", "KubeAPI", "MAX_BODY_BYTES", "Target"]

MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit for a request body
_DELETE_PAGE = 500  # objects a deletecollection reads at a time
MAX_WATCH_SECONDS = 1800  # a watch without timeoutSeconds ends here, and none lasts longer
_BOOKMARK_EVERY = 30.0
_UNKNOWN_FIELD = 'unknown field "'
_MAX_WARNING = 4096  # characters of one warning sent back
# As kube-apiserver's watch cache: a read at a revision not reached yet waits this long for it,
# then is answered 504 ResourceVersionTooLarge.
_TOO_LARGE_WAIT = 3.0
_CONSISTENT_READ_TRIES = 5  # lists read again while writes move the revision under them

# Events are not stored objects (the store keeps them in a table of their own), so the registry
# does not know them; they are served read-only at their core v1 place.
EVENT = KindInfo("Event", "v1", "", "v1", "events", ("ev",), True, model=None,  # type: ignore[arg-type]
                 status_subresource=False, printer_columns=printers.EVENT)


@dataclass(frozen=True)
class Target:
    """What a request's path names."""

    info: KindInfo
    namespace: str | None  # None: across namespaces, or a cluster-scoped kind
    name: str | None
    subresource: str | None

    @property
    def scope(self) -> str | None:
        """The namespace the request acts in, for authorisation."""
        return self.namespace if self.info.namespaced else None


def _flag(value: str | None) -> bool:
    # The Python client sends True/False (it url-encodes Python booleans).
    return (value or "").lower() in ("true", "1")


def _int_param(params: Any, name: str) -> int | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise StatusError.bad_request(f'invalid value for {name}: "{raw}" is not an integer') from None


_UPDATE_RETRY_SECONDS = 10.0


def _update_attempts() -> Iterator[int]:
    """Attempts at a read-merge-write that racing writes keep beating: as kube-apiserver's
    GuaranteedUpdate, no fixed count (a busy controller can win several in a row), but within a
    deadline, past which the write is a 409."""
    deadline = time.monotonic() + _UPDATE_RETRY_SECONDS
    attempt = 0
    while attempt == 0 or time.monotonic() < deadline:
        yield attempt
        attempt += 1


def _json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # A newline ends the body, as Go's JSON encoder ends kube-apiserver's (clients compare the text).
    return Response(orjson.dumps(data) + b"\n", status_code=status, media_type="application/json", headers=headers)


def _continue_token(revision: int, last: dict) -> str:
    """The ``continue`` of a page that ends with ``last``: where the next page starts, and the revision
    the list answers for."""
    meta = last["metadata"]
    return base64.urlsafe_b64encode(orjson.dumps(
        {"rv": revision, "after": [meta.get("namespace") or "", meta["name"]]})).decode()


class KubeAPI:
    """The resource handlers of one control plane."""

    def __init__(self, store: Store, hub: WatchHub, node: NodeAPI, pod_security: Policy) -> None:
        self.node = node  # logs, exec, attach and port-forward reach pods through it (logs.py, streaming.py)
        self.store = store
        self.pod_security = PodSecurityAdmission(store, pod_security)
        self.hub = hub
        self._by_path: dict[tuple[str, str, str], KindInfo] = {}
        for info in kinds.all_kinds():
            self._by_path.setdefault((info.group, info.version, info.plural), info)
        self._by_path[("", "v1", "events")] = EVENT

    # Resolution ------------------------------------------------------------------------

    def served(self) -> list[KindInfo]:
        """Every kind served, Events included, in registration order."""
        return list(self._by_path.values())

    def add_kind(self, info: KindInfo) -> None:
        """Serve a kind registered at run time (a user's CRD: ``server/kube/crd.py``)."""
        self._by_path.setdefault((info.group, info.version, info.plural), info)

    def remove_kind(self, info: KindInfo) -> None:
        if self._by_path.get((info.group, info.version, info.plural)) == info:
            del self._by_path[(info.group, info.version, info.plural)]

    def kind_at(self, group: str, version: str, plural: str) -> KindInfo | None:
        return self._by_path.get((group, version, plural))

    def resolve(self, group: str, version: str, segments: list[str]) -> Target:
        """The target of ``segments``: the path after ``/api/v1`` or ``/apis/G/V``."""
        def missing() -> StatusError:
            # go-restful's answer to a path no route takes: empty details, as kube-apiserver's.
            return StatusError(404, "NotFound", "the server could not find the requested resource", {})

        if segments and segments[0] == "watch":  # the deprecated /watch/ prefix
            segments = segments[1:]
        if len(segments) >= 3 and segments[0] == "namespaces" and self.kind_at(group, version, segments[2]):
            info = self.kind_at(group, version, segments[2])
            assert info is not None
            if not info.namespaced or len(segments) > 5:
                raise missing()
            return Target(info, segments[1], segments[3] if len(segments) > 3 else None,
                          segments[4] if len(segments) > 4 else None)
        info = self.kind_at(group, version, segments[0]) if segments else None
        if info is None or len(segments) > 3:
            raise missing()
        return Target(info, None, segments[1] if len(segments) > 1 else None,
                      segments[2] if len(segments) > 2 else None)

    # Dispatch --------------------------------------------------------------------------

    @staticmethod
    def verb(request: Request, target: Target) -> str:
        method = request.method
        if target.subresource in STREAMING:
            return "create"  # a WebSocket upgrade is a GET, authorised as the write it is (kube-apiserver 1.35)
        if method in ("GET", "HEAD"):
            if target.name is None:
                watching = _flag(request.query_params.get("watch")) or "/watch/" in request.url.path
                return "watch" if watching else "list"
            return "get"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if target.name else "deletecollection"
        raise StatusError.method_not_allowed()

    async def serve(self, request: Request, target: Target, verb: str) -> Response:
        """Answer one request for ``target``; a write the store's full disk refused is a 507 whose
        message names the filesystem to free (``store.DiskFull``), not an internal error."""
        try:
            return await self._serve(request, target, verb)
        except DiskFull as exc:
            raise StatusError(exc.code, exc.reason, str(exc)) from None

    async def _serve(self, request: Request, target: Target, verb: str) -> Response:
        sub = target.subresource
        info = target.info
        if sub in STREAMING and info.kind == "Pod" and target.name is not None:
            pod = await self._get(target)
            release = self.hub.streams.hold_for(request, sub)  # long-running, counted as watches are
            try:
                return await streaming.serve(request, pod, sub, self.node)
            finally:
                release()
        if sub == "eviction" and info.kind == "Pod":  # policy/v1 Eviction: kubectl drain (eviction.py)
            if verb != "create":
                raise StatusError.method_not_allowed()
            body = _decode(await _read_body(request), request)
            return _json_response(await asyncio.to_thread(evict, self.store, target.namespace or "",
                                                          target.name or "", body), 201)
        if sub not in (None, "status", "scale", "log") or (sub == "log" and info.kind != "Pod") or \
                (sub == "status" and not info.status_subresource) or (sub == "scale" and info.scale is None):
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if info is EVENT and verb not in ("get", "list", "watch"):
            raise StatusError.method_not_allowed("events are written by Trimaran's controllers only")
        if target.name is None and verb in ("create",) and target.namespace is None and info.namespaced:
            raise StatusError.method_not_allowed("create needs a namespace: POST to /namespaces/NS/" + info.plural)
        if target.name is not None and verb == "create":
            raise StatusError.method_not_allowed()
        if target.name is None and verb in ("update", "patch"):
            raise StatusError.method_not_allowed()
        params = request.query_params
        if verb == "list":
            return await self._list(request, target)
        if verb == "watch":
            return await self._watch(request, target)
        if verb == "get":
            if sub == "log":
                return await self._log(request, target)
            obj = await self._get(target)
            if sub == "scale":
                return _json_response(self._scale_of(info, obj))
            if wants_table(request.headers.get("accept", "")):
                return _json_response(table(info, [obj], obj["metadata"].get("resourceVersion", ""),
                                            params.get("includeObject", "Metadata")))
            return _json_response(obj)
        body = await _read_body(request)
        manager = params.get("fieldManager") or _default_manager(request)
        dry_run = params.get("dryRun") == "All"
        if verb == "create":
            return await self._create(target, _decode(body, request), manager, params.get("fieldValidation"),
                                      dry_run)
        if verb == "update":
            return await self._update(target, _decode(body, request), manager, params.get("fieldValidation"),
                                      dry_run)
        if verb == "patch":
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            return await self._patch(target, content_type, body, manager, _flag(params.get("force")),
                                     params.get("fieldValidation"), dry_run)
        options = _decode(body, request) if body.strip() else {}
        if not isinstance(options, dict) or not isinstance(options.get("preconditions") or {}, dict):
            raise StatusError.bad_request("the body of a delete must be a DeleteOptions object, its preconditions "
                                          "an object")
        propagation = params.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        if options.get("orphanDependents") is True:
            propagation = "Orphan"
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise StatusError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                              f'Unsupported value: "{propagation}": supported values: "Background", '
                              f'"Foreground", "Orphan"')
        dry_run = dry_run or options.get("dryRun") == ["All"]
        if verb == "delete":
            return await self._delete(target, propagation, options.get("preconditions"), dry_run)
        return await self._delete_collection(request, target, propagation, dry_run)

    # Reads -----------------------------------------------------------------------------

    async def _get(self, target: Target) -> dict:
        info = target.info
        if info is EVENT:
            found = [e for e in await asyncio.to_thread(self.store.list_events, None, target.namespace)
                     if e["metadata"]["name"] == target.name]
            if not found:
                raise StatusError.not_found("", "events", target.name or "")
            return found[0]
        try:
            obj = await asyncio.to_thread(self.store.get, info.kind, target.namespace or "", target.name)
        except NotFound:
            raise StatusError.not_found(info.group, info.plural, target.name or "") from None
        return served_as(info, obj)

    @staticmethod
    def _stored_as(target: Target, current: dict) -> Target:
        """The target in the version ``current`` is stored in. The versions of one kind are one set
        of objects, each served as it was written (MPIJob v1 and v2beta1 have no conversion)."""
        if current.get("apiVersion") == target.info.api_version:
            return target
        return Target(kinds.for_object(current["apiVersion"], current["kind"]), target.namespace, target.name,
                      target.subresource)

    def _matcher(self, target: Target, labels: LabelSelector, fields: FieldSelector) -> Callable[[dict], bool]:
        info = target.info

        def accepts(obj: dict) -> bool:
            if obj.get("kind") != info.kind:
                return False
            if target.namespace is not None and obj["metadata"].get("namespace") != target.namespace:
                return False
            return labels.matches(obj) and fields.matches(obj)

        return accepts

    async def _select(self, request: Request, target: Target) -> tuple[int, list[dict], Callable[[dict], bool]]:
        """The store revision, then the objects the request's namespace and selectors pick."""
        params = request.query_params
        info = target.info
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), info.kind)
        accepts = self._matcher(target, labels, fields)
        name = fields.value_of("metadata.name")
        namespace = target.namespace if info.namespaced else None
        if namespace is None and info.namespaced:
            namespace = fields.value_of("metadata.namespace")

        def objects() -> list[dict]:
            if info is EVENT:
                return self.store.list_events(None, namespace)
            if name is not None and (namespace is not None or not info.namespaced):
                try:
                    return [self.store.get(info.kind, namespace or "", name)]
                except NotFound:
                    return []
            return self.store.list(info.kind, namespace, label_selector=labels.equalities() or None, shared=True)

        def read() -> tuple[int, list[dict]]:
            # The list is of one revision when none was written while reading it: else a watch
            # from the revision would send again an object the list already holds.
            for _ in range(_CONSISTENT_READ_TRIES):
                revision = self.store.current_revision()
                items = objects()
                if self.store.current_revision() == revision:
                    break
            # Still moving: a watch from the first revision misses nothing (a repeat is harmless).
            return revision, items

        revision, items = await asyncio.to_thread(read)
        items = [o for o in items if accepts(o)]
        if is_custom(info):  # as the version asked for (crd.served_as)
            items = [served_as(info, o) for o in items]
        return revision, items, accepts

    async def _select_page(self, request: Request, target: Target, after: tuple[str, str] | None,
                           limit: int) -> tuple[int, Page] | None:
        """The store revision and one page of the objects the request picks, read from the store a
        page at a time; ``None`` where the request names one object or lists events (``_select``)."""
        params = request.query_params
        info = target.info
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), info.kind)
        namespace = target.namespace if info.namespaced else None
        if namespace is None and info.namespaced:
            namespace = fields.value_of("metadata.namespace")
        if info is EVENT or fields.value_of("metadata.name") is not None:
            return None
        selected = params.get("labelSelector") or params.get("fieldSelector")
        accepts = self._matcher(target, labels, fields) if selected else None

        def read() -> tuple[int, Page]:
            for _ in range(_CONSISTENT_READ_TRIES):  # one revision's page, as in _select
                revision = self.store.current_revision()
                page = self.store.list_page(info.kind, namespace, after=after, limit=limit,
                                            label_selector=labels.equalities() or None, accepts=accepts)
                if self.store.current_revision() == revision:
                    break
            return revision, page

        return await asyncio.to_thread(read)

    async def _reached(self, wanted: int) -> int | None:
        """None once the store has reached revision ``wanted`` (waiting up to :data:`_TOO_LARGE_WAIT`),
        else the revision it is at."""
        deadline = time.monotonic() + _TOO_LARGE_WAIT
        while True:
            current = await asyncio.to_thread(self.store.current_revision)
            if current >= wanted:
                return None
            if time.monotonic() >= deadline:
                return current
            await asyncio.sleep(0.05)

    async def _list(self, request: Request, target: Target) -> Response:
        params = request.query_params
        info = target.info
        rv = params.get("resourceVersion") or ""
        if rv not in ("", "0") and params.get("resourceVersionMatch") in (None, "", "NotOlderThan") \
                and not params.get("continue"):
            try:
                wanted = int(rv)
            except ValueError:
                raise StatusError.bad_request(f'invalid resource version "{rv}"') from None
            current = await self._reached(wanted)
            if current is not None:
                raise StatusError.too_large_resource_version(wanted, current)
        limit = _int_param(params, "limit")
        token = params.get("continue")
        after, token_revision = None, None
        if token:
            try:
                cont = json.loads(base64.urlsafe_b64decode(token.encode()))
                after, token_revision = tuple(cont["after"]), int(cont["rv"])
                if len(after) != 2 or not all(isinstance(part, str) for part in after):
                    raise ValueError(after)
            except (ValueError, KeyError, TypeError):
                raise StatusError(410, "Expired", "the provided continue parameter is too old or malformed"
                                  ) from None
        paged = await self._select_page(request, target, after, limit) if limit and limit > 0 else None
        next_token, remaining = "", None
        if paged is not None:
            revision, page = paged
            items = page.items
            if page.more:
                remaining = page.remaining
                next_token = _continue_token(token_revision or revision, items[-1])
        else:
            revision, items, _ = await self._select(request, target)
            if after is not None:
                items = [o for o in items if (o["metadata"].get("namespace") or "", o["metadata"]["name"]) > after]
            if limit and limit > 0 and len(items) > limit:
                if not (params.get("labelSelector") or params.get("fieldSelector")):
                    remaining = len(items) - limit  # kube-apiserver counts only what no selector chose
                items = items[:limit]
                next_token = _continue_token(token_revision or revision, items[-1])
        if token_revision is not None:
            revision = token_revision  # every page of a list answers for the revision of its first
        if wants_table(request.headers.get("accept", "")):
            return _json_response(table(info, items, str(revision), params.get("includeObject", "Metadata"),
                                        continue_token=next_token))
        metadata: dict[str, Any] = {"resourceVersion": str(revision)}
        if next_token:
            metadata["continue"] = next_token
            if remaining is not None:
                metadata["remainingItemCount"] = remaining
        return _json_response({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": metadata,
                               "items": items})

    async def _watch(self, request: Request, target: Target) -> Response:
        params = request.query_params
        info = target.info
        as_table = wants_table(request.headers.get("accept", ""))
        timeout = _int_param(params, "timeoutSeconds")
        timeout = MAX_WATCH_SECONDS if timeout is None or timeout <= 0 else min(timeout, MAX_WATCH_SECONDS)
        bookmarks = _flag(params.get("allowWatchBookmarks"))
        initial_end_bookmark = _flag(params.get("sendInitialEvents"))
        if initial_end_bookmark and params.get("resourceVersionMatch") != "NotOlderThan":
            raise StatusError(422, "Invalid", "sendInitialEvents is forbidden for watch unless resourceVersionMatch "
                              "is set to NotOlderThan")
        rv = params.get("resourceVersion") or ""
        if rv in ("", "0") or initial_end_bookmark:
            revision, initial, accepts = await self._select(request, target)
        else:
            try:
                revision = int(rv)
            except ValueError:
                raise StatusError.bad_request(f'invalid resource version "{rv}"') from None
            labels = parse_label_selector(params.get("labelSelector"))
            fields = parse_field_selector(params.get("fieldSelector"), info.kind)
            initial, accepts = [], self._matcher(target, labels, fields)
            current = await self._reached(revision)
            if current is not None:
                # Past admission and a parsed version, kube-apiserver answers a watch's errors as its one event.
                error = StatusError.too_large_resource_version(revision, current)
                return Response(orjson.dumps({"type": "ERROR", "object": error.body()}) + b"\n",
                                media_type="application/json;stream=watch")
        release = self.hub.streams.hold_for(request, "watch")
        try:
            # Events are not in the change log: the initial state, then silence.
            watcher = None if info is EVENT else await self.hub.subscribe(revision, lambda e: accepts(e.object))
        except BaseException as exc:
            release()
            if isinstance(exc, Expired):
                raise StatusError.gone(f"too old resource version: {rv} ({exc})") from None
            raise
        include = params.get("includeObject", "Metadata")

        def encode(kind: str, obj: dict, headers: bool) -> bytes:
            obj = served_as(info, obj) if kind != "ERROR" else obj
            shown = table(info, [obj], obj["metadata"].get("resourceVersion", ""), include, headers) \
                if as_table and kind != "BOOKMARK" and kind != "ERROR" else obj
            return orjson.dumps({"type": kind, "object": shown}) + b"\n"

        def bookmark(position: int, end_of_initial: bool) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": str(position)}
            if end_of_initial:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return orjson.dumps({"type": "BOOKMARK", "object": {"kind": info.kind, "apiVersion": info.api_version,
                                                                "metadata": meta}}) + b"\n"

        async def stream() -> AsyncIterator[bytes]:
            headers = True
            deadline = time.monotonic() + timeout
            try:
                for obj in initial:
                    yield encode("ADDED", obj, headers)
                    headers = False
                if initial_end_bookmark:
                    yield bookmark(revision, True)
                if watcher is None:
                    await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                    return
                position = revision
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    wait = min(left, _BOOKMARK_EVERY) if bookmarks else left
                    try:
                        event: WatchEvent | None = await watcher.next(wait)
                    except StopAsyncIteration:
                        return
                    if event is None:
                        if bookmarks and time.monotonic() < deadline:
                            yield bookmark(max(position, self.hub.position), False)
                        continue
                    position = event.revision
                    yield encode(event.type, event.object, headers)
                    headers = False
            except SlowWatcher:
                error = StatusError.gone("the watch fell too far behind: list again")
                yield orjson.dumps({"type": "ERROR", "object": error.body()}) + b"\n"

        def end() -> None:
            if watcher is not None:
                watcher.close()
            release()

        media = "application/json;stream=watch" if not as_table else "application/json"
        return HeldStream(stream(), end, media_type=media)

    async def _log(self, request: Request, target: Target) -> Response:
        params = request.query_params
        pod = await self._get(target)
        options = LogOptions(params.get("container"), _flag(params.get("follow")), _flag(params.get("previous")),
                             _int_param(params, "tailLines"), _int_param(params, "sinceSeconds"),
                             _int_param(params, "limitBytes"), _flag(params.get("timestamps")))
        return pod_log(self.hub, self.node, pod, options, lambda: self.hub.streams.hold_for(request, "log"))

    # Writes ----------------------------------------------------------------------------

    def _admit(self, target: Target, obj: Any, validation: str | None, name: str | None = None,
               current: dict | None = None) -> tuple[dict, list[str]]:
        """Validate and default ``obj`` for ``target`` (replacing ``current``), and judge its pods'
        security (a store read: call it off the event loop); return it with the warnings to send."""
        info = target.info
        if not isinstance(obj, dict):
            raise StatusError.bad_request("the body of the request must be a JSON object")
        for field, expected in (("apiVersion", info.api_version), ("kind", info.kind)):
            given = obj.get(field)
            if not given and info.builtin:
                # kube-apiserver decodes a built-in kind with the endpoint's as defaults (the Python
                # client's typed V1ConfigMap(metadata=...) sends none); a custom resource must name both.
                given = obj[field] = expected
            if not given:
                raise StatusError.bad_request(f"Object '{field[0].upper() + field[1:]}' is missing in the body")
            if given != expected:
                raise StatusError.bad_request(f"the {field} of the object ({given}) does not match the expected "
                                              f"{field} ({expected}) for {info.plural}")
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise StatusError.bad_request("metadata must be an object")
        if meta is None:  # "metadata": null is no metadata
            meta = obj["metadata"] = {}
        if info.namespaced:
            given_ns = meta.get("namespace")
            if given_ns and target.namespace and given_ns != target.namespace:
                raise StatusError.bad_request("the namespace of the provided object does not match the namespace "
                                              "sent on the request")
            meta["namespace"] = given_ns or target.namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") and meta["name"] != name:
            raise StatusError.bad_request(f"the name of the object ({meta['name']}) does not match the name on the "
                                          f"URL ({name})")
        if name is not None:
            meta["name"] = name
        if current is not None and not meta.get("uid"):
            meta["uid"] = current["metadata"].get("uid")  # an update names the object it replaces
        try:
            result = validate(obj)
        except ManifestError as exc:
            label = meta.get("name") or meta.get("generateName") or ""
            raise StatusError.invalid(info.group, info.kind, label, exc.field_errors or _as_field_errors(exc),
                                      exc.problems) from None
        unknown = [w for w in result.warnings if w.startswith(_UNKNOWN_FIELD)]
        others = [w for w in result.warnings if not w.startswith(_UNKNOWN_FIELD)]
        if unknown and validation == "Strict":
            raise StatusError.bad_request(f"{info.kind} in version \"{info.version}\" cannot be handled as a "
                                          f"{info.kind}: strict decoding error: " + ", ".join(unknown))
        admitted = result.object
        # Fields the models do not carry but the API server keeps.
        for field in ("managedFields", "resourceVersion", "deletionTimestamp", "finalizers", "ownerReferences"):
            if field in meta:
                admitted["metadata"][field] = copy.deepcopy(meta[field])
        patching.prune_managed_fields(admitted)
        if info.references is not None and current is None:
            refused = info.references(admitted, self._stored_or_none)
            if refused:
                raise StatusError.invalid(info.group, info.kind, admitted["metadata"].get("name", ""), refused)
        if info.kind == "Ingress" and current is None:  # the DefaultIngressClass admission plugin
            set_default_class(admitted, self.store)
        others += self.pod_security.admit(info, admitted, current)
        if current is not None:
            try:
                admit_update(self.store, admitted, current)  # the Priority plugin's part in updates
            except AdmissionRefused as exc:
                raise _forbidden(exc) from None
        rbac.admit(admitted)  # a role or binding granting what its writer lacks is refused
        return admitted, (unknown if validation != "Ignore" else []) + others

    def _stored_or_none(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(kind, namespace, name)
        except NotFound:
            return None

    async def _create(self, target: Target, obj: Any, manager: str, validation: str | None, dry_run: bool,
                      managed: bool = True) -> Response:
        info = target.info
        if info.status_subresource and isinstance(obj, dict):
            # A client's status is not taken on create; what defaulting gives (a Namespace is
            # Active) is, as kube-apiserver's strategies do.
            obj = {k: v for k, v in obj.items() if k != "status"}
        # The uid is the server's, given before defaulting as kube-apiserver does: a Job's generated
        # selector names it. A client's is replaced.
        uid = str(uuid.uuid4())
        if isinstance(obj, dict) and isinstance(obj.get("metadata") or {}, dict):
            meta = {**(obj.get("metadata") or {}), "uid": uid}
            prefix = meta.get("generateName")
            if prefix and isinstance(prefix, str) and not meta.get("name"):
                meta["name"] = generated_name(prefix)  # before defaulting too: a Job's labels name it
            obj = {**obj, "metadata": meta}
        admitted, warnings = await asyncio.to_thread(self._admit, target, obj, validation)
        admitted["metadata"].pop("resourceVersion", None)
        admitted["metadata"].pop("deletionTimestamp", None)
        if info.status_subresource and not is_custom(info):  # a custom resource is stored without one
            admitted.setdefault("status", {})  # the controllers' to fill; an empty one, as kube-apiserver stores it
        if managed:
            patching.track_update(None, admitted, manager)
        if dry_run:
            if self.store.admit_create is not None:  # defaulted and judged as a create would be, not stored
                admitted = await asyncio.to_thread(_admitted_by_plugins, self.store.admit_create, admitted)
            return _json_response(served_as(info, admitted), 201, _warning_headers(warnings))

        def write() -> dict:
            if info.namespaced:
                namespace = self.store.ensure_namespace(admitted["metadata"]["namespace"])
                if namespace["metadata"].get("deletionTimestamp"):
                    raise StatusError(403, "Forbidden", f'{info.plural} "{admitted["metadata"].get("name", "")}" '
                                      f'is forbidden: unable to create new content in namespace '
                                      f'{namespace["metadata"]["name"]} because it is being terminated')
            try:
                return self.store.create(admitted, uid=uid)
            except AdmissionRefused as exc:  # LimitRanger, Priority, ResourceQuota (controllers/quota.py)
                raise _forbidden(exc) from None

        try:
            created = await asyncio.to_thread(write)
        except AlreadyExists:
            raise StatusError.already_exists(info.group, info.plural, admitted["metadata"].get("name", "")) from None
        return _json_response(served_as(info, created), 201, _warning_headers(warnings))

    def _check_update(self, info: KindInfo, current: dict, new: dict) -> None:
        errors = info.model.update_errors(current, new)
        if errors:
            name = current["metadata"]["name"]
            raise StatusError.invalid(info.group, info.kind, name, errors)

    async def _update(self, target: Target, obj: Any, manager: str, validation: str | None, dry_run: bool
                      ) -> Response:
        current = await self._get(target)
        target = self._stored_as(target, current)
        info = target.info
        if target.subresource == "scale":
            return await self._write_scale(target, current, obj, dry_run)
        if target.subresource == "status":
            if not isinstance(obj, dict) or not isinstance(obj.get("status", {}), dict):
                raise StatusError.bad_request("status must be an object")
            # The store keeps all but the status of what it holds: a shallow copy is enough.
            new = {**current, "metadata": dict(current["metadata"]), "status": obj.get("status") or {}}
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                new["metadata"]["resourceVersion"] = rv
            return await self._store_status(info, new, dry_run)
        admitted, warnings = await asyncio.to_thread(self._admit, target, obj, validation, target.name, current)
        self._check_update(info, current, admitted)
        # Server-owned: a client's PUT neither sets nor clears it.
        admitted["metadata"].pop("deletionTimestamp", None)
        if current["metadata"].get("deletionTimestamp"):
            admitted["metadata"]["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
        patching.track_update(current, admitted, manager)
        return await self._store_update(info, admitted, dry_run, warnings)

    async def _store_update(self, info: KindInfo, new: dict, dry_run: bool, warnings: list[str],
                            status_only: bool = False) -> Response:
        """Write ``new`` (its spec and metadata, or only its status), checked against its resourceVersion."""
        if dry_run:
            return _json_response(served_as(info, new), 200, _warning_headers(warnings))
        write = self.store.update_status if status_only else self.store.update
        try:
            stored = await asyncio.to_thread(write, new)
        except Conflict:
            raise StatusError.conflict(info.group, info.plural, new["metadata"]["name"],
                                       "the object has been modified; please apply your changes to the latest "
                                       "version and try again") from None
        except NotFound:
            raise StatusError.not_found(info.group, info.plural, new["metadata"]["name"]) from None
        meta = stored["metadata"]
        if is_custom(info) and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The write that removes a user's object's last finalizer ends it at once, as
            # kube-apiserver's store does (the collector would, a moment later: a read right after
            # the write would still find it).
            try:
                await asyncio.to_thread(self.store.delete, info.kind, meta.get("namespace") or "", meta["name"])
            except NotFound:
                pass
        return _json_response(served_as(info, stored), 200, _warning_headers(warnings))

    async def _store_status(self, info: KindInfo, new: dict, dry_run: bool) -> Response:
        return await self._store_update(info, new, dry_run, [], status_only=True)

    async def _patch(self, target: Target, content_type: str, body: bytes, manager: str, force: bool,
                     validation: str | None, dry_run: bool) -> Response:
        info = target.info
        if content_type == "application/apply-patch+yaml":
            applied = load_yaml(body or b"")
            if not isinstance(applied, dict):
                raise StatusError.bad_request("an apply patch must be an object")
            if not isinstance(applied.get("metadata", {}), dict):
                raise StatusError.bad_request("metadata must be an object")
            # As kube-apiserver's update loop: without a resourceVersion of its own, an apply is
            # merged again into what a racing write (a controller's status) left, not refused.
            precondition = applied.get("metadata", {}).get("resourceVersion")
            for _ in _update_attempts():
                try:
                    live: dict | None = await self._get(target)
                except StatusError as exc:
                    if exc.code != 404 or target.subresource:
                        raise
                    live = None
                if live is not None and "status" in applied and target.subresource == "status":
                    new = copy.deepcopy(live)
                    new["status"] = applied["status"]
                    return await self._store_status(info, new, dry_run)
                merged = patching.server_side_apply(live, applied, manager, force)
                if live is None:
                    return await self._create(target, merged, manager, validation, dry_run, managed=False)
                admitted, warnings = await asyncio.to_thread(self._admit, target, merged, validation, target.name,
                                                             live)
                self._check_update(info, live, admitted)
                admitted["metadata"]["resourceVersion"] = precondition or live["metadata"]["resourceVersion"]
                try:
                    return await self._store_update(info, admitted, dry_run, warnings)
                except StatusError as exc:
                    if exc.code != 409 or precondition:
                        raise
            raise StatusError.conflict(info.group, info.plural, target.name or "", "too many concurrent writes")
        builtin = info.builtin
        for _ in _update_attempts():  # a patch is relative to the object: re-read and retry on a racing write
            current = await self._get(target)
            target = self._stored_as(target, current)
            info = target.info
            patched = patching.apply_patch(content_type, copy.deepcopy(current), body, builtin)
            if not isinstance(patched, dict):
                raise StatusError(422, "Invalid", "the patch did not leave an object")
            if not isinstance(patched.get("metadata"), dict):
                raise StatusError(422, "Invalid", "metadata: Invalid value: the patch did not leave an object")
            for field in ("name", "namespace", "uid"):
                if (patched.get("metadata") or {}).get(field) != current["metadata"].get(field):
                    raise StatusError(422, "Invalid", f"metadata.{field}: Invalid value: the patch may not change "
                                      f"the object's {field}")
            if patched["metadata"].get("resourceVersion") != current["metadata"].get("resourceVersion"):
                # The patch named a resourceVersion (an optimistic lock, as controller-runtime's
                # MergeFromWithOptimisticLock sends): a precondition, never retried.
                raise StatusError.conflict(info.group, info.plural, target.name or "",
                                           "the object has been modified; please apply your changes to the latest "
                                           "version and try again")
            if target.subresource == "scale":
                return await self._write_scale(target, current, patched, dry_run)
            if target.subresource == "status":
                new = copy.deepcopy(current)
                new["status"] = patched.get("status") or {}
                try:
                    return await self._store_status(info, new, dry_run)
                except StatusError as exc:
                    if exc.code == 409:
                        continue
                    raise
            admitted, warnings = await asyncio.to_thread(self._admit, target, patched, validation, target.name,
                                                         current)
            self._check_update(info, current, admitted)
            admitted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            patching.track_update(current, admitted, manager)
            try:
                return await self._store_update(info, admitted, dry_run, warnings)
            except StatusError as exc:
                if exc.code != 409:
                    raise
        raise StatusError.conflict(info.group, info.plural, target.name or "", "too many concurrent writes")

    async def _delete(self, target: Target, propagation: str, preconditions: Any, dry_run: bool) -> Response:
        info = target.info
        current = await self._get(target)
        try:
            remaining = await asyncio.to_thread(request_delete, self.store, current, propagation,
                                                preconditions if isinstance(preconditions, dict) else None, dry_run)
        except Conflict as exc:
            raise StatusError.conflict(info.group, info.plural, target.name or "", str(exc)) from None
        except NotFound:
            raise StatusError.not_found(info.group, info.plural, target.name or "") from None
        except Invalid as exc:
            raise StatusError(422, "Invalid", str(exc)) from None
        if remaining is not None:
            return _json_response(remaining, 200)
        if info.returns_deleted:
            return _json_response(current, 200)
        meta = current["metadata"]
        details = {"name": meta["name"], "group": info.group, "kind": info.plural, "uid": meta.get("uid")}
        return _json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                               "details": {k: v for k, v in details.items() if v}})  # omitempty, as upstream

    async def _delete_collection(self, request: Request, target: Target, propagation: str, dry_run: bool
                                 ) -> Response:
        after: tuple[str, str] | None = None
        deleted: list[dict] = []
        while True:  # read a page at a time (the answer lists what went, as upstream's does)
            paged = await self._select_page(request, target, after, _DELETE_PAGE)
            items = paged[1].items if paged is not None else (await self._select(request, target))[1]
            for obj in items:
                try:
                    remaining = await asyncio.to_thread(request_delete, self.store, obj, propagation, None, dry_run)
                except (NotFound, Conflict):
                    continue  # gone or changed meanwhile: deletecollection is best effort per item
                deleted.append(remaining if remaining is not None else obj)
            if paged is None or not paged[1].more:
                break
            last = items[-1]["metadata"]
            after = (last.get("namespace") or "", last["name"])
        # As kube-apiserver's registry: the list of what was deleted (or is being deleted).
        info = target.info
        revision = await asyncio.to_thread(self.store.current_revision)
        return _json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                               "metadata": {"resourceVersion": str(revision)}, "items": deleted})

    # Scale -----------------------------------------------------------------------------

    @staticmethod
    def _scale_of(info: KindInfo, obj: dict) -> dict:
        assert info.scale is not None
        meta = obj["metadata"]
        selector = info.scale.selector(obj)
        status: dict[str, Any] = {"replicas": read_path(obj, info.scale.status_replicas_path) or 0}
        if selector:
            status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": read_path(obj, info.scale.spec_replicas_path) or 0}, "status": status}

    async def _write_scale(self, target: Target, current: dict, scale: Any, dry_run: bool) -> Response:
        info = target.info
        assert info.scale is not None
        replicas = ((scale or {}).get("spec") or {}).get("replicas") if isinstance(scale, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise StatusError.invalid("autoscaling", "Scale", target.name or "", [
                FieldError.invalid("spec.replicas", replicas, "must be greater than or equal to 0")])
        new = copy.deepcopy(current)
        if not _dotted_set(new, info.scale.spec_replicas_path, replicas):
            raise StatusError(422, "Invalid", f"{info.kind} {target.name} has no {info.scale.spec_replicas_path} "
                              "to scale")
        admitted, _ = await asyncio.to_thread(self._admit, Target(info, target.namespace, target.name, None), new,
                                              "Ignore", target.name, current)
        self._check_update(info, current, admitted)
        admitted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        response = await self._store_update(info, admitted, dry_run, [])
        stored = orjson.loads(response.body)
        return _json_response(self._scale_of(info, stored))


def _forbidden(exc: AdmissionRefused) -> StatusError:
    return StatusError(403, "Forbidden", str(exc), {"name": exc.name, "group": exc.group, "kind": exc.plural})


def _admitted_by_plugins(admit: Callable[[dict], dict], obj: dict) -> dict:
    try:
        return admit(obj)
    except AdmissionRefused as exc:
        raise _forbidden(exc) from None


def _dotted_set(obj: dict, path: str, value: Any) -> bool:
    parts = path.strip(".").split(".")
    cur: Any = obj
    for part in parts[:-1]:
        cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is None:
            return False
    cur[parts[-1]] = value
    return True


def _as_field_errors(exc: ManifestError) -> list[FieldError]:
    return [FieldError.invalid("", None, problem) for problem in exc.problems]


def _warning_headers(warnings: list[str]) -> dict[str, str]:
    if not warnings:
        return {}
    # One header can carry several warnings, comma-separated (RFC 7234 warning-values). A header
    # holds printable ASCII only: anything else a warning quotes (an unknown field's name) is escaped.
    def text(warning: str) -> str:
        escaped = warning[:_MAX_WARNING].replace("\\", "\\\\").replace('"', '\\"')
        return "".join(ch if " " <= ch <= "~" else ascii(ch)[1:-1] for ch in escaped)

    return {"Warning": ", ".join('299 - "' + text(w) + '"' for w in warnings)}


def _default_manager(request: Request) -> str:
    agent = request.headers.get("user-agent", "unknown")
    return agent.split("/")[0][:128] or "unknown"


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise StatusError.too_large(MAX_BODY_BYTES)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise StatusError.too_large(MAX_BODY_BYTES)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(body: bytes, request: Request) -> Any:
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        return load_yaml(body)
    if content_type == protobuf.MEDIA_TYPE:
        try:
            return protobuf.decode(body)
        except protobuf.ProtobufError as exc:
            raise StatusError(415, "UnsupportedMediaType", f"{content_type}: {exc}") from None
    if content_type not in ("application/json", "", "*/*"):
        raise StatusError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - '
                          f'accepted media types include: application/json, application/yaml, '
                          f'{protobuf.MEDIA_TYPE} (core Namespaces, ConfigMaps and Secrets) (got "{content_type}")')
    return load_json(body)
