"""The control plane's HTTP application.

Almost everything is the Kubernetes API (`trimaran.server.kube`), so kubectl, the Kubernetes
clients and the Kubeflow SDKs work unchanged, and ``trimaran`` is one more client of it. Two
routes of our own remain, where Kubernetes has no equivalent (docs/architecture.md lists them):

* ``POST /trimaran/v1/namespaces/{ns}/trials/{name}/observations``: a trial pushes its metrics
  (``report_metrics``; Katib does this over its DB manager's gRPC API, which is served too);
* ``GET /trimaran/v1/namespaces/{ns}/observations``: every stored observation of an experiment's
  trials (``trimaran trials``, the dashboard's curves; Katib keeps them in its own database).

Plus Kubeflow Pipelines' v2beta1 REST API (``/apis/v2beta1``, what ``kfp.Client`` calls:
`trimaran.server.kfp`), the dashboard (``/dashboard``), ``/healthz``, ``/metrics`` and Prometheus' service discovery of
what ServiceMonitors and PodMonitors select (`trimaran.server.monitoring`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from trimaran.api.podsecurity import Policy
from trimaran.controllers.tuning.trial import FINISHED, trial_state
from trimaran.server.auth import TokenMiddleware, is_dashboard
from trimaran.server.controlplane import ControlPlane
from trimaran.server.dashboard import dashboard_router
from trimaran.server.kfp import kfp_routes
from trimaran.server.kube import KubeAPI, StatusError, WatchHub, principal_of, routes, status_response
from trimaran.server.kube.metrics import metrics_routes
from trimaran.server.kube.watch import metrics_exposition
from trimaran.server.monitoring import ControlPlaneCollector, monitoring_router
from trimaran.server.observations import add_pushed_observations
from trimaran.server.rbac.access import authorize_path
from trimaran.server.rbac.reviews import review_routes
from trimaran.server.tokens import TokenStore
from trimaran.store import NotFound

log = logging.getLogger(__name__)


class _ClientDisconnects:
    """A client that hangs up before its request's body ends is one line in the log: there is no one
    to answer, and nothing went wrong here (uvicorn would log the whole ASGI traceback)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            host, port = scope.get("client") or ("unknown", 0)
            log.info("%s:%s went away before the body of its request ended: %s %s", host, port,
                     scope.get("method"), scope.get("path"))


class ObservationIn(BaseModel):
    metric: str
    value: float
    step: int | None = None
    timestamp: float | None = None


class ObservationsIn(BaseModel):
    observations: list[ObservationIn]


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def create_app(plane: ControlPlane, tokens: TokenStore, hub: WatchHub, server_address: Callable[[], str],
               started: str) -> FastAPI:
    """The ASGI app of ``plane``.

    Args:
        plane: The store, controllers and node.
        tokens: Who may call; every request but the health checks needs a token.
        hub: Fans the store's changes out to watches (started by the server on its event loop).
        server_address: ``host:port`` as clients reach the server.
        started: When the control plane started (RFC 3339).
    """
    store = plane.store
    app = FastAPI(title="Trimaran control plane", version="0.1.0", openapi_url=None, docs_url=None,
                  redoc_url=None)
    kube = KubeAPI(store, hub, plane.kubelet.runtime, Policy.default(plane.pod_security))

    app.add_middleware(TokenMiddleware, tokens=tokens)
    app.add_middleware(_ClientDisconnects)

    @app.exception_handler(StatusError)
    async def status_error(request: Request, exc: StatusError) -> Response:
        return status_response(exc)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return status_response(StatusError(404, "NotFound", str(exc)))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        # Paths and methods no route takes: a Status, as kube-apiserver answers, but for the dashboard.
        if is_dashboard(request.url.path):
            return await http_exception_handler(request, exc)
        reasons = {404: "NotFound", 405: "MethodNotAllowed"}
        message = {404: "the server could not find the requested resource",
                   405: "the server does not allow this method on the requested resource"}
        return status_response(StatusError(exc.status_code, reasons.get(exc.status_code, "BadRequest"),
                                           message.get(exc.status_code, str(exc.detail)), headers=exc.headers))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        # Our own routes' bodies and queries: a Status naming each field, as the Kubernetes routes answer.
        causes = [{"reason": "FieldValueInvalid", "message": str(e.get("msg", "")),
                   "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body")} for e in exc.errors()]
        message = "; ".join(f"{c['field']}: {c['message']}" for c in causes) or "the request is not valid"
        return status_response(StatusError(400, "BadRequest", message, details={"causes": causes}))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        # Still logged by the server; the client gets a Status it can decode.
        return status_response(StatusError(500, "InternalError", f"Internal error occurred: {type(exc).__name__}"))

    @app.get("/healthz")
    @app.get("/livez")
    @app.get("/readyz")
    async def healthz() -> Response:
        return Response(b"ok", media_type="text/plain")

    # KFP's /apis/v2beta1 first: the Kubernetes API's /apis/{group} would take it.
    app.router.routes.extend(kfp_routes(store))
    app.router.routes.extend(metrics_routes(store, plane.kubelet.runtime.stats, plane.kubelet.node))
    app.router.routes.extend(review_routes(store, tokens))  # RBAC's reviews and TokenRequest
    app.router.routes.extend(routes(kube, server_address, started))
    app.include_router(dashboard_router(plane))
    app.include_router(monitoring_router(store))
    collector = ControlPlaneCollector(store, plane.manager, plane.kubelet.node, plane.kubelet.runtime)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Open watches and log follows, as kube-apiserver's ``apiserver_longrunning_requests``; the
        store's objects, the controllers and the node (`ControlPlaneCollector`)."""
        authorize_path(principal_of(request), "/metrics")
        body, media = await asyncio.to_thread(metrics_exposition, hub, collector)
        return Response(body, media_type=media)

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> Response:
        # The query string goes along: a ``?token=`` link to the root still signs the browser in.
        query = request.url.query
        return RedirectResponse("/dashboard/" + (f"?{query}" if query else ""), status_code=307)

    def allow(request: Request, verb: str, namespace: str) -> None:
        principal = principal_of(request)
        if not principal.allows(verb, namespace, "trials", "kubeflow.org"):
            raise StatusError.forbidden(principal.name, verb, "kubeflow.org", "trials", namespace)

    @app.post("/trimaran/v1/namespaces/{namespace}/trials/{name}/observations")
    def push_observations(request: Request, namespace: str, name: str, body: ObservationsIn) -> Response:
        """The push collector (``report_metrics``): a trial's own code reports its metrics."""
        allow(request, "update", namespace)
        trial = store.get("Trial", namespace, name)
        state = trial_state(trial)
        if state in FINISHED:  # as Katib's DBManager here: a finished trial's record is final
            raise StatusError(409, "Conflict", f'trials.kubeflow.org "{name}": the trial has finished ({state}): '
                              "it takes no more observations")
        rows = [o.model_dump() for o in body.observations]
        add_pushed_observations(store, namespace, name, trial["metadata"]["uid"], rows)
        return _json({"accepted": len(rows)})

    @app.get("/trimaran/v1/namespaces/{namespace}/observations")
    def list_observations(request: Request, namespace: str, trial: list[str] | None = Query(None),
                          metric: str | None = None) -> Response:
        allow(request, "list", namespace)
        return _json({"items": store.list_observations(namespace, trials=trial, metric=metric)})

    return app


__all__ = ["create_app"]
