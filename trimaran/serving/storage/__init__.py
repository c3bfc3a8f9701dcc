"""Models and artifacts from where users keep them: ``s3://``, ``gs://``, ``http(s)://``, ``hf://``, and
MLflow's ``models:/`` and ``runs:/`` through a tracking server.

One module per scheme behind :class:`Storage`. Everything here runs inside pods, never in the
control plane: the ``storage-initializer`` init container (:func:`initializer_container`, running
:mod:`trimaran.serving.storage.initializer`) downloads an InferenceService's model and a pod's
object-storage CSI volumes into the pod's own volume; a TrainJob's initializer and Seldon's executor
call :func:`fetch`, which keeps a :class:`DownloadCache` keyed by URI and version in a directory of
their own pod or job (a second fetch of an unchanged source only asks the source for its version)::

    from trimaran.serving.storage import Credentials, fetch

    path = fetch("s3://models/iris", workspace / ".cache", Credentials.from_env(os.environ))
 Importing this package imports no client
library: boto3, google-cloud-storage and huggingface_hub load when their scheme is used.
"""

from __future__ import annotations

import os
from pathlib import Path

from trimaran.serving.storage._base import (
    Credentials,
    InvalidStorageUri,
    Progress,
    Snapshot,
    Storage,
    StorageError,
    account_credentials,
    credential_env,
    human_bytes,
    secret_env,
)
from trimaran.serving.storage._cache import DownloadCache
from trimaran.serving.storage._gcs import GCSStorage
from trimaran.serving.storage._hf import HFStorage
from trimaran.serving.storage._http import HTTPStorage
from trimaran.serving.storage._mlflow import MlflowStorage
from trimaran.serving.storage._pod import INITIALIZER_NAME, initializer_container
from trimaran.serving.storage._s3 import S3Storage
from trimaran.serving.storage._storage_config import STORAGE_CONFIG_SECRET, resolve_storage_spec, storage_spec_env

__all__ = [
    "SCHEMES",
    "STORAGE_CONFIG_SECRET",
    "Credentials",
    "DownloadCache",
    "GCSStorage",
    "HFStorage",
    "HTTPStorage",
    "INITIALIZER_NAME",
    "InvalidStorageUri",
    "MlflowStorage",
    "Progress",
    "S3Storage",
    "Snapshot",
    "Storage",
    "StorageError",
    "account_credentials",
    "credential_env",
    "fetch",
    "human_bytes",
    "initializer_container",
    "resolve_storage_spec",
    "secret_env",
    "storage_for",
    "storage_spec_env",
    "uri_scheme",
]

_REGISTRY: dict[str, type[Storage]] = {
    scheme: cls for cls in (S3Storage, GCSStorage, HTTPStorage, HFStorage, MlflowStorage) for scheme in cls.schemes}
#: The schemes that download.
SCHEMES = tuple(_REGISTRY)


def uri_scheme(uri: str) -> str | None:
    """The scheme of ``scheme://...``, or of MLflow's ``models:/...`` and ``runs:/...``; None for a path."""
    scheme, sep, _ = uri.partition("://")
    if not sep:
        scheme, sep, _ = uri.partition(":/")
        if scheme.lower() not in MlflowStorage.schemes:
            return None
    return scheme.lower() if sep else None


def storage_for(uri: str) -> Storage:
    """The scheme's handler for ``uri``, checked without any request. Raises InvalidStorageUri,
    with KServe's wording for a scheme nobody handles."""
    scheme = uri_scheme(uri)
    cls = _REGISTRY.get(scheme) if scheme else None
    if cls is None:
        raise InvalidStorageUri(f"Cannot recognize storage type for {uri}")
    return cls(uri)


def _ignore(done: int, total: int | None) -> None:
    pass


def fetch(uri: str, cache_dir: Path, credentials: Credentials | None = None, progress: Progress | None = None) -> Path:
    """The local directory holding what ``uri`` names now, downloading it only when the cache has no
    copy of its current version.

    Args:
        uri: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``http(s)://host/file`` (an archive is
            unpacked), ``hf://owner/repo[:revision]``, ``models:/name/version`` or ``runs:/run_id/path``
            (``MLFLOW_TRACKING_URI`` in the credentials' environment).
        cache_dir: the cache's root (the control plane uses ``$TRIMARAN_HOME/storage``).
        credentials: what to authenticate with; None reads the process environment (`Credentials.from_env`).
        progress: called with ``(done_bytes, total_bytes)`` as bytes arrive (total None when unknown).

    Raises InvalidStorageUri for a URI no scheme takes, StorageError when the source is unreachable,
    refuses, has nothing there or sends something unsafe; nothing is left in the cache then.
    """
    storage = storage_for(uri)
    creds = credentials if credentials is not None else Credentials.from_env(os.environ)
    snap = storage.snapshot(creds)
    report = progress or _ignore

    def download(dest: Path) -> None:
        report(0, snap.total_bytes)
        storage.download(snap, dest, creds, report)

    return DownloadCache(cache_dir).get(uri, snap.version, download)
