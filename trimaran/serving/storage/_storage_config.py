"""KServe's ``storage:`` form of a model's location: a key of the ``storage-config`` Secret (JSON
with the type, bucket and credentials) plus a path, instead of a ``storageUri``."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from trimaran.serving.storage._base import StorageError

__all__ = ["STORAGE_CONFIG_SECRET", "resolve_storage_spec", "storage_config_env", "storage_spec_env"]

#: The Secret KServe reads ``storage:`` entries from (its default ``storageSpecSecretName``).
STORAGE_CONFIG_SECRET = "storage-config"
_DEFAULT_KEY = "default"
_SUPPORTED_TYPES = ("s3",)
# The entry's fields and the variables KServe's storage initializer sets from them.
_S3_FIELDS = (("endpoint_url", "AWS_ENDPOINT_URL"), ("access_key_id", "AWS_ACCESS_KEY_ID"),
              ("secret_access_key", "AWS_SECRET_ACCESS_KEY"), ("region", "AWS_DEFAULT_REGION"),
              ("ca_bundle", "AWS_CA_BUNDLE"), ("verify_ssl", "S3_VERIFY_SSL"), ("anonymous", "awsAnonymousCredential"))


def resolve_storage_spec(storage: Mapping[str, Any], secret: Mapping[str, Any] | None) -> tuple[str, dict[str, str]]:
    """The URI (``s3://<bucket>/<path>``) and the credential variables that ``storage`` names, given
    the ``storage-config`` Secret (None when there is none); see :func:`_resolve`."""
    uri, _, merged = _resolve(storage, secret)
    return uri, _fields_env(merged)


def storage_spec_env(storage: Mapping[str, Any], secret: Mapping[str, Any] | None) -> tuple[str, list[dict[str, Any]]]:
    """The URI ``storage`` names and the env of the storage initializer that reads it, as KServe's
    webhook sets them: ``STORAGE_CONFIG`` from the Secret's entry (a ``secretKeyRef``: no secret value
    is copied into the pod) and ``STORAGE_OVERRIDE_CONFIG``, the parameters as JSON. Raises StorageError."""
    uri, key, _ = _resolve(storage, secret)
    env: list[dict[str, Any]] = []
    if key:
        env.append({"name": "STORAGE_CONFIG",
                    "valueFrom": {"secretKeyRef": {"name": STORAGE_CONFIG_SECRET, "key": key}}})
    params = {str(k): str(v) for k, v in (storage.get("parameters") or {}).items()}
    if params:
        env.append({"name": "STORAGE_OVERRIDE_CONFIG", "value": json.dumps(params)})
    return uri, env


def storage_config_env(config: str | None, override: str | None) -> dict[str, str]:
    """The credential variables of ``STORAGE_CONFIG`` (the Secret's entry, JSON) overridden by
    ``STORAGE_OVERRIDE_CONFIG``, as KServe's storage initializer reads them. Raises StorageError."""
    merged: dict[str, str] = {}
    for name, text in (("STORAGE_CONFIG", config), ("STORAGE_OVERRIDE_CONFIG", override)):
        if not text:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            raise StorageError(f"{name} is not JSON") from None
        if not isinstance(value, dict):
            raise StorageError(f"{name} is not a JSON object")
        merged.update({str(k): str(v) for k, v in value.items()})
    return _fields_env(merged)


def _fields_env(merged: Mapping[str, str]) -> dict[str, str]:
    env = {variable: merged[field] for field, variable in _S3_FIELDS if merged.get(field)}
    if env.get("awsAnonymousCredential", "").lower() in ("true", "1"):
        env["awsAnonymousCredential"] = "true"
    return env


def _resolve(storage: Mapping[str, Any], secret: Mapping[str, Any] | None) -> tuple[str, str | None, dict[str, str]]:
    """The URI (``s3://<bucket>/<path>``) and the credential variables that ``storage`` (``{key,
    path, parameters}``) names, given the ``storage-config`` Secret (None when there is none).

    As KServe: without ``key`` the entry is ``default`` (``default_<type>`` when the parameters
    give a type); the parameters override the entry's fields. Raises StorageError with KServe's
    wording when the entry is missing, not JSON, of another type, or names no bucket. Returns the
    URI, the Secret's key holding the entry (None when it has none) and the entry's fields merged
    with the parameters."""
    params = {str(k): str(v) for k, v in (storage.get("parameters") or {}).items()}
    stype, bucket, key = params.get("type", ""), params.get("bucket", ""), storage.get("key") or ""
    path = str(storage.get("path") or "").strip("/")
    entry: dict[str, Any] = {}
    found: str | None = None
    if secret is not None:
        data = secret.get("data") or {}
        if key and key not in data:
            raise StorageError(f"specified storage key {key} not found in storage secret {STORAGE_CONFIG_SECRET}")
        key = key or (f"{_DEFAULT_KEY}_{stype}" if stype else _DEFAULT_KEY)
        if key in data:
            found = key
            try:
                entry = json.loads(base64.b64decode(data[key]))
            except ValueError:
                raise StorageError(f"invalid json encountered in key {key} of storage secret "
                                   f"{STORAGE_CONFIG_SECRET}") from None
            if not isinstance(entry, dict):
                raise StorageError(f"key {key} of storage secret {STORAGE_CONFIG_SECRET} is not a JSON object")
            stype = stype or str(entry.get("type", ""))
            bucket = bucket or str(entry.get("bucket", ""))
    elif key:
        raise StorageError(f"can't read storage secret {STORAGE_CONFIG_SECRET}: it does not exist")
    if not stype:
        raise StorageError("unable to determine storage type: set storage.parameters.type or \"type\" in the "
                           f"{STORAGE_CONFIG_SECRET} Secret's entry")
    if stype not in _SUPPORTED_TYPES:
        raise StorageError(f"storage type must be one of [{', '.join(_SUPPORTED_TYPES)}]. storage type [{stype}] "
                           "is not supported")
    if not bucket:
        raise StorageError(f"format [{stype}] requires a bucket but one wasn't found in storage data or parameters")
    return f"{stype}://{bucket}/{path}", found, {**{k: str(v) for k, v in entry.items()}, **params}
