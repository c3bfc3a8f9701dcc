"""The controller's downloads: off the caller's thread, failures kept with a back-off, retried after it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import poll
from tests.serving.storage.conftest import FileServer
from trimaran.controllers.serving.downloads import ModelDownloads
from trimaran.serving.storage import Credentials


def test_an_unwritable_cache_is_a_clear_failure_and_a_retry_after_the_backoff_succeeds(
        file_server: FileServer, tmp_path: Path) -> None:
    (file_server.root / "model.joblib").write_bytes(b"weights")
    url = f"{file_server.url}/model.joblib"
    blocker = tmp_path / "storage"
    blocker.write_text("a file where the cache directory should be")
    downloads = ModelDownloads(blocker)
    first = downloads.ensure(("ns", "isvc", "rev-1"), url, Credentials)
    poll(lambda: first.state == "Failed", timeout=30, what="the failure")
    assert f"{url}: cannot write the download cache {blocker}" in first.error and first.retriable
    assert first.retry_at > first.finished
    assert downloads.ensure(("ns", "isvc", "rev-1"), url, Credentials, now=first.retry_at - 0.5) is first
    blocker.unlink()
    second = downloads.ensure(("ns", "isvc", "rev-1"), url, Credentials, now=first.retry_at)
    assert second is not first and second.attempts == 2
    poll(lambda: second.state == "Done", timeout=30, what="the retry")
    assert second.path is not None and (second.path / "model.joblib").read_bytes() == b"weights"
    assert not [p for p in blocker.rglob(".tmp-*")]
