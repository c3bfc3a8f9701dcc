"""Each scheme against a real server on loopback: what lands in the cache, versions, and errors."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from tests.serving.storage.conftest import ACCESS_KEY, SECRET_KEY, FakeHub, FileServer, S3Server, iris_model
from trimaran.serving.storage import Credentials, InvalidStorageUri, StorageError, fetch, storage_for


def s3_credentials(server: S3Server, **extra: object) -> Credentials:
    return Credentials(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                       s3_endpoint_url=server.endpoint, s3_region="us-east-1", **extra)


def test_s3_prefix_downloads_every_object_under_it_and_a_new_etag_downloads_again(
        s3_server: S3Server, tmp_path: Path) -> None:
    client = s3_server.client()
    client.create_bucket(Bucket="models")
    model = iris_model(tmp_path / "model") / "model.joblib"
    client.upload_file(str(model), "models", "iris/v1/model.joblib")
    client.put_object(Bucket="models", Key="iris/v1/extra/notes.txt", Body=b"notes")
    client.put_object(Bucket="models", Key="iris/v10/other.txt", Body=b"not under iris/v1/")
    seen: list[tuple[int, int | None]] = []
    first = fetch("s3://models/iris/v1", tmp_path / "cache", s3_credentials(s3_server),
                  lambda done, total: seen.append((done, total)))
    assert sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file()) == [
        "extra/notes.txt", "model.joblib"]
    assert (first / "model.joblib").read_bytes() == model.read_bytes()
    assert seen[0] == (0, model.stat().st_size + 5) and seen[-1] == (model.stat().st_size + 5,) * 2
    assert fetch("s3://models/iris/v1", tmp_path / "cache", s3_credentials(s3_server)) == first
    client.put_object(Bucket="models", Key="iris/v1/extra/notes.txt", Body=b"changed")
    second = fetch("s3://models/iris/v1", tmp_path / "cache", s3_credentials(s3_server))
    assert second != first and (second / "extra/notes.txt").read_bytes() == b"changed"


def test_s3_key_names_a_single_file(s3_server: S3Server, tmp_path: Path) -> None:
    client = s3_server.client()
    client.create_bucket(Bucket="models")
    client.put_object(Bucket="models", Key="flat/model.joblib", Body=b"bytes")
    path = fetch("s3://models/flat/model.joblib", tmp_path / "cache", s3_credentials(s3_server))
    assert [p.name for p in path.iterdir()] == ["model.joblib"]


def test_s3_errors_say_what_is_wrong_and_leave_nothing_in_the_cache(s3_server: S3Server, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(StorageError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY missing from the environ"):
        fetch("s3://models/iris", cache, Credentials(s3_endpoint_url=s3_server.endpoint))
    with pytest.raises(StorageError, match="no such bucket 'absent'"):
        fetch("s3://absent/iris", cache, s3_credentials(s3_server))
    s3_server.client().create_bucket(Bucket="models")
    with pytest.raises(StorageError, match="no object in bucket 'models' under 'iris'"):
        fetch("s3://models/iris", cache, s3_credentials(s3_server))
    with pytest.raises(StorageError, match="cannot reach"):
        fetch("s3://models/iris", cache, Credentials(aws_access_key_id="a", aws_secret_access_key="b",
                                                     s3_endpoint_url="http://127.0.0.1:9"))
    assert not cache.exists() or not any(cache.rglob("*.joblib"))


def test_s3_object_key_with_dotdot_is_refused(s3_server: S3Server, tmp_path: Path) -> None:
    client = s3_server.client()
    client.create_bucket(Bucket="models")
    client.put_object(Bucket="models", Key="m/../../escape.txt", Body=b"x")
    with pytest.raises(StorageError, match="outside the model directory"):
        fetch("s3://models/m", tmp_path / "cache", s3_credentials(s3_server))
    assert not list(tmp_path.rglob("escape.txt"))


def test_gcs_public_bucket_through_the_emulator(gcs_emulator: str, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="test", credentials=AnonymousCredentials())
    bucket = client.create_bucket("public-models")
    bucket.blob("iris/model.joblib").upload_from_string(b"model-bytes")
    first = fetch("gs://public-models/iris", tmp_path / "cache", Credentials())
    assert (first / "model.joblib").read_bytes() == b"model-bytes"
    bucket.blob("iris/model.joblib").upload_from_string(b"new-generation")
    second = fetch("gs://public-models/iris", tmp_path / "cache", Credentials())
    assert second != first and (second / "model.joblib").read_bytes() == b"new-generation"
    with pytest.raises(StorageError, match="no object in bucket 'public-models' under 'absent'"):
        fetch("gs://public-models/absent", tmp_path / "cache", Credentials())


def test_gcs_with_a_service_account_key_signs_in_through_a_fake_token_endpoint(gcs_emulator: str,
                                                                               tmp_path: Path) -> None:
    """The key's token_uri points at a token server on loopback (Google's cannot be reached here): the
    download signs in with the key, then reads through the emulator."""
    import http.server
    import threading
    from urllib.parse import parse_qs

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    grants: list[str] = []

    class Token(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            grants.append(body["grant_type"][0])
            answer = b'{"access_token": "token-1", "expires_in": 3600, "token_type": "Bearer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Token)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    info = {"type": "service_account", "project_id": "test", "private_key_id": "k1", "private_key": key,
            "client_email": "reader@test.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": f"http://127.0.0.1:{server.server_address[1]}/token"}
    try:
        bucket = storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket("private-models")
        bucket.blob("iris/model.joblib").upload_from_string(b"private-bytes")
        path = fetch("gs://private-models/iris", tmp_path / "cache", Credentials(gcs_service_account=info))
        assert (path / "model.joblib").read_bytes() == b"private-bytes"
        assert grants and set(grants) == {"urn:ietf:params:oauth:grant-type:jwt-bearer"}
    finally:
        server.shutdown()
        server.server_close()


def model_archive(server: FileServer, name: str, files: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (server.root / name).write_bytes(buf.getvalue())
    return f"{server.url}/{name}"


def test_http_archive_is_unpacked_and_a_second_fetch_downloads_nothing(file_server: FileServer,
                                                                       tmp_path: Path) -> None:
    url = model_archive(file_server, "model.tar.gz", {"model/model.joblib": b"m", "model/meta.json": b"{}"})
    first = fetch(url, tmp_path / "cache", Credentials())
    assert sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file()) == [
        "model/meta.json", "model/model.joblib"]
    assert fetch(url, tmp_path / "cache", Credentials()) == first
    assert file_server.gets("/model.tar.gz") == 1, file_server.requests
    os.utime(file_server.root / "model.tar.gz", (1_000_000_000, 1_000_000_000))  # a new Last-Modified
    assert fetch(url, tmp_path / "cache", Credentials()) != first
    assert file_server.gets("/model.tar.gz") == 2


def test_http_single_file_keeps_its_name(file_server: FileServer, tmp_path: Path) -> None:
    (file_server.root / "model.joblib").write_bytes(b"plain")
    path = fetch(f"{file_server.url}/model.joblib", tmp_path / "cache", Credentials())
    assert (path / "model.joblib").read_bytes() == b"plain"


def test_http_missing_file_and_unreachable_server(file_server: FileServer, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"not found \(HTTP 404\)"):
        fetch(f"{file_server.url}/absent.tar.gz", tmp_path / "cache", Credentials())
    with pytest.raises(StorageError, match="cannot reach the server"):
        fetch("http://127.0.0.1:9/model.tgz", tmp_path / "cache", Credentials())


def test_hf_repo_at_a_revision_from_a_fake_hub(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.repos["acme/iris"] = {"main": {"model.joblib": b"main-weights", "config.json": b"{}"},
                                   "v1": {"model.joblib": b"v1-weights"}}
    creds = Credentials(hf_endpoint=fake_hub.url)
    main = fetch("hf://acme/iris", tmp_path / "cache", creds)
    assert sorted(p.name for p in main.iterdir()) == ["config.json", "model.joblib"]
    assert (main / "model.joblib").read_bytes() == b"main-weights"
    v1 = fetch("hf://acme/iris:v1", tmp_path / "cache", creds)
    assert (v1 / "model.joblib").read_bytes() == b"v1-weights"
    with pytest.raises(StorageError, match="no repository acme/absent"):
        fetch("hf://acme/absent", tmp_path / "cache", creds)


@pytest.mark.parametrize(("uri", "message"), [
    ("s3://", "s3:// needs a bucket"),
    ("gs:///path", "gs:// needs a bucket"),
    ("hf://just-a-name", "hf:// needs a repository"),
    ("hf://acme/iris:", "revision after ':' is empty"),
    ("https://host/dir/", "names no file"),
    ("ftp://host/model", "Cannot recognize storage type for ftp://host/model"),
])
def test_uris_are_checked_before_any_request(uri: str, message: str) -> None:
    with pytest.raises(InvalidStorageUri, match=message):
        storage_for(uri)
