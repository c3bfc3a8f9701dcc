"""The experiment's volume (``resumePolicy: FromVolume``) and pbt's checkpoint directories in it.

Katib gives a FromVolume experiment's suggestion a PersistentVolumeClaim named
``<experiment>-<algorithm>``, deleted with the experiment; pbt mounts it into every trial's
primary container at ``suggestion_trial_dir`` with subPath ``<experiment>/<trial>``, and fills that
directory with a copy of the parent trial's before the trial starts. Here the claim is an ordinary
PersistentVolumeClaim object owned by the Experiment (a directory under
``$TRIMARAN_HOME/volumes``), annotated so that its directory goes with it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from trimaran.controllers.pods import owner_reference
from trimaran.controllers.volumes import RECLAIM_ANNOTATION, claim_dir
from trimaran.runtime.idmap import hand_to_pods
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


def prepare_checkpoint(home: Path, namespace: str, mount: CheckpointMount) -> bool:
    """Create the trial's directory in the claim as a copy of its parent's (empty without one).

    Idempotent across a crash: the copy is made beside the target and renamed into place, so the
    directory either does not exist or is complete; a half-made copy is thrown away and redone.
    Returns False when the parent's directory is missing (the trial then starts empty).
    """
    root = claim_dir(home, namespace, mount.claim)
    target = root / mount.sub_path
    if target.is_dir():
        return True
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    source = target.with_name(mount.parent) if mount.parent else None
    found = source is None or source.is_dir()
    if source is not None and found:
        shutil.copytree(source, partial, symlinks=True)
        _same_owners(source, partial)
    else:
        partial.mkdir()
        hand_to_pods(partial)
    os.rename(partial, target)
    return found


def _same_owners(source: Path, copy: Path) -> None:
    """Give the copy the owners of what it copies (``copytree`` makes everything the control
    plane's): the trial writes its checkpoint files as the ids its parent wrote them with."""
    for directory, dirs, files in os.walk(source):
        for name in [".", *dirs, *files]:
            original = Path(directory, name)
            info = original.lstat()
            os.lchown(copy / original.relative_to(source), info.st_uid, info.st_gid)
