"""The download cache: coalesced concurrent downloads, nothing half-written, and KServe's Secret rules."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import pytest

from tests.serving.storage.conftest import FileServer
from trimaran.serving.storage import Credentials, DownloadCache, fetch, secret_env


def test_concurrent_fetches_of_one_uri_download_once(file_server: FileServer, tmp_path: Path) -> None:
    (file_server.root / "model.joblib").write_bytes(b"w" * (1 << 20))
    url = f"{file_server.url}/model.joblib"
    results: list[Path] = []
    barrier = threading.Barrier(4)

    def one() -> None:
        barrier.wait()
        results.append(fetch(url, tmp_path / "cache", Credentials()))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 4 and len(set(results)) == 1
    assert file_server.gets("/model.joblib") == 1, file_server.requests


def test_a_failed_download_leaves_nothing_and_the_next_one_starts_clean(tmp_path: Path) -> None:
    cache = DownloadCache(tmp_path / "cache")

    def broken(dest: Path) -> None:
        (dest / "half.bin").write_bytes(b"half")
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        cache.get("s3://b/m", "v1", broken)
    assert cache.cached("s3://b/m", "v1") is None
    assert not list((tmp_path / "cache").rglob("half.bin"))
    path = cache.get("s3://b/m", "v1", lambda dest: (dest / "model.joblib").write_bytes(b"ok"))
    assert [p.name for p in path.iterdir()] == ["model.joblib"]


def test_secret_env_follows_kserve_webhook() -> None:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    secret = {"metadata": {"name": "s3", "annotations": {
        "serving.kserve.io/s3-endpoint": "minio.local:9000", "serving.kserve.io/s3-usehttps": "0",
        "serving.kserve.io/s3-region": "eu-west-1", "serving.kserve.io/s3-verifyssl": "0"}},
        "data": {"AWS_ACCESS_KEY_ID": b64("AK"), "AWS_SECRET_ACCESS_KEY": b64("SK"), "HF_TOKEN": b64("hf_x")}}
    env = secret_env(secret)
    assert env["AWS_ENDPOINT_URL"] == "http://minio.local:9000"
    creds = Credentials.from_env(env, origin="Secret default/s3")
    assert (creds.aws_access_key_id, creds.aws_secret_access_key) == ("AK", "SK")
    assert (creds.s3_endpoint_url, creds.s3_region, creds.s3_verify) == ("http://minio.local:9000", "eu-west-1", False)
    assert creds.hf_token == "hf_x" and not creds.s3_anonymous
    key = {"type": "service_account", "client_email": "reader@p.iam.gserviceaccount.com", "private_key": "..."}
    gcs = Credentials.from_env(secret_env({"data": {"gcloud-application-credentials.json": b64(json.dumps(key))}}))
    assert gcs.gcs_service_account == key
    anonymous = Credentials.from_env(secret_env(
        {"metadata": {"annotations": {"serving.kserve.io/s3-useanoncredential": "true"}}}))
    assert anonymous.s3_anonymous
