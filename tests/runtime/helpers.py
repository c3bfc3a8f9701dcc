"""Shared helpers for the runtime tests: waiting with deadlines and pod dicts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def make_pod(name: str, containers: list[dict], **spec: object) -> dict:
    """A Pod dict as the store would hand it over (with a fresh uid)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "labels": {"app": name}},
        "spec": {"containers": containers, **spec},
    }
