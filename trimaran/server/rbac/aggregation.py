"""The clusterrole-aggregation controller: a ClusterRole with an ``aggregationRule`` holds the
rules of every ClusterRole its selectors match, kept up to date as they come, change and go (how
``admin``, ``edit`` and ``view`` take in ``system:aggregate-to-*`` and a CRD owner's roles)."""

from __future__ import annotations

from collections.abc import Iterable

from trimaran.api.rbac import aggregated_rules
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.store import Conflict, NotFound, Store

__all__ = ["ClusterRoleAggregator", "aggregate_all"]

CONFLICT_RETRY_SECONDS = 0.05


class ClusterRoleAggregator(Reconciler):
    name = "clusterrole-aggregation"
    kinds = ("ClusterRole",)

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        # Any ClusterRole's change may change what an aggregated one gathers: look at those.
        keys = [key_of(obj)] if obj.get("aggregationRule") else []
        return keys + [key_of(r) for r in self.store.list("ClusterRole", shared=True)
                       if r.get("aggregationRule") and r["metadata"]["name"] != obj["metadata"]["name"]]

    def initial_keys(self) -> Iterable[Key]:
        return [key_of(r) for r in self.store.list("ClusterRole", shared=True) if r.get("aggregationRule")]

    def reconcile(self, key: Key) -> float | None:
        try:
            role = self.store.get("ClusterRole", "", key.name)
        except NotFound:
            return None
        if not role.get("aggregationRule"):
            return None
        rules = aggregated_rules(role, self.store.list("ClusterRole", shared=True))
        if rules == (role.get("rules") or []):
            return None
        try:
            self.store.update({**role, "rules": rules})
        except Conflict:
            return CONFLICT_RETRY_SECONDS
        except NotFound:
            return None
        return None


def aggregate_all(store: Store) -> None:
    """Fill every aggregated ClusterRole now, to a fixed point (``admin`` gathers ``edit``, which
    gathers ``view``): at start, so that no request meets the default roles still empty."""
    for _ in range(8):  # deeper chains, and roles changed meanwhile, are the controller's
        changed = False
        roles = store.list("ClusterRole")
        for role in roles:
            rules = aggregated_rules(role, roles) if role.get("aggregationRule") else None
            if rules is not None and rules != (role.get("rules") or []):
                role["rules"] = rules
                try:
                    store.update(role)
                except (Conflict, NotFound):
                    continue
                changed = True
        if not changed:
            return
