"""PersistentVolumeClaims: each claim is bound to a directory, ``$TRIMARAN_HOME/volumes/<ns>/<claim>``.

The directory is what pods mount; it outlives jobs and pods. Deleting the claim object keeps the
directory, so that no checkpoint is lost to a mistyped delete (remove it by hand when done).

A claim annotated ``trimaran.io/reclaim-policy: Delete`` (the policy of a dynamically provisioned
volume; Katib's FromVolume experiments get such a claim) loses its directory with it. The policy is
noted beside the directories (``volumes/<ns>/.reclaim/<claim>``, a name no claim can have) when
the claim is bound, so a claim deleted while the control plane was down is still cleaned up on
start.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterable
from pathlib import Path

from trimaran.controllers.base import Key, Reconciler
from trimaran.store import Conflict, NotFound, Store

RECLAIM_ANNOTATION = "trimaran.io/reclaim-policy"


def claim_dir(home: Path, namespace: str, claim: str) -> Path:
    return home / "volumes" / namespace / claim


def _reclaim_marker(home: Path, namespace: str, claim: str) -> Path:
    return home / "volumes" / namespace / ".reclaim" / claim


class ClaimReconciler(Reconciler):
    name = "volumes"
    kinds = ("PersistentVolumeClaim",)

    def __init__(self, store: Store, home: Path) -> None:
        super().__init__(store)
        self.home = home

    def reconcile(self, key: Key) -> float | None:
        marker = _reclaim_marker(self.home, key.namespace, key.name)
        try:
            claim = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            if marker.exists():
                # The data first, the note last: a crash in between retries on the next start.
                shutil.rmtree(claim_dir(self.home, key.namespace, key.name), ignore_errors=True)
                marker.unlink()
            return None
        claim_dir(self.home, key.namespace, key.name).mkdir(parents=True, exist_ok=True)
        if (claim["metadata"].get("annotations") or {}).get(RECLAIM_ANNOTATION) == "Delete":
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
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

    def initial_keys(self) -> Iterable[Key]:
        """Every claim, and every Delete-policy claim whose directory outlived it."""
        yield from super().initial_keys()
        for marker in (self.home / "volumes").glob("*/.reclaim/*"):
            yield Key("PersistentVolumeClaim", marker.parent.parent.name, marker.name)
