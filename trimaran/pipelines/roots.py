"""Where a pipeline's files may lie: a run's pipeline root, an importer's URI and a step's output
artifacts must be local paths under ``$TRIMARAN_HOME/pipelines`` or a directory listed in
``TRIMARAN_PIPELINE_ROOTS`` (the control plane's environment), because the steps that read an
artifact get its path mounted."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["allowed_roots", "local_path_error", "resolve"]


def allowed_roots(home: Path) -> list[Path]:
    extra = [Path(p) for p in os.environ.get("TRIMARAN_PIPELINE_ROOTS", "").split(os.pathsep) if p]
    return [Path(home) / "pipelines", *extra]


def resolve(uri: str) -> Path | None:
    """The local path `uri` names (an absolute path or a ``file://`` URI), normalised; None for another URI."""
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return Path(os.path.normpath(path)) if path.startswith("/") else None


def local_path_error(uri: str, home: Path) -> str | None:
    """Why `uri` may not be used (it is not a local absolute path, or lies outside the allowed roots),
    as words to follow the URI; None when it may."""
    path = resolve(uri)
    if path is None:
        return "must be an absolute path or a file:// URI"
    roots = allowed_roots(home)
    if not any(path == root or root in path.parents for root in roots):
        return (f"is outside the allowed roots ({', '.join(map(str, roots))}; "
                "TRIMARAN_PIPELINE_ROOTS adds more)")
    return None
