"""ControllerRevisions: the history of a StatefulSet's or DaemonSet's pod template, as
kube-controller-manager's ``controller/history`` package keeps it.

Each revision holds, in ``data``, the patch its controller would apply to restore the template
(``{"spec": {"template": {..., "$patch": "replace"}}}``, upstream's ``getPatch``) and a ``revision``
number that grows with each change. A template equal to an older revision's reuses that revision
and moves its number to the top, which is how ``kubectl rollout undo`` (a patch with an old
revision's ``data``) shows up in the history. Revisions are owned by their workload (the garbage
collector removes them with it) and carry its template's labels, which is how kubectl finds them
(``kubectl rollout history|undo sts/X|ds/X`` list them by the workload's selector and owner).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from trimaran.api.apps import APPS_V1, selector_matches
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.workloads.deployment import template_hash
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["equal_data", "go_json", "hash_revision", "owned_revisions", "sync_revision", "template_patch",
           "truncate_history"]

# rand.SafeEncodeString's alphabet: no vowels, no 0, 1 or 3, so a hash never spells a word.
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_patch(obj: dict) -> dict:
    """Upstream's ``getPatch``: the template as a strategic merge patch that replaces it whole."""
    template = copy.deepcopy(obj["spec"]["template"])
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def go_json(value: Any) -> bytes:
    """``json.Marshal`` of a decoded map: keys sorted, compact, and ``<``, ``>``, ``&`` escaped as Go escapes them."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def hash_revision(data: bytes, collision_count: int | None) -> str:
    """``HashControllerRevision``: FNV-1 (32 bit) of the data and the collision count, written with
    ``rand.SafeEncodeString`` over its decimal digits."""
    digest = 0x811C9DC5
    for byte in data + (str(collision_count).encode() if collision_count is not None else b""):
        digest = (digest * 0x01000193) & 0xFFFFFFFF
        digest ^= byte
    return "".join(_SAFE[ord(ch) % len(_SAFE)] for ch in str(digest))


def equal_data(left: Any, right: Any) -> bool:
    """Two revisions' data mean the same template; empty fields do not count (a client that writes
    ``resources: {}`` back, as ``kubectl rollout undo`` does, means the same template)."""
    def template(data: Any) -> dict:
        found = ((data or {}).get("spec") or {}).get("template") if isinstance(data, dict) else None
        return {k: v for k, v in (found or {}).items() if k != "$patch"}
    return template_hash(template(left)) == template_hash(template(right))


def owned_revisions(store: Store, owner: dict) -> list[dict]:
    """The owner's ControllerRevisions, oldest revision first; revisions no controller owns that its
    selector matches are adopted first (upstream's ``adoptOrphanRevisions``: a workload deleted with
    ``--cascade=orphan`` and made again takes its history back)."""
    meta = owner["metadata"]
    revisions = []
    for revision in store.list("ControllerRevision", meta["namespace"], shared=True):
        refs = revision["metadata"].get("ownerReferences") or []
        controller = next((r.get("uid") for r in refs if r.get("controller")), None)
        if controller is None and selector_matches(owner["spec"].get("selector"), revision["metadata"].get("labels")) \
                and (owner["spec"].get("selector") or {}):
            adopted = copy.deepcopy(revision)
            adopted["metadata"]["ownerReferences"] = [*refs, owner_reference(owner)]
            try:
                revision = store.update(adopted)
            except (Conflict, NotFound):
                continue
            controller = meta["uid"]
        if controller == meta["uid"]:
            revisions.append(revision)
    return sorted(revisions, key=lambda r: (int(r.get("revision") or 0), r["metadata"]["name"]))


def sync_revision(store: Store, owner: dict, revisions: list[dict], hash_label: str, collision_count: int,
                  name_hash: str = "") -> tuple[dict, int]:
    """The revision of ``owner``'s template now, created or moved to the top of ``revisions`` as
    upstream's controllers do (``revisions`` is updated in place); with the collision count after.

    The revision carries the template's labels and its hash under ``hash_label``. ``name_hash`` is the
    name's suffix where the controller has one (a DaemonSet's template hash); a StatefulSet's revision
    is named by ``HashControllerRevision`` of its data, ``collision_count`` bumped while that name is
    taken by other data.
    """
    data = template_patch(owner)
    latest = max((int(r.get("revision") or 0) for r in revisions), default=0)
    equal = [r for r in revisions if equal_data(r.get("data"), data)]
    if equal and equal[-1] is revisions[-1]:
        return equal[-1], collision_count
    if equal:  # a rollback to an older template: that revision becomes the newest
        moved = copy.deepcopy(equal[-1])
        moved["revision"] = latest + 1
        try:
            stored = store.update(moved)
        except (Conflict, NotFound):
            stored = store.get("ControllerRevision", owner["metadata"]["namespace"], moved["metadata"]["name"])
        revisions[revisions.index(equal[-1])] = stored
        revisions.sort(key=lambda r: int(r.get("revision") or 0))
        return stored, collision_count
    meta = owner["metadata"]
    labels = dict((owner["spec"]["template"].get("metadata") or {}).get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    while True:
        suffix = name_hash or hash_revision(go_json(data), collision_count)
        revision = {"apiVersion": APPS_V1, "kind": "ControllerRevision",
                    "metadata": {"name": f"{meta['name'][:223]}-{suffix}", "namespace": meta["namespace"],
                                 "labels": {**labels, hash_label: suffix},
                                 "ownerReferences": [owner_reference(owner)]},
                    "data": data, "revision": latest + 1}
        if annotations:
            revision["metadata"]["annotations"] = annotations
        try:
            created = store.create(revision)
        except AlreadyExists:
            taken = store.get("ControllerRevision", meta["namespace"], revision["metadata"]["name"])
            if equal_data(taken.get("data"), data) or name_hash:
                return taken, collision_count
            collision_count += 1
            continue
        revisions.append(created)
        return created, collision_count


def truncate_history(store: Store, revisions: list[dict], keep: set[str], limit: int) -> None:
    """Delete the oldest revisions beyond ``limit``, never one named in ``keep`` (those live pods and the
    status name), as upstream's ``truncateHistory`` does."""
    spare = [r for r in revisions if r["metadata"]["name"] not in keep]
    for revision in spare[:max(len(spare) - limit, 0)]:
        try:
            store.delete("ControllerRevision", revision["metadata"]["namespace"], revision["metadata"]["name"])
        except NotFound:
            pass
