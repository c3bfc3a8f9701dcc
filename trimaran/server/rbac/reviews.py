"""Asking the server what a user may do, and who it is:

- ``authorization.k8s.io/v1``: SelfSubjectAccessReview (``kubectl auth can-i VERB RESOURCE``),
  SelfSubjectRulesReview (``kubectl auth can-i --list``), SubjectAccessReview (cluster) and
  LocalSubjectAccessReview (a namespace's);
- ``authentication.k8s.io/v1``: SelfSubjectReview (``kubectl auth whoami``), TokenReview;
- TokenRequest, the ``serviceaccounts/token`` subresource (``kubectl create token``).

Each is a ``create`` that stores nothing and answers the object with its ``status``, as
kube-apiserver does; each is authorised by RBAC like any request (``system:basic-user`` lets every
authenticated user ask about itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from trimaran.api.authorization import AUTHN_GROUP, AUTHZ_GROUP, REVIEW_KINDS
from trimaran.server.kube import protobuf
from trimaran.server.kube.errors import StatusError, status_response
from trimaran.server.rbac import access, serviceaccounts  # modules: each imports server.kube, which imports them
from trimaran.server.rbac.authorizer import Attributes, Authorizer, Rule
from trimaran.server.tokens import Principal, TokenStore
from trimaran.store import Store

__all__ = ["review_routes"]

AUTHZ = AUTHZ_GROUP
AUTHN = AUTHN_GROUP
_RESOURCES = {group: [(r.plural, r.kind, r.namespaced) for r in REVIEW_KINDS if r.group == group]
              for group in (AUTHZ, AUTHN)}


@dataclass(frozen=True)
class _Subject:
    """The user a SubjectAccessReview asks about."""

    name: str
    groups: tuple[str, ...]


def _resource_list(group: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1",
            "resources": [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                           "verbs": ["create"]} for plural, kind, namespaced in _RESOURCES[group]]}


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data) + b"\n", status_code=status, media_type="application/json")


def _principal(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise StatusError.unauthorized()
    return principal


async def _body(request: Request, kind: str) -> dict[str, Any]:
    """The request's object, in JSON or (as kubectl sends it) protobuf."""
    raw = await request.body()
    if request.headers.get("content-type", "").split(";")[0].strip() == protobuf.MEDIA_TYPE:
        try:
            body: Any = protobuf.decode(raw)
        except protobuf.ProtobufError as exc:
            raise StatusError(415, "UnsupportedMediaType", f"{protobuf.MEDIA_TYPE}: {exc}") from None
    else:
        try:
            body = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError as exc:
            raise StatusError.bad_request(f"the body of the request is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("spec") or {}, dict):
        raise StatusError.bad_request(f"the body of the request must be a {kind} object")
    return body


def _attributes(kind: str, spec: dict[str, Any], namespace: str | None) -> Attributes:
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        raise StatusError(422, "Invalid", f'{kind}.{AUTHZ} "" is invalid: spec.resourceAttributes: Invalid value: '
                          '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
                          {"group": AUTHZ, "kind": kind})
    if non_resource is not None:
        return Attributes(str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or ""))
    ns = namespace if namespace is not None else str(resource.get("namespace") or "")
    return Attributes(str(resource.get("verb") or ""), str(resource.get("group") or ""),
                      str(resource.get("resource") or ""), str(resource.get("subresource") or ""), ns,
                      str(resource.get("name") or ""))


def _access_status(authorizer: Authorizer | None, user: Any, attrs: Attributes) -> dict[str, Any]:
    reason = authorizer.decide(user, attrs) if authorizer is not None else None
    if reason is None:
        return {"allowed": False}
    return {"allowed": True, "reason": reason} if reason else {"allowed": True}


def _answer(body: dict[str, Any], kind: str, group: str, status: dict[str, Any],
            namespace: str | None = None) -> Response:
    metadata = {**(body.get("metadata") or {}), "creationTimestamp": None}
    if namespace is not None:
        metadata["namespace"] = namespace
    return _json({"kind": kind, "apiVersion": f"{group}/v1", "metadata": metadata, "spec": body.get("spec") or {},
                  "status": status}, 201)


def _rules_status(rules: list[Rule]) -> dict[str, Any]:
    resource, non_resource = [], []
    for rule in rules:
        entry = rule.as_dict()
        target = non_resource if "nonResourceURLs" in entry else resource
        if entry not in target:
            target.append(entry)
    return {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": False}


def review_routes(store: Store, tokens: TokenStore) -> list[BaseRoute]:
    """The reviews' and TokenRequest's routes, and their groups' discovery (mount them before the
    Kubernetes API's ``/apis/{group}``)."""

    def answers(handler: Any) -> Any:
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except StatusError as exc:
                return status_response(exc)
        return run

    def create(request: Request, plural: str, group: str, namespace: str = "") -> Principal:
        principal = _principal(request)
        access.authorize(principal, Attributes("create", group, plural, "", namespace))
        return principal

    async def discovery(request: Request) -> Response:
        path = request.url.path.rstrip("/")
        access.authorize(_principal(request), Attributes("get", path=path))
        _, _, group, *version = path.split("/")
        return _json(_resource_list(group) if version else discovery.api_group(group, ["v1"]))

    async def self_access(request: Request) -> Response:
        principal = create(request, "selfsubjectaccessreviews", AUTHZ)
        body = await _body(request, "SelfSubjectAccessReview")
        attrs = _attributes("SelfSubjectAccessReview", body.get("spec") or {}, None)
        return _answer(body, "SelfSubjectAccessReview", AUTHZ, _access_status(principal.authorizer, principal, attrs))

    async def self_rules(request: Request) -> Response:
        principal = create(request, "selfsubjectrulesreviews", AUTHZ)
        body = await _body(request, "SelfSubjectRulesReview")
        namespace = str((body.get("spec") or {}).get("namespace") or "")
        rules = principal.authorizer.rules(principal, namespace) if principal.authorizer is not None else []
        return _answer(body, "SelfSubjectRulesReview", AUTHZ, _rules_status(rules))

    async def subject_access(request: Request, namespace: str | None = None) -> Response:
        kind = "LocalSubjectAccessReview" if namespace is not None else "SubjectAccessReview"
        principal = create(request, kind.lower() + "s", AUTHZ, namespace or "")
        body = await _body(request, kind)
        spec = body.get("spec") or {}
        if not spec.get("user") and not spec.get("groups"):
            raise StatusError(422, "Invalid", f'{kind}.{AUTHZ} "" is invalid: spec.user: Invalid value: "": at '
                              "least one of user or group must be specified", {"group": AUTHZ, "kind": kind})
        subject = _Subject(str(spec.get("user") or ""), tuple(str(g) for g in spec.get("groups") or ()))
        attrs = _attributes(kind, spec, namespace)
        return _answer(body, kind, AUTHZ, _access_status(principal.authorizer, subject, attrs), namespace)

    async def local_access(request: Request) -> Response:
        return await subject_access(request, request.path_params["namespace"])

    async def whoami(request: Request) -> Response:
        principal = create(request, "selfsubjectreviews", AUTHN)
        body = await _body(request, "SelfSubjectReview")
        user = {"username": principal.name, "groups": list(principal.groups)}
        return _json({"kind": "SelfSubjectReview", "apiVersion": f"{AUTHN}/v1",
                      "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None},
                      "status": {"userInfo": user}}, 201)

    async def token_review(request: Request) -> Response:
        create(request, "tokenreviews", AUTHN)
        body = await _body(request, "TokenReview")
        spec = body.get("spec") or {}
        who = tokens.authenticate(str(spec.get("token") or ""))
        status: dict[str, Any] = {"authenticated": False}
        if who is not None:
            status = {"authenticated": True, "user": {"username": who.name, "groups": list(who.groups)}}
        return _answer(body, "TokenReview", AUTHN, status)

    async def service_account_token(request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        principal = _principal(request)
        access.authorize(principal, Attributes("create", "", "serviceaccounts", "token", namespace, name))
        body = await _body(request, "TokenRequest")
        return _json(await serviceaccounts.token_request(store, tokens, namespace, name, body), 201)

    base = f"/apis/{AUTHZ}/v1"
    return [
        Route(f"{base}/selfsubjectaccessreviews", answers(self_access), methods=["POST"]),
        Route(f"{base}/selfsubjectrulesreviews", answers(self_rules), methods=["POST"]),
        Route(f"{base}/subjectaccessreviews", answers(subject_access), methods=["POST"]),
        Route(f"{base}/namespaces/{{namespace}}/localsubjectaccessreviews", answers(local_access), methods=["POST"]),
        Route(f"/apis/{AUTHN}/v1/selfsubjectreviews", answers(whoami), methods=["POST"]),
        Route(f"/apis/{AUTHN}/v1/tokenreviews", answers(token_review), methods=["POST"]),
        Route("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", answers(service_account_token),
              methods=["POST"]),
        *[Route(path, answers(discovery), methods=["GET"]) for g in _RESOURCES
          for path in (f"/apis/{g}", f"/apis/{g}/v1")],
    ]
