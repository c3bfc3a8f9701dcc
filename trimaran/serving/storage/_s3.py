"""``s3://bucket/prefix``: AWS S3 or any S3-compatible server (MinIO, moto, Ceph), with boto3."""

from __future__ import annotations

import threading
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

__all__ = ["S3Storage"]

_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403")


_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _new_client(access_key: str | None, secret_key: str | None, token: str | None, region: str,
                endpoint: str | None, verify: bool | str, anonymous: bool) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(signature_version=UNSIGNED) if anonymous else Config()
    config = config.merge(Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=60))
    # A session of our own: boto3's default one reads ~/.aws and the process environment, and the
    # credentials must be exactly those given (an InferenceService's Secret, not the host's).
    session = boto3.session.Session(aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                                    aws_session_token=token, region_name=region)
    return session.client("s3", endpoint_url=endpoint, verify=verify, config=config)


class S3Storage(BucketStorage):
    """Every object under ``prefix`` (a whole key, or a "directory": keys under ``prefix/``),
    written relative to the prefix; a prefix that is one object's key gives that file alone.

    The version is a digest of the listed keys, sizes and ETags (a rewritten object has a new ETag).
    Credentials: ``aws_access_key_id``/``aws_secret_access_key`` (and a session token), or
    ``s3_anonymous`` for public buckets; the endpoint, region and TLS checks from the same object.
    """

    schemes = ("s3",)

    def snapshot(self, credentials: Credentials) -> Snapshot:
        client = self._client(credentials)
        objects: list[tuple[str, int, str]] = []
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                objects += [(item["Key"], int(item["Size"]), item.get("ETag", ""))
                            for item in page.get("Contents") or [] if self.wanted(item["Key"])]
        except Exception as exc:
            raise self._error(exc, credentials) from None
        return self.listed(objects)

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        check_size(snapshot, self.uri)
        client = self._client(credentials)
        done = 0
        lock = threading.Lock()

        def advanced(count: int) -> None:
            nonlocal done
            with lock:
                done += count
                progress(done, snapshot.total_bytes)

        for key, _, _ in snapshot.detail:
            try:
                client.download_file(self.bucket, key, str(self.target(dest, key)), Callback=advanced)
            except Exception as exc:
                raise self._error(exc, credentials, key) from None
        progress(done, snapshot.total_bytes)

    def _client(self, credentials: Credentials) -> Any:
        if not credentials.s3_anonymous and not (credentials.aws_access_key_id and credentials.aws_secret_access_key):
            missing = [name for name, value in (("AWS_ACCESS_KEY_ID", credentials.aws_access_key_id),
                                                ("AWS_SECRET_ACCESS_KEY", credentials.aws_secret_access_key))
                       if not value]
            raise StorageError(
                f"{self.uri}: no S3 credentials: {' and '.join(missing)} missing from {credentials.origin}; "
                "put them in a Secret attached to the InferenceService's ServiceAccount "
                "(with the serving.kserve.io/s3-endpoint annotation for a non-AWS endpoint), or set them in the "
                "control plane's environment; for a public bucket annotate the Secret "
                "serving.kserve.io/s3-useanoncredential: \"true\"")
        anonymous = credentials.s3_anonymous
        key = (None if anonymous else credentials.aws_access_key_id,
               None if anonymous else credentials.aws_secret_access_key,
               None if anonymous else credentials.aws_session_token,
               credentials.s3_region or "us-east-1", credentials.s3_endpoint_url, credentials.s3_verify, anonymous)
        # A client costs about half a second to build (botocore loads its service model); clients are
        # thread-safe, so one per set of credentials serves every download that uses them.
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                client = _CLIENTS[key] = _new_client(*key)
        return client

    def _error(self, exc: Exception, credentials: Credentials, key: str | None = None) -> StorageError:
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

        what = f"{self.uri}" + (f" ({key})" if key else "")
        where = credentials.s3_endpoint_url or "AWS S3"
        if isinstance(exc, StorageError):
            return exc
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchBucket":
                return StorageError(f"{what}: no such bucket {self.bucket!r} at {where}")
            if code in ("NoSuchKey", "404"):
                return StorageError(f"{what}: no such object at {where}")
            if code in _DENIED:
                return StorageError(f"{what}: access denied by {where} ({code}): check the credentials from "
                                    f"{credentials.origin}")
            return StorageError(f"{what}: {where} answered {code}: {exc}")
        if isinstance(exc, EndpointConnectionError):
            return StorageError(f"{what}: cannot reach {where}: {exc}")
        if isinstance(exc, (BotoCoreError, OSError)):
            return StorageError(f"{what}: {where}: {exc}")
        return StorageError(f"{what}: {type(exc).__name__}: {exc}")
