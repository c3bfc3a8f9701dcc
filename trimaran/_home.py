"""Where a control plane keeps its state: ``$TRIMARAN_HOME``, else ``~/.trimaran``. Every layer may
ask (the API checks paths against it, the node and the store live under it)."""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    return Path(os.environ.get("TRIMARAN_HOME", Path.home() / ".trimaran")).expanduser()
