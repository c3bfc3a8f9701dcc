"""Unpacking a downloaded archive (.tar, .tar.gz/.tgz, .zip) without trusting it, whatever the
Python version.

The standard library's ``tarfile`` ``data`` filter is not relied on: CVE-2025-4517 bypassed it
with a chain of symbolic links whose lexical path stays inside the destination while
``os.path.realpath`` gives up past ``PATH_MAX``, then a hard link through them. Here instead:

- every member is written through directory descriptors opened one name at a time from the
  destination with ``O_NOFOLLOW``, and its file is created with ``O_EXCL | O_NOFOLLOW``: nothing is
  ever written through a link, whatever links earlier members made (a member under a link is
  refused, naming both);
- a symbolic link is kept only when its target, resolved against the tree unpacked so far one
  name at a time (following earlier links, 40 at most), stays inside the destination; once all
  members are out every link is resolved again, since a later member can change what an earlier
  link's target passes through;
- a hard link must name a regular file unpacked before, reached the same way;
- absolute names, ``..``, devices and fifos are refused; setuid, setgid and sticky bits and
  group/other write bits are dropped;
- what an archive may expand to is capped (:class:`ArchiveLimits`): total bytes, members, and the
  ratio to its compressed size. Each cap's error says its value and the variable that sets it.

Every refusal is a :class:`StorageError` that is not retried, naming the member; the caller
removes what was written.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from trimaran.serving.storage._base import StorageError

__all__ = ["ARCHIVE_SUFFIXES", "MAX_BYTES_VARIABLE", "MAX_MEMBERS_VARIABLE", "MAX_RATIO_VARIABLE", "ArchiveLimits",
           "archive_kind", "unpack"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_BYTES_VARIABLE = "TRIMARAN_ARCHIVE_MAX_BYTES"
MAX_MEMBERS_VARIABLE = "TRIMARAN_ARCHIVE_MAX_MEMBERS"
MAX_RATIO_VARIABLE = "TRIMARAN_ARCHIVE_MAX_RATIO"
_MAX_LINK_HOPS = 40  # as the kernel's ELOOP limit
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may expand to: ``max_bytes`` written in all (default 10 GiB), ``max_members``
    (100,000), and ``max_ratio`` times its compressed size once past ``ratio_floor`` bytes (100x past
    64 MiB: model weights compress far less; a bomb far more)."""

    max_bytes: int = 10 << 30
    max_members: int = 100_000
    max_ratio: int = 100
    ratio_floor: int = 64 << 20

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ArchiveLimits:
        """The defaults, overridden by ``TRIMARAN_ARCHIVE_MAX_BYTES``, ``TRIMARAN_ARCHIVE_MAX_MEMBERS``
        and ``TRIMARAN_ARCHIVE_MAX_RATIO`` (0: no ratio check)."""
        source = os.environ if env is None else env
        default = cls()

        def number(name: str, fallback: int) -> int:
            raw = source.get(name, "").strip()
            return int(raw) if raw.isdigit() else fallback

        return cls(max_bytes=number(MAX_BYTES_VARIABLE, default.max_bytes),
                   max_members=number(MAX_MEMBERS_VARIABLE, default.max_members),
                   max_ratio=number(MAX_RATIO_VARIABLE, default.max_ratio))


def archive_kind(name: str) -> str | None:
    """``tar`` or ``zip`` for an archive's file name, None for a plain file."""
    lower = name.lower()
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    return None


def unpack(archive: Path, kind: str, dest: Path, uri: str, limits: ArchiveLimits | None = None) -> None:
    """Unpack ``archive`` (``tar`` or ``zip``) into the directory ``dest``. Raises StorageError (not
    retriable) for an unsafe, oversized or broken archive, naming the member; what was written
    stays for the caller to remove."""
    limits = limits or ArchiveLimits.from_env()
    root = os.open(dest, _DIR_FLAGS)
    try:
        tree = _Tree(root, uri, limits, archive.stat().st_size)
        members = _tar_members(archive) if kind == "tar" else _zip_members(archive)
        try:
            for member in members:
                tree.add(member)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError) as exc:
            raise StorageError(f"{uri}: not a readable {kind} archive: {exc}", retriable=False) from None
        tree.check_links()
    finally:
        os.close(root)


@dataclass
class _Member:
    """One archive entry as the unpacker needs it, whichever format it came from."""

    name: str
    kind: str  # file, dir, symlink, hardlink, or what it is when refused (a device, a fifo)
    mode: int
    size: int = 0
    linkname: str = ""
    open: Callable[[], IO[bytes]] | None = None


def _tar_members(archive: Path) -> Iterator[_Member]:
    with tarfile.open(archive, "r:*") as tar:
        while (info := tar.next()) is not None:
            tar.members.clear()  # one member at a time in memory, however many the archive holds
            if info.isreg():
                kind = "file"
            elif info.isdir():
                kind = "dir"
            elif info.issym():
                kind = "symlink"
            elif info.islnk():
                kind = "hardlink"
            elif info.ischr() or info.isblk():
                kind = "a device"
            elif info.isfifo():
                kind = "a fifo"
            else:
                kind = f"of tar type {info.type!r}"
            yield _Member(info.name, kind, info.mode, info.size, info.linkname,
                          (lambda i=info: tar.extractfile(i)) if kind == "file" else None)  # type: ignore[misc]


def _zip_members(archive: Path) -> Iterator[_Member]:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            mode = info.external_attr >> 16
            kind = "dir" if info.is_dir() else "file"
            if stat.S_ISLNK(mode):
                kind = "symlink"
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "a device"
            elif stat.S_ISFIFO(mode):
                kind = "a fifo"
            linkname = ""
            if kind == "symlink":
                with zf.open(info) as link:  # a link's target is its content: bounded as the kernel bounds it
                    linkname = link.read(4096).decode(errors="replace")
            yield _Member(info.filename, kind, stat.S_IMODE(mode) or (0o755 if kind == "dir" else 0o644),
                          info.file_size, linkname, (lambda i=info: zf.open(i)) if kind == "file" else None)  # type: ignore[misc]


class _Tree:
    """The destination as unpacked so far, addressed one name at a time from its descriptor."""

    def __init__(self, root: int, uri: str, limits: ArchiveLimits, compressed: int) -> None:
        self.root, self.uri, self.limits, self.compressed = root, uri, limits, compressed
        self.written = 0
        self.members = 0
        self.links: list[tuple[str, list[str], str]] = []  # (member, where it is, its target)

    def refuse(self, member: str, why: str) -> StorageError:
        return StorageError(f"{self.uri}: refusing the archive: member {_shown(member)} {why}", retriable=False)

    def add(self, member: _Member) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise StorageError(f"{self.uri}: refusing the archive: it has more than {self.limits.max_members} "
                               f"members (the cap; {MAX_MEMBERS_VARIABLE} on the control plane sets it)",
                               retriable=False)
        parts = self._parts(member.name)
        if member.kind not in ("file", "dir", "symlink", "hardlink"):
            raise self.refuse(member.name, f"is {member.kind}, which a model directory never holds")
        if not parts:
            if member.kind == "dir":
                return  # "./": the destination itself
            raise self.refuse(member.name, "has no name")
        if member.kind == "dir":
            os.close(self._open_dir(member.name, parts, create=True, mode=_dir_mode(member.mode)))
            return
        parent = self._open_dir(member.name, parts[:-1], create=True)
        try:
            self._clear(member.name, parent, parts[-1])
            if member.kind == "file":
                self._write(member, parent, parts[-1])
            elif member.kind == "symlink":
                self._symlink(member, parent, parts)
            else:
                self._hardlink(member, parent, parts[-1])
        finally:
            os.close(parent)

    # -- names --------------------------------------------------------------------------------
    def _parts(self, name: str) -> list[str]:
        if name.startswith("/"):
            raise self.refuse(name, "has an absolute name")
        parts = [p for p in PurePosixPath(name).parts if p != "."]
        if ".." in parts:
            raise self.refuse(name, "has '..' in its name")
        return parts

    def _open_dir(self, member: str, parts: list[str], create: bool, mode: int = 0o755) -> int:
        """A descriptor of the directory ``parts`` under the root, never through a link."""
        fd = os.dup(self.root)
        try:
            for index, part in enumerate(parts):
                if create:
                    try:
                        os.mkdir(part, mode if index == len(parts) - 1 else 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    where = "/".join(parts[:index + 1])
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and self._is_link(fd, part):
                        raise self.refuse(member, f"would be written through the link {_shown(where)}") from None
                    raise self.refuse(member, f"needs {_shown(where)} to be a directory ({exc.strerror})") from None
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _is_link(dir_fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _clear(self, member: str, parent: int, leaf: str) -> None:
        """A later member of the same name replaces an earlier file or link (never follows it)."""
        try:
            os.unlink(leaf, dir_fd=parent)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise self.refuse(member, "would replace a directory") from None
        except PermissionError:  # Linux answers EISDIR or EPERM for a directory
            raise self.refuse(member, "would replace a directory") from None

    def resolve(self, member: str, parts: list[str]) -> list[str]:
        """``parts`` with every link among them followed inside the tree as it is now; raises when
        the path leaves the destination (or loops)."""
        resolved: list[str] = []
        pending = deque(parts)
        hops = 0
        while pending:
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    raise self.refuse(member, "has a link target that resolves outside the destination")
                resolved.pop()
                continue
            target = self._readlink(resolved, part)
            if target is None:
                resolved.append(part)
                continue
            hops += 1
            if hops > _MAX_LINK_HOPS or target.startswith("/"):
                raise self.refuse(member, "has a link target that resolves outside the destination"
                                  if target.startswith("/") else "has links that loop")
            pending.extendleft(reversed(target.split("/")))
        return resolved

    def _readlink(self, parent: list[str], name: str) -> str | None:
        """The target of the link ``parent/name``, None when it is not a link (or not there yet)."""
        try:
            fd = self._open_dir("", parent, create=False)
        except StorageError:
            return None  # a parent that is not a directory: nothing beyond it exists either
        try:
            return os.readlink(name, dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)

    # -- members ------------------------------------------------------------------------------
    def _write(self, member: _Member, parent: int, leaf: str) -> None:
        if self.written + member.size > self.limits.max_bytes:
            raise self._too_big(member.name)
        assert member.open is not None
        out = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            with member.open() as source:
                while chunk := source.read(_CHUNK):
                    # Counted as written: a zip's declared sizes are whatever its author wrote.
                    self.written += len(chunk)
                    if self.written > self.limits.max_bytes:
                        raise self._too_big(member.name)
                    ratio = self.limits.max_ratio
                    if ratio and self.written > self.limits.ratio_floor and self.written > ratio * self.compressed:
                        raise StorageError(
                            f"{self.uri}: refusing the archive: at member {_shown(member.name)} it expands to more "
                            f"than {ratio} times its compressed size ({self.compressed} bytes) (the cap; "
                            f"{MAX_RATIO_VARIABLE} on the control plane sets it, 0 turns it off)", retriable=False)
                    os.write(out, chunk)
            os.fchmod(out, (member.mode & 0o755) | 0o600)
        finally:
            os.close(out)

    def _too_big(self, member: str) -> StorageError:
        cap = self.limits.max_bytes
        return StorageError(f"{self.uri}: refusing the archive: at member {_shown(member)} it expands past {cap} bytes "
                            f"({_human(cap)}), the cap on what an archive may unpack to; "
                            f"{MAX_BYTES_VARIABLE} on the control plane sets it", retriable=False)

    def _symlink(self, member: _Member, parent: int, parts: list[str]) -> None:
        target = member.linkname
        if not target or target.startswith("/"):
            raise self.refuse(member.name, f"is a link to {target!r}: only relative links inside the destination "
                                           "are kept")
        self.resolve(member.name, [*parts[:-1], *target.split("/")])
        os.symlink(target, parts[-1], dir_fd=parent)
        self.links.append((member.name, parts, target))

    def _hardlink(self, member: _Member, parent: int, leaf: str) -> None:
        if member.linkname.startswith("/"):
            raise self.refuse(member.name, f"is a hard link to {member.linkname!r}, outside the destination")
        source = self.resolve(member.name, [p for p in PurePosixPath(member.linkname).parts if p != "."])
        if not source:
            raise self.refuse(member.name, f"is a hard link to {member.linkname!r}, which is not a file")
        source_dir = self._open_dir(member.name, source[:-1], create=False)
        try:
            info = os.stat(source[-1], dir_fd=source_dir, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise self.refuse(member.name, f"is a hard link to {member.linkname!r}, which is not a file "
                                               "unpacked before it")
            os.link(source[-1], leaf, src_dir_fd=source_dir, dst_dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise self.refuse(member.name, f"is a hard link to {member.linkname!r}, which is not a file "
                                           "unpacked before it") from None
        finally:
            os.close(source_dir)

    def check_links(self) -> None:
        """Every link kept must still resolve inside: a later member can make a name an earlier
        link's target passes through into a link of its own."""
        for member, parts, target in self.links:
            self.resolve(member, [*parts[:-1], *target.split("/")])


def _shown(name: str) -> str:
    """A member's name for a message: quoted, and its middle left out past 160 characters (the
    names of path-length attacks run to kilobytes)."""
    return repr(name if len(name) <= 160 else f"{name[:100]}...{name[-50:]}")


def _dir_mode(mode: int) -> int:
    return (mode & 0o755) | 0o700


def _human(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count} B"
