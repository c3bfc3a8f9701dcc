"""Fixtures of the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    """A runtime in a fresh home; whatever pods a test leaves are stopped."""
    rt = LocalRuntime(tmp_path / "home")
    yield rt
    for uid in rt.known_pods():
        rt.stop_pod(uid, grace_seconds=0)
