"""An await with a deadline that never loses its task's cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when its task is cancelled at the
moment the inner awaitable finishes (python/cpython#86296): the cancellation is lost, and a
``while True`` loop awaiting it (a prober, a watch) then outlives its own shutdown.
``asyncio.timeout`` (3.11+) cancels in place, keeps the task's cancel count, and makes no task of
its own; 3.10 has only ``wait_for``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")

_timeout = getattr(asyncio, "timeout", None)


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, raising ``TimeoutError`` after ``seconds`` (None: no deadline)."""
    if _timeout is None:
        return await asyncio.wait_for(awaitable, seconds)
    async with _timeout(seconds):
        return await awaitable
