"""Who is calling: every request but the health checks carries a bearer token, loopback included
(pods share this machine). The token names a `Principal` (`trimaran.server.tokens`): a user and its
groups; what it may do is RBAC's (`trimaran.server.rbac`), checked where the request is understood
(the API knows the verb, resource and namespace).

A browser cannot send a header from a link, so the dashboard also takes the token once in its
query string (``/dashboard/?token=TOKEN``, as ``trimaran dashboard`` prints it): the answer sets an
HttpOnly, SameSite=Strict cookie and redirects to the same URL without the token, so the token
leaves the address bar and history. The cookie is accepted for the dashboard's pages only (GET),
never for the API.
"""

from __future__ import annotations

from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from trimaran.server.dashboard.html import PREFIX
from trimaran.server.tokens import AUTHENTICATED, Principal, TokenStore, service_account_groups

COOKIE = "trimaran_token"
# Paths anyone may read: health checks, the version (as kube-apiserver's public-info role allows),
# and the root, which only redirects to the dashboard.
PUBLIC = ("/healthz", "/livez", "/readyz", "/version", "/")


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def is_dashboard(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def unauthorized(message: str = "Unauthorized") -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Unauthorized", "code": 401}
    return Response(orjson.dumps(body), status_code=401, media_type="application/json")


def check(request: Request, tokens: TokenStore) -> Response | None:
    """None when the request may go on (``request.state.principal`` set when a token was given),
    else the response that answers it instead."""
    path = request.url.path
    principal = tokens.authenticate(_bearer(request))
    if principal is not None:
        if "impersonate-user" in request.headers or "impersonate-group" in request.headers:
            principal, refused = _impersonated(principal, request)
            if refused is not None:
                return refused
        request.state.principal = principal
        return None
    if path in PUBLIC:
        return None
    if not is_dashboard(path) or request.method not in ("GET", "HEAD"):
        return unauthorized("Unauthorized: a bearer token is required (see $TRIMARAN_HOME/kubeconfig)"
                            if not _bearer(request) else "Unauthorized: the token is not valid")
    offered = request.query_params.get("token")
    if offered is not None:
        if tokens.authenticate(offered) is None:
            return _refused("the token in this link is wrong")
        rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        response = RedirectResponse(path + (f"?{rest}" if rest else ""), status_code=303)
        response.set_cookie(COOKIE, offered, path=PREFIX, httponly=True, samesite="strict")
        return response
    principal = tokens.authenticate(request.cookies.get(COOKIE))
    if principal is not None:
        request.state.principal = principal
        return None
    return _refused("this control plane requires its token")


def _impersonated(principal: Principal, request: Request) -> tuple[Principal, Response | None]:
    """The user ``Impersonate-User``/``Impersonate-Group`` name (``kubectl --as``, ``--as-group``),
    when ``principal`` may ``impersonate`` each, as kube-apiserver's impersonation filter checks."""
    user = request.headers.get("impersonate-user", "")
    groups = [g for g in request.headers.getlist("impersonate-group") if g]
    if not user:
        return principal, _forbidden('requested [{Kind:Group}] without impersonating a user')
    wanted: list[tuple[str, str, str]] = []  # (resource, namespace, name)
    sa_prefix = "system:serviceaccount:"
    if user.startswith(sa_prefix) and user.count(":") == 3:
        namespace, name = user[len(sa_prefix):].split(":")
        wanted.append(("serviceaccounts", namespace, name))
        groups = groups or list(service_account_groups(namespace))
    else:
        wanted.append(("users", "", user))
    wanted += [("groups", "", g) for g in groups]
    for resource, namespace, name in wanted:
        if not principal.allows("impersonate", namespace or None, resource, name=name):
            where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            return principal, _forbidden(f'{resource} "{name}" is forbidden: User "{principal.name}" cannot '
                                         f'impersonate resource "{resource}" in API group "" {where}')
    groups = [g for g in groups if g != AUTHENTICATED] + [AUTHENTICATED]
    return Principal(user, tuple(dict.fromkeys(groups)), authorizer=principal.authorizer), None


def _forbidden(message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Forbidden", "code": 403}
    return Response(orjson.dumps(body), status_code=403, media_type="application/json")


def _refused(reason: str) -> Response:
    body = (f"<!doctype html><title>Trimaran: token required</title><p>{reason}: open the URL that "
            "<code>trimaran dashboard</code> prints (it carries the token once, then a cookie does).</p>")
    return Response(body, status_code=401, media_type="text/html",
                    headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


class TokenMiddleware:
    """Answers a request without a valid token before any route sees it; ``request.state.principal``
    carries the caller's otherwise. Plain ASGI: a request pays one function call for it (Starlette's
    ``BaseHTTPMiddleware`` runs every request through a task and a memory stream, ~1 ms)."""

    def __init__(self, app: ASGIApp, tokens: TokenStore) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = check(request, self.tokens)
        principal = getattr(request.state, "principal", None)
        if refused is None and is_dashboard(request.url.path) and principal is not None \
                and not principal.allows("list", None, "pods"):
            refused = Response("the dashboard shows every namespace: it needs a token that may list pods in all "
                               "of them", status_code=403, media_type="text/plain")
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)
