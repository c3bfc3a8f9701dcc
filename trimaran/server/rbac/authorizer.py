"""kube-apiserver's RBAC authorizer: may this user do this?

Rules are matched as ``plugin/pkg/auth/authorizer/rbac`` matches them (``*`` for verbs, groups and
resources, ``*/SUB`` for a subresource of any resource, ``resourceNames`` narrowing by name, a
trailing ``*`` in non-resource URLs). A request in a namespace is allowed by a ClusterRoleBinding
or by a RoleBinding of that namespace; a cluster-scoped one by a ClusterRoleBinding only. Group
``system:masters`` is allowed everything before any rule is read, as upstream's
authorizer-of-last-resort does.

Speed: the bindings are indexed by subject, each user's rules compiled per namespace, and every
decision cached, all dropped when an RBAC object changes: a watch of the four kinds says so (for
controllers' writes), and the API's own writes say so at once (``changed``), so a request right
after ``kubectl create rolebinding`` sees the binding.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from trimaran.store import Expired, Store

__all__ = ["KINDS", "MASTERS", "Attributes", "Authorizer", "Rule", "UserInfo", "compile_rule"]

log = logging.getLogger(__name__)

KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
MASTERS = "system:masters"
# Decisions (and compiled rule lists) kept until the next change: a bound on memory (~3 MB).
_DECISIONS_KEPT = 10_000


class UserInfo(Protocol):
    """Who asks: a user name and its groups (an authenticated Principal)."""

    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Attributes:
    """A request as the authorizer sees it: a resource request (``resource`` set) or a request for
    a non-resource URL (``path``)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return not self.path


@dataclass(frozen=True, slots=True)
class Rule:
    """A PolicyRule, compiled to sets, with where it came from (for a review's reason)."""

    verbs: frozenset[str]
    groups: frozenset[str]
    resources: frozenset[str]
    names: frozenset[str]
    urls: tuple[str, ...]
    source: str

    def allows(self, a: Attributes) -> bool:
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.is_resource:
            return any(u == "*" or u == a.path or (u.endswith("*") and a.path.startswith(u[:-1])) for u in self.urls)
        if self.urls and not self.resources:
            return False
        if "*" not in self.groups and a.group not in self.groups:
            return False
        resources = self.resources
        if "*" not in resources:
            combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
            if combined not in resources and not (a.subresource and f"*/{a.subresource}" in resources):
                return False
        return not self.names or a.name in self.names

    def as_dict(self) -> dict[str, Any]:
        if self.urls:
            return {"verbs": sorted(self.verbs), "nonResourceURLs": list(self.urls)}
        out: dict[str, Any] = {"verbs": sorted(self.verbs), "apiGroups": sorted(self.groups),
                               "resources": sorted(self.resources)}
        if self.names:
            out["resourceNames"] = sorted(self.names)
        return out


def compile_rule(rule: dict[str, Any], source: str = "") -> Rule:
    return Rule(frozenset(rule.get("verbs") or ()), frozenset(rule.get("apiGroups") or ()),
                frozenset(rule.get("resources") or ()), frozenset(rule.get("resourceNames") or ()),
                tuple(rule.get("nonResourceURLs") or ()), source)


def _subject_keys(binding: dict[str, Any]) -> list[str]:
    """Index keys of a binding's subjects: ``u:NAME`` for users (a ServiceAccount is its user name),
    ``g:NAME`` for groups."""
    keys = []
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            keys.append(f"u:{name}")
        elif kind == "Group":
            keys.append(f"g:{name}")
        elif kind == "ServiceAccount":
            namespace = subject.get("namespace") or binding["metadata"].get("namespace", "")
            keys.append(f"u:system:serviceaccount:{namespace}:{name}")
    return keys


class _Index:
    """The RBAC objects of one moment, indexed for lookups by subject."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.cluster_roles = {r["metadata"]["name"]: r.get("rules") or [] for r in objects["ClusterRole"]}
        self.roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r.get("rules") or []
                      for r in objects["Role"]}
        # subject key → bindings naming it (cluster-wide; by namespace).
        self.cluster_bindings: dict[str, list[dict[str, Any]]] = {}
        self.bindings: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # (namespace, name) of every binding; "" for a ClusterRoleBinding's namespace.
        self.binding_names = {(b["metadata"].get("namespace", ""), b["metadata"]["name"])
                              for kind in ("RoleBinding", "ClusterRoleBinding") for b in objects[kind]}
        for b in objects["ClusterRoleBinding"]:
            for key in _subject_keys(b):
                self.cluster_bindings.setdefault(key, []).append(b)
        for b in objects["RoleBinding"]:
            for key in _subject_keys(b):
                self.bindings.setdefault((key, b["metadata"]["namespace"]), []).append(b)

    def role_rules(self, binding: dict[str, Any]) -> list[dict[str, Any]]:
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            return self.cluster_roles.get(ref.get("name", ""), [])
        return self.roles.get((binding["metadata"].get("namespace", ""), ref.get("name", "")), [])

    def rules_for(self, keys: Iterable[str], namespace: str) -> list[Rule]:
        """Every rule granted to these subject keys in ``namespace`` ("" : cluster-wide only)."""
        rules: list[Rule] = []
        for key in keys:
            user = key[2:]
            who = f'{"User" if key[0] == "u" else "Group"} "{user}"'
            for b in self.cluster_bindings.get(key, ()):
                source = (f'RBAC: allowed by ClusterRoleBinding "{b["metadata"]["name"]}" of ClusterRole '
                          f'"{b["roleRef"]["name"]}" to {who}')
                rules += [compile_rule(r, source) for r in self.role_rules(b)]
            if namespace:
                for b in self.bindings.get((key, namespace), ()):
                    source = (f'RBAC: allowed by RoleBinding "{b["metadata"]["name"]}/{namespace}" of '
                              f'{b["roleRef"]["kind"]} "{b["roleRef"]["name"]}" to {who}')
                    rules += [compile_rule(r, source) for r in self.role_rules(b)]
        return rules


class Authorizer:
    """Decides requests from the RBAC objects of ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._index: _Index | None = None
        self._generation = 0  # grows with every change; an index built across one is not kept
        self._rules: dict[tuple[str, tuple[str, ...], str], list[Rule]] = {}
        self._decisions: dict[tuple, str | None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # Keeping up with the store ------------------------------------------------------------

    def changed(self) -> None:
        """An RBAC object changed: decide from the store's objects from now on."""
        with self._lock:
            self._generation += 1
            self._index = None
            self._rules = {}
            self._decisions = {}

    def start(self) -> None:
        """Follow the store's RBAC objects (what controllers and other processes write)."""
        self._thread = threading.Thread(target=self._follow, name="rbac-authorizer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _follow(self) -> None:
        since = self.store.current_revision()
        while not self._stop.is_set() and not self.store.closed:
            try:
                for _ in self.store.watch(KINDS, since=since, stop=self._stop):
                    self.changed()
                    since = self.store.current_revision()
                    break
            except Expired:
                since = self.store.current_revision()
                self.changed()

    def _current(self) -> _Index:
        index = self._index
        if index is not None:
            return index
        with self._lock:
            generation = self._generation
        built = _Index({kind: self.store.list(kind, shared=True) for kind in KINDS})
        with self._lock:
            if generation == self._generation:
                self._index = built
        return built

    def has_binding(self, namespace: str, name: str) -> bool:
        """Whether a RoleBinding ``namespace/name`` (a ClusterRoleBinding: namespace "") exists."""
        return (namespace, name) in self._current().binding_names

    # Deciding -------------------------------------------------------------------------------

    def rules(self, user: UserInfo, namespace: str) -> list[Rule]:
        """Every rule ``user`` holds in ``namespace`` ("" : those that hold cluster-wide)."""
        key = (user.name, user.groups, namespace)
        rules = self._rules.get(key)
        if rules is None:
            keys = [f"u:{user.name}", *(f"g:{g}" for g in user.groups)]
            rules = self._current().rules_for(keys, namespace)
            if len(self._rules) > _DECISIONS_KEPT:
                self._rules = {}
            self._rules[key] = rules
        return rules

    def decide(self, user: UserInfo, attrs: Attributes) -> str | None:
        """The reason it is allowed (``RBAC: allowed by ...``), or None when it is not."""
        key = (user.name, user.groups, attrs)
        decisions = self._decisions
        if key in decisions:
            return decisions[key]
        if MASTERS in user.groups:
            reason: str | None = ""
        else:
            reason = next((r.source for r in self.rules(user, attrs.namespace) if r.allows(attrs)), None)
        if len(decisions) > _DECISIONS_KEPT:
            self._decisions = decisions = {}
        decisions[key] = reason
        return reason

    def allows(self, user: UserInfo, attrs: Attributes) -> bool:
        return self.decide(user, attrs) is not None
