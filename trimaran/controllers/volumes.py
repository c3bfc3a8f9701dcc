"""PersistentVolumeClaims: each claim is bound to a directory, ``$TRIMARAN_HOME/volumes/<ns>/<claim>``.

The directory is what pods mount; it outlives jobs and pods. Deleting the claim object keeps the
directory, so that no checkpoint is lost to a mistyped delete (remove it by hand when done).
"""

from __future__ import annotations

import copy
from pathlib import Path

from trimaran.controllers.base import Key, Reconciler
from trimaran.store import Conflict, NotFound, Store


def claim_dir(home: Path, namespace: str, claim: str) -> Path:
    return home / "volumes" / namespace / claim


class ClaimReconciler(Reconciler):
    name = "volumes"
    kinds = ("PersistentVolumeClaim",)

    def __init__(self, store: Store, home: Path) -> None:
        super().__init__(store)
        self.home = home

    def reconcile(self, key: Key) -> float | None:
        try:
            claim = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            return None
        claim_dir(self.home, key.namespace, key.name).mkdir(parents=True, exist_ok=True)
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
            self.store.record_event(claim, "Normal", "ProvisioningSucceeded",
                                    f"bound to local volume {claim_dir(self.home, key.namespace, key.name)}")
        return None
