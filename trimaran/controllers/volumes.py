"""PersistentVolumeClaims: each claim is bound to a local volume the node provisions for it.

The node makes a directory per claim (``runtime/claims.py``, a local-path provisioner), which pods
mount and which outlives jobs and pods. Deleting the claim object keeps the directory, so that no
checkpoint is lost to a mistyped delete (remove it by hand when done).

A claim annotated ``trimaran.io/reclaim-policy: Delete`` (the policy of a dynamically provisioned
volume; Katib's FromVolume experiments get such a claim) loses its directory with it; the node
remembers which, so a claim deleted while the control plane was down is still cleaned up on start.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from trimaran.controllers.base import Key, Reconciler
from trimaran.runtime import NodeAPI
from trimaran.store import Conflict, NotFound, Store

RECLAIM_ANNOTATION = "trimaran.io/reclaim-policy"


class ClaimReconciler(Reconciler):
    name = "volumes"
    kinds = ("PersistentVolumeClaim",)

    def __init__(self, store: Store, node: NodeAPI) -> None:
        super().__init__(store)
        self.node = node

    def reconcile(self, key: Key) -> float | None:
        try:
            claim = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            self.node.release_claim(key.namespace, key.name)
            return None
        reclaim_delete = (claim["metadata"].get("annotations") or {}).get(RECLAIM_ANNOTATION) == "Delete"
        where = self.node.provision_claim(key.namespace, key.name, reclaim_delete=reclaim_delete)
        spec = claim.get("spec") or {}
        status = copy.deepcopy(claim.get("status") or {})
        wanted = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                  "capacity": ((spec.get("resources") or {}).get("requests") or {})}
        if status != wanted:
            claim["status"] = wanted
            try:
                self.store.update_status(claim)
            except Conflict:
                return 0.05
            self.store.record_event(claim, "Normal", "ProvisioningSucceeded", f"bound to local volume {where}")
        return None

    def initial_keys(self) -> Iterable[Key]:
        """Every claim, and every Delete-policy claim whose volume outlived it."""
        yield from super().initial_keys()
        for namespace, name in self.node.released_claims():
            yield Key("PersistentVolumeClaim", namespace, name)
