"""Model downloads for InferenceServices, off the reconcile thread.

The reconciler asks for a revision's model on each pass (`ModelDownloads.ensure`); the first ask
starts :func:`trimaran.serving.storage.fetch` on a worker thread and later asks read its progress,
its cached directory, or its failure. A failure is retried after a back-off that doubles up to a
minute (a Secret may be fixed meanwhile: credentials are read again for each attempt). Downloads of
one URI from several revisions share the cache's single download.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trimaran.serving.storage import Credentials, InvalidStorageUri, StorageError, fetch

__all__ = ["Download", "ModelDownloads", "human_bytes"]

BACKOFF_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0


@dataclass
class Download:
    """One revision's download as its worker last reported it."""

    uri: str
    state: Literal["Downloading", "Done", "Failed"] = "Downloading"
    done_bytes: int = 0
    total_bytes: int | None = None
    path: Path | None = None
    error: str = ""
    retriable: bool = True
    attempts: int = 1
    started: float = 0.0
    finished: float = 0.0
    retry_at: float = 0.0
    #: What the reconciler already told in events (so each thing is told once).
    reported_attempt: int = 0
    reported_failure: int = 0
    reported_progress_at: float = 0.0

    def progress(self) -> str:
        """``"1.2 MB of 3.4 MB"`` (or without the total when the source does not say)."""
        done = human_bytes(self.done_bytes)
        return f"{done} of {human_bytes(self.total_bytes)}" if self.total_bytes is not None else done


class ModelDownloads:
    """Downloads into ``cache_dir``, keyed by whatever the caller names a model by (the reconciler
    uses namespace, InferenceService and revision)."""

    def __init__(self, cache_dir: Path, workers: int = 2) -> None:
        self.cache_dir = cache_dir
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model-download")
        self._lock = threading.Lock()
        self._downloads: dict[tuple[str, ...], Download] = {}

    def ensure(self, key: tuple[str, ...], uri: str, credentials: Callable[[], Credentials],
               now: float | None = None) -> Download:
        """The download of ``uri`` for ``key``: started when there is none (or another URI's), and
        started again when a failed one's back-off has passed. ``credentials`` is called on this
        thread, once per attempt."""
        now = time.time() if now is None else now
        with self._lock:
            current = self._downloads.get(key)
            if current is not None and current.uri == uri and (
                    current.state != "Failed" or now < current.retry_at or not current.retriable):
                return current
            attempts = current.attempts + 1 if current is not None and current.uri == uri else 1
            download = self._downloads[key] = Download(uri=uri, attempts=attempts, started=now)
        try:
            creds = credentials()
        except StorageError as exc:
            self._failed(download, exc.args[0], exc.retriable)
            return download
        self._pool.submit(self._run, download, creds)
        return download

    def forget(self, match: Callable[[tuple[str, ...]], bool]) -> None:
        """Drop the records whose key ``match``es (a running download still finishes into the cache)."""
        with self._lock:
            for key in [k for k in self._downloads if match(k)]:
                del self._downloads[key]

    def _run(self, download: Download, creds: Credentials) -> None:
        def progress(done: int, total: int | None) -> None:
            download.done_bytes, download.total_bytes = done, total

        try:
            path = fetch(download.uri, self.cache_dir, creds, progress)
        except (StorageError, InvalidStorageUri) as exc:
            self._failed(download, str(exc), getattr(exc, "retriable", False))
        except OSError as exc:  # the schemes turn their own I/O errors into StorageError: this is the cache's
            self._failed(download, f"{download.uri}: cannot write the download cache {self.cache_dir}: {exc}", True)
        except Exception as exc:  # a bug or an unforeseen client error must not kill the worker silently
            self._failed(download, f"{download.uri}: {type(exc).__name__}: {exc}", True)
        else:
            download.path, download.finished = path, time.time()
            download.state = "Done"

    def _failed(self, download: Download, message: str, retriable: bool) -> None:
        download.error, download.retriable, download.finished = message, retriable, time.time()
        delay = min(BACKOFF_SECONDS * 2 ** (download.attempts - 1), MAX_BACKOFF_SECONDS)
        download.retry_at = download.finished + delay
        download.state = "Failed"


def human_bytes(count: int) -> str:
    """Bytes for a person: ``512 B``, ``3.4 MB``."""
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
