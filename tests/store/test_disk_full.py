"""The SQLite store on a full disk: a write answers DiskFull naming the filesystem, a delete still
commits by releasing the reserve, which comes back once there is room (a small tmpfs: root only)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import small_tmpfs
from trimaran.store import DiskFull, SQLiteStore


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "8m") as mount:
        yield mount


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        for step in (1 << 20, 4096):
            while True:
                try:
                    os.posix_fallocate(handle.fileno(), os.fstat(handle.fileno()).st_size, step)
                except OSError:
                    break
    return filler


def _configmap(name: str, size: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": {"a": "x" * size}}


def test_a_full_disk_refuses_writes_and_keeps_deletes(small_disk: Path) -> None:
    store = SQLiteStore(small_disk / "trimaran.db", reserve=1 << 20)
    try:
        assert (small_disk / "trimaran.db.reserve").stat().st_size == 1 << 20
        store.create(_configmap("kept", 1000))
        filler = _fill(small_disk)
        with pytest.raises(DiskFull) as refused:
            for i in range(40):  # free pages in the database and its WAL take a few writes first
                store.create(_configmap(f"big-{i}", 200_000))
        assert refused.value.code == 507 and refused.value.reason == "InsufficientStorage"
        assert f"database or disk is full: free space on {small_disk} (tmpfs" in str(refused.value)
        store.delete("ConfigMap", "default", "kept")  # the reserve gives it room
        assert not (small_disk / "trimaran.db.reserve").exists()
        filler.unlink()
        store.create(_configmap("later", 10))
        assert (small_disk / "trimaran.db.reserve").exists()  # back once the disk had room
    finally:
        store.close()
