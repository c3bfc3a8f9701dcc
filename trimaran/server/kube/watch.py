"""Watches without a thread each.

One thread follows the store's change log and hands every change to the event loop, where each
open watch is a queue: a thousand idle watches cost a thousand small objects, not a thousand
threads, and a client that goes away frees its watch at once. Recent changes are kept in memory
so a watch that resumes from a recent resourceVersion replays from there; an older one reads the
store's change log (or gets 410 Expired when the log no longer reaches back).

Long-lived requests (watches and log follows) are counted per client, and bounded: one more than
``Streams.per_client`` is answered 429 TooManyRequests with Retry-After, so a pod looping on
``watch`` cannot hold every file descriptor of the control plane. A stream is counted from the
moment it is admitted until its response ends, however it ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from trimaran._aio import within
from trimaran.server.kube.errors import StatusError
from trimaran.store import Store
from trimaran.store.base import WatchEvent
from trimaran.store.errors import Expired

log = logging.getLogger(__name__)

__all__ = ["HeldStream", "SlowWatcher", "Streams", "WatchHub", "Watcher", "metrics_exposition"]

_RECENT = 20_000
# Events a watcher may fall behind by before it is closed with 410, as kube-apiserver closes a
# watcher whose buffer is full; the client lists again.
_QUEUE_LIMIT = 10_000


# Watches and log follows one client (token) may hold open at once: far more than kubectl, an
# operator's informers or a training job's pods need, and few enough that one client cannot take
# every connection the process can hold.
MAX_STREAMS_PER_CLIENT = 2048


class Streams:
    """The open long-lived requests, counted per client and per kind (``watch``, ``log``)."""

    def __init__(self, per_client: int = MAX_STREAMS_PER_CLIENT) -> None:
        self.per_client = per_client
        self._by_client: Counter[str] = Counter()
        self.open: Counter[str] = Counter()  # by kind, for /metrics

    def hold(self, client: str, kind: str) -> Callable[[], None]:
        """Count one more ``kind`` stream of ``client``; return what releases it (once).

        Raises:
            StatusError: 429 when ``client`` already holds ``per_client`` streams.
        """
        if self._by_client[client] >= self.per_client:
            raise StatusError(429, "TooManyRequests",
                              f"Too many requests, please try again later: {client} holds {self.per_client} "
                              f"watches and log follows, the most one client may have open",
                              {"retryAfterSeconds": 1}, headers={"Retry-After": "1"})
        self._by_client[client] += 1
        self.open[kind] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open[kind] -= 1
                self._by_client[client] -= 1
                if not self._by_client[client]:
                    del self._by_client[client]

        return release

    def hold_for(self, request: Request, kind: str) -> Callable[[], None]:
        """:meth:`hold` for the caller of ``request`` (its token's principal)."""
        principal = getattr(request.state, "principal", None)
        return self.hold(principal.name if principal is not None else "anonymous", kind)


class HeldStream(StreamingResponse):
    """A streaming response that runs ``release`` when it ends, however it ends (also when the
    client went away before the first byte, when the body's own ``finally`` never runs)."""

    def __init__(self, content: Any, release: Callable[[], None], media_type: str) -> None:
        super().__init__(content, media_type=media_type)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


class SlowWatcher(Exception):
    """The watcher fell too far behind; answer with an Expired error event."""


class _Subscription:
    def __init__(self, since: int, accepts: Callable[[WatchEvent], bool]) -> None:
        self.since = since
        self.accepts = accepts
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.overflowed = False

    def offer(self, event: WatchEvent) -> None:
        if event.revision <= self.since or self.overflowed or not self.accepts(event):
            return
        if self.queue.qsize() >= _QUEUE_LIMIT:
            self.overflowed = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(event)


class Watcher:
    """One open watch: its pending changes, oldest first."""

    def __init__(self, hub: WatchHub, sub: _Subscription, pending: deque[WatchEvent]) -> None:
        self._hub, self._sub, self._pending = hub, sub, pending
        self.closed = False

    async def next(self, timeout: float | None) -> WatchEvent | None:
        """The next change, or None when ``timeout`` seconds pass without one.

        Raises:
            StopAsyncIteration: the hub closed (the server stops).
            SlowWatcher: the watcher fell too far behind.
        """
        while True:
            if self._pending:
                event = self._pending.popleft()
            else:
                try:
                    event = await within(self._sub.queue.get(), timeout)
                except asyncio.TimeoutError:
                    return None
                if event is None:
                    if self._sub.overflowed:
                        raise SlowWatcher()
                    raise StopAsyncIteration
            if event.revision > self._sub.since:
                self._sub.since = event.revision
                return event

    def close(self) -> None:
        self._hub._unsubscribe(self._sub)
        self.closed = True


class WatchHub:
    """Fans the store's changes out to the watches of one event loop."""

    def __init__(self, store: Store, streams: Streams | None = None) -> None:
        self.store = store
        self.streams = streams or Streams()
        self._subs: set[_Subscription] = set()
        self._recent: deque[WatchEvent] = deque(maxlen=_RECENT)
        self._stop = threading.Event()
        # Set while anyone watches: with no watch open the change log is not read at all (a busy
        # control plane writes thousands of changes nobody would look at).
        self._active = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._since = 0  # where the thread resumes reading the log
        self.position = 0  # the revision of the last change handed to the loop

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._since = self.position = self.store.current_revision()
        self._thread = threading.Thread(target=self._follow, name="watch-hub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._active.set()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._close_all)

    def _close_all(self) -> None:
        for sub in list(self._subs):
            sub.queue.put_nowait(None)

    def _wake(self) -> None:
        """Called on the loop when a watch opens: an idle hub starts from the log's head."""
        if not self._active.is_set():
            self._since = self.position = self.store.current_revision()
            self._recent.clear()
            self._active.set()

    def _follow(self) -> None:
        while not self._stop.is_set() and not self.store.closed:
            if not self._active.wait(timeout=1.0):
                continue
            since = self._since
            try:
                for event in self.store.watch(since=since, stop=self._stop, timeout=1.0):
                    since = event.revision
                    self._loop.call_soon_threadsafe(self._dispatch, event)  # type: ignore[union-attr]
            except Expired:
                # The log was compacted past us (the loop stalled for very long): watchers must relist.
                since = self.store.current_revision()
                self._loop.call_soon_threadsafe(self._expire_all, since)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - a closed store at shutdown; anything else is logged
                if not self._stop.is_set():
                    log.exception("the watch hub lost the store's change log; retrying")
                    self._stop.wait(0.5)
            self._since = since
            if not self._subs:
                self._active.clear()
                if self._subs:  # a watch opened meanwhile: it must not wait for the next one
                    self._active.set()

    def _expire_all(self, revision: int) -> None:
        self._recent.clear()
        self.position = revision
        for sub in list(self._subs):
            sub.overflowed = True
            sub.queue.put_nowait(None)

    def _dispatch(self, event: WatchEvent) -> None:
        self._recent.append(event)
        self.position = event.revision
        for sub in self._subs:
            sub.offer(event)

    async def subscribe(self, since: int, accepts: Callable[[WatchEvent], bool]) -> Watcher:
        """A watcher of every accepted change after revision ``since``; close it when done.

        Raises:
            Expired: ``since`` is older than the store's change log reaches.
        """
        sub = _Subscription(since, accepts)
        self._subs.add(sub)
        self._wake()
        try:
            backlog = await self._backlog(since, accepts)
        except BaseException:
            self._subs.discard(sub)
            raise
        # Changes the hub delivered while the backlog was read are in the deque (and the queue).
        after = backlog[-1].revision if backlog else since
        replay = [e for e in self._recent if e.revision > after and accepts(e)]
        return Watcher(self, sub, deque(backlog + replay))

    def _unsubscribe(self, sub: _Subscription) -> None:
        self._subs.discard(sub)

    @property
    def watchers(self) -> int:
        """How many watches are open."""
        return len(self._subs)

    async def _backlog(self, since: int, accepts: Callable[[WatchEvent], bool]) -> list[WatchEvent]:
        """Changes after ``since`` that the in-memory window does not hold."""
        oldest = self._recent[0].revision if self._recent else self.position + 1
        if since + 1 >= oldest or since >= self.position:
            return []
        upto = oldest - 1

        def read() -> list[WatchEvent]:
            out = []
            for event in self.store.watch(since=since, timeout=0):
                if event.revision > upto:
                    break
                if accepts(event):
                    out.append(event)
            return out

        return await asyncio.to_thread(read)


class _Collector:
    def __init__(self, hub: WatchHub) -> None:
        self.hub = hub

    def collect(self) -> Any:
        # kube-apiserver's gauge, with the labels that tell these two apart.
        gauge = GaugeMetricFamily("apiserver_longrunning_requests", "Gauge of all active long-running apiserver "
                                  "requests broken out by verb and subresource.", labels=["verb", "subresource"])
        gauge.add_metric(["WATCH", ""], self.hub.streams.open["watch"])
        gauge.add_metric(["GET", "log"], self.hub.streams.open["log"])
        for sub in ("exec", "attach", "portforward"):  # kube-apiserver counts these as CONNECT
            gauge.add_metric(["CONNECT", sub], self.hub.streams.open[sub])
        yield gauge
        yield GaugeMetricFamily("trimaran_watch_hub_watchers", "Watches the watch hub hands changes to.",
                                value=self.hub.watchers)


def metrics_exposition(hub: WatchHub, *collectors: Any) -> tuple[bytes, str]:
    """The control plane's ``/metrics`` (Prometheus' text format, with ``collectors``' series) and its media type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(hub))
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST
