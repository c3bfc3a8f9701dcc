"""The API's hooks into RBAC: authorise each request, guard writes of RBAC objects, start it all."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from trimaran.api.rbac import API_GROUP
from trimaran.server.kube.errors import StatusError

# Modules, not names: each imports server.kube, whose package imports this one (any may come first).
from trimaran.server.rbac import escalation, serviceaccounts
from trimaran.server.rbac.authorizer import Attributes, Authorizer
from trimaran.server.rbac.bootstrap import (
    POD_BINDING,
    ensure_bootstrap,
    ensure_pod_binding,
    ensure_token_bindings,
    sync_token_bindings,
)
from trimaran.server.tokens import Principal, TokenStore
from trimaran.store import NotFound, Store

__all__ = ["RBAC_KINDS", "admit", "authorize", "authorize_path", "forbidden", "start", "wrote"]

RBAC_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
# Who makes the request being served: set by `authorize`, read by `admit` where the object to
# store is known (the admission step runs in a thread, which copies the request's context).
_requester: ContextVar[Principal | None] = ContextVar("rbac_requester", default=None)


def forbidden(user: str, a: Attributes, reason: str = "") -> StatusError:
    """kube-apiserver's 403: ``pods "x" is forbidden: User "alice" cannot get resource "pods" in
    API group "" in the namespace "default"``; for a URL, ``forbidden: User "alice" cannot get path "/metrics"``."""
    suffix = f": {reason}" if reason else ""
    if not a.is_resource:
        return StatusError(403, "Forbidden", f'forbidden: User "{user}" cannot {a.verb} path "{a.path}"{suffix}')
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    qualified = f"{a.resource}.{a.group}" if a.group else a.resource
    head = f'{qualified} "{a.name}" is forbidden' if a.name else f"{qualified} is forbidden"
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    return StatusError(403, "Forbidden", f'{head}: User "{user}" cannot {a.verb} resource "{resource}" in API group '
                       f'"{a.group}" {where}{suffix}', {"name": a.name, "group": a.group, "kind": a.resource})


def authorize(principal: Principal, a: Attributes) -> None:
    """Raise kube-apiserver's 403 unless ``principal`` may do ``a``."""
    _requester.set(principal)
    if principal.authorizer is None or not principal.authorizer.allows(principal, a):
        raise forbidden(principal.name, a)


def authorize_path(principal: Principal, path: str, verb: str = "get") -> None:
    authorize(principal, Attributes(verb, path=path))


def admit(obj: dict[str, Any]) -> None:
    """Before ``obj`` is stored by a request: refuse a role or binding granting what its writer lacks."""
    principal = _requester.get()
    if obj.get("kind") in RBAC_KINDS and str(obj.get("apiVersion", "")).startswith(API_GROUP) \
            and principal is not None and principal.authorizer is not None:
        escalation.check_write(principal.authorizer, principal, obj)  # type: ignore[arg-type]


def wrote(principal: Principal, group: str) -> None:
    """After a request's write: one to an RBAC object decides the next request at once."""
    if group == API_GROUP and principal.authorizer is not None:
        principal.authorizer.changed()  # type: ignore[attr-defined]


def start(store: Store, tokens: TokenStore) -> Authorizer:
    """Authorise ``tokens``' callers by the RBAC objects of ``store``: make the bootstrap policy and
    the tokens' bindings, keep them following the token file, and follow the store's changes."""
    authorizer = Authorizer(store)
    ensure_bootstrap(store)

    def tokens_changed(entries: dict[str, dict]) -> None:
        if sync_token_bindings(store, entries):
            authorizer.changed()

    # Per request: a lookup in the authorizer's index; a write only when a binding is missing.
    def user_token_used(token_id: str, entry: dict) -> None:
        if entry.get("role") and ensure_token_bindings(store, token_id, entry, authorizer.has_binding):
            authorizer.changed()

    def pod_token_used(namespace: str) -> None:
        if not authorizer.has_binding(namespace, POD_BINDING) and ensure_pod_binding(store, namespace):
            authorizer.changed()

    def account_exists(namespace: str, name: str, uid: str) -> bool:
        try:
            return store.get("ServiceAccount", namespace, name)["metadata"].get("uid") == uid
        except NotFound:
            return name == serviceaccounts.DEFAULT_ACCOUNT and not uid  # a namespace's default, never stored


    tokens.authorizer = authorizer
    tokens.account_exists = account_exists
    tokens.on_change = tokens_changed
    tokens.on_user_token = user_token_used
    tokens.on_service_account = pod_token_used
    tokens_changed(tokens.entries())
    authorizer.start()
    return authorizer
