"""Real servers on loopback for the storage schemes: moto's S3 server, a plain HTTP file server
with a request log, the GCS emulator, and a fake Hugging Face Hub (no hub server can run here)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.serving.conftest import free_port

ACCESS_KEY, SECRET_KEY = "AKIATRIMARANTEST", "trimaran-test-secret"


def iris_model(directory: Path) -> Path:
    """A real scikit-learn model (logistic regression on iris) as ``model.joblib``."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    directory.mkdir(parents=True, exist_ok=True)
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), directory / "model.joblib")
    return directory


@dataclass
class S3Server:
    endpoint: str

    def client(self):  # noqa: ANN201
        import boto3

        return boto3.session.Session(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                                     region_name="us-east-1").client("s3", endpoint_url=self.endpoint)


@pytest.fixture
def s3_server() -> Iterator[S3Server]:
    """moto in server mode on a free port, emptied afterwards (its state lives in this process)."""
    import urllib.request

    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST"))
        server.stop()


@dataclass
class FileServer:
    """``http.server`` over a directory; ``requests`` is every (method, path) it answered."""

    root: Path
    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)
    #: Paths whose body stops halfway until ``gate`` is set (a download caught in the middle).
    gated: set[str] = field(default_factory=set)
    gate: threading.Event = field(default_factory=threading.Event)

    def gets(self, path: str) -> int:
        return sum(1 for method, p in self.requests if method == "GET" and p == path)


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[FileServer]:
    root = tmp_path / "www"
    root.mkdir()
    log: list[tuple[str, str]] = []
    served = FileServer(root, "", log)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def send_head(self):  # noqa: ANN202
            log.append((self.command, self.path))
            return super().send_head()

        def copyfile(self, source, outputfile) -> None:  # noqa: ANN001
            if self.path not in served.gated:
                return super().copyfile(source, outputfile)
            data = source.read()
            outputfile.write(data[: len(data) // 2])
            outputfile.flush()
            served.gate.wait(120)
            outputfile.write(data[len(data) // 2:])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        served.gate.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def gcs_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """gcp-storage-emulator (in memory) on a free port, with STORAGE_EMULATOR_HOST pointing at it."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@dataclass
class FakeHub:
    """The few Hub endpoints huggingface_hub's ``model_info`` and ``snapshot_download`` call (model info,
    the file tree, ``resolve``), over
    in-memory repositories: ``repos[repo_id][revision] = {filename: bytes}``; a revision's commit
    sha is a digest of its files, so changing the files moves the branch."""

    url: str
    repos: dict[str, dict[str, dict[str, bytes]]]
    requests: list[tuple[str, str]]

    @staticmethod
    def sha(files: dict[str, bytes]) -> str:
        return hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    repos: dict[str, dict[str, dict[str, bytes]]] = {}
    log: list[tuple[str, str]] = []

    def lookup(repo: str, revision: str) -> dict[str, bytes] | None:
        revisions = repos.get(repo) or {}
        if revision in revisions:
            return revisions[revision]
        return next((files for files in revisions.values() if FakeHub.sha(files) == revision), None)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _not_found(self, code: str) -> None:
            self._send(404, json.dumps({"error": code}).encode(), {"X-Error-Code": code,
                                                                   "Content-Type": "application/json"})

        def do_GET(self) -> None:  # noqa: N802
            log.append((self.command, self.path))
            path = unquote(self.path.split("?", 1)[0])
            if path.startswith("/api/models/"):
                parts = path[len("/api/models/"):].split("/")
                repo, revision = "/".join(parts[:2]), "/".join(parts[3:]) if len(parts) > 3 else "main"
                if repo not in repos:
                    return self._not_found("RepoNotFound")
                files = lookup(repo, revision)
                if files is None:
                    return self._not_found("RevisionNotFound")
                if parts[2] == "tree":
                    listing = [{"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                               for n, b in sorted(files.items())]
                    return self._send(200, json.dumps(listing).encode(), {"Content-Type": "application/json"})
                body = {"id": repo, "modelId": repo, "sha": FakeHub.sha(files), "private": False,
                        "siblings": [{"rfilename": n, "size": len(b), "blobId": hashlib.sha1(b).hexdigest()}
                                     for n, b in sorted(files.items())]}
                return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            # /{owner}/{repo}/resolve/{revision}/{filename}
            parts = path.lstrip("/").split("/")
            if len(parts) >= 5 and parts[2] == "resolve":
                repo, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
                files = lookup(repo, revision)
                if files is None or name not in files:
                    return self._not_found("EntryNotFound")
                data = files[name]
                return self._send(200, data, {"ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                                              "X-Repo-Commit": FakeHub.sha(files),
                                              "Content-Type": "application/octet-stream"})
            self._not_found("NotFound")

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield FakeHub(f"http://127.0.0.1:{server.server_address[1]}", repos, log)
    finally:
        server.shutdown()
        server.server_close()
