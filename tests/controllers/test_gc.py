"""Deletion as Kubernetes does it, with a real store and a real manager running the garbage collector:
the DELETE (request_delete) marks or removes one object, the collector finishes the cascade."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.controllers.base import ControllerManager, Key
from trimaran.controllers.gc import FOREGROUND_FINALIZER, ORPHAN_FINALIZER, GarbageCollector, request_delete
from trimaran.store import Conflict, Invalid, NotFound, SQLiteStore

NS = "default"
HOLD = "example.com/hold"


def ref(owner: dict, block: bool = True) -> dict:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": block}


def make(store: SQLiteStore, name: str, *owners: dict, kind: str = "ConfigMap", api_version: str = "v1",
         finalizers: list[str] | None = None, block: bool = True) -> dict:
    meta: dict = {"name": name, "namespace": NS}
    if owners:
        meta["ownerReferences"] = [ref(owner, block) for owner in owners]
    if finalizers:
        meta["finalizers"] = finalizers
    return store.create({"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {}})


def exists(store: SQLiteStore, obj: dict) -> bool:
    try:
        return store.get(obj["kind"], NS, obj["metadata"]["name"])["metadata"]["uid"] == obj["metadata"]["uid"]
    except NotFound:
        return False


def gone(store: SQLiteStore, *objs: dict) -> bool:
    return not any(exists(store, obj) for obj in objs)


def fresh(store: SQLiteStore, obj: dict) -> dict:
    return store.get(obj["kind"], NS, obj["metadata"]["name"])


def collector_caught_up(store: SQLiteStore, label: str) -> None:
    """Wait until the collector has handled everything queued before this call.

    Its queue is first in, first out on one thread: once the dependent of an owner deleted now is
    gone, every earlier event has had its pass. Absence (an object the collector must keep) can
    only be asserted after such a point.
    """
    owner = make(store, f"barrier-{label}")
    dependent = make(store, f"barrier-{label}-dependent", owner)
    request_delete(store, owner)
    poll(lambda: gone(store, dependent), timeout=10, what=f"the collector to catch up ({label})")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "t.db")
    yield s
    s.close()


@pytest.fixture
def collector(store: SQLiteStore) -> Iterator[ControllerManager]:
    manager = ControllerManager(store, [GarbageCollector(store)], resync_seconds=3600)
    manager.start()
    yield manager
    manager.stop()


def test_background_delete_removes_the_owner_at_once_and_the_collector_takes_the_chain_below(store, collector):
    experiment = make(store, "exp", kind="Experiment", api_version="kubeflow.org/v1beta1")
    trial = make(store, "exp-t1", experiment, kind="Trial", api_version="kubeflow.org/v1beta1")
    job = make(store, "exp-t1-job", trial, kind="Job", api_version="batch/v1")
    pod = make(store, "exp-t1-job-0", job, kind="Pod")
    store.add_observations(NS, "exp-t1", trial["metadata"]["uid"], [{"metric": "loss", "value": 0.5}])
    store.record_event(job, "Normal", "SuccessfulCreate", "created pod exp-t1-job-0")

    assert request_delete(store, experiment) is None
    assert gone(store, experiment)

    poll(lambda: gone(store, trial, job), timeout=10, what="the trial and its job to be collected")
    # A pod is the kubelet's to remove once its processes stop: the collector only marks it.
    marked = poll(lambda: fresh(store, pod)["metadata"].get("deletionTimestamp"), timeout=10,
                  what="the pod to be marked for the kubelet")
    assert marked
    assert store.list_observations(NS, trials=["exp-t1"]) == []
    assert store.list_events("Job", NS, "exp-t1-job") == []


def test_foreground_delete_keeps_the_owner_until_its_dependents_are_gone_deepest_first(store, collector):
    owner = make(store, "owner")
    child = make(store, "child", owner)
    grandchild = make(store, "grandchild", child)
    held = make(store, "held", owner, finalizers=[HOLD])
    since = store.current_revision()

    marked = request_delete(store, owner, "Foreground")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == [FOREGROUND_FINALIZER]

    poll(lambda: gone(store, child, grandchild), timeout=10, what="the owner's dependents to go")
    poll(lambda: fresh(store, held)["metadata"].get("deletionTimestamp"), timeout=10, what="the held one marked")
    collector_caught_up(store, "foreground")
    # Its dependent "held" is still there (its own finalizer holds it), so the owner waits.
    assert fresh(store, owner)["metadata"]["finalizers"] == [FOREGROUND_FINALIZER]

    current = fresh(store, held)
    store.update({**current, "metadata": {**current["metadata"], "finalizers": []}})
    poll(lambda: gone(store, held, owner), timeout=10, what="the held dependent, then the owner, to go")

    order = [e.object["metadata"]["name"] for e in store.watch(since=since, timeout=0.5) if e.type == "DELETED"]
    assert order.index("grandchild") < order.index("child") < order.index("owner")
    assert order.index("held") < order.index("owner")


def test_foreground_owner_does_not_wait_for_a_dependent_that_does_not_block_it(store, collector):
    owner = make(store, "owner")
    loose = make(store, "loose", owner, finalizers=[HOLD], block=False)

    request_delete(store, owner, "Foreground")

    poll(lambda: gone(store, owner), timeout=10, what="the owner to go")
    # Deleted with it all the same, but held by its own finalizer.
    assert fresh(store, loose)["metadata"]["deletionTimestamp"]


def test_orphan_delete_leaves_the_dependents_without_their_reference_to_the_owner(store, collector):
    owner = make(store, "owner")
    other = make(store, "other-owner")
    only = make(store, "only", owner)
    shared = make(store, "shared", owner, other)

    marked = request_delete(store, owner, "Orphan")
    assert marked is not None and marked["metadata"]["finalizers"] == [ORPHAN_FINALIZER]

    poll(lambda: gone(store, owner), timeout=10, what="the owner to go once orphaning is done")
    assert "ownerReferences" not in fresh(store, only)["metadata"]
    assert fresh(store, shared)["metadata"]["ownerReferences"] == [ref(other)]
    collector_caught_up(store, "orphan")
    assert exists(store, only) and exists(store, shared)


def test_a_user_finalizer_holds_the_object_until_an_update_removes_it(store, collector):
    obj = make(store, "finalized", finalizers=[HOLD])

    first = request_delete(store, obj)
    assert first is not None and first["metadata"]["deletionTimestamp"]
    again = request_delete(store, obj)
    assert again == first  # a later delete changes nothing: not re-stamped, not rewritten
    collector_caught_up(store, "finalizer")
    assert fresh(store, obj)["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    store.update({**first, "metadata": {**first["metadata"], "finalizers": []}})
    poll(lambda: gone(store, obj), timeout=10, what="the object to go with its last finalizer")


def test_a_dependent_with_two_owners_stays_while_one_lives(store, collector):
    first = make(store, "first")
    second = make(store, "second")
    dependent = make(store, "dependent", first, second)

    request_delete(store, first)
    poll(lambda: fresh(store, dependent)["metadata"]["ownerReferences"] == [ref(second)], timeout=10,
         what="the reference to the deleted owner to be dropped")
    collector_caught_up(store, "two-owners")
    assert exists(store, dependent)

    request_delete(store, second)
    poll(lambda: gone(store, dependent), timeout=10, what="the dependent to go with its last owner")


def test_a_cascade_cut_by_a_crash_is_finished_by_the_next_control_plane(tmp_path):
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    owner = make(store, "owner")
    child = make(store, "child", owner)
    grandchild = make(store, "grandchild", child)
    pod = make(store, "pod", child, kind="Pod")
    waiting = make(store, "waiting")
    waiting_child = make(store, "waiting-child", waiting)
    orphaning = make(store, "orphaning")
    orphan = make(store, "orphan", orphaning)
    # The delete of "owner" was answered, then the control plane died before any collector pass;
    # two more owners were marked, their dependents untouched.
    request_delete(store, owner)
    request_delete(store, waiting, "Foreground")
    request_delete(store, orphaning, "Orphan")
    store.close()

    store = SQLiteStore(path)
    manager = ControllerManager(store, [GarbageCollector(store)], resync_seconds=3600)
    manager.start()
    try:
        poll(lambda: gone(store, child, grandchild, waiting, waiting_child, orphaning), timeout=10,
             what="the cut cascade to be finished after the restart")
        # The pod's owner went in that pass; the pod is marked in the pass its deletion wakes.
        poll(lambda: fresh(store, pod)["metadata"].get("deletionTimestamp"), timeout=10, what="the pod to be marked")
        poll(lambda: "ownerReferences" not in fresh(store, orphan)["metadata"], timeout=10,
             what="the orphan's reference to go")
    finally:
        manager.stop()
        store.close()


def test_a_pass_run_twice_is_the_same_as_once(store):
    owner = make(store, "owner")
    dependent = make(store, "dependent", owner)
    pod = make(store, "pod", owner, kind="Pod")
    store.delete("ConfigMap", NS, "owner")
    gc = GarbageCollector(store)

    for _ in range(2):
        for key in (Key("ConfigMap", NS, "dependent"), Key("Pod", NS, "pod")):
            assert gc.reconcile(key) is None
    assert gone(store, dependent)
    stamped = fresh(store, pod)
    assert stamped["metadata"]["deletionTimestamp"]
    assert "finalizers" not in stamped["metadata"]


def test_preconditions_that_do_not_hold_refuse_the_delete(store):
    obj = make(store, "guarded")

    with pytest.raises(Conflict, match="Precondition failed: uid"):
        request_delete(store, obj, preconditions={"uid": "not-its-uid"})
    with pytest.raises(Conflict, match="Precondition failed: resourceVersion"):
        request_delete(store, obj, preconditions={"resourceVersion": "999"})
    assert fresh(store, obj) == obj

    meta = obj["metadata"]
    assert request_delete(store, obj, preconditions={"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}) \
        is None
    assert gone(store, obj)


def test_pods_are_only_marked_and_a_later_delete_switches_the_collectors_finalizer(store):
    pod = make(store, "pod", kind="Pod")
    marked = request_delete(store, pod, "Orphan")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert "finalizers" not in marked["metadata"]  # the kubelet removes pods once they stopped

    owner = make(store, "owner", finalizers=[HOLD])
    foreground = request_delete(store, owner, "Foreground")
    assert foreground["metadata"]["finalizers"] == [HOLD, FOREGROUND_FINALIZER]
    # As in Kubernetes, an explicit propagation replaces the earlier one; the timestamp stays.
    orphan = request_delete(store, owner, "Orphan")
    assert orphan["metadata"]["finalizers"] == [HOLD, ORPHAN_FINALIZER]
    assert orphan["metadata"]["deletionTimestamp"] == foreground["metadata"]["deletionTimestamp"]
    background = request_delete(store, owner)
    assert background["metadata"]["finalizers"] == [HOLD]


def test_dry_run_writes_nothing_and_bad_propagation_is_invalid(store):
    obj = make(store, "plain")
    held = make(store, "held", finalizers=[HOLD])
    revision = store.current_revision()

    assert request_delete(store, obj, dry_run=True) is None
    would = request_delete(store, held, "Foreground", dry_run=True)
    assert would["metadata"]["deletionTimestamp"] and would["metadata"]["finalizers"] == [HOLD, FOREGROUND_FINALIZER]
    assert store.current_revision() == revision
    assert exists(store, obj) and "deletionTimestamp" not in fresh(store, held)["metadata"]

    with pytest.raises(Invalid, match="propagationPolicy"):
        request_delete(store, obj, "Cascade")


def test_dependents_made_before_the_collector_started_go_with_their_owner_later(tmp_path):
    # The collector knows which kinds hold an owner's dependents from the objects it has seen
    # name it: those written while it runs and, for those written before, its first list.
    store = SQLiteStore(tmp_path / "t.db")
    owner = make(store, "owner")
    secret = make(store, "secret", owner, kind="Secret")
    pod = make(store, "pod", owner, kind="Pod")
    manager = ControllerManager(store, [GarbageCollector(store)], resync_seconds=3600)
    manager.start()
    try:
        collector_caught_up(store, "start")
        assert exists(store, secret) and not fresh(store, pod)["metadata"].get("deletionTimestamp")
        assert request_delete(store, owner) is None
        poll(lambda: gone(store, secret), timeout=10, what="the secret made before the start to be collected")
        poll(lambda: fresh(store, pod)["metadata"].get("deletionTimestamp"), timeout=10, what="the pod to be marked")
    finally:
        manager.stop()
        store.close()
