"""Who may use a control plane that has a token (one bound to an address other than loopback).

The API takes ``Authorization: Bearer TOKEN``. A browser cannot send that header from a link, so
the dashboard also takes the token once in its query string (``/dashboard/?token=TOKEN``, as
``trimaran dashboard`` prints it): the answer sets an HttpOnly, SameSite=Strict cookie and
redirects to the same URL without the token, so the token leaves the address bar and history.
The cookie is accepted for the dashboard's pages only (GET), never for the API.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from trimaran.server.dashboard.html import PREFIX

COOKIE = "trimaran_token"
# Paths anyone may read: the health check, and the root, which only redirects to the dashboard.
PUBLIC = ("/healthz", "/")


def _same(offered: str | None, token: str) -> bool:
    return offered is not None and hmac.compare_digest(offered.encode(), token.encode())


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def is_dashboard(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def check(request: Request, token: str) -> Response | None:
    """None when the request may go on, else the response that answers it instead."""
    path = request.url.path
    if path in PUBLIC or _same(_bearer(request), token):
        return None
    if not is_dashboard(path) or request.method not in ("GET", "HEAD"):
        return JSONResponse({"message": "missing or wrong bearer token"}, status_code=401)
    offered = request.query_params.get("token")
    if offered is not None:
        if not _same(offered, token):
            return _refused("the token in this link is wrong")
        rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        response = RedirectResponse(path + (f"?{rest}" if rest else ""), status_code=303)
        response.set_cookie(COOKIE, token, path=PREFIX, httponly=True, samesite="strict")
        return response
    if _same(request.cookies.get(COOKIE), token):
        return None
    return _refused("this control plane requires its token")


def _refused(reason: str) -> Response:
    body = (f"<!doctype html><title>Trimaran: token required</title><p>{reason}: open the URL that "
            "<code>trimaran dashboard</code> prints (it carries the token once, then a cookie does).</p>")
    return Response(body, status_code=401, media_type="text/html",
                    headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
