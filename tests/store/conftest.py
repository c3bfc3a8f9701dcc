"""Fixtures for the store tests: a real SQLite file per test, and a way to run a second process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import trimaran.store
from trimaran.store import SQLiteStore

# The directory holding the trimaran package, so a child process imports this checkout.
_SOURCE_ROOT = str(Path(trimaran.store.__file__).resolve().parents[2])


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "trimaran.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db_path)
    yield s
    s.close()


def make_obj(
    name: str,
    kind: str = "PyTorchJob",
    namespace: str = "default",
    spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal object of ``kind``."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec if spec is not None else {"replicas": 1},
    }
    if status is not None:
        obj["status"] = status
    return obj


@pytest.fixture
def obj() -> Callable[..., dict[str, Any]]:
    return make_obj


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SOURCE_ROOT, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a Python snippet in a child process that imports this checkout's trimaran."""

    def run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            env=_child_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    return run


@pytest.fixture
def spawn_python() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start a Python snippet in a child process (stdout piped); killed at teardown if still running."""
    children: list[subprocess.Popen[str]] = []

    def spawn(code: str, *args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            env=_child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout:
            child.stdout.close()
