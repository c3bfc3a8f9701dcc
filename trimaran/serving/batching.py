"""How one model version's predictions run: inline, on a thread, and in adaptive batches.

A model whose predictions take well under a millisecond runs inline on the worker's event loop: handing it to
a thread would cost more than the prediction. A slower model runs on one thread per version, so the loop
keeps parsing requests, answering health checks and firing timeouts meanwhile (an inline call cannot be timed
out: it ends before the loop runs again). The choice follows moving averages of the measured predict time
(with hysteresis), starting on the thread.

Adaptive batching (``max_batch_size`` > 1) has MLServer's semantics: requests queue; a batch closes when it
holds ``max_batch_size`` requests or ``max_batch_latency`` has passed since its first request (0: at the end
of the current event-loop iteration, Triton's no-delay); a batch that closes while the previous one runs
starts as soon as that one ends. A batch of requests with the same input names, dtypes and trailing shapes
is concatenated on dimension 0 when the model is batchable, run once, and the outputs are split back by each
request's row count. Anything else (an unbatchable model, mixed shapes, outputs without the batch
dimension, an error in the merged call) runs request by request, so every caller gets its own rows and its
own errors.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from trimaran.serving.errors import Overloaded, RequestTimeout

# A model runs on the event loop when its calls average under INLINE_CPU seconds of CPU (thread time: on a busy
# machine, preemption inflates wall time, not CPU time) and under INLINE_WALL of wall time (a model that waits,
# on I/O or a lock, must not hold the loop); it goes back to its thread when wall time averages over THREAD_WALL.
INLINE_CPU = 0.001
INLINE_WALL = 0.005
THREAD_WALL = 0.010
SAMPLES_BEFORE_INLINE = 3


class Pending:
    """One request waiting for its outputs."""

    __slots__ = ("inputs", "outputs", "signature", "future", "rows", "timer")

    def __init__(self, inputs: dict[str, np.ndarray], outputs: list[str] | None, signature: str | None,
                 future: asyncio.Future) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.signature = signature
        self.future = future
        self.rows = _rows(inputs)
        self.timer: asyncio.TimerHandle | None = None


def _rows(inputs: dict[str, np.ndarray]) -> int | None:
    """The request's batch size: the common first dimension of its inputs, None if they disagree."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    return sizes.pop() if len(sizes) == 1 else None


class Dispatcher:
    """Runs one model version's predictions; see the module docstring.

    Args:
        predict: ``model.predict``.
        batchable: the model's rows are independent (``Model.batchable``).
        max_batch_size: requests per batch; 1 disables batching.
        max_batch_latency: seconds a request may wait for its batch to fill.
        max_queue: requests that may wait; more get 503 (Overloaded).
        timeout: seconds before a waiting request gets 504 (RequestTimeout).
        on_batch: ``(seconds, requests)`` after each predict call, for metrics.
        on_queue: ``(delta)`` when the number of waiting requests changes, for metrics.
    """

    def __init__(self, predict: Callable[..., dict[str, np.ndarray]], *, batchable: bool, max_batch_size: int,
                 max_batch_latency: float, max_queue: int, timeout: float,
                 on_batch: Callable[[float, int], None], on_queue: Callable[[int], None]) -> None:
        self._predict = predict
        self.batchable = batchable
        self.max_batch_size = max(1, max_batch_size)
        self.max_batch_latency = max(0.0, max_batch_latency)
        self.max_queue = max_queue
        self.timeout = timeout
        self._on_batch = on_batch
        self._on_queue = on_queue
        self._queue: collections.deque[Pending] = collections.deque()
        self._timer: asyncio.Handle | None = None
        self._busy = False
        self._inline = False
        self._wall = 0.0  # moving averages of a predict call's wall and CPU seconds
        self._cpu = 0.0
        self._samples = 0
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, inputs: dict[str, np.ndarray], outputs: list[str] | None,
               signature: str | None) -> dict[str, np.ndarray] | asyncio.Future:
        """The outputs at once (inline, unbatched, idle model) or a future of them.

        Raises Overloaded when the queue is full; the future fails with RequestTimeout after ``timeout``.
        """
        if self._inline and self.max_batch_size == 1 and not self._busy and not self._queue:
            return self._run_one(inputs, outputs, signature)
        if len(self._queue) >= self.max_queue:
            raise Overloaded(f"the model's queue is full ({self.max_queue} requests waiting); retry later")
        loop = asyncio.get_running_loop()
        item = Pending(inputs, outputs, signature, loop.create_future())
        item.timer = loop.call_at(loop.time() + self.timeout, _expire, item, self.timeout)
        self._queue.append(item)
        self._on_queue(1)
        if self._busy:
            return item.future
        if len(self._queue) >= self.max_batch_size:
            self._flush()
        elif self._timer is None:
            if self.max_batch_latency == 0:
                self._timer = loop.call_soon(self._flush)
            else:
                self._timer = loop.call_later(self.max_batch_latency, self._flush)
        return item.future

    # -- execution -------------------------------------------------------------------------------------------
    def _run_one(self, inputs: dict[str, np.ndarray], outputs: list[str] | None,
                 signature: str | None) -> dict[str, np.ndarray]:
        # Inline, only wall time can change the choice (back to the thread): a thread's CPU time is a system
        # call (no vDSO clock), read only while the model runs on its thread.
        cpu = None if self._inline else time.thread_time()
        started = time.perf_counter()
        try:
            return self._predict(inputs, signature_name=signature, outputs=outputs)
        finally:
            self._measured(time.perf_counter() - started, None if cpu is None else time.thread_time() - cpu, 1)

    def _measured(self, seconds: float, cpu_seconds: float | None, requests: int) -> None:
        """Count a predict call; ``cpu_seconds`` None: not measured (the CPU average stays)."""
        self._on_batch(seconds, requests)
        self._samples += 1
        if self._samples == 1:
            self._wall, self._cpu = seconds, cpu_seconds or 0.0
        else:
            self._wall = 0.8 * self._wall + 0.2 * seconds
            if cpu_seconds is not None:
                self._cpu = 0.8 * self._cpu + 0.2 * cpu_seconds
        if self._inline and self._wall > THREAD_WALL:
            self._inline = False
        elif (not self._inline and self._samples >= SAMPLES_BEFORE_INLINE and self._cpu < INLINE_CPU
              and self._wall < INLINE_WALL):
            self._inline = True

    def _take(self) -> list[Pending]:
        batch: list[Pending] = []
        while self._queue and len(batch) < self.max_batch_size:
            item = self._queue.popleft()
            self._on_queue(-1)
            if not item.future.done():  # timed out while waiting: not worth running
                batch.append(item)
        return batch

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._busy:
            return
        batch = self._take()
        if not batch:
            return
        if self._inline:
            self._deliver(batch, self._run_batch(batch))
            self._after_batch()
            return
        self._busy = True
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="predict")
        loop = asyncio.get_running_loop()
        done = loop.run_in_executor(self._executor, self._run_batch, batch)
        done.add_done_callback(lambda f: self._thread_done(batch, f))

    def _thread_done(self, batch: list[Pending], done: asyncio.Future) -> None:
        self._busy = False
        self._deliver(batch, done.result())
        self._after_batch()

    def _after_batch(self) -> None:
        # Requests that queued while the batch ran have waited already: start the next batch now.
        if self._queue and self._timer is None:
            self._timer = asyncio.get_running_loop().call_soon(self._flush)

    @staticmethod
    def _deliver(batch: list[Pending], results: list[Any]) -> None:
        for item, result in zip(batch, results, strict=True):
            if item.timer is not None:
                item.timer.cancel()
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _run_batch(self, batch: list[Pending]) -> list[Any]:
        """Outputs (or the exception) per request; runs on the loop or the version's thread."""
        if len(batch) > 1 and self._mergeable(batch):
            merged = self._run_merged(batch)
            if merged is not None:
                return merged
        results: list[Any] = []
        for item in batch:
            try:
                results.append(self._run_one(item.inputs, item.outputs, item.signature))
            except Exception as exc:
                results.append(exc)
        return results

    def _mergeable(self, batch: list[Pending]) -> bool:
        if not self.batchable:
            return False
        first = batch[0]
        if first.rows is None:
            return False
        spec = {name: (a.dtype, a.shape[1:]) for name, a in first.inputs.items()}
        for item in batch[1:]:
            if item.rows is None or item.signature != first.signature or item.outputs != first.outputs:
                return False
            if item.inputs.keys() != spec.keys():
                return False
            for name, array in item.inputs.items():
                if (array.dtype, array.shape[1:]) != spec[name]:
                    return False
        return True

    def _run_merged(self, batch: list[Pending]) -> list[Any] | None:
        first = batch[0]
        merged = {name: np.concatenate([item.inputs[name] for item in batch]) for name in first.inputs}
        total = sum(item.rows for item in batch)
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            outputs = self._predict(merged, signature_name=first.signature, outputs=first.outputs)
        except Exception:
            return None  # one request's bad rows must not fail the others: run them one by one
        finally:
            self._measured(time.perf_counter() - started, time.thread_time() - cpu, len(batch))
        if not all(np.ndim(a) and len(a) == total for a in outputs.values()):
            return None
        results = []
        start = 0
        for item in batch:
            end = start + item.rows
            results.append({name: array[start:end] for name, array in outputs.items()})
            start = end
        return results

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def _expire(item: Pending, timeout: float) -> None:
    if not item.future.done():
        item.future.set_exception(RequestTimeout(f"no answer within the request timeout ({timeout:g} s)"))
