"""Create, get, list, update, update_status and delete, with Kubernetes semantics."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from trimaran.store import (
    AlreadyExists,
    Conflict,
    Invalid,
    NotFound,
    SQLiteStore,
    StoreError,
    default_store_path,
    open_store,
)


def test_create_sets_server_metadata(store, obj):
    created = store.create(obj("a"))
    meta = created["metadata"]
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert meta["resourceVersion"] == "1"
    assert meta["generation"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert store.get("PyTorchJob", "default", "a") == created
    assert store.current_revision() == 1


def test_create_does_not_change_the_callers_dict(store, obj):
    original = obj("a")
    store.create(original)
    assert "uid" not in original["metadata"]


def test_returned_objects_are_copies(store, obj):
    created = store.create(obj("a"))
    created["spec"]["replicas"] = 99
    fetched = store.get("PyTorchJob", "default", "a")
    fetched["spec"]["replicas"] = 98
    assert store.get("PyTorchJob", "default", "a")["spec"]["replicas"] == 1


def test_resource_versions_increase_across_kinds(store, obj):
    revisions = [
        int(store.create(obj("a"))["metadata"]["resourceVersion"]),
        int(store.create(obj("a", kind="TFJob"))["metadata"]["resourceVersion"]),
        int(store.create(obj("b"))["metadata"]["resourceVersion"]),
    ]
    assert revisions == [1, 2, 3]


def test_create_twice_is_already_exists(store, obj):
    store.create(obj("a"))
    with pytest.raises(AlreadyExists, match=r'PyTorchJob "default/a" already exists'):
        store.create(obj("a"))
    # The failed create used no revision.
    assert store.current_revision() == 1


def test_same_name_in_other_namespace_or_kind_is_fine(store, obj):
    store.create(obj("a"))
    store.create(obj("a", namespace="team"))
    store.create(obj("a", kind="TFJob"))
    assert len(store.list("PyTorchJob")) == 2


def test_generate_name(store, obj):
    template = obj("x")
    template["metadata"] = {"generateName": "run-", "namespace": "default"}
    first, second = store.create(template), store.create(template)
    for created in (first, second):
        assert re.fullmatch(r"run-[bcdfghjklmnpqrstvwxz2456789]{5}", created["metadata"]["name"])
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert store.get("PyTorchJob", "default", first["metadata"]["name"]) == first


def test_create_without_name_or_kind_is_invalid(store, obj):
    nameless = obj("a")
    del nameless["metadata"]["name"]
    with pytest.raises(Invalid, match="metadata.name"):
        store.create(nameless)
    kindless = obj("a")
    del kindless["kind"]
    with pytest.raises(Invalid, match="kind"):
        store.create(kindless)


def test_get_missing_is_not_found(store):
    with pytest.raises(NotFound, match=r'TFJob "default/x" not found') as caught:
        store.get("TFJob", "default", "x")
    assert caught.value.code == 404


def test_cluster_scoped_objects_and_ensure_namespace(store):
    created = store.ensure_namespace("team")
    assert store.ensure_namespace("team") == created
    assert store.get("Namespace", "", "team")["status"] == {"phase": "Active"}
    with pytest.raises(NotFound, match=r'Namespace "nope" not found'):
        store.get("Namespace", "", "nope")


def test_list_sorted_by_namespace_then_name(store, obj):
    for namespace, name in [("b", "z"), ("a", "y"), ("b", "a"), ("a", "x")]:
        store.create(obj(name, namespace=namespace))
    store.create(obj("other", kind="TFJob"))
    listed = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list("PyTorchJob")]
    assert listed == [("a", "x"), ("a", "y"), ("b", "a"), ("b", "z")]
    assert [o["metadata"]["name"] for o in store.list("PyTorchJob", namespace="b")] == ["a", "z"]
    assert store.list("PyTorchJob", namespace="none") == []
    assert store.list("Pod") == []


def test_list_label_selector(store, obj):
    store.create(obj("a", labels={"team": "x", "tier": "gpu"}))
    store.create(obj("b", labels={"team": "x"}))
    store.create(obj("c"))
    names = lambda sel: [o["metadata"]["name"] for o in store.list("PyTorchJob", label_selector=sel)]  # noqa: E731
    assert names({"team": "x"}) == ["a", "b"]
    assert names({"team": "x", "tier": "gpu"}) == ["a"]
    assert names({"team": "y"}) == []
    assert names({}) == ["a", "b", "c"]


def test_shared_list_reuses_unchanged_objects_and_sees_every_change(store, obj, db_path):
    store.create(obj("a", labels={"team": "x"}))
    store.create(obj("b", labels={"team": "x"}))
    store.create(obj("c", labels={"team": "y"}))
    first = store.list("PyTorchJob", label_selector={"team": "x"}, shared=True)
    assert [o["metadata"]["name"] for o in first] == ["a", "b"]
    again = store.list("PyTorchJob", label_selector={"team": "x"}, shared=True)
    assert again[0] is first[0] and again[1] is first[1]  # not decoded again

    changed = store.update_status({**first[1], "status": {"phase": "Done"}})
    other = SQLiteStore(db_path)  # a write by another process is seen as well
    try:
        other.update({**store.get("PyTorchJob", "default", "a"), "spec": {"replicas": 7}})
    finally:
        other.close()
    store.delete("PyTorchJob", "default", "c")
    store.create(obj("c", labels={"team": "x"}))

    now = store.list("PyTorchJob", label_selector={"team": "x"}, shared=True)
    assert [o["metadata"]["name"] for o in now] == ["a", "b", "c"]
    assert now[0]["spec"] == {"replicas": 7} and now[1] == changed
    assert now == store.list("PyTorchJob", label_selector={"team": "x"})  # same answer as a plain list


def test_update_bumps_generation_only_on_spec_change(store, obj):
    created = store.create(obj("a"))
    created["metadata"]["labels"] = {"new": "label"}
    relabeled = store.update(created)
    assert relabeled["metadata"]["generation"] == 1
    assert int(relabeled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    relabeled["spec"]["replicas"] = 3
    respecced = store.update(relabeled)
    assert respecced["metadata"]["generation"] == 2
    assert store.get("PyTorchJob", "default", "a") == respecced


def test_update_keeps_server_owned_metadata(store, obj):
    created = store.create(obj("a"))
    forged = obj("a", spec={"replicas": 2})
    forged["metadata"].update(uid="forged", creationTimestamp="1970-01-01T00:00:00Z", generation=40)
    updated = store.update(forged)
    for field in ("uid", "creationTimestamp"):
        assert updated["metadata"][field] == created["metadata"][field]
    assert updated["metadata"]["generation"] == 2


def test_update_does_not_change_status(store, obj):
    created = store.create(obj("a", status={"phase": "Running"}))
    created["status"] = {"phase": "Hacked"}
    created["spec"]["replicas"] = 2
    updated = store.update(created)
    assert updated["status"] == {"phase": "Running"}
    assert updated["spec"]["replicas"] == 2
    dropped = dict(updated)
    del dropped["status"]
    assert store.update(dropped)["status"] == {"phase": "Running"}


def test_update_status_does_not_change_spec_or_metadata(store, obj):
    created = store.create(obj("a"))
    created["spec"]["replicas"] = 50
    created["metadata"]["labels"] = {"sneaky": "yes"}
    created["status"] = {"phase": "Succeeded"}
    updated = store.update_status(created)
    assert updated["status"] == {"phase": "Succeeded"}
    assert updated["spec"] == {"replicas": 1}
    assert "labels" not in updated["metadata"]
    assert updated["metadata"]["generation"] == 1
    assert store.get("PyTorchJob", "default", "a") == updated


def test_two_updates_from_the_same_read_conflict(store, obj):
    store.create(obj("a"))
    first = store.get("PyTorchJob", "default", "a")
    second = store.get("PyTorchJob", "default", "a")
    first["spec"]["replicas"] = 2
    store.update(first)
    second["spec"]["replicas"] = 3
    with pytest.raises(Conflict, match=r'on PyTorchJob "default/a": the object has been modified') as caught:
        store.update(second)
    assert caught.value.code == 409
    second["status"] = {"phase": "Failed"}
    with pytest.raises(Conflict):
        store.update_status(second)
    assert store.get("PyTorchJob", "default", "a")["spec"]["replicas"] == 2


def test_update_without_resource_version_is_unconditional(store, obj):
    store.create(obj("a"))
    store.update(obj("a", spec={"replicas": 2}))
    assert store.update(obj("a", spec={"replicas": 3}))["spec"] == {"replicas": 3}


def test_noop_update_writes_nothing(store, obj):
    created = store.create(obj("a", status={"phase": "Running"}))
    assert store.update(created) == created
    assert store.update_status(created) == created
    assert store.current_revision() == 1


def test_update_missing_is_not_found(store, obj):
    with pytest.raises(NotFound):
        store.update(obj("a"))
    with pytest.raises(NotFound):
        store.update_status(obj("a"))


def test_delete_returns_last_state(store, obj):
    created = store.create(obj("a"))
    deleted = store.delete("PyTorchJob", "default", "a")
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    assert deleted["metadata"]["resourceVersion"] == "2"
    with pytest.raises(NotFound):
        store.get("PyTorchJob", "default", "a")
    with pytest.raises(NotFound):
        store.delete("PyTorchJob", "default", "a")
    recreated = store.create(obj("a"))
    assert recreated["metadata"]["uid"] != created["metadata"]["uid"]


def test_state_survives_reopening(db_path, obj):
    with SQLiteStore(db_path) as first:
        created = first.create(obj("a"))
    with SQLiteStore(db_path) as second:
        assert second.get("PyTorchJob", "default", "a") == created
        assert second.current_revision() == 1
        assert second.create(obj("b"))["metadata"]["resourceVersion"] == "2"


def test_newer_schema_is_refused(db_path):
    SQLiteStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(db_path)


def test_closed_store_refuses_writes(db_path, obj):
    closed = SQLiteStore(db_path)
    closed.close()
    with pytest.raises(StoreError, match="closed"):
        closed.create(obj("a"))


def test_open_store_urls(tmp_path: Path, obj):
    by_path = open_store(tmp_path / "a.db")
    by_str = open_store(str(tmp_path / "b.db"))
    by_url = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    for opened, file in ((by_path, "a.db"), (by_str, "b.db"), (by_url, "c.db")):
        assert isinstance(opened, SQLiteStore) and opened.path == tmp_path / file
        opened.create(obj("a"))
        opened.close()
    with pytest.raises(NotImplementedError, match="PostgreSQL store is not implemented"):
        open_store("postgresql://user:secret@localhost/trimaran")
    with pytest.raises(ValueError, match="in-memory"):
        open_store("sqlite://")
    with pytest.raises(ValueError, match="unsupported store URL"):
        open_store("mysql://localhost/trimaran")


def test_postgres_error_does_not_echo_the_password():
    with pytest.raises(NotImplementedError) as caught:
        open_store("postgresql://user:secret@localhost/trimaran")
    assert "secret" not in str(caught.value)


def test_default_store_path(monkeypatch, tmp_path):
    monkeypatch.setenv("TRIMARAN_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "trimaran.db"
    monkeypatch.delenv("TRIMARAN_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_path() == tmp_path / ".trimaran" / "trimaran.db"


def test_list_by_owner_uid_returns_only_that_owners_objects(store, obj):
    owner = store.create(obj("owner"))
    other = store.create(obj("other"))
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True}
    for name, refs in (("a", [ref]), ("b", [{**ref, "name": "other", "uid": other["metadata"]["uid"]}]),
                       ("c", [])):
        pod = obj(name, kind="Pod")
        pod["metadata"]["ownerReferences"] = refs
        store.create(pod)
    # The uid also appears outside ownerReferences: the exact test after decoding excludes it.
    decoy = obj("decoy", kind="Pod")
    decoy["metadata"]["annotations"] = {"note": owner["metadata"]["uid"]}
    decoy["metadata"]["labels"] = {"uid": owner["metadata"]["uid"]}
    store.create(decoy)
    assert [p["metadata"]["name"] for p in store.list("Pod", "default", owner_uid=owner["metadata"]["uid"])] == ["a"]


def test_label_selector_matches_values_with_sql_wildcards_literally(store, obj):
    store.create(obj("pct", labels={"team": "a%b"}))
    store.create(obj("under", labels={"team": "a_b"}))
    store.create(obj("plain", labels={"team": "axb"}))
    store.create(obj("elsewhere", spec={"note": '"team":"a_b"'}))
    assert [o["metadata"]["name"] for o in store.list("PyTorchJob", label_selector={"team": "a_b"})] == ["under"]
    assert [o["metadata"]["name"] for o in store.list("PyTorchJob", label_selector={"team": "a%b"})] == ["pct"]


def test_reads_see_the_last_commit_while_another_writer_holds_the_lock(store, obj, db_path):
    # Reads run outside a transaction (one snapshot per statement): another connection's open
    # write transaction neither blocks them nor shows them its uncommitted rows.
    store.create(obj("a"))
    writer = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE objects SET body = '{}' WHERE name = 'a'")
        writer.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
        assert store.get("PyTorchJob", "default", "a")["metadata"]["resourceVersion"] == "1"
        assert [o["metadata"]["name"] for o in store.list("PyTorchJob", "default")] == ["a"]
        assert store.current_revision() == 1
        assert [e.revision for e in store.watch("PyTorchJob", since=0, timeout=0)] == [1]
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    store.create(obj("b"))  # the store writes again once the other writer has let go
    assert store.current_revision() == 2
