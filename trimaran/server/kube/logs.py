"""``pods/log``: a container's log file, as the kubelet serves it through kube-apiserver."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from pathlib import Path

from starlette.responses import Response

from trimaran.api.tuning import METRICS_COLLECTOR_CONTAINER, METRICS_LOGS_ANNOTATION
from trimaran.server.kube.errors import StatusError
from trimaran.server.kube.watch import HeldStream, SlowWatcher, Watcher, WatchHub
from trimaran.store import NotFound
from trimaran.store.base import WatchEvent
from trimaran.store.errors import Expired

__all__ = ["LogOptions", "pod_log"]

# A follow looks at the file's size every _FOLLOW_POLL seconds while it grows, backing off to
# _FOLLOW_IDLE while it does not; it ends when its pod does (a watch of the pod says when).
_FOLLOW_POLL = 0.1
_FOLLOW_IDLE = 0.5
_ENDED = ("Succeeded", "Failed")
_TAIL_BLOCK = 64 * 1024


class LogOptions:
    """The query parameters of ``GET .../pods/NAME/log``."""

    def __init__(self, container: str | None, follow: bool, previous: bool, tail_lines: int | None,
                 since_seconds: int | None, limit_bytes: int | None, timestamps: bool) -> None:
        for label, value in (("tailLines", tail_lines), ("sinceSeconds", since_seconds), ("limitBytes", limit_bytes)):
            if value is not None and value < (1 if label != "tailLines" else 0):
                raise StatusError(422, "Invalid", f"PodLogOptions is invalid: {label}: Invalid value: {value}: "
                                  f"must be greater than {'or equal to ' if label == 'tailLines' else ''}0")
        self.container, self.follow, self.previous = container, follow, previous
        self.tail_lines, self.since_seconds, self.limit_bytes = tail_lines, since_seconds, limit_bytes
        self.timestamps = timestamps


def _tail_offset(path: Path, lines: int) -> int:
    """The offset where the last ``lines`` lines of ``path`` begin."""
    if lines == 0:
        return path.stat().st_size
    with path.open("rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        pos, seen = end, 0
        # A final newline ends the last line; it does not start another.
        while pos > 0:
            step = min(_TAIL_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            if pos + step == end and block.endswith(b"\n"):
                block = block[:-1]
            count = block.count(b"\n")
            if seen + count >= lines:
                index = len(block)
                for _ in range(lines - seen):
                    index = block.rindex(b"\n", 0, index)
                return pos + index + 1
            seen += count
    return 0


def _stamp(chunk: bytes, at_line_start: bool, when: float) -> tuple[bytes, bool]:
    """Prefix each line of ``chunk`` with an RFC 3339 time (when it was read: the files keep none)."""
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode()
    out = bytearray()
    for line in chunk.splitlines(keepends=True):
        if at_line_start:
            out += stamp
        out += line
        at_line_start = line.endswith(b"\n")
    return bytes(out), at_line_start


async def _watch_pod(hub: WatchHub, pod: dict) -> tuple[Watcher, bool]:
    """A watch of ``pod`` from the state the caller saw, and whether it has ended meanwhile."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

    def mine(event: WatchEvent) -> bool:
        meta = event.object["metadata"]
        return event.object.get("kind") == "Pod" and meta["name"] == name and meta.get("namespace") == namespace

    try:
        return await hub.subscribe(int(pod["metadata"]["resourceVersion"]), mine), False
    except Expired:  # the change log no longer reaches back to it: watch from now, and look once
        watcher = await hub.subscribe(hub.store.current_revision(), mine)
        try:
            current = await asyncio.to_thread(hub.store.get, "Pod", namespace, name)
        except NotFound:
            return watcher, True
        return watcher, (current.get("status") or {}).get("phase") in _ENDED


def pod_log(hub: WatchHub, log_path: Callable[[str, str, str, int | None], Path], pod: dict,
            options: LogOptions, hold: Callable[[], Callable[[], None]] | None = None) -> Response:
    """The response for one container's log; ``log_path(ns, pod, container, attempt)`` finds the file.

    A follow learns that its pod ended from ``hub`` (a watch of that pod: nothing to read from the
    store while it waits); it is counted with ``hold()`` (which may refuse it) and released when its
    response ends.
    """
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    annotations = pod["metadata"].get("annotations") or {}
    containers = [c["name"] for c in pod["spec"].get("containers") or []]
    container = options.container or annotations.get("kubectl.kubernetes.io/default-container") or \
        (containers[0] if containers else None)
    if container == METRICS_COLLECTOR_CONTAINER and METRICS_LOGS_ANNOTATION in annotations:
        container = annotations[METRICS_LOGS_ANNOTATION]
    inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
    if container not in containers and container not in inits:
        raise StatusError.bad_request(f"container {container} is not valid for pod {name}")
    status = pod.get("status") or {}
    restarts = max((cs.get("restartCount", 0) for cs in [*(status.get("initContainerStatuses") or []),
                                                         *(status.get("containerStatuses") or [])]
                    if cs.get("name") == container), default=0)
    attempt = restarts - 1 if options.previous else None
    if options.previous and attempt < 0:
        raise StatusError.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    path = log_path(namespace, name, container, attempt)
    start = 0
    if path.exists():
        if options.tail_lines is not None:
            start = _tail_offset(path, options.tail_lines)
        elif options.since_seconds is not None and path.stat().st_mtime < time.time() - options.since_seconds:
            start = path.stat().st_size  # nothing written in the window
    budget = options.limit_bytes

    if not options.follow:
        data = b""
        if path.exists():
            with path.open("rb") as fh:
                fh.seek(start)
                data = fh.read(budget) if budget is not None else fh.read()
        if options.timestamps:
            data, _ = _stamp(data, True, path.stat().st_mtime if path.exists() else time.time())
        return Response(data, media_type="text/plain")

    async def follow() -> AsyncIterator[bytes]:
        offset, remaining, line_start = start, budget, True
        pause = _FOLLOW_POLL
        ended = (pod.get("status") or {}).get("phase") in _ENDED or options.previous
        watcher = None
        if not ended:
            watcher, ended = await _watch_pod(hub, pod)
        try:
            while True:
                chunk = b""
                try:
                    grown = path.stat().st_size > offset
                except FileNotFoundError:
                    grown = False
                if grown:
                    with path.open("rb") as fh:
                        fh.seek(offset)
                        chunk = fh.read(remaining if remaining is not None else -1)
                    offset += len(chunk)
                if chunk:
                    if remaining is not None:
                        remaining -= len(chunk)
                    if options.timestamps:
                        chunk, line_start = _stamp(chunk, line_start, time.time())
                    yield chunk
                    if remaining is not None and remaining <= 0:
                        return
                    pause = _FOLLOW_POLL
                    continue
                if ended or watcher is None:  # what it wrote before it ended has been sent
                    return
                try:
                    event = await watcher.next(pause)
                except (StopAsyncIteration, SlowWatcher):
                    return
                if event is None:
                    pause = min(pause * 2, _FOLLOW_IDLE)
                elif event.type == "DELETED" or (event.object.get("status") or {}).get("phase") in _ENDED:
                    ended = True
        finally:
            if watcher is not None:
                watcher.close()

    release = hold() if hold is not None else (lambda: None)
    return HeldStream(follow(), release, media_type="text/plain")
