"""Payload logging: inference requests and responses sent as CloudEvents to a sink URL, off the request path.

KServe's ``logger`` (``spec.predictor.logger: {url, mode}``; its agent's event types
``org.kubeflow.serving.inference.request`` / ``.response`` and the extensions ``inferenceservicename``,
``namespace``, ``component``, ``endpoint``) and Seldon's unit ``logger`` (its executor's
``io.seldon.serving.inference.request`` / ``.response``, extensions ``modelid``, ``inferenceservicename``,
``namespace``, ``endpoint``, ``requestid``). Events use CloudEvents' HTTP binary mode: attributes in
``ce-*`` headers, the payload as the body, sent as it came (no re-encoding).

A request only appends to a bounded queue (no await, no I/O); sender tasks on the same event loop post
over keep-alive connections. When the queue is full an event is dropped, never waited for: a slow or dead
sink cannot slow predictions. Outcomes are counted (sent, dropped for a full queue, failed at the sink).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from trimaran.serving.http import Request, Response
from trimaran.serving.router._http import Request as UpstreamRequest
from trimaran.serving.router._http import UpstreamPool

__all__ = ["KSERVE_TYPES", "MODES", "SELDON_TYPES", "LoggingApp", "PayloadLogger", "SinkConfig"]

log = logging.getLogger("trimaran.serving.logger")
MODES = ("all", "request", "response")
KSERVE_TYPES = ("org.kubeflow.serving.inference.request", "org.kubeflow.serving.inference.response")
SELDON_TYPES = ("io.seldon.serving.inference.request", "io.seldon.serving.inference.response")
QUEUE_CAPACITY = 1024
SENDERS = 2  # concurrent posts: one slow answer does not hold every event behind it
POST_TIMEOUT = 5.0


@dataclass(frozen=True)
class SinkConfig:
    """Where events go and what they say about their source.

    ``extensions`` are the CloudEvents extension attributes sent on every event (``ce-<name>`` headers).
    """

    url: str
    mode: str = "all"
    source: str = "http://localhost/"
    types: tuple[str, str] = KSERVE_TYPES
    extensions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"logger mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        parts = urlsplit(self.url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"logger url {self.url!r}: an http:// URL with a host is needed")

    @property
    def logs_requests(self) -> bool:
        return self.mode in ("all", "request")

    @property
    def logs_responses(self) -> bool:
        return self.mode in ("all", "response")


class PayloadLogger:
    """The queue and its senders for one sink; ``start`` in the event loop that will call ``request``/``response``.

    ``on_outcome(outcome)`` is called once per event with ``sent``, ``dropped`` or ``failed`` (for metrics).
    """

    def __init__(self, config: SinkConfig, *, capacity: int = QUEUE_CAPACITY, timeout: float = POST_TIMEOUT,
                 on_outcome: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.capacity = capacity
        self.timeout = timeout
        self.counts = {"sent": 0, "dropped": 0, "failed": 0}
        self._on_outcome = on_outcome
        self._queue: collections.deque[tuple[str, str, bytes, str, tuple[tuple[bytes, bytes], ...]]] = \
            collections.deque()
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        parts = urlsplit(config.url)
        port = parts.port or 80
        self._pool = UpstreamPool(f"{parts.hostname}:{port}", max_idle=SENDERS)
        self._host = (parts.netloc or f"{parts.hostname}:{port}").encode()
        self._target = ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).encode()
        self._static = [(b"ce-specversion", b"1.0"), (b"ce-source", config.source.encode())] + \
            [(b"ce-" + name.lower().encode(), value.encode()) for name, value in config.extensions.items()]

    def start(self) -> None:
        self._ready = asyncio.Event()
        self._tasks = [asyncio.get_running_loop().create_task(self._send_loop()) for _ in range(SENDERS)]

    async def close(self, timeout: float = 1.0) -> None:
        """Send what is queued (for up to ``timeout`` seconds), then stop."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._queue and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._pool.close()

    def request(self, event_id: str, body: bytes, content_type: str = "application/json",
                extensions: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        if self.config.logs_requests:
            self._put(self.config.types[0], event_id, body, content_type, extensions)

    def response(self, event_id: str, body: bytes, content_type: str = "application/json",
                 extensions: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        if self.config.logs_responses:
            self._put(self.config.types[1], event_id, body, content_type, extensions)

    def _put(self, ce_type: str, event_id: str, body: bytes, content_type: str,
             extensions: tuple[tuple[bytes, bytes], ...]) -> None:
        if len(self._queue) >= self.capacity:
            self._count("dropped")
            return
        self._queue.append((ce_type, event_id, body, content_type, extensions))
        self._ready.set()

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    async def _send_loop(self) -> None:
        while True:
            if not self._queue:
                self._ready.clear()
                await self._ready.wait()
                continue
            ce_type, event_id, body, content_type, extensions = self._queue.popleft()
            headers = [(b"content-type", content_type.encode()), (b"ce-id", event_id.encode()),
                       (b"ce-type", ce_type.encode()), *self._static, *extensions]
            try:
                answer = await self._pool.send(UpstreamRequest(b"POST", self._target, headers, body, True),
                                               self._host, self.timeout)
            except Exception as exc:  # noqa: BLE001 - a sink's failure is counted, never raised into serving
                log.debug("logger sink %s: %s", self.config.url, exc)
                self._count("failed")
                continue
            self._count("sent" if 200 <= answer.status < 300 else "failed")


def event_id(headers: dict[str, str]) -> str:
    """The request's id as KServe's agent takes it: ``X-Request-Id`` when the client sent one."""
    return headers.get("x-request-id") or str(uuid.uuid4())


class LoggingApp:
    """Wraps a model server's HTTP handler: inference POSTs are logged, everything else passes through."""

    def __init__(self, app: Callable[[Request], Any], logger: PayloadLogger,
                 is_inference: Callable[[str], bool]) -> None:
        self.app = app
        self.logger = logger
        self.is_inference = is_inference

    def __call__(self, req: Request) -> Response | Awaitable[Response]:
        if req.method != "POST" or not self.is_inference(req.path):
            return self.app(req)
        ident = event_id(req.headers)
        self.logger.request(ident, req.body, req.headers.get("content-type") or "application/json")
        result = self.app(req)
        if isinstance(result, Response):
            self.logger.response(ident, result.body, result.content_type)
            return result
        return self._after(result, ident)

    async def _after(self, pending: Awaitable[Response], ident: str) -> Response:
        response = await pending
        self.logger.response(ident, response.body, response.content_type)
        return response
