"""The store's tables, written with portable SQLAlchemy Core types.

``SCHEMA_VERSION`` is recorded in the ``meta`` table; a database written by a newer
Trimaran is refused rather than misread. Migrations, when the schema changes, belong here.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, Integer, MetaData, String, Table, Text

SCHEMA_VERSION = 1

# SQLite makes an INTEGER PRIMARY KEY the rowid (no separate index); elsewhere 64 bits.
_Revision = BigInteger().with_variant(Integer, "sqlite")

metadata = MetaData()

# The current state. The primary key doubles as the index list() uses (kind, then namespace).
objects = Table(
    "objects",
    metadata,
    Column("kind", String(63), primary_key=True),
    Column("namespace", String(253), primary_key=True),
    Column("name", String(253), primary_key=True),
    Column("uid", String(36), nullable=False),
    Column("resource_version", _Revision, nullable=False),
    Column("body", Text, nullable=False),
)

# One row per change, committed with the object row, so watch can resume from any kept revision.
changes = Table(
    "changes",
    metadata,
    Column("revision", _Revision, primary_key=True, autoincrement=False),
    Column("kind", String(63), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("name", String(253), nullable=False),
    Column("type", String(8), nullable=False),
    Column("body", Text, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False),
    Column("uid", String(36), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("involved_api_version", String(253), nullable=False),
    Column("involved_kind", String(63), nullable=False),
    Column("involved_name", String(253), nullable=False),
    Column("involved_uid", String(36), nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(128), nullable=False),
    Column("message", Text, nullable=False),
    Column("count", Integer, nullable=False),
    Column("first_timestamp", String(20), nullable=False),
    Column("last_timestamp", String(20), nullable=False),
    # Timestamps have whole seconds; this orders events recorded within one second.
    Column("last_seen", Float, nullable=False),
    Index("events_involved", "involved_kind", "namespace", "involved_name"),
)

# Metric observations of tuning trials: one row per (metric, step) report, so curves can be drawn
# and early-stopping rules applied mid-trial. Added in place (create_all adds a missing table).
observations = Table(
    "observations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(253), nullable=False),
    Column("trial", String(253), nullable=False),
    Column("trial_uid", String(36), nullable=False),
    Column("metric", String(253), nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("value", Float, nullable=False),
    Column("timestamp", Float, nullable=False),
    Index("observations_trial", "namespace", "trial"),
)

# Counters: the schema version, the latest revision and the highest compacted revision.
meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

META_SCHEMA_VERSION = "schema_version"
META_REVISION = "revision"
META_COMPACTED = "compacted"
