"""``gs://bucket/prefix``: Google Cloud Storage with google-cloud-storage.

Google's own client rather than hand-made JSON API calls: it signs with a service-account key,
retries, checks hashes and honours ``STORAGE_EMULATOR_HOST`` (an emulator or a test server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trimaran.serving.storage._base import (
    BucketStorage,
    Credentials,
    Progress,
    Snapshot,
    StorageError,
    check_size,
)

__all__ = ["GCSStorage"]


class GCSStorage(BucketStorage):
    """Every object under ``prefix`` (a whole name, or names under ``prefix/``), written relative to
    the prefix. The version is a digest of the names and their generations. Anonymous (public
    buckets) unless ``gcs_service_account`` holds a key."""

    schemes = ("gs",)

    def snapshot(self, credentials: Credentials) -> Snapshot:
        client = self._client(credentials)
        objects: list[tuple[str, int, int]] = []
        try:
            blobs = client.list_blobs(self.bucket, prefix=self.prefix or None)
            objects += [(blob.name, int(blob.size or 0), int(blob.generation or 0))
                        for blob in blobs if self.wanted(blob.name)]
        except Exception as exc:
            raise self._error(exc, credentials) from None
        return self.listed(objects)

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        check_size(snapshot, self.uri)
        bucket = self._client(credentials).bucket(self.bucket)
        done = 0
        for name, size, generation in snapshot.detail:
            target = self.target(dest, name)
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
