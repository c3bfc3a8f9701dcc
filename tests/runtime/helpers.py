"""Shared helpers for the runtime tests: waiting with deadlines and pod dicts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from tests.helpers import poll

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    return poll(predicate, timeout=timeout, interval=0.02, what=what)


def make_pod(name: str, containers: list[dict], **spec: object) -> dict:
    """A Pod dict as the store would hand it over (with a fresh uid)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "labels": {"app": name}},
        "spec": {"containers": containers, **spec},
    }
