"""``/apis/apiextensions.k8s.io/v1/customresourcedefinitions``: Trimaran's own CRDs (read-only, made
from the kind registry) and users' CRDs (stored, validated by ``api/crd.py``), served together.

A user's CRD is served as apiextensions-apiserver serves it, without waiting: the write that stores
it also sets its status (NamesAccepted, Established) and registers one `KindInfo` per served
version, so discovery, OpenAPI, tables and every verb of the new resource answer from the next
request on. Deleting it deletes its objects and unregisters the kind; at start every stored CRD is
registered again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from trimaran.api import kinds
from trimaran.api.crd import CRD_INFO, CRD_KIND, crd_status, is_custom, kind_infos
from trimaran.server.kube import discovery
from trimaran.server.kube.errors import StatusError
from trimaran.server.kube.resources import KubeAPI, Target
from trimaran.server.kube.table import table, wants_table
from trimaran.store import Conflict, NotFound
from trimaran.store._objects import now_rfc3339

__all__ = ["CustomResources"]

log = logging.getLogger(__name__)

_WRITES = ("create", "update", "patch", "delete", "deletecollection")
_STATUS_TRIES = 5


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data) + b"\n", status_code=status, media_type="application/json", headers=headers)


class CustomResources:
    """The CRD endpoint of one control plane, and the runtime registration of users' kinds."""

    def __init__(self, api: KubeAPI, started: str) -> None:
        self.api = api
        self.started = started  # our own CRDs' creation time
        self._registered: dict[str, list[kinds.KindInfo]] = {}
        self._lock = threading.Lock()
        for crd in api.store.list(CRD_KIND):
            self.sync(crd["metadata"]["name"])

    # Registration ----------------------------------------------------------------------------

    def sync(self, name: str) -> dict | None:
        """Bring the registry and the status of CRD ``name`` to what the store holds; return it."""
        with self._lock:
            for info in self._registered.pop(name, []):
                kinds.unregister(info)
                self.api.remove_kind(info)
            crd = self._with_status(name)
            if crd is None or crd["metadata"].get("deletionTimestamp"):
                return crd
            registered: list[kinds.KindInfo] = []
            try:
                for info in kind_infos(crd):
                    kinds.register(info)
                    self.api.add_kind(info)
                    registered.append(info)
            except (KeyError, TypeError, ValueError) as exc:
                # A CRD stored before a check it now fails (a kind Trimaran has come to serve itself):
                # the control plane starts without it rather than not at all.
                log.warning("CustomResourceDefinition %s is not served: %s", name, exc)
                for info in registered:
                    kinds.unregister(info)
                    self.api.remove_kind(info)
                return crd
            self._registered[name] = registered
            return crd

    def _with_status(self, name: str) -> dict | None:
        for _ in range(_STATUS_TRIES):
            try:
                crd = self.api.store.get(CRD_KIND, "", name)
            except NotFound:
                return None
            status = crd_status(crd, now_rfc3339())
            if status == crd.get("status"):
                return crd
            try:
                return self.api.store.update_status({**crd, "status": status})
            except Conflict:
                continue  # a write raced this one: read it again
            except NotFound:
                return None
        return self.api.store.get(CRD_KIND, "", name)

    def _delete_objects(self, name: str) -> None:
        """Remove every object of the CRD's kind, as apiextensions' finalizer does before the CRD goes."""
        infos = self._registered.get(name) or []
        for kind in dict.fromkeys(info.kind for info in infos):
            for obj in self.api.store.list(kind):
                meta = obj["metadata"]
                self.api.store.delete_events_for(kind, meta.get("namespace") or "", meta["name"])
                try:
                    self.api.store.delete(kind, meta.get("namespace") or "", meta["name"])
                except NotFound:
                    continue

    # Requests --------------------------------------------------------------------------------

    def _own(self) -> list[dict]:
        return discovery.crd_objects(self.api.served(), self.started)

    def _own_names(self) -> set[str]:
        # Cheap, for every request: the objects themselves cost every kind's schema.
        return {f"{i.plural}.{i.group}" for i in self.api.served()
                if not i.builtin and i.model is not None and not is_custom(i)}

    async def serve(self, request: Request, segments: list[str], guard: Callable[[str], None]) -> Response:
        name = segments[1] if len(segments) > 1 else None
        sub = segments[2] if len(segments) > 2 else None
        if len(segments) > 3 or sub not in (None, "status"):
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        target = Target(CRD_INFO, None, name, sub)
        verb = KubeAPI.verb(request, target)
        guard(verb)
        if name in self._own_names():
            if verb != "get":
                raise StatusError(403, "Forbidden", f'customresourcedefinitions.apiextensions.k8s.io "{name}" is '
                                  f"forbidden: {name} is Trimaran's own CustomResourceDefinition: it is read-only "
                                  "(Trimaran serves that kind itself)",
                                  {"name": name, "group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"})
            [crd] = [c for c in await asyncio.to_thread(self._own) if c["metadata"]["name"] == name]
            if wants_table(request.headers.get("accept", "")):
                return _json(table(CRD_INFO, [crd], "1", request.query_params.get("includeObject", "Metadata")))
            return _json(crd)
        dry_run = request.query_params.get("dryRun") == "All"
        if verb == "delete" and not dry_run:
            await asyncio.to_thread(self._delete_objects, name or "")
        if verb == "deletecollection" and not dry_run:
            for stored in await asyncio.to_thread(self.api.store.list, CRD_KIND):
                await asyncio.to_thread(self._delete_objects, stored["metadata"]["name"])
        response = await self.api.serve(request, target, verb)
        if verb == "list":
            return self._with_own(request, response, await asyncio.to_thread(self._own))
        if verb not in _WRITES or response.status_code >= 300 or dry_run:
            return response
        if verb == "deletecollection":
            for stored_name in list(self._registered):
                await asyncio.to_thread(self.sync, stored_name)
            return response
        body = orjson.loads(response.body)
        crd_name = name or (body.get("metadata") or {}).get("name") or ""
        crd = await asyncio.to_thread(self.sync, crd_name)
        if crd is None or verb == "delete":
            return response
        warning = response.headers.get("warning")
        return _json(crd, response.status_code, {"Warning": warning} if warning else None)

    @staticmethod
    def _with_own(request: Request, response: Response, own: list[dict]) -> Response:
        """A list of the stored CRDs and Trimaran's own, by name as kube-apiserver lists them (the
        first page only, when the list is paged)."""
        if response.status_code != 200 or request.query_params.get("continue"):
            return response
        body = orjson.loads(response.body)
        if body.get("kind") == "Table":
            rows = table(CRD_INFO, own, "", request.query_params.get("includeObject", "Metadata"))["rows"]
            body["rows"] = sorted(rows + body["rows"], key=lambda row: row["cells"][0])
        else:
            body["items"] = sorted(own + body["items"], key=lambda crd: crd["metadata"]["name"])
        return _json(body)
