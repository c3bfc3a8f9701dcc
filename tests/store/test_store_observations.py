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


def test_observations_of_many_named_trials_come_once_each(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    for i in range(12):
        store.add_observations("ns", f"t{i}", f"uid-{i}", [{"metric": "loss", "value": float(i), "step": 0}])
    for count in (0, 1, 8, 9, 11, 12):
        names = [f"t{i}" for i in range(count)]
        rows = store.list_observations("ns", trials=names, metric="loss")
        assert [r["trial"] for r in rows] == names, count
    assert store.list_observations("ns", trials=["t3"], metric="accuracy") == []
    store.close()
