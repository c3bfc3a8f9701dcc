"""The store in one SQLite file: everything SQLite-specific is in this module.

WAL journaling lets readers (watchers, the API) run beside the one writer;
``synchronous=NORMAL`` in WAL mode never corrupts the file and loses no committed
transaction when a process is killed (only an OS crash or power loss can drop the
last few), at a fraction of the cost of an fsync per write.

A full disk: SQLite answers SQLITE_FULL ("database or disk is full"), which the store raises as
``DiskFull`` naming the filesystem and its free space. Beside the database lies
``<db>.reserve``, a file of ``TRIMARAN_STORE_RESERVE`` bytes (4Mi; ``0`` for none) allocated when
the store opens: a delete that meets a full disk removes it and tries again, so deleting what
fills the disk (a pod and its logs) still commits, and the next write that finds room for it
twice over allocates it again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
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
DEFAULT_RESERVE = 4 * 1024 * 1024
_UNITS = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "k": 1000, "M": 1000**2, "G": 1000**3}

log = logging.getLogger(__name__)


def reserve_from_env(env: dict[str, str] | None = None) -> int:
    """``TRIMARAN_STORE_RESERVE`` in bytes (``4Mi``, ``500k``, ``1048576``; ``0``: none), 4Mi by default."""
    text = (os.environ if env is None else env).get("TRIMARAN_STORE_RESERVE", "").strip()
    if not text:
        return DEFAULT_RESERVE
    digits = text.rstrip("KMGik")
    unit = text[len(digits):]
    if not digits.isdigit() or unit not in _UNITS:
        raise ValueError(f"TRIMARAN_STORE_RESERVE: {text!r} is not a size such as 4Mi or 1048576")
    return int(digits) * _UNITS[unit]


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def _filesystem(path: Path) -> tuple[str, str]:
    """The mount point holding ``path`` and its filesystem type."""
    point = path.resolve()
    while not os.path.ismount(point) and point != point.parent:
        point = point.parent
    kind = "?"
    with contextlib.suppress(OSError), open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[1] == str(point):
                kind = fields[2]  # the last entry for a point is the one on top
    return str(point), kind


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
        reserve: Bytes kept beside the database for deletes on a full disk (see the module's doc);
            ``TRIMARAN_STORE_RESERVE`` by default.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        keep_revisions: int = 10_000,
        poll_interval: float = 0.25,
        busy_timeout: float = 30.0,
        reserve: int | None = None,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _private(self.path)
        self.reserve_path = self.path.with_name(self.path.name + ".reserve")
        self._reserve = reserve_from_env() if reserve is None else reserve
        self._reserve_lock = threading.Lock()
        self._reserve_missing = self._reserve > 0 and not self._allocate_reserve()
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

    # -- a full disk ------------------------------------------------------------------------

    def _is_disk_full(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", exc)  # SQLAlchemy wraps the driver's error
        return isinstance(orig, sqlite3.OperationalError) and (
            getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(orig))

    def _disk_full_message(self) -> str:
        point, kind = _filesystem(self.path.parent)
        try:
            stat = os.statvfs(self.path.parent)
            room = f"{_human(stat.f_bavail * stat.f_frsize)} of {_human(stat.f_blocks * stat.f_frsize)} free"
        except OSError:
            room = "free space unknown"
        return (f"database or disk is full: free space on {point} ({kind}, {room}; the store is "
                f"{self.path}): delete what fills it (deletes still commit)")

    def _release_reserve(self) -> bool:
        with self._reserve_lock:
            try:
                self.reserve_path.unlink()
            except FileNotFoundError:
                return False
            self._reserve_missing = True
        log.warning("the disk of %s is full: released the store's reserve of %d bytes for deletes",
                    self.path, self._reserve)
        return True

    def _after_commit(self) -> None:
        if self._reserve_missing:
            with self._reserve_lock:
                if self._reserve_missing and self._allocate_reserve():
                    self._reserve_missing = False
                    log.info("the disk of %s has room again: its reserve is back", self.path)

    def _allocate_reserve(self) -> bool:
        """Allocate the reserve where the disk has room for it twice over (so that taking it does
        not itself fill the disk); True when it exists afterwards."""
        if self.reserve_path.exists():
            return True
        try:
            stat = os.statvfs(self.path.parent)
            if stat.f_bavail * stat.f_frsize < 2 * self._reserve:
                return False
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self._reserve)
        except OSError:
            os.close(fd)
            self.reserve_path.unlink(missing_ok=True)
            return False
        os.close(fd)
        return True

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
