"""What every storage scheme shares: its abstract base, the credentials it may use, its errors."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import posixpath
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

__all__ = ["BucketStorage", "Credentials", "InvalidStorageUri", "Progress", "Snapshot", "Storage", "StorageError",
           "check_size", "credential_env", "human_bytes", "max_download_bytes", "safe_join", "secret_env"]

#: ``progress(done_bytes, total_bytes)``; ``total_bytes`` is None when the source does not say.
Progress = Callable[[int, "int | None"], None]

# KServe's annotations on a Secret attached to the ServiceAccount, and the variables its webhook
# turns them into for the storage initializer (both prefixes: KServe's and the older Kubeflow one).
_S3_ANNOTATIONS = {"s3-endpoint": "S3_ENDPOINT", "s3-usehttps": "S3_USE_HTTPS", "s3-region": "AWS_REGION",
                   "s3-verifyssl": "S3_VERIFY_SSL", "s3-useanoncredential": "awsAnonymousCredential",
                   "s3-cabundle": "AWS_CA_BUNDLE"}
_ANNOTATION_PREFIXES = ("serving.kserve.io/", "serving.kubeflow.org/")
# Secret keys passed through as variables of the same name.
_SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN")
#: The key of a Secret holding a GCP service-account key, as KServe's GCS credential builder names it.
GCS_SECRET_KEY = "gcloud-application-credentials.json"
_GCS_INFO_VARIABLE = "TRIMARAN_GCS_SERVICE_ACCOUNT_JSON"


class StorageError(Exception):
    """A download that did not happen; the message says what to fix (it goes to the user's status).

    ``retriable`` is False for what a retry cannot fix by itself (a malformed archive, a path escape).
    """

    def __init__(self, message: str, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class InvalidStorageUri(ValueError):
    """A URI that no download can satisfy (found without any request)."""


@dataclass(frozen=True)
class Credentials:
    """What the schemes may authenticate with, and where S3 and the Hub are.

    Build it with :meth:`from_env` from variables named as KServe's storage initializer reads them;
    :func:`secret_env` turns a Secret into those variables the way KServe's webhook does. Example::

        creds = Credentials.from_env({**os.environ, **secret_env(secret)})
        fetch("s3://models/iris", cache_dir, creds)

    Every field is optional: S3 without keys fails with a message naming what is missing (unless
    ``s3_anonymous``), GCS without a service account reads public buckets, the Hub without a token
    reads public repositories.
    """

    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    #: ``http(s)://host:port``; None: AWS itself.
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    #: True, False, or the path of a CA bundle.
    s3_verify: bool | str = True
    s3_anonymous: bool = False
    #: A GCP service-account key (the parsed JSON); None: anonymous (public buckets).
    gcs_service_account: Mapping[str, Any] | None = field(default=None, repr=False)
    hf_token: str | None = field(default=None, repr=False)
    hf_endpoint: str | None = None
    #: The MLflow tracking server that resolves ``models:/`` and ``runs:/``, and how to sign in to it.
    mlflow_tracking_uri: str | None = None
    mlflow_tracking_token: str | None = field(default=None, repr=False)
    mlflow_tracking_username: str | None = None
    mlflow_tracking_password: str | None = field(default=None, repr=False)
    #: Host names resolved as a pod would (a Service's names, seen from the control plane) -> addresses.
    hosts: Mapping[str, str] = field(default_factory=dict)
    #: Where these came from, for messages ("the control plane's environment", "Secret ns/name").
    origin: str = "the environment"

    @classmethod
    def from_env(cls, env: Mapping[str, str], origin: str = "the environment") -> Credentials:
        """Read KServe's variables: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
        ``AWS_ENDPOINT_URL`` (else ``S3_ENDPOINT`` with ``S3_USE_HTTPS``), ``AWS_REGION`` /
        ``AWS_DEFAULT_REGION``, ``S3_VERIFY_SSL``, ``AWS_CA_BUNDLE``, ``awsAnonymousCredential``,
        ``GOOGLE_APPLICATION_CREDENTIALS`` (a key file), ``HF_TOKEN``, ``HF_ENDPOINT``, and MLflow's
        ``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``.

        Raises StorageError when ``GOOGLE_APPLICATION_CREDENTIALS`` names a file that is not a readable key.
        """
        endpoint = env.get("AWS_ENDPOINT_URL") or None
        if not endpoint and env.get("S3_ENDPOINT"):
            raw = env["S3_ENDPOINT"]
            https = env.get("S3_USE_HTTPS", "1").lower() not in ("0", "false")
            endpoint = raw if "://" in raw else f"{'https' if https else 'http'}://{raw}"
        verify: bool | str = env.get("S3_VERIFY_SSL", "1").lower() not in ("0", "false")
        if verify and env.get("AWS_CA_BUNDLE"):
            verify = env["AWS_CA_BUNDLE"]
        gcs: Mapping[str, Any] | None = None
        if env.get(_GCS_INFO_VARIABLE):
            gcs = _service_account(env[_GCS_INFO_VARIABLE], origin)
        elif env.get("GOOGLE_APPLICATION_CREDENTIALS"):
            path = env["GOOGLE_APPLICATION_CREDENTIALS"]
            try:
                gcs = _service_account(Path(path).read_text(), path)
            except OSError as exc:
                raise StorageError(f"GOOGLE_APPLICATION_CREDENTIALS={path}: {exc.strerror}") from None
        return cls(
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
            s3_endpoint_url=endpoint,
            s3_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            s3_verify=verify,
            s3_anonymous=env.get("awsAnonymousCredential", "").lower() == "true",
            gcs_service_account=gcs,
            hf_token=env.get("HF_TOKEN") or None,
            hf_endpoint=env.get("HF_ENDPOINT") or None,
            mlflow_tracking_uri=env.get("MLFLOW_TRACKING_URI") or None,
            mlflow_tracking_token=env.get("MLFLOW_TRACKING_TOKEN") or None,
            mlflow_tracking_username=env.get("MLFLOW_TRACKING_USERNAME") or None,
            mlflow_tracking_password=env.get("MLFLOW_TRACKING_PASSWORD") or None,
            origin=origin,
        )


def _service_account(text: str, where: str) -> Mapping[str, Any]:
    try:
        info = json.loads(text)
    except ValueError:
        raise StorageError(f"{where}: the GCP service-account key is not JSON", retriable=False) from None
    if not isinstance(info, dict) or "client_email" not in info:
        raise StorageError(f"{where}: not a GCP service-account key (no client_email)", retriable=False)
    return info


def secret_env(secret: Mapping[str, Any]) -> dict[str, str]:
    """The variables KServe's webhook gives the storage initializer for one Secret attached to the
    ServiceAccount: its AWS and HF keys, its ``serving.kserve.io/s3-*`` annotations (as
    ``S3_ENDPOINT``, ``S3_USE_HTTPS``, ``AWS_REGION``, ...) and a GCP key under
    ``gcloud-application-credentials.json``. Undecodable values are left out."""
    data: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            data[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    env = {k: data[k] for k in _SECRET_KEYS if data.get(k)}
    if data.get(GCS_SECRET_KEY):
        env[_GCS_INFO_VARIABLE] = data[GCS_SECRET_KEY]
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    for prefix in reversed(_ANNOTATION_PREFIXES):  # KServe's own prefix wins
        for name, variable in _S3_ANNOTATIONS.items():
            if prefix + name in annotations:
                env[variable] = annotations[prefix + name]
    if "S3_ENDPOINT" in env:
        https = env.get("S3_USE_HTTPS", "1").lower() not in ("0", "false")
        endpoint = env["S3_ENDPOINT"]
        env["AWS_ENDPOINT_URL"] = endpoint if "://" in endpoint else f"{'https' if https else 'http'}://{endpoint}"
    return env


def credential_env(lookup: Callable[[str, str, str], Mapping[str, Any] | None], namespace: str,
                   account: str) -> tuple[list[dict[str, Any]], str]:
    """The env KServe's webhook gives the storage initializer of a pod of ServiceAccount ``account``,
    and where it came from (for messages). Each Secret the account names contributes its AWS and HF
    keys and its GCP key as ``secretKeyRef``s (no secret value is copied into the pod's spec), and
    its ``serving.kserve.io/s3-*`` annotations as values. ``lookup(kind, namespace, name)`` reads an
    object, None when there is none."""
    env: list[dict[str, Any]] = []
    sources: list[str] = []
    found = lookup("ServiceAccount", namespace, account)
    for ref in (found or {}).get("secrets") or []:
        name = ref.get("name") or ""
        secret = lookup("Secret", namespace, name)
        if secret is None:
            continue
        data = secret.get("data") or {}
        keys = [(k, k) for k in _SECRET_KEYS if data.get(k)]
        if data.get(GCS_SECRET_KEY):
            keys.append((_GCS_INFO_VARIABLE, GCS_SECRET_KEY))
        literal = secret_env({"metadata": secret.get("metadata") or {}})  # the annotations alone
        if not keys and not literal:
            continue
        env += [{"name": variable, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}} for variable, key in keys]
        env += [{"name": k, "value": v} for k, v in literal.items()]
        sources.append(f"Secret {namespace}/{name}")
    if sources:
        return env, ", ".join(sources)
    if found is None:
        return env, f"no Secret: there is no ServiceAccount {namespace}/{account}"
    return env, f"no Secret: ServiceAccount {namespace}/{account} names no Secret with storage credentials"


def account_credentials(lookup: Callable[[str, str, str], Mapping[str, Any] | None], namespace: str, account: str,
                        overlay: Mapping[str, str] | None = None, overlay_origin: str = "",
                        container_env: Mapping[str, str] | None = None) -> Credentials:
    """What KServe's storage initializer would see in a pod of ServiceAccount ``account``: this
    process's environment, overlaid with the variables of each Secret the account names (as
    KServe's webhook sets them), then with ``overlay`` (from ``overlay_origin``), then with the
    serving container's own ``MLFLOW_*`` variables (``container_env``: the model server itself reads
    those). An MLflow tracking server named by a Service (``http://mlflow-server:5000``) is reached
    at the Service's address, as from a pod of ``namespace``.
    ``lookup(kind, namespace, name)`` reads an object, None when there is none."""
    env = dict(os.environ)
    sources: list[str] = []
    found = lookup("ServiceAccount", namespace, account)
    if found is None:
        where = f"there is no ServiceAccount {namespace}/{account}"
    else:
        where = f"ServiceAccount {namespace}/{account} names no Secret with storage credentials"
    for ref in (found or {}).get("secrets") or []:
        secret = lookup("Secret", namespace, ref.get("name") or "")
        extra = secret_env(secret) if secret is not None else {}
        if extra:
            env.update(extra)
            sources.append(f"Secret {namespace}/{ref.get('name')}")
    if overlay is not None:
        env.update(overlay)
        sources.append(overlay_origin)
    mlflow_env = {k: v for k, v in (container_env or {}).items() if k.startswith("MLFLOW_")}
    if mlflow_env:
        env.update(mlflow_env)
        sources.append("the serving container's env")
    origin = (f"the control plane's environment and {', '.join(sources)}" if sources
              else f"the control plane's environment ({where})")
    creds = Credentials.from_env(env, origin=origin)
    hosts = _service_hosts(lookup, namespace, creds.mlflow_tracking_uri)
    return dataclasses.replace(creds, hosts=hosts) if hosts else creds


def _service_hosts(lookup: Callable[[str, str, str], Mapping[str, Any] | None], namespace: str,
                   url: str | None) -> dict[str, str]:
    """``{host: clusterIP}`` when ``url``'s host is a Service's name (``<svc>``, ``<svc>.<ns>``,
    ``<svc>.<ns>.svc[.cluster.local]``) as a pod of ``namespace`` resolves it; else empty."""
    host = (urllib.parse.urlsplit(url).hostname or "") if url else ""
    parts = host.split(".")
    if len(parts) == 1:
        service, where = parts[0], namespace
    elif len(parts) == 2 or parts[2:] in (["svc"], ["svc", "cluster", "local"]):
        service, where = parts[0], parts[1]
    else:
        return {}
    found = lookup("Service", where, service) if service else None
    address = ((found or {}).get("spec") or {}).get("clusterIP")
    return {host: address} if address and address != "None" else {}


@dataclass(frozen=True)
class Snapshot:
    """One version of what a URI names, as a cheap metadata request found it.

    ``version`` keys the cache (ETags, generations, a commit sha); ``detail`` is the scheme's own
    record of what to download, so the download fetches exactly what was versioned.
    """

    version: str
    total_bytes: int | None
    detail: Any = None


class Storage(ABC):
    """One URI scheme. The constructor checks the URI without any request (raising
    :class:`InvalidStorageUri`); :meth:`snapshot` asks the source which version it holds (one cheap
    request); :meth:`download` writes that version into an empty directory.

    Adding a scheme means adding a module with a subclass and naming it in the package's registry.
    """

    schemes: ClassVar[tuple[str, ...]]

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @abstractmethod
    def snapshot(self, credentials: Credentials) -> Snapshot:
        """The version the source holds now. Raises StorageError."""

    @abstractmethod
    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        """Write ``snapshot`` into the empty directory ``dest``. Raises StorageError."""


def safe_join(root: Path, relative: str, uri: str) -> Path:
    """``root/relative`` for a name that came from the source; a name that would leave ``root``
    (absolute, ``..``) is refused rather than written."""
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise StorageError(f"{uri}: refusing {relative!r}: it would be written outside the model directory",
                           retriable=False)
    return root.joinpath(*pure.parts)


def human_bytes(count: int) -> str:
    """Bytes for a person: ``512 B``, ``3.4 MB``."""
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def max_download_bytes() -> int:
    """The most one URI may bring (``TRIMARAN_STORAGE_MAX_BYTES``, default 50 GiB): a runaway
    source or an archive bomb fills no disk."""
    return int(os.environ.get("TRIMARAN_STORAGE_MAX_BYTES", str(50 << 30)))


def check_size(snapshot: Snapshot, uri: str) -> None:
    """Refuse, before any byte is written, a version larger than :func:`max_download_bytes`."""
    if (snapshot.total_bytes or 0) > max_download_bytes():
        raise StorageError(f"{uri}: {snapshot.total_bytes} bytes is more than TRIMARAN_STORAGE_MAX_BYTES "
                           f"({max_download_bytes()})", retriable=False)


class BucketStorage(Storage):
    """An object store addressed as ``<scheme>://<bucket>/<prefix>``: the URI names every object
    under the prefix (whole path segments), and its version is a digest of their names and versions."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        scheme, _, rest = uri.partition("://")
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise InvalidStorageUri(f"{scheme}:// needs a bucket: {scheme}://<bucket>/<prefix>")
        self.prefix = prefix.strip("/")

    def wanted(self, name: str) -> bool:
        """Whether an object of the bucket is under the prefix (a "folder" marker is not)."""
        return not name.endswith("/") and (not self.prefix or name == self.prefix
                                           or name.startswith(self.prefix + "/"))

    def target(self, dest: Path, name: str) -> Path:
        """Where object ``name`` is written under ``dest`` (relative to the prefix; a prefix that is
        one object's name gives that file alone), its directory made."""
        relative = posixpath.basename(name) if name == self.prefix else name[len(self.prefix):].lstrip("/")
        target = safe_join(dest, relative, self.uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def listed(self, objects: list[tuple[str, int, Any]]) -> Snapshot:
        """The snapshot of ``(name, size, version)`` objects found under the prefix."""
        if not objects:
            raise StorageError(f"{self.uri}: no object in bucket {self.bucket!r} under {self.prefix or '/'!r}")
        digest = hashlib.sha256(repr(sorted(objects)).encode()).hexdigest()
        scheme = self.uri.partition("://")[0]
        return Snapshot(version=f"{scheme}:{digest}", total_bytes=sum(size for _, size, _ in objects), detail=objects)
