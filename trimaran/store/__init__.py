"""Where Trimaran keeps objects, their change log (for watch) and events.

The rest of Trimaran talks to :class:`Store` and gets one from :func:`open_store`;
which database is behind it is decided by the URL alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url

from trimaran.store.base import Page, Store, WatchEvent
from trimaran.store.errors import AlreadyExists, Conflict, DiskFull, Expired, Invalid, NotFound, StoreError
from trimaran.store.sqlite import SQLiteStore

__all__ = [
    "AlreadyExists",
    "Conflict",
    "DiskFull",
    "Expired",
    "Invalid",
    "NotFound",
    "Page",
    "SQLiteStore",
    "Store",
    "StoreError",
    "WatchEvent",
    "default_store_path",
    "open_store",
]


def default_store_path() -> Path:
    """``$TRIMARAN_HOME/trimaran.db``, with ``TRIMARAN_HOME`` defaulting to ``~/.trimaran``."""
    home = os.environ.get("TRIMARAN_HOME") or "~/.trimaran"
    return Path(home).expanduser() / "trimaran.db"


def open_store(url_or_path: str | Path) -> Store:
    """Open the store a URL or file path names.

    Args:
        url_or_path: A file path (``/var/lib/trimaran.db``), or a SQLAlchemy-style URL:
            ``sqlite:///relative.db`` or ``sqlite:////absolute/path.db``.

    Raises:
        NotImplementedError: A ``postgresql://`` URL: not supported yet.
        ValueError: Any other scheme, or an in-memory SQLite URL (other processes and
            watchers need a file to share).
    """
    if isinstance(url_or_path, Path) or "://" not in url_or_path:
        return SQLiteStore(url_or_path)
    url = make_url(url_or_path)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError(f"{url_or_path!r}: an in-memory SQLite store is not supported; name a file")
        return SQLiteStore(url.database)
    if backend == "postgresql":
        raise NotImplementedError(
            f"{url.render_as_string()!r}: the PostgreSQL store is not implemented yet; "
            "use sqlite:///path/to/trimaran.db or a file path"
        )
    raise ValueError(f"{url_or_path!r}: unsupported store URL; use sqlite:///path/to/trimaran.db or a file path")
