"""The control plane gives memory back after a burst of writes (server/memory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trimaran.server.memory import MemoryReturner, _glibc
from trimaran.store import SQLiteStore

pytestmark = pytest.mark.skipif(_glibc() is None, reason="malloc_trim is glibc's")


def _configmap(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "default"}}


def test_it_trims_after_a_burst_of_writes_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        returner = MemoryReturner(store, burst=5)
        since = store.current_revision()
        for i in range(4):
            store.create(_configmap(i))
        assert returner.trim_if_busy(since) == since and returner.trims == 0  # a quiet store: no trim
        store.create(_configmap(4))
        after = returner.trim_if_busy(since)
        assert after == store.current_revision() and returner.trims == 1
        assert returner.trim_if_busy(after) == after and returner.trims == 1  # counted from the trim
    finally:
        store.close()
