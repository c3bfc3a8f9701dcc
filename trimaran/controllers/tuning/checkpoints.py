"""The experiment's volume (``resumePolicy: FromVolume``) and pbt's checkpoint directories in it.

Katib gives a FromVolume experiment's suggestion a PersistentVolumeClaim named
``<experiment>-<algorithm>``, deleted with the experiment; pbt mounts it into every trial's
primary container at ``suggestion_trial_dir`` with subPath ``<experiment>/<trial>``, and fills that
directory with a copy of the parent trial's before the trial starts. Here the claim is an ordinary
PersistentVolumeClaim object owned by the Experiment (a local volume the node provisions),
annotated so that its directory goes with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trimaran.controllers.pods import owner_reference
from trimaran.controllers.volumes import RECLAIM_ANNOTATION
from trimaran.runtime import NodeAPI
from trimaran.tuning import PBT_PARENT_LABEL
from trimaran.tuning._labels import EXPERIMENT_LABEL

__all__ = ["CHECKPOINT_VOLUME", "CheckpointMount", "checkpoint_mount", "prepare_checkpoint", "volume_claim",
           "volume_claim_name"]

#: The pod volume that carries a pbt trial's checkpoint directory.
CHECKPOINT_VOLUME = "pbt-checkpoint"
# The size katib.md gives for pbt's volume; a local directory has no quota, so it is only shown.
_DEFAULT_STORAGE = "5Gi"


def volume_claim_name(experiment: dict) -> str:
    """Katib's ``<suggestion-name>-<algorithm>``; the suggestion is named after the experiment."""
    return f"{experiment['metadata']['name']}-{experiment['spec']['algorithm']['algorithmName']}"


def volume_claim(experiment: dict) -> dict:
    """The PersistentVolumeClaim a FromVolume experiment owns; its directory is removed with it."""
    name = experiment["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": volume_claim_name(experiment), "namespace": experiment["metadata"]["namespace"],
                     "labels": {EXPERIMENT_LABEL: name},
                     "annotations": {RECLAIM_ANNOTATION: "Delete"},
                     "ownerReferences": [owner_reference(experiment)]},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": _DEFAULT_STORAGE}}},
    }


@dataclass(frozen=True)
class CheckpointMount:
    """Where a pbt trial's checkpoint directory lives: ``sub_path`` of ``claim``, at ``mount_path``
    in the trial's container; ``parent`` is the trial whose directory it starts as a copy of."""

    claim: str
    sub_path: str
    mount_path: str
    parent: str | None

    def volume(self) -> dict:
        return {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": self.claim}}

    def volume_mount(self) -> dict:
        return {"name": CHECKPOINT_VOLUME, "mountPath": self.mount_path, "subPath": self.sub_path}


def checkpoint_mount(experiment: dict, trial: dict) -> CheckpointMount | None:
    """The checkpoint directory of a pbt trial, or None for any other algorithm."""
    algorithm = experiment["spec"]["algorithm"]
    if algorithm.get("algorithmName") != "pbt":
        return None
    settings = {s["name"]: str(s["value"]) for s in algorithm.get("algorithmSettings") or []}
    labels = trial["metadata"].get("labels") or {}
    return CheckpointMount(claim=volume_claim_name(experiment),
                           sub_path=f"{experiment['metadata']['name']}/{trial['metadata']['name']}",
                           mount_path=settings["suggestion_trial_dir"].strip(),
                           parent=labels.get(PBT_PARENT_LABEL))


def prepare_checkpoint(node: NodeAPI, namespace: str, mount: CheckpointMount) -> bool:
    """Create the trial's directory in the claim's volume as a copy of its parent's (empty without
    one), on the node that holds the volume (see ``runtime/claims.py``: crash-safe, idempotent).
    Returns False when the parent's directory is missing (the trial then starts empty)."""
    return node.seed_claim_path(namespace, mount.claim, mount.sub_path, mount.parent)
