"""The store on a SQL database through SQLAlchemy Core, in SQL every supported database speaks.

What differs between databases (connecting, pragmas, how a write transaction begins)
lives in the dialect's module (``sqlite.py``); this module never mentions a dialect.

Writes are serialised twice: a process-wide lock keeps this process's threads from
contending inside the database, and the database's own write lock orders writers from
different processes. Each write is one transaction holding the object row, its change-log
row and the revision counter, so a crash either keeps all three or none.

A write that cannot commit for want of disk space raises :class:`DiskFull`, except a delete (or
a write to an object being deleted, such as setting its deletionTimestamp or dropping its
finalizers): that one is tried again once the dialect has released the space it keeps in
reserve, so that deleting what fills the disk stays possible.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Executable,
    and_,
    bindparam,
    delete,
    false,
    func,
    insert,
    select,
    tuple_,
    update,
)

from trimaran.store import _codec
from trimaran.store._objects import (
    generated_name,
    matches_labels,
    merge_status,
    merge_update,
    now_rfc3339,
    object_key,
    prepare_create,
)
from trimaran.store.base import EventType, Page, Store, WatchEvent, WatchEventType
from trimaran.store.errors import AlreadyExists, Conflict, DiskFull, Expired, Invalid, NotFound, StoreError
from trimaran.store.schema import (
    META_COMPACTED,
    META_REVISION,
    META_SCHEMA_VERSION,
    SCHEMA_VERSION,
    changes,
    events,
    meta,
    metadata,
    objects,
    observations,
)

# Execution option set on connections that will write. A dialect whose transactions must
# know that up front (SQLite: BEGIN IMMEDIATE, or two writers deadlock upgrading read locks)
# reads it in its "begin" hook.
WRITE_OPTION = "trimaran_write"
# Execution option set on connections that run one read statement: a dialect whose driver can run
# it outside a transaction (the statement then sees one snapshot by itself) skips BEGIN for it.
SINGLE_STATEMENT_OPTION = "trimaran_single_statement"

# Changes one watch query fetches at most, so a far-behind watcher does not load the whole log.
_WATCH_BATCH = 500

# Recent changes this process committed, kept in memory so that its own watchers, woken by a
# write, read the change from here instead of each querying the change log.
_FEED_SIZE = 4096
# Objects list(shared=True) keeps decoded; past this it starts afresh (deleted rows leave entries).
_SHARED_CACHE_SIZE = 50_000

# Rows a page reads at least per query: a page whose filters pass few rows reads on in steps this big.
_PAGE_BATCH = 256

# Tries to find a free name for a generateName; a clash in 27**5 suffixes is already rare.
_GENERATE_NAME_TRIES = 8

_T = TypeVar("_T")


_BY_KEY = and_(
    objects.c.kind == bindparam("key_kind"),
    objects.c.namespace == bindparam("key_namespace"),
    objects.c.name == bindparam("key_name"),
)
# The hot statements, compiled once per store (see _Prepared).
_SELECT_BODY = select(objects.c.body).where(_BY_KEY)
_SELECT_BODY_FOR_UPDATE = _SELECT_BODY.with_for_update()
_SELECT_UID = select(objects.c.uid).where(_BY_KEY)
_DELETE_OBJECT = delete(objects).where(_BY_KEY)
_UPDATE_BODY = update(objects).where(_BY_KEY).values(
    resource_version=bindparam("new_revision"), body=bindparam("new_body"))
_INSERT_OBJECT = insert(objects)
_INSERT_CHANGE = insert(changes)
_NEXT_REVISION = (
    update(meta).where(meta.c.key == META_REVISION).values(value=meta.c.value + 1).returning(meta.c.value)
)
_SELECT_REVISION = select(meta.c.value).where(meta.c.key == META_REVISION)
_SAME_EVENT = and_(
    events.c.involved_kind == bindparam("event_kind"),
    events.c.namespace == bindparam("event_namespace"),
    events.c.involved_name == bindparam("event_name"),
    events.c.involved_uid == bindparam("event_uid"),
    events.c.type == bindparam("event_type"),
    events.c.reason == bindparam("event_reason"),
    events.c.message == bindparam("event_message"),
)
_FOLD_EVENT = update(events).where(_SAME_EVENT).values(
    count=events.c.count + 1, last_timestamp=bindparam("event_now"), last_seen=bindparam("event_seen"))
_INSERT_EVENT = insert(events)
_EVENT_COLUMNS = [column.name for column in events.columns if column.name != "id"]
_DELETE_EVENTS_OF = delete(events).where(events.c.involved_uid == bindparam("event_uid"))
_DELETE_EVENTS_FOR = delete(events).where(
    events.c.involved_kind == bindparam("event_kind"),
    events.c.namespace == bindparam("event_namespace"),
    events.c.involved_name == bindparam("event_name"),
)
_SELECT_COUNTER = select(meta.c.value).where(meta.c.key == bindparam("counter"))
_COMPACT_CHANGES = delete(changes).where(changes.c.revision <= bindparam("upto"))
_MARK_COMPACTED = update(meta).where(meta.c.key == META_COMPACTED, meta.c.value < bindparam("upto")).values(
    value=bindparam("upto"))
_INSERT_OBSERVATION = insert(observations)
_OBSERVATION_COLUMNS = [column.name for column in observations.columns if column.name != "id"]
_DELETE_OBSERVATIONS = delete(observations).where(
    observations.c.namespace == bindparam("observation_namespace"),
    observations.c.trial == bindparam("observation_trial"),
)
_OBJECT_COLUMNS = [column.name for column in objects.columns]
_CHANGE_COLUMNS = [column.name for column in changes.columns]


def _key_params(key: tuple[str, str, str]) -> dict[str, str]:
    return {"key_kind": key[0], "key_namespace": key[1], "key_name": key[2]}


def _needles(label_selector: dict[str, str] | None, owner_uid: str | None) -> list[str]:
    """Substrings of the stored JSON text that every object matching these filters contains."""
    needles = [f"{_codec.dumps(k)}:{_codec.dumps(v)}" for k, v in (label_selector or {}).items()]
    if owner_uid is not None:
        needles.append(f'"uid":{_codec.dumps(owner_uid)}')
    return needles


def _contains_pattern(needle: str) -> str:
    """A LIKE pattern (escape character ``/``) for text that contains ``needle``."""
    return "%" + needle.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


class _Prepared:
    """A statement compiled once for the engine's dialect, run on the driver's connection.

    SQLAlchemy's work on every execution (cache key, execution context, events, result rows) cost
    ten times what SQLite spends on a small indexed read; the store's hot statements skip it. Only
    for statements whose columns need no conversion (text, integers, floats): the driver's values
    are used as they are.
    """

    __slots__ = ("_defaults", "_order", "sql")

    def __init__(self, statement: Executable, dialect: Dialect, columns: Sequence[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=columns)
        self.sql = compiled.string
        # Literal values in the statement (META_REVISION) are bound parameters with their value.
        self._defaults = {name: value for name, value in compiled.params.items() if value is not None}
        self._order = compiled.positiontup  # the parameters' order for a positional paramstyle

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        merged = {**self._defaults, **values} if self._defaults else values
        return merged if self._order is None else tuple(merged[name] for name in self._order)

    def run(self, dbapi_connection: Any, values: Mapping[str, Any]) -> Any:
        """Execute on ``dbapi_connection`` (a driver's connection) and return the cursor."""
        cursor = dbapi_connection.cursor()
        cursor.execute(self.sql, self.parameters(values))
        return cursor


class SQLStore(Store):
    """:class:`Store` on any SQLAlchemy engine; dialect modules subclass it to configure the engine.

    Args:
        engine: The database. Its pool must hand each connection to one thread at a time.
        keep_revisions: How many of the latest changes the change log keeps for watchers;
            a watch from an older revision raises :class:`Expired`.
        poll_interval: Seconds between looks at the change log while a watch waits; writes
            by this process wake watchers at once, writes by other processes within this.
    """

    def __init__(self, engine: Engine, *, keep_revisions: int = 10_000, poll_interval: float = 0.25) -> None:
        if keep_revisions < 1:
            raise ValueError("keep_revisions must be at least 1")
        self._engine = engine
        self._write_engine = engine.execution_options(**{WRITE_OPTION: True})
        self._single_statement_engine = engine.execution_options(**{SINGLE_STATEMENT_OPTION: True})
        dialect = engine.dialect
        self._integrity_error = dialect.loaded_dbapi.IntegrityError
        self._sql = {
            name: _Prepared(statement, dialect, columns)
            for name, statement, columns in (
                ("select_body", _SELECT_BODY, None),
                ("select_body_for_update", _SELECT_BODY_FOR_UPDATE, None),
                ("select_uid", _SELECT_UID, None),
                ("delete_object", _DELETE_OBJECT, None),
                ("update_body", _UPDATE_BODY, None),
                ("insert_object", _INSERT_OBJECT, _OBJECT_COLUMNS),
                ("insert_change", _INSERT_CHANGE, _CHANGE_COLUMNS),
                ("next_revision", _NEXT_REVISION, None),
                ("select_revision", _SELECT_REVISION, None),
                ("fold_event", _FOLD_EVENT, None),
                ("insert_event", _INSERT_EVENT, _EVENT_COLUMNS),
                ("delete_events_of", _DELETE_EVENTS_OF, None),
                ("delete_events_for", _DELETE_EVENTS_FOR, None),
                ("select_counter", _SELECT_COUNTER, None),
                ("compact_changes", _COMPACT_CHANGES, None),
                ("mark_compacted", _MARK_COMPACTED, None),
                ("insert_observation", _INSERT_OBSERVATION, _OBSERVATION_COLUMNS),
                ("delete_observations", _DELETE_OBSERVATIONS, None),
            )
        }
        # list()'s statements by (shared, by namespace, number of needles), compiled when first used.
        self._list_sql: dict[tuple[bool | str, bool, int], _Prepared] = {}
        # list_observations()'s statements by (number of trial names it takes, by metric).
        self._observations_sql: dict[tuple[int | None, bool], _Prepared] = {}
        # The change log's statements by the number of kinds a watch follows (None: all).
        self._changes_sql: dict[int | None, _Prepared] = {}
        self._keep_revisions = keep_revisions
        # Compact in steps of a tenth of what is kept, so a delete is rare and small.
        self._compact_every = max(1, keep_revisions // 10)
        self._poll_interval = poll_interval
        self._write_lock = threading.Lock()
        self._changed = threading.Condition()
        self._notified_revision = 0  # the latest revision this process committed
        # (revision, kind, type, body) of this process's latest commits, with no revision missing
        # in between; guarded by _changed. A gap (another process wrote) starts it afresh.
        self._feed: deque[tuple[int, str, str, str]] = deque(maxlen=_FEED_SIZE)
        self._pending: list[tuple[int, str, str, str]] = []  # logged by the open write transaction
        self._compacted_here = 0  # the highest revision an explicit compact() in this process dropped
        # (kind, namespace, name) → (resource version, object) handed out by list(shared=True).
        self._shared: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = {}
        self._closed = False
        self._initialize()

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Any]:
        """A write transaction on a pooled driver connection, for prepared statements (``_run``);
        this process's watchers hear of its changes once it has committed. Raises ``DiskFull``
        when the database cannot grow."""
        if self._closed:
            raise StoreError("the store is closed")
        with self._write_lock:
            self._pending = []
            conn = self._engine.raw_connection()
            try:
                self._begin_write(conn)
                yield conn
                conn.commit()
            except BaseException as exc:
                conn.rollback()
                if self._is_disk_full(exc):
                    raise DiskFull(self._disk_full_message()) from exc
                raise
            finally:
                conn.close()
            if self._pending:
                self._publish(self._pending)
        self._after_commit()

    def _freeing(self, write: Callable[[], _T]) -> _T:
        """Run ``write``, a transaction that deletes; on a full disk, again with the reserve released."""
        try:
            return write()
        except DiskFull:
            if not self._release_reserve():
                raise
        return write()

    # Hooks for a dialect that can tell a full disk and keep space in reserve (SQLite's file).

    def _is_disk_full(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by the driver, says the database or its disk is full."""
        return False

    def _disk_full_message(self) -> str:
        return "database or disk is full"

    def _release_reserve(self) -> bool:
        """Free the space kept for deletes; False when there was none left to free."""
        return False

    def _after_commit(self) -> None:
        """Called after each committed write (outside the write lock): put a released reserve back."""

    def _begin_write(self, dbapi_connection: Any) -> None:
        """Begin a write transaction; a driver that follows PEP 249 begins one with the first statement.
        A dialect whose writers must take the write lock up front overrides this."""

    def _begin_read(self, dbapi_connection: Any) -> None:
        """Begin a read transaction, so that the statements after it see one snapshot; a driver that
        follows PEP 249 begins one with the first statement. A driver in autocommit mode overrides this."""

    @contextmanager
    def _reading_one(self) -> Iterator[Connection]:
        """A connection for a single read statement, which sees one snapshot without a transaction."""
        with self._single_statement_engine.connect() as conn:
            yield conn

    def _fetch(self, prepared: _Prepared, values: Mapping[str, Any]) -> list[Any]:
        """The rows of one prepared read statement, run on a pooled connection outside a transaction."""
        conn = self._engine.raw_connection()
        try:
            cursor = prepared.run(conn, values)
            try:
                return cursor.fetchall()
            finally:
                cursor.close()
        finally:
            conn.close()

    def _run(self, conn: Any, name: str, values: Mapping[str, Any]) -> Any:
        """Execute the prepared statement ``name`` on a driver connection (``_writing``'s); return the cursor."""
        return self._sql[name].run(conn, values)

    def _initialize(self) -> None:
        with self._write_lock, self._write_engine.begin() as conn:
            metadata.create_all(conn)
            counters = dict(conn.execute(select(meta.c.key, meta.c.value)).all())
            version = counters.get(META_SCHEMA_VERSION)
            if version is None:
                conn.execute(
                    insert(meta),
                    [
                        {"key": META_SCHEMA_VERSION, "value": SCHEMA_VERSION},
                        {"key": META_REVISION, "value": 0},
                        {"key": META_COMPACTED, "value": 0},
                    ],
                )
            elif version != SCHEMA_VERSION:
                raise StoreError(
                    f"the database has schema version {version}; this Trimaran reads version {SCHEMA_VERSION}"
                )

    def _next_revision(self, conn: Any) -> int:
        return self._run(conn, "next_revision", {}).fetchone()[0]

    def _log_change(
        self, conn: Any, revision: int, type: WatchEventType, key: tuple[str, str, str], body: str
    ) -> None:
        kind, namespace, name = key
        self._run(conn, "insert_change", {"revision": revision, "kind": kind, "namespace": namespace,
                                          "name": name, "type": type, "body": body})
        self._pending.append((revision, kind, type, body))
        # Decided by the revision alone, so every process compacts on the same schedule.
        if revision % self._compact_every == 0:
            self._compact(conn, revision - self._keep_revisions)

    def _compact(self, conn: Any, upto: int) -> None:
        if upto <= 0:
            return
        self._run(conn, "compact_changes", {"upto": upto})
        self._run(conn, "mark_compacted", {"upto": upto})

    def _publish(self, committed: list[tuple[int, str, str, str]]) -> None:
        """Add committed changes to the feed and wake this process's watchers."""
        with self._changed:
            for change in committed:
                if self._feed and change[0] != self._feed[-1][0] + 1:
                    self._feed.clear()
                self._feed.append(change)
            self._notified_revision = max(self._notified_revision, committed[-1][0])
            self._changed.notify_all()

    def _from_feed(self, position: int, kinds: list[str] | None) -> tuple[list[Any], int] | None:
        """The changes after ``position`` from the feed, or None when it does not reach back that far."""
        with self._changed:
            feed = self._feed
            if not feed or feed[0][0] > position + 1 or feed[-1][0] < position:
                return None
            newer = []
            for change in reversed(feed):
                if change[0] <= position:
                    break
                newer.append(change)
            head = feed[-1][0]
        # Writes compact on a schedule set by the revision alone, so the feed knows what is gone.
        compacted = max(self._compacted_here, head - head % self._compact_every - self._keep_revisions)
        if position < compacted:
            raise Expired(position, compacted)
        newer.reverse()
        rows = [(rev, type, body) for rev, kind, type, body in newer if kinds is None or kind in kinds]
        return rows[:_WATCH_BATCH], (head if len(rows) <= _WATCH_BATCH else rows[_WATCH_BATCH - 1][0])

    def _stored(self, conn: Any, key: tuple[str, str, str]) -> dict[str, Any]:
        # Row lock where the database has them; SQLite's BEGIN IMMEDIATE already excludes writers.
        row = self._run(conn, "select_body_for_update", _key_params(key)).fetchone()
        if row is None:
            raise NotFound(*key)
        return _codec.loads(row[0])

    # -- objects ------------------------------------------------------------------------

    def create(self, obj: dict[str, Any], *, uid: str | None = None) -> dict[str, Any]:
        meta_in = obj.get("metadata") or {}
        prefix = None if meta_in.get("name") else meta_in.get("generateName")
        if prefix and not obj.get("kind"):
            raise Invalid("object has no kind")
        key = None if prefix else object_key(obj)
        with self._writing() as conn:
            if key is None:
                key = self._free_generated_key(conn, obj["kind"], meta_in.get("namespace") or "", prefix)
                obj = {**obj, "metadata": {**meta_in, "name": key[2]}}
            if self.admit_create is not None:
                obj = self.admit_create(obj)
            revision = self._next_revision(conn)
            body = prepare_create(obj, revision, uid)
            text = _codec.dumps(body)
            try:
                self._run(conn, "insert_object", {"kind": key[0], "namespace": key[1], "name": key[2],
                                                  "uid": body["metadata"]["uid"], "resource_version": revision,
                                                  "body": text})
            except self._integrity_error:
                raise AlreadyExists(*key) from None
            self._log_change(conn, revision, "ADDED", key, text)
        return body

    def _free_generated_key(self, conn: Any, kind: str, namespace: str, prefix: str) -> tuple[str, str, str]:
        for _ in range(_GENERATE_NAME_TRIES):
            key = (kind, namespace, generated_name(prefix))
            if self._run(conn, "select_uid", _key_params(key)).fetchone() is None:
                return key
        raise AlreadyExists(kind, namespace, prefix + "*")

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        rows = self._fetch(self._sql["select_body"], _key_params((kind, namespace, name)))
        if not rows:
            raise NotFound(kind, namespace, name)
        return _codec.loads(rows[0][0])

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: dict[str, str] | None = None,
        owner_uid: str | None = None,
        shared: bool = False,
    ) -> list[dict[str, Any]]:
        # Narrow the rows in SQL by text the JSON body must contain, so that only candidates are
        # decoded; the exact tests run on the decoded objects.
        needles = _needles(label_selector, owner_uid)
        values = {"kind": kind, "namespace": namespace}
        values.update((f"needle_{i}", _contains_pattern(needle)) for i, needle in enumerate(needles))
        rows = self._fetch(self._list_statement(shared, namespace is not None, len(needles)), values)
        found = self._decode_shared(kind, rows) if shared else [_codec.loads(row[0]) for row in rows]
        if label_selector:
            found = [obj for obj in found if matches_labels(obj, label_selector)]
        if owner_uid is not None:
            found = [obj for obj in found
                     if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])]
        return found

    def list_page(
        self,
        kind: str,
        namespace: str | None,
        *,
        after: tuple[str, str] | None,
        limit: int,
        label_selector: dict[str, str] | None = None,
        accepts: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Page:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        needles = _needles(label_selector, None)
        statement = self._page_statement(namespace is not None, len(needles))
        values: dict[str, Any] = {"kind": kind, "namespace": namespace}
        values.update((f"needle_{i}", _contains_pattern(needle)) for i, needle in enumerate(needles))
        position = after or ("", "")
        if namespace is not None:
            # Within one namespace the position is a name alone, so the index reads the page in
            # order (a (namespace, name) comparison there has SQLite sort everything past it).
            if position[0] > namespace:
                return Page([], False, None)
            position = (namespace, position[1] if position[0] == namespace else "")
        items: list[dict[str, Any]] = []
        batch = max(limit + 1, _PAGE_BATCH)
        while True:
            values.update(after_namespace=position[0], after_name=position[1], batch=batch)
            rows = self._fetch(statement, values)
            for obj in self._decode_shared(kind, rows):
                if label_selector and not matches_labels(obj, label_selector):
                    continue
                if accepts is not None and not accepts(obj):
                    continue
                items.append(obj)
                if len(items) > limit:
                    break
            if len(items) > limit or len(rows) < batch:
                break
            position = (rows[-1][0], rows[-1][1])
        more = len(items) > limit
        del items[limit:]
        remaining = None
        if more and not label_selector and accepts is None:
            last = items[-1]["metadata"]
            counted = self._fetch(self._count_after_statement(namespace is not None),
                                  {"kind": kind, "namespace": namespace,
                                   "after_namespace": last.get("namespace") or "", "after_name": last["name"]})
            remaining = int(counted[0][0])
        return Page(items, more, remaining)

    def _page_statement(self, by_namespace: bool, needles: int) -> _Prepared:
        variant = ("page", by_namespace, needles)
        prepared = self._list_sql.get(variant)
        if prepared is None:
            position = (objects.c.namespace, objects.c.name)
            # The first page is past ("", ""): every object, as no name is empty.
            if by_namespace:
                past = and_(objects.c.namespace == bindparam("namespace"), objects.c.name > bindparam("after_name"))
            else:
                past = tuple_(*position) > tuple_(bindparam("after_namespace"), bindparam("after_name"))
            query = select(*position, objects.c.resource_version, objects.c.body).where(
                objects.c.kind == bindparam("kind"), past)
            for i in range(needles):
                query = query.where(objects.c.body.like(bindparam(f"needle_{i}"), escape="/"))
            query = query.order_by(*position).limit(bindparam("batch"))
            prepared = _Prepared(query, self._engine.dialect)
            self._list_sql[variant] = prepared
        return prepared

    def _count_after_statement(self, by_namespace: bool) -> _Prepared:
        variant = ("count", by_namespace, 0)
        prepared = self._list_sql.get(variant)
        if prepared is None:
            query = select(func.count()).select_from(objects).where(
                objects.c.kind == bindparam("kind"),
                tuple_(objects.c.namespace, objects.c.name) > tuple_(bindparam("after_namespace"),
                                                                     bindparam("after_name")))
            if by_namespace:
                query = query.where(objects.c.namespace == bindparam("namespace"))
            prepared = _Prepared(query, self._engine.dialect)
            self._list_sql[variant] = prepared
        return prepared

    def _list_statement(self, shared: bool, by_namespace: bool, needles: int) -> _Prepared:
        variant = (shared, by_namespace, needles)
        prepared = self._list_sql.get(variant)
        if prepared is None:
            columns = (objects.c.namespace, objects.c.name, objects.c.resource_version, objects.c.body)
            query = (select(*columns) if shared else select(objects.c.body)).where(objects.c.kind == bindparam("kind"))
            if by_namespace:
                query = query.where(objects.c.namespace == bindparam("namespace"))
            for i in range(needles):
                query = query.where(objects.c.body.like(bindparam(f"needle_{i}"), escape="/"))
            prepared = _Prepared(query.order_by(objects.c.namespace, objects.c.name), self._engine.dialect)
            self._list_sql[variant] = prepared
        return prepared

    def _decode_shared(self, kind: str, rows: Sequence[Any]) -> list[dict[str, Any]]:
        # The resource version names one immutable body, so a decoded object stays valid until
        # the row changes; rows from other processes are caught the same way.
        cache = self._shared
        if len(cache) > _SHARED_CACHE_SIZE:
            cache.clear()
        found = []
        for namespace, name, version, body in rows:
            key = (kind, namespace, name)
            hit = cache.get(key)
            if hit is None or hit[0] != version:
                hit = (version, _codec.loads(body))
                cache[key] = hit
            found.append(hit[1])
        return found

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._replace(obj, merge_update)

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._replace(obj, merge_status)

    def _replace(
        self, obj: dict[str, Any], merge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        key = object_key(obj)
        expected = (obj.get("metadata") or {}).get("resourceVersion")

        def write() -> dict[str, Any]:
            with self._writing() as conn:
                stored = self._stored(conn, key)
                if expected not in (None, "") and str(expected) != stored["metadata"]["resourceVersion"]:
                    raise Conflict(*key)
                body = merge(stored, obj)
                if body == stored:
                    # Nothing changed: no revision, no watch event, so a controller that writes
                    # the status it already wrote does not wake itself up forever.
                    return stored
                revision = self._next_revision(conn)
                body["metadata"]["resourceVersion"] = str(revision)
                text = _codec.dumps(body)
                self._run(conn, "update_body", {**_key_params(key), "new_revision": revision, "new_body": text})
                self._log_change(conn, revision, "MODIFIED", key, text)
            return body

        # An object being deleted: its deletionTimestamp, its finalizers going, its last status.
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return self._freeing(write)
        return write()

    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        key = (kind, namespace, name)

        def write() -> dict[str, Any]:
            with self._writing() as conn:
                body = self._stored(conn, key)
                revision = self._next_revision(conn)
                body["metadata"]["resourceVersion"] = str(revision)
                self._run(conn, "delete_object", _key_params(key))
                self._shared.pop(key, None)
                self._log_change(conn, revision, "DELETED", key, _codec.dumps(body))
                self._run(conn, "delete_events_of", {"event_uid": body["metadata"]["uid"]})
            return body

        return self._freeing(write)

    # -- watch --------------------------------------------------------------------------

    def current_revision(self) -> int:
        return self._fetch(self._sql["select_revision"], {})[0][0]

    def compact(self, keep_revisions: int | None = None) -> int:
        """Drop all but the latest ``keep_revisions`` changes now; return the highest revision dropped.

        Writes compact on their own; this is for maintenance and tests.
        """
        keep = self._keep_revisions if keep_revisions is None else keep_revisions
        with self._writing() as conn:
            self._compact(conn, self._counter(conn, META_REVISION) - keep)
            compacted = self._counter(conn, META_COMPACTED)
        with self._changed:
            self._compacted_here = max(self._compacted_here, compacted)
        return compacted

    @property
    def closed(self) -> bool:
        return self._closed

    def _counter(self, conn: Any, key: str) -> int:
        return self._run(conn, "select_counter", {"counter": key}).fetchone()[0]

    def watch(
        self,
        kinds: Iterable[str] | None = None,
        since: int | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        if isinstance(kinds, str):  # a lone kind, not an iterable of one-letter kinds
            kinds = [kinds]
        kind_list = None if kinds is None else sorted(set(kinds))
        # Taken now, not at the first next(), so changes made before iteration starts are seen.
        start = self.current_revision() if since is None else since
        return self._watch(kind_list, start, timeout, stop)

    def _watch(
        self, kinds: list[str] | None, position: int, timeout: float | None, stop: threading.Event | None
    ) -> Iterator[WatchEvent]:
        deadline = None if timeout is None else time.monotonic() + timeout
        # Only a wake-up by this process's own write is answered from the feed; the first look and
        # every timed-out wait query the change log, which also holds other processes' writes.
        woken = False
        while not self._closed and not (stop is not None and stop.is_set()):
            fed = self._from_feed(position, kinds) if woken else None
            rows, head = fed if fed is not None else self._changes_after(position, kinds)
            for revision, type, body in rows:
                if stop is not None and stop.is_set():
                    return
                yield WatchEvent(type, _codec.loads(body), revision)
                position = revision
            if rows:
                if deadline is not None:
                    deadline = time.monotonic() + timeout
                if len(rows) == _WATCH_BATCH:
                    continue
            # Nothing else of these kinds up to head: skip the other kinds' changes for good.
            position = max(position, head)
            wait = self._poll_interval
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                wait = min(wait, remaining)
            with self._changed:
                if self._notified_revision <= position and not self._closed:
                    self._changed.wait(wait)
                woken = self._notified_revision > position

    def _changes_after(self, position: int, kinds: list[str] | None) -> tuple[list[Any], int]:
        values: dict[str, Any] = {"position": position}
        values.update((f"kind_{i}", kind) for i, kind in enumerate(kinds or ()))
        rows_after = self._changes_statement(None if kinds is None else len(kinds))
        conn = self._engine.raw_connection()
        try:
            # One snapshot for the counters and the rows, so they agree with each other.
            self._begin_read(conn)
            revision = self._counter(conn, META_REVISION)
            compacted = self._counter(conn, META_COMPACTED)
            if position < compacted:
                raise Expired(position, compacted)
            rows = rows_after.run(conn, values).fetchall()
        finally:
            conn.rollback()
            conn.close()
        return rows, revision

    def _changes_statement(self, kinds: int | None) -> _Prepared:
        """The change log after a position, of any kind (None) or of one of ``kinds`` kinds."""
        prepared = self._changes_sql.get(kinds)
        if prepared is None:
            query = (
                select(changes.c.revision, changes.c.type, changes.c.body)
                .where(changes.c.revision > bindparam("position"))
                .order_by(changes.c.revision)
                .limit(_WATCH_BATCH)
            )
            if kinds == 0:
                query = query.where(false())  # a watch of no kinds: only the head moves
            elif kinds is not None:
                query = query.where(changes.c.kind.in_([bindparam(f"kind_{i}") for i in range(kinds)]))
            prepared = self._changes_sql[kinds] = _Prepared(query, self._engine.dialect)
        return prepared

    # -- events -------------------------------------------------------------------------

    def record_event(self, obj: dict[str, Any], type: EventType, reason: str, message: str) -> None:
        if type not in ("Normal", "Warning"):
            raise ValueError(f'event type must be "Normal" or "Warning", not {type!r}')
        kind, namespace, name = object_key(obj)
        uid = obj["metadata"].get("uid", "")
        now, seen = now_rfc3339(), time.time()
        with self._writing() as conn:
            folded = self._run(conn, "fold_event", {
                "event_kind": kind, "event_namespace": namespace, "event_name": name, "event_uid": uid,
                "event_type": type, "event_reason": reason, "event_message": message, "event_now": now,
                "event_seen": seen}).rowcount
            if not folded:
                self._run(conn, "insert_event", {
                    "name": f"{name}.{uuid.uuid4().hex[:16]}", "uid": str(uuid.uuid4()), "namespace": namespace,
                    "involved_api_version": obj.get("apiVersion", ""), "involved_kind": kind,
                    "involved_name": name, "involved_uid": uid, "type": type, "reason": reason,
                    "message": message, "count": 1, "first_timestamp": now, "last_timestamp": now,
                    "last_seen": seen})

    def list_events(
        self, kind: str | None = None, namespace: str | None = None, name: str | None = None
    ) -> list[dict[str, Any]]:
        query = select(events).order_by(events.c.last_seen, events.c.id)
        if kind is not None:
            query = query.where(events.c.involved_kind == kind)
        if namespace is not None:
            query = query.where(events.c.namespace == namespace)
        if name is not None:
            query = query.where(events.c.involved_name == name)
        with self._reading_one() as conn:
            rows = conn.execute(query).mappings().all()
        return [_event_object(row) for row in rows]

    def delete_events_for(self, kind: str, namespace: str, name: str) -> int:
        def write() -> int:
            with self._writing() as conn:
                return self._run(conn, "delete_events_for",
                                 {"event_kind": kind, "event_namespace": namespace, "event_name": name}).rowcount

        return self._freeing(write)

    def add_observations(self, namespace: str, trial: str, trial_uid: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        now = time.time()
        insert_observation = self._sql["insert_observation"]
        with self._writing() as conn:
            conn.cursor().executemany(insert_observation.sql, [insert_observation.parameters(
                {"namespace": namespace, "trial": trial, "trial_uid": trial_uid, "metric": r["metric"],
                 "step": int(r.get("step") or 0), "value": float(r["value"]),
                 "timestamp": float(r.get("timestamp") or now)}) for r in rows])

    def list_observations(
        self, namespace: str, trials: Sequence[str] | None = None, metric: str | None = None
    ) -> list[dict[str, Any]]:
        values: dict[str, Any] = {"namespace": namespace, "metric": metric}
        slots = None
        if trials is not None:
            trials = list(trials)
            # Statements for 1 to 8 names, then for powers of two, the last name repeated to fill them:
            # an experiment's list of every trial grows one by one, and a statement per length would too.
            slots = len(trials) if len(trials) <= 8 else 1 << (len(trials) - 1).bit_length()
            values.update((f"trial_{i}", trials[min(i, len(trials) - 1)]) for i in range(slots))
        rows = self._fetch(self._observations_statement(slots, metric is not None), values)
        return [{"trial": trial, "trialUid": uid, "metric": name, "step": step, "value": value, "timestamp": at}
                for trial, uid, name, step, value, at in rows]

    def _observations_statement(self, trials: int | None, by_metric: bool) -> _Prepared:
        """Observations of a namespace, of all its trials (None) or of ``trials`` named ones."""
        variant = (trials, by_metric)
        prepared = self._observations_sql.get(variant)
        if prepared is None:
            columns = (observations.c.trial, observations.c.trial_uid, observations.c.metric, observations.c.step,
                       observations.c.value, observations.c.timestamp)
            query = select(*columns).where(observations.c.namespace == bindparam("namespace"))
            if trials == 0:
                query = query.where(false())
            elif trials is not None:
                query = query.where(observations.c.trial.in_([bindparam(f"trial_{i}") for i in range(trials)]))
            if by_metric:
                query = query.where(observations.c.metric == bindparam("metric"))
            prepared = self._observations_sql[variant] = _Prepared(query.order_by(observations.c.id),
                                                                   self._engine.dialect)
        return prepared

    def delete_observations(self, namespace: str, trial: str) -> int:
        def write() -> int:
            with self._writing() as conn:
                return self._run(conn, "delete_observations",
                                 {"observation_namespace": namespace, "observation_trial": trial}).rowcount

        return self._freeing(write)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._engine.dispose()


def _event_object(row: Any) -> dict[str, Any]:
    """A stored event row as a v1 Event object."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": row["name"],
            "namespace": row["namespace"],
            "uid": row["uid"],
            "creationTimestamp": row["first_timestamp"],
        },
        "involvedObject": {
            "apiVersion": row["involved_api_version"],
            "kind": row["involved_kind"],
            "namespace": row["namespace"],
            "name": row["involved_name"],
            "uid": row["involved_uid"],
        },
        "type": row["type"],
        "reason": row["reason"],
        "message": row["message"],
        "count": row["count"],
        "firstTimestamp": row["first_timestamp"],
        "lastTimestamp": row["last_timestamp"],
        "source": {"component": "trimaran"},
    }
