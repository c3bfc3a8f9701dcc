"""Threads that follow the store end with it: a closed store's watch ends at once, and a follower
that watched again would spin a core for as long as the process lived (as leaked ones did in the
suite's workers)."""

from __future__ import annotations

from pathlib import Path

from trimaran.server.rbac.authorizer import Authorizer
from trimaran.store import SQLiteStore


def test_the_authorizer_stops_following_a_closed_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    authorizer = Authorizer(store)
    authorizer.start()
    thread = authorizer._thread
    assert thread is not None and thread.is_alive()
    store.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert store.closed

