"""The node's local volumes: a directory per PersistentVolumeClaim, ``<home>/volumes/<ns>/<claim>``.

The one-node stand-in for a local-path provisioner (Rancher's, which k3s and kind ship): the
PersistentVolumeClaim controller asks the node to provision and release a claim's directory
(:meth:`LocalRuntime.provision_claim`), the kubelet mounts it (``runtime/volumes.py``). A claim
whose volume is deleted with it (``reclaim_delete``, a dynamically provisioned volume's policy) is
noted beside the directories (``volumes/<ns>/.reclaim/<claim>``, a name no claim can have), so a
claim deleted while the control plane was down is still cleaned up on start.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trimaran.runtime.idmap import hand_to_pods

__all__ = ["claim_dir", "provision", "release", "released", "seed_sub_path"]


def claim_dir(home: Path, namespace: str, claim: str) -> Path:
    return home / "volumes" / namespace / claim


def _reclaim_marker(home: Path, namespace: str, claim: str) -> Path:
    return home / "volumes" / namespace / ".reclaim" / claim


def provision(home: Path, namespace: str, claim: str, reclaim_delete: bool) -> Path:
    """Make the claim's directory (idempotent); note that it goes with its claim where it does."""
    path = claim_dir(home, namespace, claim)
    path.mkdir(parents=True, exist_ok=True)
    if reclaim_delete:
        marker = _reclaim_marker(home, namespace, claim)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return path


def release(home: Path, namespace: str, claim: str) -> None:
    """The claim is gone: remove its directory if it goes with it, else keep it (no checkpoint is
    lost to a mistyped delete)."""
    marker = _reclaim_marker(home, namespace, claim)
    if marker.exists():
        # The data first, the note last: a crash in between retries on the next start.
        shutil.rmtree(claim_dir(home, namespace, claim), ignore_errors=True)
        marker.unlink()


def released(home: Path) -> list[tuple[str, str]]:
    """``(namespace, claim)`` of every directory that goes with its claim, still here."""
    return [(m.parent.parent.name, m.name) for m in (home / "volumes").glob("*/.reclaim/*")]


def seed_sub_path(home: Path, namespace: str, claim: str, sub_path: str, copy_of: str | None) -> bool:
    """Create ``sub_path`` in the claim's directory as a copy of its sibling ``copy_of`` (empty
    without one), writable by the pods.

    Idempotent across a crash: the copy is made beside the target and renamed into place, so the
    directory either does not exist or is complete; a half-made copy is thrown away and redone.
    Returns False when ``copy_of`` is missing (the directory then starts empty).
    """
    target = claim_dir(home, namespace, claim) / sub_path
    if target.is_dir():
        return True
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    source = target.with_name(copy_of) if copy_of else None
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
    plane's): the pod writes its files as the ids the source's pod wrote them with."""
    for directory, dirs, files in os.walk(source):
        for name in [".", *dirs, *files]:
            original = Path(directory, name)
            info = original.lstat()
            os.lchown(copy / original.relative_to(source), info.st_uid, info.st_gid)
