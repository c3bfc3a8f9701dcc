"""Unpacking a downloaded archive (.tar, .tar.gz/.tgz, .zip) without trusting it.

tar goes through the standard library's ``data`` filter (no absolute names, no ``..``, no links
that point outside, no device files, no setuid bits); zip members are checked the same way, and
links in a zip are refused. Both stop at a size limit counted from what is actually written.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from pathlib import Path

from trimaran.serving.storage._base import StorageError, max_download_bytes, safe_join

__all__ = ["ARCHIVE_SUFFIXES", "archive_kind", "unpack"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
_MAX_MEMBERS = 100_000


def archive_kind(name: str) -> str | None:
    """``tar`` or ``zip`` for an archive's file name, None for a plain file."""
    lower = name.lower()
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    return None


def unpack(archive: Path, kind: str, dest: Path, uri: str) -> None:
    """Unpack ``archive`` into ``dest``; raises StorageError (not retriable) for an unsafe or broken one."""
    try:
        if kind == "tar":
            _untar(archive, dest, uri)
        else:
            _unzip(archive, dest, uri)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise StorageError(f"{uri}: not a readable {kind} archive: {exc}", retriable=False) from None


def _untar(archive: Path, dest: Path, uri: str) -> None:
    limit = max_download_bytes()
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        if len(members) > _MAX_MEMBERS:
            raise StorageError(f"{uri}: more than {_MAX_MEMBERS} members", retriable=False)
        if sum(m.size for m in members if m.isfile()) > limit:
            raise StorageError(f"{uri}: unpacks to more than TRIMARAN_STORAGE_MAX_BYTES ({limit})", retriable=False)
        for member in members:
            if member.name.startswith("/"):  # the data filter would strip the '/': refused outright instead
                raise StorageError(f"{uri}: refusing the archive: {member.name!r} is an absolute name", retriable=False)
            try:
                tarfile.data_filter(member, str(dest))
            except tarfile.FilterError as exc:
                raise StorageError(f"{uri}: refusing the archive: {exc}", retriable=False) from None
        tar.extractall(dest, filter="data")


def _unzip(archive: Path, dest: Path, uri: str) -> None:
    limit = max_download_bytes()
    written = 0
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > _MAX_MEMBERS:
            raise StorageError(f"{uri}: more than {_MAX_MEMBERS} members", retriable=False)
        for info in infos:
            if stat.S_ISLNK(info.external_attr >> 16):
                raise StorageError(f"{uri}: refusing the archive: {info.filename!r} is a link", retriable=False)
            target = safe_join(dest, info.filename, uri)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Counted while writing: a zip's declared sizes are whatever its author wrote.
            with zf.open(info) as src, open(target, "wb") as out:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > limit:
                        raise StorageError(f"{uri}: unpacks to more than TRIMARAN_STORAGE_MAX_BYTES ({limit})",
                                           retriable=False)
                    out.write(chunk)
