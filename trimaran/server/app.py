"""The control plane's HTTP API.

Paths are Trimaran's own but shaped like Kubernetes' (namespaces/{ns}/{plural}/{name}); objects
are the same dicts the store keeps. ``apply`` takes every document of a command at once so a file
with one bad document stores nothing.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel

from trimaran.api import ManifestError, kinds, validate
from trimaran.controllers.gc import delete_with_dependents
from trimaran.server.auth import check as check_token
from trimaran.server.controlplane import ControlPlane
from trimaran.server.dashboard import dashboard_router
from trimaran.store import Conflict, NotFound

INTERNAL_ANNOTATION_PREFIX = "trimaran.io/"


class ManifestIn(BaseModel):
    location: str = "-"
    object: dict


class ObservationIn(BaseModel):
    metric: str
    value: float
    step: int | None = None
    timestamp: float | None = None


class ObservationsIn(BaseModel):
    observations: list[ObservationIn]


class ApplyIn(BaseModel):
    manifests: list[ManifestIn]
    namespace: str | None = None
    dryRun: bool = False


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def create_app(plane: ControlPlane, token: str | None = None) -> FastAPI:
    store = plane.store
    app = FastAPI(title="Trimaran control plane", version="0.1.0")

    @app.middleware("http")
    async def auth(request: Request, call_next):  # noqa: ANN001, ANN202 - Starlette middleware
        refused = check_token(request, token) if token is not None else None
        return refused if refused is not None else await call_next(request)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return _json({"message": str(exc), "reason": "NotFound"}, 404)

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> Response:
        return _json({"message": str(exc), "reason": "Conflict"}, 409)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    app.include_router(dashboard_router(plane))

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> Response:
        # The query string goes along: a ``?token=`` link to the root still signs the browser in.
        query = request.url.query
        return RedirectResponse("/dashboard/" + (f"?{query}" if query else ""), status_code=307)

    @app.post("/trimaran/v1/apply")
    def apply(body: ApplyIn) -> Response:
        validated, warnings, errors = [], [], []
        for m in body.manifests:
            obj = copy.deepcopy(m.object)
            if body.namespace and isinstance(obj.get("metadata"), dict) and not obj["metadata"].get("namespace"):
                obj["metadata"]["namespace"] = body.namespace
            try:
                result = validate(obj)
            except ManifestError as exc:
                errors += [f"{m.location}: {problem}" for problem in exc.problems]
                continue
            forbidden = _update_problems(result.object)
            if forbidden:
                errors += [f"{m.location}: {problem}" for problem in forbidden]
                continue
            validated.append(result.object)
            warnings += [f"{m.location}: Warning: {w}" for w in result.warnings]
        if errors:
            return _json({"message": "\n".join(errors), "reason": "Invalid", "warnings": warnings}, 422)
        results = []
        if not body.dryRun:
            for obj in validated:
                results.append(_apply_one(obj))
        else:
            results = [{"kind": o["kind"], "group": kinds.for_object(o["apiVersion"], o["kind"]).group,
                        "namespace": o["metadata"].get("namespace", ""),
                        "name": o["metadata"]["name"], "action": "configured (dry run)"} for o in validated]
        return _json({"results": results, "warnings": warnings})

    def _update_problems(obj: dict) -> list[str]:
        """The kind's update rule (e.g. Katib's immutable Experiment spec) against the stored object."""
        info = kinds.for_object(obj["apiVersion"], obj["kind"])
        ns = obj["metadata"].get("namespace", "default") if info.namespaced else ""
        try:
            current = store.get(obj["kind"], ns, obj["metadata"]["name"])
        except NotFound:
            return []
        errs = info.model.update_errors(current, obj)
        return ManifestError.from_field_errors(f'{obj["kind"]} "{obj["metadata"]["name"]}"', errs).problems

    def _apply_one(obj: dict) -> dict:
        info = kinds.for_object(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        ns = meta.get("namespace", "default") if info.namespaced else ""
        if info.namespaced:
            store.ensure_namespace(ns)
        try:
            current = store.get(obj["kind"], ns, meta["name"])
        except NotFound:
            store.create(obj)
            return {"kind": obj["kind"], "group": info.group, "namespace": ns, "name": meta["name"],
                    "action": "created"}
        merged = copy.deepcopy(current)
        for field, value in obj.items():
            if field not in ("metadata", "status"):
                merged[field] = value
        for field in ("labels", "annotations"):
            kept = {k: v for k, v in (current["metadata"].get(field) or {}).items()
                    if k.startswith(INTERNAL_ANNOTATION_PREFIX)}
            wanted = {**(meta.get(field) or {}), **kept}
            if wanted or field in merged["metadata"]:
                merged["metadata"][field] = wanted
        if merged == current:
            action = "unchanged"
        else:
            store.update(merged)
            action = "configured"
        return {"kind": obj["kind"], "group": info.group, "namespace": ns, "name": meta["name"], "action": action}

    @app.get("/trimaran/v1/resolve/{kind_name}")
    def resolve_kind(kind_name: str) -> Response:
        info = _kind(kind_name)
        return _json({"kind": info.kind, "apiVersion": info.api_version, "group": info.group,
                      "plural": info.plural, "shortNames": list(info.short_names), "namespaced": info.namespaced})

    @app.get("/trimaran/v1/kinds/{kind_name}")
    def list_objects(kind_name: str, namespace: str | None = None, labelSelector: str | None = None) -> Response:
        info = _kind(kind_name)
        selector = _parse_selector(labelSelector)
        revision = store.current_revision()  # read first, so a watch from here misses nothing
        items = store.list(info.kind, namespace if info.namespaced else None, label_selector=selector)
        return _json({"kind": info.kind, "items": items, "resourceVersion": str(revision)})

    @app.get("/trimaran/v1/kinds/{kind_name}/namespaces/{namespace}/{name}")
    def get_object(kind_name: str, namespace: str, name: str) -> Response:
        info = _kind(kind_name)
        return _json(store.get(info.kind, namespace if info.namespaced else "", name))

    @app.delete("/trimaran/v1/kinds/{kind_name}/namespaces/{namespace}/{name}")
    def delete_object(kind_name: str, namespace: str, name: str) -> Response:
        info = _kind(kind_name)
        ns = namespace if info.namespaced else ""
        obj = store.get(info.kind, ns, name)
        delete_with_dependents(store, obj)
        return _json({"kind": info.kind, "namespace": ns, "name": name, "uid": obj["metadata"]["uid"]})

    @app.post("/trimaran/v1/namespaces/{namespace}/trials/{name}/observations")
    def push_observations(namespace: str, name: str, body: ObservationsIn) -> Response:
        """The push collector (``report_metrics``): a trial's own code reports its metrics."""
        trial = store.get("Trial", namespace, name)
        rows = [o.model_dump() for o in body.observations]
        if any(r["step"] is None for r in rows):
            # Reports without a step count per metric, as the text collector numbers its lines.
            seen: dict[str, int] = {}
            for r in store.list_observations(namespace, trials=[name]):
                seen[r["metric"]] = seen.get(r["metric"], 0) + 1
            for r in rows:
                if r["step"] is None:
                    r["step"] = seen.get(r["metric"], 0)
                seen[r["metric"]] = seen.get(r["metric"], 0) + 1
        store.add_observations(namespace, name, trial["metadata"]["uid"], rows)
        return _json({"accepted": len(rows)})

    @app.get("/trimaran/v1/namespaces/{namespace}/observations")
    def list_observations(namespace: str, trial: list[str] | None = Query(None), metric: str | None = None) -> Response:
        return _json({"items": store.list_observations(namespace, trials=trial, metric=metric)})

    @app.get("/trimaran/v1/events")
    def events(kind: str | None = None, namespace: str | None = None, name: str | None = None) -> Response:
        return _json({"items": store.list_events(kind=kind, namespace=namespace, name=name)})

    @app.get("/trimaran/v1/watch")
    def watch(kinds_: str = Query("", alias="kinds"), since: int | None = None, timeout: float = 300.0) -> Response:
        wanted = [_kind(k).kind for k in kinds_.split(",") if k] or None
        start = since if since is not None else store.current_revision()
        stop = threading.Event()

        def stream() -> Iterator[bytes]:
            try:
                for event in store.watch(kinds=wanted, since=start, timeout=timeout, stop=stop):
                    yield orjson.dumps({"type": event.type, "object": event.object,
                                        "revision": event.revision}) + b"\n"
            finally:
                stop.set()

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    @app.get("/trimaran/v1/namespaces/{namespace}/pods/{name}/log")
    async def pod_log(namespace: str, name: str, container: str | None = None, previous: bool = False,
                      follow: bool = False) -> Response:
        pod = store.get("Pod", namespace, name)
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        cname = container or (containers[0] if containers else None)
        if cname not in containers:
            raise HTTPException(400, f"container {cname!r} is not valid for pod {name}; choose one of {containers}")
        restarts = max((cs.get("restartCount", 0) for cs in (pod.get("status") or {}).get("containerStatuses") or []
                        if cs.get("name") == cname), default=0)
        attempt = restarts - 1 if previous else None
        if previous and attempt < 0:
            raise HTTPException(400, f"previous terminated container {cname!r} in pod {name!r} not found")
        path: Path = plane.kubelet.runtime.log_path(namespace, name, cname, attempt)
        if not follow:
            data = path.read_bytes() if path.exists() else b""
            return Response(data, media_type="text/plain")

        async def tail() -> object:
            offset = 0
            while True:
                if path.exists():
                    with path.open("rb") as fh:
                        fh.seek(offset)
                        chunk = fh.read()
                        offset += len(chunk)
                    if chunk:
                        yield chunk
                try:
                    current = store.get("Pod", namespace, name)
                except NotFound:
                    return
                phase = (current.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    if path.exists() and path.stat().st_size > offset:
                        continue
                    return
                await asyncio.sleep(0.2)

        return StreamingResponse(tail(), media_type="text/plain")

    return app


def _kind(name: str):  # noqa: ANN202 - returns the api registry's KindInfo
    try:
        return kinds.lookup(name)
    except Exception as exc:  # noqa: BLE001 - the registry's own error message is the answer
        raise HTTPException(404, str(exc)) from exc


def _parse_selector(raw: str | None) -> dict[str, str] | None:
    if not raw:
        return None
    out = {}
    for part in raw.split(","):
        if "=" not in part:
            raise HTTPException(400, f"unsupported label selector {part!r}: use key=value")
        k, v = part.split("=", 1)
        out[k.strip().rstrip("=")] = v.strip()
    return out


__all__ = ["create_app"]
