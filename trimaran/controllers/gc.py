"""Cascading deletion: an object goes with everything it owns, as Kubernetes' garbage collector
deletes dependents by their ownerReferences. Pods are handed to the kubelet (graceful stop)."""

from __future__ import annotations

from trimaran.api import kinds
from trimaran.controllers.pods import request_deletion
from trimaran.store import NotFound, Store


def dependents(store: Store, owner: dict) -> list[dict]:
    """Objects in the owner's namespace that name it (by uid) among their owners."""
    uid = owner["metadata"]["uid"]
    ns = owner["metadata"].get("namespace") or None
    found = []
    # The store keys objects by kind, not version: MPIJob v1 and v2beta1 are one list.
    names = dict.fromkeys(info.kind for info in kinds.all_kinds() if info.namespaced and info.kind != "Namespace")
    for kind in names:
        for obj in store.list(kind, ns):
            if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                found.append(obj)
    return found


def delete_with_dependents(store: Store, obj: dict) -> None:
    """Delete ``obj``, then everything it owns; pods are stopped by the kubelet.

    The owner goes first, as in Kubernetes' background deletion: a controller that notices a
    missing child must not find its owner still there and recreate the child.
    """
    if obj["kind"] == "Pod":
        request_deletion(store, obj)
        return
    children = dependents(store, obj)
    meta = obj["metadata"]
    try:
        store.delete(obj["kind"], meta.get("namespace", ""), meta["name"])
    except NotFound:
        return
    store.delete_events_for(obj["kind"], meta.get("namespace", ""), meta["name"])
    if obj["kind"] == "Trial":
        store.delete_observations(meta["namespace"], meta["name"])
    for child in children:
        delete_with_dependents(store, child)
