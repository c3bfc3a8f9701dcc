"""What the node spends on each part of a pod's start and end, counted in the control plane.

One process-wide :data:`NODE_TIMINGS` holds, per part, how many times it ran and the seconds it
took in all (two integers a part: a lock and a ``perf_counter`` pair per step, nothing kept per
pod); ``/metrics`` shows them as ``trimaran_node_part_seconds`` and ``bench/bench_tuning.py``
prints them. The parts, in a pod's order:

- ``network.setup``: the pod's network namespace and address by CNI ADD (``network.adopt``: taken
  from the pool of namespaces made ahead, :mod:`trimaran.runtime.network`);
- ``run.files``: the run's directory (spec, hosts, resolv.conf, token, bundles' directories);
- ``shim.spawn``: fork and exec of the pod's shim (or, ``shim.handoff``, a pre-started shim
  handed its run directory);
- in the shim, from the times it records in ``shim.done``: ``shim.startup`` (spawned → its
  ``main`` runs: the interpreter and the import), ``shim.prepare`` (→ its first container starts:
  spec read, network namespace joined), per container ``cgroup.create``, ``container.run`` (crun
  started → its exit reaped: crun's setup and teardown and the container's own run) and
  ``cgroup.remove``, and ``shim.finish`` (the last exit → ``shim.done`` written);
- ``exit.noticed``: ``shim.done`` written → the control plane's waiter sees the shim gone;
- after the pod's end, off its path: ``network.teardown`` (CNI DEL and the namespace removed),
  ``network.recycle`` (its namespace scrubbed and put back in the pool instead), ``pool.fill``
  (one namespace made ahead), ``cgroup.release`` (what the runtime removes of a stopped pod).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NODE_TIMINGS", "PartTimings"]


class PartTimings:
    """Counts and total seconds per part; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[str, list[float]] = {}

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            entry = self._parts.setdefault(part, [0, 0.0])
            entry[0] += 1
            entry[1] += max(seconds, 0.0)

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Count the block's duration under ``part`` (when it raises too)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(part, time.perf_counter() - start)

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """``part -> (count, total seconds)``."""
        with self._lock:
            return {part: (int(count), total) for part, (count, total) in self._parts.items()}


NODE_TIMINGS = PartTimings()
