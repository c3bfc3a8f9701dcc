"""``http://`` and ``https://``: one file, or an archive (.tar, .tar.gz/.tgz, .zip) that is unpacked."""

from __future__ import annotations

import hashlib
import posixpath
import urllib.parse
from pathlib import Path

from trimaran.serving.storage._archive import archive_kind, unpack
from trimaran.serving.storage._base import (
    Credentials,
    InvalidStorageUri,
    Progress,
    Snapshot,
    Storage,
    StorageError,
    max_download_bytes,
    safe_join,
)

__all__ = ["HTTPStorage"]

_TIMEOUT = 30.0
_CHUNK = 1 << 20


class HTTPStorage(Storage):
    """A URL's body. The version is the response's ``ETag``, else ``Last-Modified`` and length, from a
    ``HEAD`` request; a server that sends neither is versioned by URL alone (downloaded once).
    An archive's name (by its path) is unpacked safely into the model directory; any other file
    is written under its own name, as KServe's storage initializer does."""

    schemes = ("http", "https")

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        parsed = urllib.parse.urlsplit(uri)
        if not parsed.hostname:
            raise InvalidStorageUri(f"{parsed.scheme}:// needs a host: {parsed.scheme}://<host>/<path>")
        self.filename = posixpath.basename(urllib.parse.unquote(parsed.path))
        if not self.filename:
            raise InvalidStorageUri(f"{uri} names no file (the path ends with '/')")

    def snapshot(self, credentials: Credentials) -> Snapshot:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.uri, method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
                headers = response.headers
        except urllib.error.HTTPError as exc:
            if exc.code in (405, 501):  # no HEAD here: versioned by URL alone
                return Snapshot(version="http:unversioned", total_bytes=None)
            raise self._error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._error(exc) from None
        length = headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        validator = headers.get("ETag") or (
            f"{headers.get('Last-Modified')}|{length}" if headers.get("Last-Modified") else "unversioned")
        return Snapshot(version="http:" + hashlib.sha256(validator.encode()).hexdigest(), total_bytes=total)

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        import urllib.error
        import urllib.request

        limit = max_download_bytes()
        kind = archive_kind(self.filename)
        # An archive lands beside the model directory (the directory gets only what it holds).
        target = dest.parent / f"{dest.name}.download" if kind else safe_join(dest, self.filename, self.uri)
        done = 0
        try:
            with urllib.request.urlopen(self.uri, timeout=_TIMEOUT) as response, open(target, "wb") as out:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else snapshot.total_bytes
                if total is not None and total > limit:
                    raise StorageError(f"{self.uri}: {total} bytes is more than TRIMARAN_STORAGE_MAX_BYTES ({limit})",
                                       retriable=False)
                # read1: what has arrived, so progress moves with the bytes (read(n) waits for all n).
                while chunk := response.read1(_CHUNK):
                    done += len(chunk)
                    if done > limit:
                        raise StorageError(f"{self.uri}: more than TRIMARAN_STORAGE_MAX_BYTES ({limit})",
                                           retriable=False)
                    out.write(chunk)
                    progress(done, total)
            if total is not None and done != total:
                raise StorageError(f"{self.uri}: the connection closed after {done} of {total} bytes")
            if kind:
                unpack(target, kind, dest, self.uri)
        except (urllib.error.URLError, OSError) as exc:
            raise self._error(exc) from None
        finally:
            if kind:
                target.unlink(missing_ok=True)

    def _error(self, exc: BaseException) -> StorageError:
        import urllib.error

        if isinstance(exc, urllib.error.HTTPError):
            if exc.code == 404:
                return StorageError(f"{self.uri}: not found (HTTP 404)")
            if exc.code in (401, 403):
                return StorageError(f"{self.uri}: access denied (HTTP {exc.code})")
            return StorageError(f"{self.uri}: HTTP {exc.code} {exc.reason}")
        if isinstance(exc, urllib.error.URLError):
            return StorageError(f"{self.uri}: cannot reach the server: {exc.reason}")
        return StorageError(f"{self.uri}: {type(exc).__name__}: {exc}")
