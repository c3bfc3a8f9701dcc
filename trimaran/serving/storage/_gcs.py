"""``gs://bucket/prefix``: Google Cloud Storage with google-cloud-storage.

Google's own client rather than hand-made JSON API calls: it signs with a service-account key,
retries, checks hashes and honours ``STORAGE_EMULATOR_HOST`` (an emulator or a test server).
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path
from typing import Any

from trimaran.serving.storage._base import (
    Credentials,
    InvalidStorageUri,
    Progress,
    Snapshot,
    Storage,
    StorageError,
    max_download_bytes,
    safe_join,
)

__all__ = ["GCSStorage"]


class GCSStorage(Storage):
    """Every object under ``prefix`` (a whole name, or names under ``prefix/``), written relative to
    the prefix. The version is a digest of the names and their generations. Anonymous (public
    buckets) unless ``gcs_service_account`` holds a key."""

    schemes = ("gs",)

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.bucket, _, prefix = uri.split("://", 1)[1].partition("/")
        if not self.bucket:
            raise InvalidStorageUri("gs:// needs a bucket: gs://<bucket>/<prefix>")
        self.prefix = prefix.strip("/")

    def snapshot(self, credentials: Credentials) -> Snapshot:
        client = self._client(credentials)
        objects: list[tuple[str, int, int]] = []
        try:
            for blob in client.list_blobs(self.bucket, prefix=self.prefix or None):
                name = blob.name
                if name.endswith("/"):
                    continue
                if not self.prefix or name == self.prefix or name.startswith(self.prefix + "/"):
                    objects.append((name, int(blob.size or 0), int(blob.generation or 0)))
        except Exception as exc:
            raise self._error(exc, credentials) from None
        if not objects:
            raise StorageError(f"{self.uri}: no object in bucket {self.bucket!r} under {self.prefix or '/'!r}")
        digest = hashlib.sha256(repr(sorted(objects)).encode()).hexdigest()
        return Snapshot(version=f"gs:{digest}", total_bytes=sum(size for _, size, _ in objects), detail=objects)

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        if (snapshot.total_bytes or 0) > max_download_bytes():
            raise StorageError(f"{self.uri}: {snapshot.total_bytes} bytes is more than TRIMARAN_STORAGE_MAX_BYTES",
                               retriable=False)
        bucket = self._client(credentials).bucket(self.bucket)
        done = 0
        for name, size, generation in snapshot.detail:
            relative = posixpath.basename(name) if name == self.prefix else name[len(self.prefix):].lstrip("/")
            target = safe_join(dest, relative, self.uri)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                # The generation listed, not whatever is newest now: the cache key must name the bytes.
                bucket.blob(name, generation=generation).download_to_filename(str(target))
            except Exception as exc:
                raise self._error(exc, credentials, name) from None
            done += size
            progress(done, snapshot.total_bytes)

    def _client(self, credentials: Credentials) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        if credentials.gcs_service_account:
            from google.oauth2 import service_account

            try:
                creds = service_account.Credentials.from_service_account_info(dict(credentials.gcs_service_account))
            except (ValueError, KeyError) as exc:
                raise StorageError(f"{self.uri}: the GCP service-account key from {credentials.origin} is "
                                   f"unusable: {exc}", retriable=False) from None
            return storage.Client(project=credentials.gcs_service_account.get("project_id"), credentials=creds)
        return storage.Client(project="anonymous", credentials=AnonymousCredentials())

    def _error(self, exc: Exception, credentials: Credentials, name: str | None = None) -> StorageError:
        from google.api_core import exceptions as gexc

        what = self.uri + (f" ({name})" if name else "")
        if isinstance(exc, gexc.NotFound):
            return StorageError(f"{what}: no such bucket or object: {exc.message}")
        if isinstance(exc, (gexc.Forbidden, gexc.Unauthorized)):
            who = "anonymous access" if not credentials.gcs_service_account else f"the key from {credentials.origin}"
            return StorageError(f"{what}: access denied for {who} ({exc.code}); attach a Secret holding a "
                                "service-account key (gcloud-application-credentials.json) to the ServiceAccount, "
                                "or set GOOGLE_APPLICATION_CREDENTIALS on the control plane")
        if isinstance(exc, gexc.GoogleAPICallError):
            return StorageError(f"{what}: {exc}")
        return StorageError(f"{what}: cannot reach Google Cloud Storage: {type(exc).__name__}: {exc}")
