"""``within``: a deadline on an await that keeps its task's cancellation, even when the awaited thing
finishes at the very moment the task is cancelled (where 3.11's ``asyncio.wait_for`` loses it)."""

from __future__ import annotations

import asyncio

import pytest

from trimaran._aio import within


def test_a_cancel_that_meets_the_answer_is_not_lost() -> None:
    async def main() -> None:
        inner = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(within(inner, 5))
        await asyncio.sleep(0)  # the task now waits on ``inner``
        inner.set_result("answer")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_prober_loop_ends_when_cancelled_between_answers() -> None:
    # The router's prober shape: a loop of short awaits with deadlines, each answered at once.
    async def prober(answers: asyncio.Queue) -> None:
        while True:
            await within(answers.get(), 1)

    async def main() -> None:
        answers: asyncio.Queue = asyncio.Queue()
        task = asyncio.create_task(prober(answers))
        for _ in range(50):
            await asyncio.sleep(0)
            answers.put_nowait(1)
        task.cancel()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
        assert task.cancelled()

    asyncio.run(main())


def test_the_deadline_raises_timeout_and_none_waits_for_ever() -> None:
    async def main() -> None:
        never = asyncio.get_running_loop().create_future()
        with pytest.raises(asyncio.TimeoutError):
            await within(never, 0.01)
        assert await within(asyncio.sleep(0, "late"), None) == "late"

    asyncio.run(main())
