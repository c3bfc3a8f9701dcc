"""The archive extractor on its own: members that would reach outside the destination (however
their links are arranged), special files, and archives that expand past their caps."""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.serving.storage.malicious import add, cve_2025_4517
from trimaran.serving.storage import StorageError
from trimaran.serving.storage._archive import ArchiveLimits, unpack

URI = "http://127.0.0.1/model.tar.gz"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file beside the destination that no archive may touch."""
    target = tmp_path / "outside" / "sentinel.txt"
    target.parent.mkdir()
    target.write_text("original\n")
    target.chmod(0o644)
    return target


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    path = tmp_path / "deep" / "er" / "dest"
    path.mkdir(parents=True)
    return path


def tar(tmp_path: Path, *members: dict) -> Path:
    path = tmp_path / "archive.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member in members:
            add(archive, **member)
    return path


def refused(archive: Path, dest: Path, kind: str = "tar", limits: ArchiveLimits | None = None) -> str:
    with pytest.raises(StorageError) as caught:
        unpack(archive, kind, dest, URI, limits)
    assert not caught.value.retriable
    return str(caught.value)


def test_the_cve_2025_4517_archive_is_refused_naming_the_member_and_the_file_outside_is_untouched(
        tmp_path: Path, dest: Path, outside: Path) -> None:
    archive = tmp_path / "cve.tar.gz"
    cve_2025_4517(archive, outside, len(str(dest)))
    # What the archive does to the standard library's own filter on this Python (3.11.7: it writes).
    control = tmp_path / "deep" / "er" / "control"
    control.mkdir()
    message = refused(archive, dest)
    assert message.startswith(f"{URI}: refusing the archive: member 'a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/lll")
    assert "would be written through the link 'a'" in message
    assert outside.read_text() == "original\n"
    assert not (outside.parent / "newfile").exists()


@pytest.mark.parametrize(("members", "words"), [
    ([{"name": "../escape.txt", "data": b"x"}], "member '../escape.txt' has '..' in its name"),
    ([{"name": "/etc/escape.txt", "data": b"x"}], "member '/etc/escape.txt' has an absolute name"),
    ([{"name": "model/evil", "symlink": "/etc/passwd"}], "member 'model/evil' is a link to '/etc/passwd'"),
    ([{"name": "model/evil", "symlink": "../../outside/sentinel.txt"}],
     "member 'model/evil' has a link target that resolves outside the destination"),
    ([{"name": "model/hard", "hardlink": "/etc/passwd"}], "member 'model/hard' is a hard link to '/etc/passwd'"),
    ([{"name": "model/hard", "hardlink": "../outside/sentinel.txt"}],
     "member 'model/hard' has a link target that resolves outside"),
    # Each link alone stays inside; followed through the earlier one, the second climbs out.
    ([{"name": "up", "symlink": "sub/.."}, {"name": "sub", "kind": tarfile.DIRTYPE},
      {"name": "sub/back", "symlink": "../up/.."}],
     "member 'sub/back' has a link target that resolves outside the destination"),
    # A link made before the name its target passes through became a link: caught once all are out.
    ([{"name": "c", "symlink": "a/b/.."}, {"name": "a", "kind": tarfile.DIRTYPE}, {"name": "a/b", "symlink": ".."}],
     "member 'c' has a link target that resolves outside the destination"),
    ([{"name": "dir", "symlink": "."}, {"name": "dir/file", "data": b"x"}],
     "member 'dir/file' would be written through the link 'dir'"),
    ([{"name": "loop", "symlink": "loop/x"}, {"name": "hard", "hardlink": "loop"}], "has links that loop"),
    ([{"name": "tty", "kind": tarfile.CHRTYPE}], "member 'tty' is a device"),
    ([{"name": "disk", "kind": tarfile.BLKTYPE}], "member 'disk' is a device"),
    ([{"name": "pipe", "kind": tarfile.FIFOTYPE}], "member 'pipe' is a fifo"),
    ([{"name": "dir", "kind": tarfile.DIRTYPE}, {"name": "dir", "data": b"x"}], "would replace a directory"),
], ids=["dotdot", "absolute", "symlink-absolute", "symlink-up", "hardlink-absolute", "hardlink-up",
        "symlink-through-symlink", "symlink-made-unsafe-later", "write-through-symlink", "loop", "chardev",
        "blockdev", "fifo", "file-over-dir"])
def test_tar_members_that_reach_outside_or_are_special_are_refused(
        tmp_path: Path, dest: Path, outside: Path, members: list[dict], words: str) -> None:
    message = refused(tar(tmp_path, {"name": "model/model.joblib", "data": b"m"}, *members), dest)
    assert words in message, message
    assert outside.read_text() == "original\n"
    assert not list(tmp_path.rglob("escape.txt"))


def test_a_hard_link_through_an_inner_link_to_a_file_outside_is_refused(tmp_path: Path, dest: Path,
                                                                        outside: Path) -> None:
    # The destination's parent is 'er': a link to '..' from the root would be refused at once, so
    # the link climbs from a directory, then the hard link names a file beyond it.
    archive = tar(tmp_path, {"name": "x", "kind": tarfile.DIRTYPE}, {"name": "x/up", "symlink": ".."},
                  {"name": "flag", "hardlink": "x/up/../../../outside/sentinel.txt"}, {"name": "flag", "data": b"x"})
    assert "member 'flag' has a link target that resolves outside the destination" in refused(archive, dest)
    assert outside.read_text() == "original\n"


def test_a_sound_archive_keeps_its_inner_links_and_drops_setuid_and_world_write(tmp_path: Path, dest: Path) -> None:
    archive = tar(tmp_path, {"name": "./", "kind": tarfile.DIRTYPE},
                  {"name": "model/weights.bin", "data": b"w", "mode": 0o4777},
                  {"name": "model/tool", "data": b"#!/bin/sh\n", "mode": 0o2755},
                  {"name": "model/shared", "data": b"s", "mode": 0o4777},
                  {"name": "latest", "symlink": "model"}, {"name": "model/again.bin", "hardlink": "model/weights.bin"},
                  {"name": "model/weights.bin", "data": b"w2"})  # a later member replaces an earlier one
    unpack(archive, "tar", dest, URI)
    assert (dest / "latest" / "weights.bin").read_bytes() == b"w2"
    assert (dest / "model" / "again.bin").read_bytes() == b"w"
    assert stat.S_IMODE((dest / "model" / "shared").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "model" / "tool").stat().st_mode) == 0o755
    assert os.readlink(dest / "latest") == "model"


def zip_of(tmp_path: Path, *entries: tuple[str | zipfile.ZipInfo, bytes]) -> Path:
    path = tmp_path / "archive.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def zip_link(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o120777 << 16
    return info


@pytest.mark.parametrize(("entries", "words"), [
    ([("../escape.txt", b"x")], "member '../escape.txt' has '..' in its name"),
    ([("/tmp/escape.txt", b"x")], "member '/tmp/escape.txt' has an absolute name"),
    ([(zip_link("model/link"), b"/etc/passwd")], "member 'model/link' is a link to '/etc/passwd'"),
    ([(zip_link("model/link"), b"../../x")], "member 'model/link' has a link target that resolves outside"),
    ([(zip_link("dir"), b"."), ("dir/file", b"x")], "member 'dir/file' would be written through the link 'dir'"),
], ids=["zip-slip", "absolute", "symlink-absolute", "symlink-up", "write-through-symlink"])
def test_zip_members_that_reach_outside_are_refused(tmp_path: Path, dest: Path, entries: list, words: str) -> None:
    assert words in refused(zip_of(tmp_path, ("model/model.joblib", b"m"), *entries), dest, "zip")
    assert not list(tmp_path.rglob("escape.txt"))


def test_a_zip_with_an_inner_link_is_unpacked(tmp_path: Path, dest: Path) -> None:
    unpack(zip_of(tmp_path, ("model/model.joblib", b"weights"), (zip_link("current"), b"model")), "zip", dest, URI)
    assert (dest / "current" / "model.joblib").read_bytes() == b"weights"


def test_caps_on_bytes_members_and_ratio_say_their_value_and_variable(tmp_path: Path, dest: Path) -> None:
    zeros = tar(tmp_path, {"name": "zeros.bin", "data": b"\0" * (4 << 20)})  # 4 MiB of zeros: a few KiB packed
    message = refused(zeros, dest, limits=ArchiveLimits(max_bytes=1 << 20))
    assert "at member 'zeros.bin' it expands past 1048576 bytes (1 MiB)" in message
    assert "TRIMARAN_ARCHIVE_MAX_BYTES on the control plane sets it" in message
    bomb = zip_of(tmp_path, ("zeros.bin", b"\0" * (4 << 20)))
    message = refused(bomb, dest, "zip", ArchiveLimits(max_ratio=10, ratio_floor=1 << 20))
    assert "it expands to more than 10 times its compressed size" in message and "TRIMARAN_ARCHIVE_MAX_RATIO" in message
    many = tar(tmp_path, *({"name": f"f{i}", "data": b""} for i in range(5)))
    message = refused(many, dest, limits=ArchiveLimits(max_members=3))
    assert "it has more than 3 members" in message and "TRIMARAN_ARCHIVE_MAX_MEMBERS" in message


def test_limits_come_from_the_environment() -> None:
    limits = ArchiveLimits.from_env({"TRIMARAN_ARCHIVE_MAX_BYTES": "2048", "TRIMARAN_ARCHIVE_MAX_MEMBERS": "7"})
    assert (limits.max_bytes, limits.max_members, limits.max_ratio) == (2048, 7, 100)
    assert ArchiveLimits.from_env({}).max_bytes == 10 << 30


def test_a_truncated_archive_is_refused_as_unreadable(tmp_path: Path, dest: Path) -> None:
    archive = tar(tmp_path, {"name": "a.bin", "data": os.urandom(1 << 16)})
    archive.write_bytes(archive.read_bytes()[:2000])
    assert "not a readable tar archive" in refused(archive, dest)
