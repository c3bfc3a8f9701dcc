"""Kubernetes-style events: deduplication, ordering, filtering and cleanup."""

from __future__ import annotations

import pytest


def test_event_shape(store, obj):
    job = store.create(obj("a"))
    store.record_event(job, "Normal", "SuccessfulCreatePod", "Created pod: a-worker-0")
    [event] = store.list_events()
    assert event["apiVersion"] == "v1" and event["kind"] == "Event"
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("a.")
    assert event["involvedObject"] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "namespace": "default",
        "name": "a",
        "uid": job["metadata"]["uid"],
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "SuccessfulCreatePod",
        "Created pod: a-worker-0",
    )
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"]


def test_repeated_event_is_counted_not_duplicated(store, obj):
    job = store.create(obj("a"))
    store.record_event(job, "Warning", "BackOff", "Back-off restarting failed container")
    [first] = store.list_events()
    store.record_event(job, "Warning", "BackOff", "Back-off restarting failed container")
    [second] = store.list_events()
    assert (first["count"], second["count"]) == (1, 2)
    assert second["firstTimestamp"] == first["firstTimestamp"]
    assert second["lastTimestamp"] >= first["lastTimestamp"]
    assert second["metadata"]["name"] == first["metadata"]["name"]
    # Another message or type is another event.
    store.record_event(job, "Warning", "BackOff", "Back-off pulling image")
    store.record_event(job, "Normal", "BackOff", "Back-off restarting failed container")
    assert len(store.list_events()) == 3


def test_events_ordered_by_last_occurrence(store, obj):
    job = store.create(obj("a"))
    store.record_event(job, "Normal", "First", "one")
    store.record_event(job, "Normal", "Second", "two")
    store.record_event(job, "Normal", "First", "one")  # seen again: now the latest
    assert [e["reason"] for e in store.list_events()] == ["Second", "First"]


def test_list_events_filters(store, obj):
    a = store.create(obj("a"))
    b = store.create(obj("b", namespace="team"))
    pod = store.create(obj("a", kind="Pod"))
    for involved in (a, b, pod):
        store.record_event(involved, "Normal", "Created", "made")
    assert len(store.list_events()) == 3
    assert [e["involvedObject"]["kind"] for e in store.list_events(kind="Pod")] == ["Pod"]
    assert len(store.list_events(name="a")) == 2
    assert len(store.list_events(namespace="team")) == 1
    assert len(store.list_events(kind="PyTorchJob", namespace="default", name="a")) == 1


def test_delete_removes_the_objects_events(store, obj):
    a = store.create(obj("a"))
    b = store.create(obj("b"))
    store.record_event(a, "Normal", "Created", "a")
    store.record_event(b, "Normal", "Created", "b")
    store.delete("PyTorchJob", "default", "a")
    assert [e["involvedObject"]["name"] for e in store.list_events()] == ["b"]
    assert store.delete_events_for("PyTorchJob", "default", "b") == 1
    assert store.list_events() == []


def test_events_write_no_revision(store, obj):
    job = store.create(obj("a"))
    store.record_event(job, "Normal", "Created", "a")
    assert store.current_revision() == 1


def test_bad_event_type_is_rejected(store, obj):
    with pytest.raises(ValueError, match='"Normal" or "Warning"'):
        store.record_event(store.create(obj("a")), "Info", "Created", "a")
