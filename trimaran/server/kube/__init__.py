"""The Kubernetes-compatible API: discovery, OpenAPI, and every served kind at its real path.

``routes(api, ...)`` gives the Starlette routes; the handlers are generic over the kind registry
(`trimaran.api.kinds`), so a kind registered there is served here with no code of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from trimaran.server.kube import discovery, openapi
from trimaran.server.kube.crd import CustomResources
from trimaran.server.kube.errors import StatusError, status_response
from trimaran.server.kube.resources import EVENT, KubeAPI, Target
from trimaran.server.kube.watch import WatchHub
from trimaran.server.rbac import access as rbac  # modules: rbac's own modules import this package's
from trimaran.server.rbac.authorizer import Attributes
from trimaran.server.tokens import Principal

__all__ = ["EVENT", "KubeAPI", "StatusError", "Target", "WatchHub", "principal_of", "routes", "status_response"]

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
READ_VERBS = frozenset({"get", "list", "watch"})


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def principal_of(request: Request) -> Principal:
    """The caller the authentication middleware found (every API request has one)."""
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise StatusError.unauthorized()
    return principal


def routes(api: KubeAPI, server_address: Callable[[], str], started: str) -> list[BaseRoute]:
    """Routes for ``/version``, ``/api``, ``/apis``, ``/openapi/v3`` and every resource path.

    Args:
        api: The resource handlers.
        server_address: ``host:port`` as clients reach the server (for ``/api``).
        started: When the control plane started (RFC 3339), the CRDs' creation time.
    """
    crds = CustomResources(api, started)
    served = api.served  # users' CRDs add and remove kinds at run time

    def guard(request: Request, verb: str, target_ns: str | None, group: str, plural: str, name: str | None = None,
              subresource: str | None = None) -> Principal:
        principal = principal_of(request)
        rbac.authorize(principal, Attributes(verb, group, plural, subresource or "", target_ns or "", name or ""))
        return principal

    def discovery_path(request: Request) -> None:
        rbac.authorize_path(principal_of(request), request.url.path)

    async def version(request: Request) -> Response:
        return _json(discovery.version_info())

    async def core(request: Request) -> Response:
        discovery_path(request)
        return _json(discovery.api_versions(server_address()))

    async def groups(request: Request) -> Response:
        discovery_path(request)
        return _json(discovery.api_group_list(served()))

    async def openapi_root(request: Request) -> Response:
        discovery_path(request)
        # Building the schemas takes seconds the first time: off the event loop, which serves on.
        return _json(await asyncio.to_thread(openapi.openapi_index, served()))

    async def openapi_v2(request: Request) -> Response:
        discovery_path(request)
        body, media = openapi.openapi_v2("protobuf" in request.headers.get("accept", ""))
        return Response(body, media_type=media)

    async def openapi_gv(request: Request) -> Response:
        discovery_path(request)
        parts = request.path_params["rest"].strip("/").split("/")
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        body = await asyncio.to_thread(openapi.document_bytes, group, version, served())
        if not body:
            raise StatusError(404, "NotFound", f"no OpenAPI document for {'/'.join(parts)}")
        return Response(body, media_type="application/json")

    async def resource(request: Request, group: str, version: str, rest: str) -> Response:
        segments = [s for s in rest.split("/") if s]
        if not segments:
            body = discovery.api_resource_list(group, version, served())
            if body is None:
                raise StatusError(404, "NotFound", "the server could not find the requested resource")
            discovery_path(request)
            return _json(body)
        if group == "apiextensions.k8s.io" and segments[0] == "customresourcedefinitions":
            return await crds.serve(request, segments, lambda verb: guard(
                request, verb, None, "apiextensions.k8s.io", "customresourcedefinitions"))
        target = api.resolve(group, version, segments)
        verb = api.verb(request, target)
        principal = guard(request, verb, target.scope, group, target.info.plural, target.name, target.subresource)
        response = await api.serve(request, target, verb)
        if verb not in READ_VERBS:
            rbac.wrote(principal, group)
        return response

    async def core_resource(request: Request) -> Response:
        return await resource(request, "", "v1", request.path_params.get("rest", ""))

    async def group_resource(request: Request) -> Response:
        group = request.path_params["group"]
        rest = request.path_params.get("rest", "")
        version, _, rest = rest.partition("/")
        if not version:
            versions = list(dict.fromkeys(i.version for i in served() if i.group == group))
            if not versions:
                raise StatusError(404, "NotFound", "the server could not find the requested resource")
            discovery_path(request)
            return _json(discovery.api_group(group, versions))
        return await resource(request, group, version, rest)

    def guarded(handler: Callable) -> Callable:
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except StatusError as exc:
                return status_response(exc)
        return run

    return [
        Route("/version", guarded(version), methods=["GET"]),
        Route("/api", guarded(core), methods=["GET"]),
        Route("/api/v1", guarded(core_resource), methods=_METHODS),
        Route("/api/v1/{rest:path}", guarded(core_resource), methods=_METHODS),
        Route("/apis", guarded(groups), methods=["GET"]),
        Route("/apis/{group}", guarded(group_resource), methods=_METHODS),
        Route("/apis/{group}/{rest:path}", guarded(group_resource), methods=_METHODS),
        Route("/openapi/v2", guarded(openapi_v2), methods=["GET"]),
        Route("/openapi/v3", guarded(openapi_root), methods=["GET"]),
        Route("/openapi/v3/{rest:path}", guarded(openapi_gv), methods=["GET"]),
    ]

