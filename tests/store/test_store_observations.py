"""Metric observations of trials: appended in order, filtered, deleted with the trial, durable."""

from __future__ import annotations

from trimaran.store import SQLiteStore


def test_observations_round_trip_and_survive_reopening(tmp_path):
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    store.add_observations("ns", "exp-a", "uid-a", [
        {"metric": "loss", "value": 0.9, "step": 0},
        {"metric": "loss", "value": 0.5, "step": 1, "timestamp": 12.5},
        {"metric": "accuracy", "value": 0.7, "step": 1},
    ])
    store.add_observations("ns", "exp-b", "uid-b", [{"metric": "loss", "value": 0.4}])
    store.add_observations("other", "exp-a", "uid-c", [{"metric": "loss", "value": 9.0}])
    store.close()

    store = SQLiteStore(path)
    rows = store.list_observations("ns", trials=["exp-a"], metric="loss")
    assert [(r["step"], r["value"]) for r in rows] == [(0, 0.9), (1, 0.5)]
    assert rows[1]["timestamp"] == 12.5 and rows[0]["trialUid"] == "uid-a"
    assert {r["trial"] for r in store.list_observations("ns")} == {"exp-a", "exp-b"}
    assert store.delete_observations("ns", "exp-a") == 3
    assert [r["trial"] for r in store.list_observations("ns")] == ["exp-b"]
    store.close()
