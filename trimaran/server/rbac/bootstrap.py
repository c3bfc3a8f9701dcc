"""The RBAC objects the control plane keeps: the bootstrap policy, each ``--role`` token's
bindings, and each namespace's binding of its pods' token.

Bootstrap roles are reconciled at start as kube-apiserver reconciles them: a missing one is made,
and one annotated ``rbac.authorization.kubernetes.io/autoupdate: "true"`` gets back any rule it
lost (rules added by hand stay). A ``--role`` token's bindings (``trimaran:token:<id>``, labelled
with the token's id) follow the token file: made when a token appears (and again when one is found
missing as the token is used), deleted when it is revoked. A namespace's ``trimaran:pods-edit`` is
made when one of its pod tokens is used and the binding is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trimaran.api.rbac import API_GROUP, API_VERSION
from trimaran.server.rbac.aggregation import aggregate_all
from trimaran.server.rbac.policy import AUTOUPDATE, bootstrap_objects
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["POD_BINDING", "TOKEN_LABEL", "ensure_bootstrap", "ensure_pod_binding", "ensure_token_bindings",
           "sync_token_bindings", "token_binding_name"]

log = logging.getLogger(__name__)

TOKEN_LABEL = "trimaran.io/token"
# The RoleBinding that lets a namespace's pods (its ServiceAccounts' tokens) edit it.
POD_BINDING = "trimaran:pods-edit"
_ROLE_OF = {"view": "view", "edit": "edit", "admin": "admin"}


def _create(store: Store, obj: dict[str, Any]) -> None:
    try:
        store.create(obj)
    except AlreadyExists:
        pass


def ensure_bootstrap(store: Store) -> None:
    """Make the bootstrap roles and bindings that are missing; give autoupdated roles back their
    rules; fill the aggregated ones."""
    for obj in bootstrap_objects():
        meta = obj["metadata"]
        try:
            current = store.get(obj["kind"], "", meta["name"])
        except NotFound:
            _create(store, obj)
            continue
        annotations = current["metadata"].get("annotations") or {}
        if obj["kind"] != "ClusterRole" or "aggregationRule" in obj or \
                annotations.get(next(iter(AUTOUPDATE))) != "true":
            continue
        rules = list(current.get("rules") or [])
        missing = [r for r in obj["rules"] if r not in rules]
        if missing:
            try:
                store.update({**current, "rules": rules + missing})
            except (Conflict, NotFound):
                log.warning("RBAC bootstrap: ClusterRole %s changed while being reconciled", meta["name"])
    aggregate_all(store)


def _token_bindings(token_id: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
    role = entry.get("role")
    if role not in _ROLE_OF:
        return []
    user = entry.get("user") or entry.get("name") or f"token:{token_id}"
    name = token_binding_name(token_id)
    subject = [{"kind": "User", "apiGroup": API_GROUP, "name": user}]
    namespaces = entry.get("namespaces")
    if not namespaces:
        return [{"apiVersion": API_VERSION, "kind": "ClusterRoleBinding",
                 "metadata": {"name": name, "labels": {TOKEN_LABEL: token_id}},
                 "roleRef": {"apiGroup": API_GROUP, "kind": "ClusterRole",
                             "name": "cluster-admin" if role == "admin" else _ROLE_OF[role]},
                 "subjects": subject}]
    return [{"apiVersion": API_VERSION, "kind": "RoleBinding",
             "metadata": {"name": name, "namespace": ns, "labels": {TOKEN_LABEL: token_id}},
             "roleRef": {"apiGroup": API_GROUP, "kind": "ClusterRole", "name": _ROLE_OF[role]},
             "subjects": subject} for ns in namespaces]


def token_binding_name(token_id: str) -> str:
    return f"trimaran:token:{token_id}"


def _namespace_live(store: Store, namespace: str, missing: bool = False) -> bool:
    """Whether ``namespace`` exists (``missing``: or has no object at all) and is not being
    deleted: a binding made in a namespace being deleted would outlive it."""
    if not namespace:
        return True
    try:
        return not store.get("Namespace", "", namespace)["metadata"].get("deletionTimestamp")
    except NotFound:
        return missing


def ensure_token_bindings(store: Store, token_id: str, entry: dict[str, Any],
                          exists: Callable[[str, str], bool]) -> bool:
    """Make the bindings of one ``--role`` token that ``exists(namespace, name)`` says are gone
    (deleted with their namespace, or by hand: revoking the token is what takes its role away);
    whether any was made."""
    made = False
    for binding in _token_bindings(token_id, entry):
        meta = binding["metadata"]
        namespace = meta.get("namespace", "")
        if not exists(namespace, meta["name"]) and _namespace_live(store, namespace):
            _create(store, binding)
            made = True
    return made


def sync_token_bindings(store: Store, entries: dict[str, dict[str, Any]]) -> bool:
    """Make the bindings of every ``--role`` token in ``entries`` that lack them, delete those of
    tokens no longer there; whether anything changed."""
    changed = False
    wanted = {(b["kind"], b["metadata"].get("namespace", ""), b["metadata"]["name"]): b
              for token_id, entry in entries.items() for b in _token_bindings(token_id, entry)}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for obj in store.list(kind):
            if TOKEN_LABEL not in (obj["metadata"].get("labels") or {}):
                continue
            key = (kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if wanted.pop(key, None) is None:
                try:
                    store.delete(*key)
                    changed = True
                except NotFound:
                    pass
    for binding in wanted.values():
        _create(store, binding)
        changed = True
    return changed


def ensure_pod_binding(store: Store, namespace: str) -> bool:
    """Let ``namespace``'s pods edit it: a RoleBinding of its ServiceAccounts' group to ``edit``
    (whatever ServiceAccount a pod runs as), as a Kubeflow profile binds its ``default-editor``;
    whether it was made now. (A pod's namespace has no object where a store is written without the
    API, as by Katib's DBManager alone.)"""
    if not _namespace_live(store, namespace, missing=True):
        return False
    try:
        store.create({"apiVersion": API_VERSION, "kind": "RoleBinding",
                      "metadata": {"name": POD_BINDING, "namespace": namespace},
                      "roleRef": {"apiGroup": API_GROUP, "kind": "ClusterRole", "name": "edit"},
                      "subjects": [{"kind": "Group", "apiGroup": API_GROUP,
                                    "name": f"system:serviceaccounts:{namespace}"}]})
    except AlreadyExists:
        return False
    return True
