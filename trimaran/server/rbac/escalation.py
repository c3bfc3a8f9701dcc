"""Escalation prevention, as kube-apiserver's RBAC storage enforces it: a user may write a Role
(or ClusterRole) only with every permission it grants, or with ``escalate`` on it; and a binding
only with every permission of the role it binds, or with ``bind`` on that role. Otherwise the
write is refused with upstream's words, listing what the user lacks
(``... is attempting to grant RBAC permissions not currently held:``).
"""

from __future__ import annotations

import json
from typing import Any

from trimaran.api.rbac import API_GROUP
from trimaran.server.kube.errors import StatusError
from trimaran.server.rbac.authorizer import MASTERS, Attributes, Authorizer, Rule, UserInfo
from trimaran.store import NotFound

__all__ = ["check_write", "missing_rules"]


def _q(values: list[str]) -> str:
    """Go's ``%q`` of a []string: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _compact(rule: dict[str, Any]) -> str:
    """rbacv1helpers' ``CompactString``."""
    parts = []
    for label, key in (("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
                       ("ResourceNames", "resourceNames"), ("Verbs", "verbs")):
        if rule.get(key):
            parts.append(f"{label}:{_q(rule[key])}")
    return "{" + ", ".join(parts) + "}"


def _covers(owner: Rule, atom: dict[str, Any]) -> bool:
    """validation's ``ruleCovers`` for a rule of one verb, group, resource (or URL) and name."""
    verb = atom["verbs"][0]
    if "*" not in owner.verbs and verb not in owner.verbs:
        return False
    if "nonResourceURLs" in atom:
        url = atom["nonResourceURLs"][0]
        return any(u == "*" or u == url or (u.endswith("*") and url.startswith(u[:-1])) for u in owner.urls)
    if "*" not in owner.groups and atom["apiGroups"][0] not in owner.groups:
        return False
    resource = atom["resources"][0]
    if "*" not in owner.resources and resource not in owner.resources:
        plural, _, sub = resource.partition("/")
        if not (sub and f"*/{sub}" in owner.resources):
            return False
    names = atom.get("resourceNames")
    if not names:
        return not owner.names
    return not owner.names or names[0] in owner.names


def _atoms(rule: dict[str, Any]) -> list[dict[str, Any]]:
    """validation's ``BreakdownRule``: one rule per verb, group, resource and name."""
    out = []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                names = rule.get("resourceNames") or []
                for name in names or [None]:
                    atom: dict[str, Any] = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name is not None:
                        atom["resourceNames"] = [name]
                    out.append(atom)
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            out.append({"nonResourceURLs": [url], "verbs": [verb]})
    return out


def missing_rules(held: list[Rule], wanted: list[dict[str, Any]]) -> list[str]:
    """What of ``wanted`` no rule of ``held`` covers, compacted and sorted as upstream prints it."""
    merged: dict[str, dict[str, Any]] = {}
    for rule in wanted:
        for atom in _atoms(rule):
            if any(_covers(owner, atom) for owner in held):
                continue
            # CompactRules: rules that differ only in their verbs become one.
            key = json.dumps({k: v for k, v in atom.items() if k != "verbs"}, sort_keys=True)
            entry = merged.setdefault(key, {**atom, "verbs": []})
            if atom["verbs"][0] not in entry["verbs"]:
                entry["verbs"].append(atom["verbs"][0])
    return sorted({_compact(r) for r in merged.values()})


def _refuse(plural: str, name: str, user: UserInfo, missing: list[str]) -> StatusError:
    message = (f'{plural}.{API_GROUP} "{name}" is forbidden: user "{user.name}" (groups={_q(list(user.groups))}) '
               f"is attempting to grant RBAC permissions not currently held:\n" + "\n".join(missing))
    return StatusError(403, "Forbidden", message, {"name": name, "group": API_GROUP, "kind": plural})


def check_write(authorizer: Authorizer, user: UserInfo, obj: dict[str, Any]) -> None:
    """Refuse (StatusError) a Role, ClusterRole or binding ``obj`` that grants what ``user`` lacks."""
    if MASTERS in user.groups:
        return
    kind, meta = obj["kind"], obj["metadata"]
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    if kind in ("Role", "ClusterRole"):
        plural = "roles" if kind == "Role" else "clusterroles"
        if authorizer.allows(user, Attributes("escalate", API_GROUP, plural, "", namespace, name)):
            return
        if kind == "ClusterRole" and obj.get("aggregationRule"):
            # Aggregation gathers any role's rules: only a user who holds everything may use it.
            if missing_rules(authorizer.rules(user, ""), [{"verbs": ["*"], "apiGroups": ["*"],
                                                            "resources": ["*"]}]):
                raise StatusError(403, "Forbidden", f'{plural}.{API_GROUP} "{name}" is forbidden: must have '
                                  "cluster-admin privileges to use the aggregationRule",
                                  {"name": name, "group": API_GROUP, "kind": plural})
            return
        missing = missing_rules(authorizer.rules(user, namespace), obj.get("rules") or [])
        if missing:
            raise _refuse(plural, name, user, missing)
        return
    ref = obj.get("roleRef") or {}
    role_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
    if authorizer.allows(user, Attributes("bind", API_GROUP, role_plural, "", namespace, ref.get("name", ""))):
        return
    try:
        role = authorizer.store.get(ref.get("kind", ""), "" if role_plural == "clusterroles" else namespace,
                                    ref.get("name", ""))
    except NotFound:
        raise StatusError.not_found(API_GROUP, role_plural, ref.get("name", "")) from None
    plural = "rolebindings" if kind == "RoleBinding" else "clusterrolebindings"
    missing = missing_rules(authorizer.rules(user, namespace), role.get("rules") or [])
    if missing:
        raise _refuse(plural, name, user, missing)
