"""Helpers the whole suite shares."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def poll(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> T:
    """Wait for ``predicate`` to return something truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
