"""TokenRequest (``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token``, ``kubectl create
token NAME``): a token of a ServiceAccount, a JWT (HS256, under the home's service-account key)
with kube-apiserver's claims (``sub`` ``system:serviceaccount:NS:NAME``, ``aud``, ``exp``, and
``kubernetes.io``), which authenticates as that ServiceAccount until it expires.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from trimaran.server.kube.errors import StatusError
from trimaran.server.tokens import TokenStore, make_jwt
from trimaran.store import NotFound, Store

__all__ = ["AUDIENCE", "DEFAULT_ACCOUNT", "ISSUER", "token_request"]

# Every namespace has it, though nothing here stores it (a cluster's ServiceAccount controller makes
# it): pods without a serviceAccountName run as it.
DEFAULT_ACCOUNT = "default"
ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = ISSUER  # kube-apiserver's --api-audiences default to its issuer
_DEFAULT_SECONDS = 3600
_MIN_SECONDS = 600
_MAX_SECONDS = 2**32


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid(field: str, value: Any, detail: str, name: str) -> StatusError:
    return StatusError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is invalid: {field}: Invalid '
                       f"value: {value}: {detail}",
                       {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest",
                        "causes": [{"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {detail}",
                                    "field": field}]})


async def token_request(store: Store, tokens: TokenStore, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """The answered TokenRequest for ServiceAccount ``namespace/name`` (StatusError when it is refused)."""
    if not isinstance(body, dict) or not isinstance(body.get("spec") or {}, dict):
        raise StatusError.bad_request("the body of the request must be a TokenRequest object")
    spec = dict(body.get("spec") or {})
    seconds = spec.get("expirationSeconds")
    seconds = _DEFAULT_SECONDS if seconds is None else seconds
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise StatusError.bad_request("spec.expirationSeconds must be an integer")
    if seconds < _MIN_SECONDS:
        raise _invalid("spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes", name)
    if seconds > _MAX_SECONDS:
        raise _invalid("spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds", name)
    audiences = spec.get("audiences") or [AUDIENCE]
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise StatusError.bad_request("spec.audiences must be a list of strings")
    try:
        account = await asyncio.to_thread(store.get, "ServiceAccount", namespace, name)
    except NotFound:
        if name != DEFAULT_ACCOUNT:
            raise StatusError.not_found("", "serviceaccounts", name) from None
        account = {"metadata": {"uid": ""}}  # every namespace's, which pods run as, stored or not
    now = int(time.time())
    identity: dict[str, Any] = {"namespace": namespace,
                                "serviceaccount": {"name": name, "uid": account["metadata"].get("uid", "")}}
    bound = spec.get("boundObjectRef")
    if isinstance(bound, dict) and bound.get("kind") in ("Pod", "Secret", "Node"):
        identity[bound["kind"].lower()] = {"name": bound.get("name", ""), "uid": bound.get("uid", "")}
    claims = {"aud": audiences, "exp": now + seconds, "iat": now, "iss": ISSUER, "jti": str(uuid.uuid4()),
              "kubernetes.io": identity, "nbf": now, "sub": f"system:serviceaccount:{namespace}:{name}"}
    token = make_jwt(claims, tokens.sign)
    spec.update(audiences=audiences, expirationSeconds=seconds, boundObjectRef=spec.get("boundObjectRef"))
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec, "status": {"token": token, "expirationTimestamp": _rfc3339(now + seconds)}}
