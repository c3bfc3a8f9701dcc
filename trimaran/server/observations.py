"""Metrics a trial pushes (Trimaran's route and Katib's DBManager both take them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trimaran.store import Store

__all__ = ["add_pushed_observations"]


def add_pushed_observations(store: Store, namespace: str, trial: str, trial_uid: str,
                            rows: Sequence[dict[str, Any]]) -> None:
    """Store a trial's pushed observations; a row without a ``step`` gets the next one of its
    metric, as the text collector numbers its lines. Callers serialise calls for one trial."""
    seen: dict[str, int] = {}
    if any(r.get("step") is None for r in rows):
        for r in store.list_observations(namespace, trials=[trial]):
            seen[r["metric"]] = seen.get(r["metric"], 0) + 1
    numbered = []
    for r in rows:
        step = seen.get(r["metric"], 0) if r.get("step") is None else r["step"]
        seen[r["metric"]] = seen.get(r["metric"], 0) + 1
        numbered.append({**r, "step": step})
    store.add_observations(namespace, trial, trial_uid, numbered)
