"""Archives from a real HTTP server: what is refused (path escapes, links, bombs) leaves nothing behind."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.serving.storage.conftest import FileServer
from trimaran.serving.storage import Credentials, StorageError, fetch


def tar_with(server: FileServer, name: str, *members: tuple[tarfile.TarInfo, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    (server.root / name).write_bytes(buf.getvalue())
    return f"{server.url}/{name}"


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def assert_cache_empty(cache: Path) -> None:
    assert not [p for p in cache.rglob("*") if p.is_file() and p.name != "uri" and not p.name.endswith(".lock")]


@pytest.mark.parametrize("member", [
    (tarfile.TarInfo("../escape.txt"), b"x"),
    (tarfile.TarInfo("/etc/escape.txt"), b"x"),
    (link("model/evil", "/etc/passwd"), b""),
    (link("model/evil", "../../../etc/passwd"), b""),
    (link("model/hard", "/etc/passwd", tarfile.LNKTYPE), b""),
], ids=["dotdot", "absolute", "symlink-absolute", "symlink-up", "hardlink"])
def test_tar_that_would_write_outside_is_refused(file_server: FileServer, tmp_path: Path,
                                                 member: tuple[tarfile.TarInfo, bytes]) -> None:
    url = tar_with(file_server, "bad.tar.gz", (tarfile.TarInfo("model/model.joblib"), b"m"), member)
    with pytest.raises(StorageError, match="refusing the archive") as caught:
        fetch(url, tmp_path / "cache", Credentials())
    assert not caught.value.retriable
    assert_cache_empty(tmp_path / "cache")
    assert not list(tmp_path.rglob("escape.txt"))


def test_zip_with_dotdot_or_a_link_is_refused(file_server: FileServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../escape.txt", b"x")
    (file_server.root / "dotdot.zip").write_bytes(buf.getvalue())
    with pytest.raises(StorageError, match="member '../escape.txt' has '..' in its name"):
        fetch(f"{file_server.url}/dotdot.zip", tmp_path / "cache", Credentials())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("model/link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    (file_server.root / "link.zip").write_bytes(buf.getvalue())
    with pytest.raises(StorageError, match="member 'model/link' is a link to '/etc/passwd'"):
        fetch(f"{file_server.url}/link.zip", tmp_path / "cache", Credentials())
    assert_cache_empty(tmp_path / "cache")
    assert not list(tmp_path.rglob("escape.txt"))


def test_zip_is_unpacked(file_server: FileServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("model/model.joblib", b"weights")
    (file_server.root / "model.zip").write_bytes(buf.getvalue())
    path = fetch(f"{file_server.url}/model.zip", tmp_path / "cache", Credentials())
    assert (path / "model/model.joblib").read_bytes() == b"weights"


def test_size_limit_stops_an_archive_bomb(file_server: FileServer, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * (4 << 20))  # 4 MiB of zeros compress to a few KiB
    (file_server.root / "bomb.zip").write_bytes(buf.getvalue())
    monkeypatch.setenv("TRIMARAN_ARCHIVE_MAX_BYTES", str(1 << 20))
    with pytest.raises(StorageError, match=r"expands past 1048576 bytes \(1 MiB\).*TRIMARAN_ARCHIVE_MAX_BYTES"):
        fetch(f"{file_server.url}/bomb.zip", tmp_path / "cache", Credentials())
    assert_cache_empty(tmp_path / "cache")
