"""The download cache: one directory per (URI, version), written aside and renamed into place."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["DownloadCache"]


class DownloadCache:
    """Downloads under ``root``, keyed by URI and version, so a second InferenceService, a new
    replica or a restart reuses what is there.

    A download goes into a temporary directory beside its final place and is renamed when complete:
    a failure or a crash leaves nothing that looks finished. One download of a key runs at a time,
    across threads and processes (a lock file per key); the others wait and find it done. Example::

        cache = DownloadCache(home / "storage")
        path = cache.get("s3://b/m", "etag-1", lambda tmp: (tmp / "model.joblib").write_bytes(data))
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._guard = threading.Lock()
        self._locks: dict[Path, threading.Lock] = {}

    def path_for(self, uri: str, version: str) -> Path:
        """Where the download of ``uri`` at ``version`` lives (whether or not it is there yet)."""
        return self.root / _digest(uri) / _digest(version)

    def cached(self, uri: str, version: str) -> Path | None:
        """The finished download, if there is one."""
        path = self.path_for(uri, version)
        return path if path.is_dir() else None

    def get(self, uri: str, version: str, download: Callable[[Path], None]) -> Path:
        """The directory holding ``uri`` at ``version``, calling ``download(tmp_dir)`` only when no
        finished copy exists. Whatever ``download`` raises propagates, and its partial output is removed."""
        final = self.path_for(uri, version)
        if final.is_dir():
            return final
        with self._exclusive(final):
            if final.is_dir():  # another thread or process finished it while this one waited
                return final
            for stale in final.parent.glob(f".tmp-{final.name}-*"):
                shutil.rmtree(stale, ignore_errors=True)  # left by a crash: the lock says nobody is writing it
            (final.parent / "uri").write_text(uri + "\n")
            staging = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
            staging.mkdir()
            try:
                download(staging)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return final

    @contextmanager
    def _exclusive(self, final: Path) -> Iterator[None]:
        final.parent.mkdir(parents=True, exist_ok=True)
        with self._guard:
            lock = self._locks.setdefault(final, threading.Lock())
        with lock, open(final.parent / f".{final.name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]
