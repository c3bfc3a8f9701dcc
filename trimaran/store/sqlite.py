"""The store in one SQLite file: everything SQLite-specific is in this module.

WAL journaling lets readers (watchers, the API) run beside the one writer;
``synchronous=NORMAL`` in WAL mode never corrupts the file and loses no committed
transaction when a process is killed (only an OS crash or power loss can drop the
last few), at a fraction of the cost of an fsync per write.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import URL

from trimaran.store.sql import SINGLE_STATEMENT_OPTION, WRITE_OPTION, SQLStore

# Connections are cheap in SQLite; enough that the API server's worker threads and the
# controllers' watchers rarely queue for one.
_POOL_SIZE = 8
_POOL_OVERFLOW = 32
_WAL_SWITCH_SECONDS = 30.0


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy emit BEGIN itself (see _begin) instead of the sqlite3 module guessing.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # Turning a new file to WAL needs it to itself, and SQLite answers "database is locked" at once,
    # without its busy timeout, when another process opening the same new file holds it (seen in
    # CI: three processes creating one store). Try again for a while, as the busy timeout would.
    deadline = time.monotonic() + _WAL_SWITCH_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _begin(conn: Connection) -> None:
    options = conn.get_execution_options()
    if options.get(SINGLE_STATEMENT_OPTION):
        return  # the sqlite3 module, in autocommit mode, runs the statement as its own transaction
    # A writer takes the write lock at BEGIN: a deferred transaction that reads first and
    # writes later fails with SQLITE_BUSY, without waiting, if another writer got in between.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION) else "BEGIN")


def _private(path: Path) -> None:
    """Create the database file readable by its owner only (it holds every Secret), and tighten a
    looser existing one. SQLite gives the ``-wal`` and ``-shm`` files it creates the database's mode."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            mode = each.stat().st_mode & 0o777
            if mode & 0o077:
                each.chmod(mode & 0o700)


class SQLiteStore(SQLStore):
    """The store in the SQLite file at ``path``, created with its directory if missing, mode 0600.

    Several processes may open the same file: their writes take turns on SQLite's lock,
    and each one's watchers notice the others' writes within ``poll_interval``.

    Example::

        store = SQLiteStore("/tmp/trimaran.db")
        job = store.create({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                            "metadata": {"name": "mnist", "namespace": "default"}, "spec": {}})
        assert store.get("PyTorchJob", "default", "mnist")["metadata"]["uid"] == job["metadata"]["uid"]

    Args:
        path: The database file.
        keep_revisions: How many of the latest changes the change log keeps for watchers.
        poll_interval: Seconds between a waiting watcher's looks for other processes' writes.
        busy_timeout: Seconds a write waits for another process's write to finish before failing.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        keep_revisions: int = 10_000,
        poll_interval: float = 0.25,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _private(self.path)
        engine = create_engine(
            URL.create("sqlite", database=str(self.path)),
            connect_args={"timeout": busy_timeout, "check_same_thread": False},
            pool_size=_POOL_SIZE,
            max_overflow=_POOL_OVERFLOW,
        )
        event.listen(engine, "connect", _configure_connection)
        event.listen(engine, "begin", _begin)
        super().__init__(engine, keep_revisions=keep_revisions, poll_interval=poll_interval)

    def _begin_write(self, dbapi_connection: Any) -> None:
        # The write lock at BEGIN (see _begin); the sqlite3 module, in autocommit mode, begins nothing itself.
        cursor = dbapi_connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        cursor.close()

    def _begin_read(self, dbapi_connection: Any) -> None:
        # In autocommit mode each statement would see its own snapshot; a deferred BEGIN takes no lock.
        cursor = dbapi_connection.cursor()
        cursor.execute("BEGIN")
        cursor.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
