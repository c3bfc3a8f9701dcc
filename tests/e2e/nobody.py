"""A control plane started by an ordinary user (uid 65534), for the tests of what such a user's
node does: the escape suite and the ordinary user's documented subset."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.helpers import REPO

NOBODY = 65534


@contextlib.contextmanager
def nobody_plane() -> Iterator[ControlPlaneHandle]:
    """A control plane of uid 65534 in a home of its own, stopped with its pods and removed after."""
    from trimaran.server.daemon import stop_pods, stop_server

    # pytest's tmp_path is private to root; the ordinary user's home must be its own.
    base = Path(tempfile.mkdtemp(prefix="trimaran-nobody-"))
    home = base / "home"
    home.mkdir()
    os.chown(base, NOBODY, NOBODY)
    os.chown(home, NOBODY, NOBODY)
    try:
        try:
            yield start_as_nobody(home)
        finally:
            stop_server(home)
            stop_pods(home, grace_seconds=1.0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def start_as_nobody(home: Path) -> ControlPlaneHandle:
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    python, env = _interpreter_for_nobody(drop, dict(os.environ, TRIMARAN_HOME=str(home), HOME=str(home)))
    started = subprocess.run([*drop, python, "-m", "trimaran.cli", "server", "start"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr + (home / "server.log").read_text(errors="replace")
    return ControlPlaneHandle(home=home, env=env)


def _interpreter_for_nobody(drop: list[str], env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """This checkout's Python as uid 65534 can run it: ours, else (a pyenv under /root, mode 0700)
    the system's interpreter of the same version with our environment's packages on its path."""
    same_version = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    tried = []
    for python, packages in ((sys.executable, []), (same_version, [sysconfig.get_paths()["purelib"]])):
        path = os.pathsep.join(p for p in (str(REPO), *packages, os.environ.get("PYTHONPATH")) if p)
        candidate = dict(env, PYTHONPATH=path)
        # Through env(1), as the CLI spawns the server: exec by path, directories searched as that user.
        reach = subprocess.run([*drop, "env", python, "-c", "import trimaran.server"], cwd=REPO, env=candidate,
                               capture_output=True, text=True, timeout=60)
        if reach.returncode == 0:
            return python, candidate
        tried.append(f"{python}: {reach.stderr.strip().splitlines()[-1] if reach.stderr.strip() else reach.returncode}")
    pytest.skip(f"uid {NOBODY} can run no Python with this checkout's packages ({'; '.join(tried)})")
