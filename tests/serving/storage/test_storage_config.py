"""KServe's ``storage:`` form: which entry of the storage-config Secret, the URI and the variables, and its errors."""

from __future__ import annotations

import base64
import json

import pytest

from trimaran.serving.storage import StorageError, resolve_storage_spec


def secret(**entries: dict) -> dict:
    return {"data": {k: base64.b64encode(json.dumps(v).encode()).decode() for k, v in entries.items()}}


def test_entry_by_key_with_parameters_overriding_it() -> None:
    config = secret(minio={"type": "s3", "bucket": "b1", "access_key_id": "AK", "secret_access_key": "SK",
                           "endpoint_url": "http://minio:9000", "region": "eu", "anonymous": "False"})
    uri, env = resolve_storage_spec({"key": "minio", "path": "/sklearn/iris/", "parameters": {"bucket": "b2"}}, config)
    assert uri == "s3://b2/sklearn/iris"
    assert env == {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
                   "AWS_DEFAULT_REGION": "eu", "awsAnonymousCredential": "False"}


def test_default_entries() -> None:
    assert resolve_storage_spec({"path": "m"}, secret(default={"type": "s3", "bucket": "d"}))[0] == "s3://d/m"
    by_type = secret(default_s3={"bucket": "typed"})
    assert resolve_storage_spec({"path": "m", "parameters": {"type": "s3"}}, by_type)[0] == "s3://typed/m"


@pytest.mark.parametrize(("storage", "config", "message"), [
    ({"key": "absent", "path": "m"}, secret(default={"type": "s3"}), "specified storage key absent not found"),
    ({"key": "minio", "path": "m"}, None, "can't read storage secret storage-config"),
    ({"path": "m"}, secret(default={"bucket": "b"}), "unable to determine storage type"),
    ({"path": "m"}, secret(default={"type": "hdfs"}), "storage type [hdfs] is not supported"),
    ({"path": "m"}, secret(default={"type": "s3"}), "format [s3] requires a bucket"),
    ({"key": "bad", "path": "m"}, {"data": {"bad": base64.b64encode(b"{nope").decode()}}, "invalid json"),
])
def test_errors_use_kserves_wording(storage: dict, config: dict | None, message: str) -> None:
    with pytest.raises(StorageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        resolve_storage_spec(storage, config)
