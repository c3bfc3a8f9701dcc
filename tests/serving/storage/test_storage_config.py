"""KServe's ``storage:`` form: which entry of the storage-config Secret, the URI and the variables, and its errors."""

from __future__ import annotations

import base64
import json

import pytest

from trimaran.serving.storage import StorageError, credential_env, resolve_storage_spec, storage_spec_env
from trimaran.serving.storage._storage_config import storage_config_env


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


def test_the_initializer_gets_the_entry_by_reference_and_reads_it_as_kserve_does() -> None:
    entry = {"type": "s3", "bucket": "b1", "access_key_id": "AK", "secret_access_key": "SK", "region": "eu"}
    storage = {"key": "minio", "path": "m", "parameters": {"region": "us"}}
    uri, env = storage_spec_env(storage, secret(minio=entry))
    assert uri == "s3://b1/m"
    reference = {"secretKeyRef": {"name": "storage-config", "key": "minio"}}
    assert env == [{"name": "STORAGE_CONFIG", "valueFrom": reference},
                   {"name": "STORAGE_OVERRIDE_CONFIG", "value": json.dumps({"region": "us"})}]
    assert "SK" not in json.dumps(env)
    assert storage_config_env(json.dumps(entry), json.dumps({"region": "us"})) == {
        "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_DEFAULT_REGION": "us"}
    with pytest.raises(StorageError, match="STORAGE_CONFIG is not JSON"):
        storage_config_env("{", None)


def test_credential_env_names_the_accounts_secrets_by_reference() -> None:
    objects = {("ServiceAccount", "sa"): {"secrets": [{"name": "s3creds"}, {"name": "other"}]},
               ("Secret", "s3creds"): {"metadata": {"annotations": {"serving.kserve.io/s3-endpoint": "minio:9000",
                                                                    "serving.kserve.io/s3-usehttps": "0"}},
                                       "data": {"AWS_ACCESS_KEY_ID": "QUs=", "AWS_SECRET_ACCESS_KEY": "U0s="}},
               ("Secret", "other"): {"data": {"unrelated": "eA=="}}}
    env, origin = credential_env(lambda kind, ns, name: objects.get((kind, name)), "ns", "sa")
    assert origin == "Secret ns/s3creds"
    assert {"name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3creds", "key": "AWS_SECRET_ACCESS_KEY"}}} in env
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio:9000"} in env
    assert credential_env(lambda *_: None, "ns", "sa")[1] == "no Secret: there is no ServiceAccount ns/sa"
