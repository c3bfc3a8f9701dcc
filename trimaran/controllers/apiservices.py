"""apiregistration.k8s.io/v1 APIServices, as kube-aggregator's autoregister and availability
controllers keep them.

The server hands over one APIService per group version it serves (``spec.service`` unset: Local,
labelled ``kube-aggregator.kubernetes.io/automanaged``), derived from what discovery lists
(`trimaran.server.kube.apiservices`): each is made when missing, put back when changed or deleted,
and removed when its group version is no longer served (after an upgrade). Every APIService gets
its ``Available`` condition: a Local one is available; one that names a Service is not (Trimaran
proxies no aggregated API), with kube-aggregator's reason when the Service is missing.
"""

from __future__ import annotations

import copy

from trimaran.api.apiregistration import AUTOMANAGED_LABEL
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.conditions import now_rfc3339
from trimaran.store import AlreadyExists, Conflict, NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["APIServiceReconciler"]

_RETRY_SECONDS = 0.05


class APIServiceReconciler(Reconciler):
    name = "apiservice"
    kinds = ("APIService",)
    watches = ("Service",)

    def __init__(self, store: Store, local: list[dict]) -> None:
        """``local``: the APIServices of the group versions this server answers itself."""
        super().__init__(store)
        self.local = {o["metadata"]["name"]: o for o in local}

    def initial_keys(self) -> list[Key]:
        keys = {Key("APIService", "", name) for name in self.local}
        keys |= {key_of(o) for o in self.store.list("APIService", shared=True)}
        return sorted(keys)

    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        if obj["kind"] == "APIService":
            return [key_of(obj)]
        meta = obj["metadata"]
        return [key_of(a) for a in self.store.list("APIService", shared=True)
                if ((a.get("spec") or {}).get("service") or {}).get("name") == meta["name"]
                and a["spec"]["service"].get("namespace") == meta.get("namespace")]

    def reconcile(self, key: Key) -> float | None:
        wanted = self.local.get(key.name)
        try:
            current = self.store.get("APIService", "", key.name)
        except NotFound:
            if wanted is None:
                return None
            try:
                current = self.store.create(copy.deepcopy(wanted))
            except AlreadyExists:
                return _RETRY_SECONDS
        labels = current["metadata"].get("labels") or {}
        if wanted is None and labels.get(AUTOMANAGED_LABEL) == "onstart":
            try:
                self.store.delete("APIService", "", key.name)  # a group version no longer served
            except NotFound:
                pass
            return None
        if wanted is not None and (current.get("spec") != wanted["spec"] or labels != wanted["metadata"]["labels"]):
            current["spec"] = copy.deepcopy(wanted["spec"])
            current["metadata"]["labels"] = dict(wanted["metadata"]["labels"])
            try:
                current = self.store.update(current)
            except Conflict:
                return _RETRY_SECONDS
        return self._set_available(current)

    def _set_available(self, apiservice: dict) -> float | None:
        service = (apiservice.get("spec") or {}).get("service")
        if not service:
            state = ("True", "Local", "Local APIServices are always available")
        else:
            try:
                self.store.get("Service", service.get("namespace") or "", service.get("name") or "")
                state = ("False", "FailedDiscoveryCheck",
                         "Trimaran serves no aggregated API: nothing is proxied to "
                         f'service/{service.get("name")} in "{service.get("namespace")}"')
            except NotFound:
                state = ("False", "ServiceNotFound",
                         f'service/{service.get("name")} in "{service.get("namespace")}" is not present')
        status = copy.deepcopy(apiservice.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Available"]
        before = next((c for c in status.get("conditions") or [] if c.get("type") == "Available"), None)
        if before is not None and (before.get("status"), before.get("reason"), before.get("message")) == state:
            return None
        since = before.get("lastTransitionTime") if before is not None and before.get("status") == state[0] else None
        conditions.append({"type": "Available", "status": state[0], "lastTransitionTime": since or now_rfc3339(),
                           "reason": state[1], "message": state[2]})
        apiservice["status"] = {**status, "conditions": conditions}
        try:
            self.write_status(apiservice)
        except Conflict:
            return _RETRY_SECONDS
        except NotFound:
            pass
        return None
