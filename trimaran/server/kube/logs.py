"""``pods/log``: a container's log, as the kubelet serves it through kube-apiserver.

A log is the live file and the files the shim rotated it into (the node's ``log_files``),
read as one stream: ``tailLines``, ``sinceSeconds`` and ``limitBytes`` count across them, and a
follow goes on into the new file when the live one is rotated.

The file holds the container's output as written (attach sessions read it raw), while a CRI
runtime's log holds whole lines: containerd writes a line once its newline comes, or a part of
``_PARTIAL_LINE`` bytes of a longer one. So while the container runs, a line it has begun is held
back here, as ``kubectl logs`` against containerd would not see it yet."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from starlette.responses import Response

from trimaran.api.tuning import METRICS_COLLECTOR_CONTAINER, METRICS_LOGS_ANNOTATION
from trimaran.runtime import NodeAPI
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
# A follow sends at most this much per read, so a log of many rotated files streams rather than
# being read into memory at once.
_FOLLOW_CHUNK = 1 << 20
# containerd's max_container_log_line_size: a line this long is logged in parts before its end.
_PARTIAL_LINE = 16 * 1024


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


def _whole(data: bytes) -> bytes:
    """``data`` without a line begun at its end (a part of ``_PARTIAL_LINE`` bytes or more is kept)."""
    cut = data.rfind(b"\n") + 1
    return data if len(data) - cut >= _PARTIAL_LINE else data[:cut]


def _tail_start(files: list[Path], lines: int, held: bool) -> tuple[int, int]:
    """``(file, offset)`` where the last ``lines`` lines of ``files``, read as one stream, begin;
    where ``held``, a line begun at the end is not one of them."""
    last = len(files) - 1
    if lines == 0:
        return last, _size(files[last])
    seen, at_end = 0, True
    for index in range(last, -1, -1):
        try:
            fh = files[index].open("rb")
        except FileNotFoundError:
            continue
        with fh:
            pos = fh.seek(0, os.SEEK_END)
            while pos > 0:
                step = min(_TAIL_BLOCK, pos)
                pos -= step
                fh.seek(pos)
                block = fh.read(step)
                if at_end:
                    if held:
                        block = _whole(block)
                    # A final newline ends the last line; it does not start another.
                    at_end = not block  # a block of only the held line: the end is further back
                    if block.endswith(b"\n"):
                        block = block[:-1]
                count = block.count(b"\n")
                if seen + count >= lines:
                    cut = len(block)
                    for _ in range(lines - seen):
                        cut = block.rindex(b"\n", 0, cut)
                    return index, pos + cut + 1
                seen += count
    return 0, 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _since_start(files: list[Path], seconds: int) -> tuple[int, int]:
    """Where the files written to within the last ``seconds`` begin (the files keep no times per line)."""
    horizon = time.time() - seconds
    for index, path in enumerate(files):
        try:
            if path.stat().st_mtime >= horizon:
                return index, 0
        except FileNotFoundError:
            continue
    return len(files) - 1, _size(files[-1])


class _LogCursor:
    """Reads a container's log across its rotations, from ``files[index]`` at ``offset``.

    The file being read stays open, so a rotation (the shim renames the live file, ``<n>.log.<k>``)
    loses nothing: once that file is read to its end and the live name no longer is it, reading
    goes on with the file written after it, found again by inode, as the shim may have rotated
    several times since."""

    def __init__(self, listing: Callable[[], list[Path]], files: list[Path], index: int, offset: int) -> None:
        """``listing()`` gives the log's files now (``files`` is one such answer), the live one last."""
        self.listing = listing
        self.live = files[-1]
        self._files = files[index:]
        self._offset = offset
        self._fh: BinaryIO | None = None

    def _open_next(self) -> bool:
        while self._files:
            path = self._files.pop(0)
            try:
                self._fh = path.open("rb")
            except FileNotFoundError:
                if path == self.live:
                    self._files.insert(0, path)  # not created yet (or being rotated): look again later
                    return False
                self._offset = 0  # rotated away before it was read: what it held is gone
                continue
            self._fh.seek(self._offset)
            self._offset = 0
            return True
        return False

    def _after_current(self) -> list[Path]:
        """The files written after the one being read, found by its inode among those kept now."""
        assert self._fh is not None
        inode = os.fstat(self._fh.fileno()).st_ino
        files = self.listing()
        for index, path in enumerate(files):
            try:
                if path.stat().st_ino == inode:
                    return files[index + 1:]
            except FileNotFoundError:
                continue
        return files  # deleted meanwhile: the oldest kept file is next

    def _rotated_away(self) -> bool:
        assert self._fh is not None
        try:
            return self.live.stat().st_ino != os.fstat(self._fh.fileno()).st_ino
        except FileNotFoundError:
            return False  # between the shim's rename and its new file: the new file comes

    def read(self, limit: int | None) -> bytes:
        """The next bytes (at most ``limit``), or b"" at the end of what has been written."""
        size = -1 if limit is None else limit
        while True:
            if self._fh is None and not self._open_next():
                return b""
            assert self._fh is not None
            chunk = self._fh.read(size)
            if chunk:
                return chunk
            if self._files:  # a rotated file read to its end
                self._fh.close()
                self._fh = None
                continue
            if not self._rotated_away():
                return b""
            chunk = self._fh.read(size)  # what it was given before it was renamed
            if chunk:
                return chunk
            self._files = self._after_current()
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _running(status: dict, container: str) -> bool:
    """Whether the pod's status has ``container`` running (its output may yet end a line)."""
    return any(cs.get("name") == container and "running" in (cs.get("state") or {})
               for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])])


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


def pod_log(hub: WatchHub, node: NodeAPI, pod: dict, options: LogOptions,
            hold: Callable[[], Callable[[], None]] | None = None) -> Response:
    """The response for one container's log, read from ``node``.

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
    if attempt is None:  # the latest, kept while a follow reads it
        attempts = node.log_attempts(namespace, name, container)
        attempt = attempts[-1] if attempts else 0
    listing = functools.partial(node.log_files, namespace, name, container, attempt)
    files = listing()
    path = files[-1]
    held = not options.previous and _running(status, container)
    if options.tail_lines is not None:
        index, start = _tail_start(files, options.tail_lines, held)
    elif options.since_seconds is not None:
        index, start = _since_start(files, options.since_seconds)
    else:
        index, start = 0, 0
    budget = options.limit_bytes

    if not options.follow:
        cursor = _LogCursor(listing, files, index, start)
        parts, remaining = [], budget
        try:
            while remaining is None or remaining > 0:
                chunk = cursor.read(remaining)
                if not chunk:
                    break
                parts.append(chunk)
                if remaining is not None:
                    remaining -= len(chunk)
        finally:
            cursor.close()
        data = b"".join(parts)
        if held and (remaining is None or remaining > 0):  # read to the end, not cut by limitBytes
            data = _whole(data)
        if options.timestamps:
            data, _ = _stamp(data, True, path.stat().st_mtime if path.exists() else time.time())
        return Response(data, media_type="text/plain")

    async def follow() -> AsyncIterator[bytes]:
        cursor = _LogCursor(listing, files, index, start)
        remaining, line_start = budget, True
        pause = _FOLLOW_POLL
        ended = (pod.get("status") or {}).get("phase") in _ENDED or options.previous
        watcher = None
        if not ended:
            watcher, ended = await _watch_pod(hub, pod)
        begun = b""  # a line read but not yet ended, held while the container may still end it
        try:
            while True:
                chunk = cursor.read(min(remaining, _FOLLOW_CHUNK) if remaining is not None else _FOLLOW_CHUNK)
                if chunk:
                    if remaining is not None:
                        remaining -= len(chunk)
                    chunk = begun + chunk
                    if not ended and (remaining is None or remaining > 0):
                        whole = _whole(chunk)
                        chunk, begun = whole, chunk[len(whole):]
                    else:
                        begun = b""
                    if chunk:
                        if options.timestamps:
                            chunk, line_start = _stamp(chunk, line_start, time.time())
                        yield chunk
                    if remaining is not None and remaining <= 0:
                        return
                    pause = _FOLLOW_POLL
                    continue
                if ended or watcher is None:  # what it wrote before it ended has been sent
                    if begun:
                        yield _stamp(begun, line_start, time.time())[0] if options.timestamps else begun
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
            cursor.close()
            if watcher is not None:
                watcher.close()

    release = hold() if hold is not None else (lambda: None)
    return HeldStream(follow(), release, media_type="text/plain")
