"""``python -m trimaran.serving.graph --config JSON --port N``: an InferenceGraph's router, as KServe's
``cmd/router``: every POST runs the ``root`` node on its body and answers what the graph answers.

Routers: **Sequence** runs its steps in order (``data: $response`` sends the previous answer, else the
original request; ``mapPredictionsToInstances`` turns a previous ``predictions`` into ``instances``); a step
whose ``condition`` does not exist in the previous answer (the request, for the first step) ends the sequence
with that answer. **Switch** runs the first step whose condition exists in the request (404 when none does).
**Ensemble** runs every step at once and answers ``{step name or index: answer}``. **Splitter** runs one step
drawn by weight. A failed step (non-2xx, or unreachable: 502) that is ``Hard`` ends the graph with its answer
and status; a ``Soft`` one (the default) does not.

The same graph also runs inside the InferenceService router (`trimaran.serving.router`), which passes
``local``: a step whose service the router itself serves is dispatched there in-process, without a
connection or a second pass through the router; this process then answers only what reaches it directly.

The configuration (JSON, written by the InferenceGraph controller, service URLs already resolved)::

    {"name": "g", "timeout": 60, "nodes": {"root": {"routerType": "Sequence", "steps": [
        {"name": "a", "url": "http://127.0.0.1:8001/v1/models/a:predict", "data": "$request",
         "condition": "predictions.0", "dependency": "Hard"}, {"node": "other"}]}}}
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from trimaran.serving.graph.gjson import Expression, exists, parse
from trimaran.serving.http import HttpServer, Request, Response
from trimaran.serving.router._http import Request as UpstreamRequest
from trimaran.serving.router._http import UpstreamError, UpstreamPool

__all__ = ["GraphRouter", "main"]

log = logging.getLogger("trimaran.serving.graph")
MAX_BODY = 64 * 1024 * 1024
_JSON = [(b"content-type", b"application/json")]


@dataclass
class Answer:
    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class Step:
    label: str  # its name, else its index, as Ensemble keys it
    node: str | None
    address: str  # host:port
    host: bytes
    target: bytes
    data: str
    condition: Expression | None
    hard: bool
    weight: int
    map_predictions: bool


LocalStep = Callable[["Step", bytes], "Awaitable[Answer] | None"]


class GraphRouter:
    """Runs one graph; ``__call__`` is the HTTP handler. ``local(step, body)``, when given, answers a step in
    process (an awaitable) or returns None to have it sent over HTTP."""

    def __init__(self, config: dict[str, Any], local: LocalStep | None = None) -> None:
        self.local = local
        self.name = str(config.get("name") or "graph")
        self.timeout = float(config.get("timeout") or 60)
        self.pools: dict[str, UpstreamPool] = {}
        self.nodes: dict[str, tuple[str, list[Step]]] = {}
        for name, node in config["nodes"].items():
            steps = [self._step(i, step) for i, step in enumerate(node["steps"])]
            self.nodes[name] = (node["routerType"], steps)

    def _step(self, index: int, spec: dict[str, Any]) -> Step:
        address = host = target = ""
        if spec.get("url"):
            parts = urlsplit(spec["url"])
            host = parts.netloc
            address = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            self.pools.setdefault(address, UpstreamPool(address))
        condition = spec.get("condition")
        return Step(str(spec.get("name") or index), spec.get("node"), address, host.encode(), target.encode(),
                    spec.get("data") or "$request", parse(condition) if condition else None,
                    spec.get("dependency") == "Hard", int(spec.get("weight") or 0),
                    bool(spec.get("mapPredictionsToInstances")))

    async def __call__(self, req: Request) -> Response:
        if req.method != "POST":
            return Response(200, b'{"status": "alive"}')
        answer = await self.answer(req.body)
        return Response(answer.status, answer.body)

    async def answer(self, body: bytes) -> Answer:
        """The graph's answer to a request body (the ``root`` node's)."""
        try:
            return await self.run("root", body)
        except Exception as exc:  # a bug here must still answer the client, in the graph's error shape
            log.exception("graph %s failed", self.name)
            return _error(500, f"graph {self.name}: {type(exc).__name__}: {exc}")

    async def run(self, node: str, body: bytes) -> Answer:
        router, steps = self.nodes[node]
        if router == "Sequence":
            return await self._sequence(steps, body)
        if router == "Switch":
            request = _loads(body)
            for step in steps:
                if step.condition is None or exists(step.condition, request):
                    return await self._call(step, body)
            return _error(404, f"node {node}: no step's condition matched the request")
        if router == "Splitter":
            step = random.choices(steps, weights=[s.weight for s in steps])[0]
            return await self._call(step, body)
        answers = await asyncio.gather(*(self._call(step, body) for step in steps))
        for step, answer in zip(steps, answers, strict=True):
            if step.hard and not answer.ok:
                return answer
        merged = {step.label: _loads_or_text(answer.body) for step, answer in zip(steps, answers, strict=True)}
        return Answer(200, orjson.dumps(merged))

    async def _sequence(self, steps: list[Step], body: bytes) -> Answer:
        previous: Answer | None = None
        for step in steps:
            if step.condition is not None:
                seen = previous.body if previous is not None else body
                if not exists(step.condition, _loads(seen)):
                    return previous or Answer(200, body)
            sent = body
            if step.data == "$response" and previous is not None:
                sent = previous.body
                if step.map_predictions:
                    sent = _predictions_to_instances(sent)
            previous = await self._call(step, sent)
            if step.hard and not previous.ok:
                return previous
        assert previous is not None  # validation: a node has steps
        return previous

    async def _call(self, step: Step, body: bytes) -> Answer:
        if step.node is not None:
            return await self.run(step.node, body)
        if self.local is not None:
            pending = self.local(step, body)
            if pending is not None:
                return await pending
        request = UpstreamRequest(b"POST", step.target, _JSON, body, True)
        try:
            reply = await self.pools[step.address].send(request, step.host, self.timeout)
        except (UpstreamError, OSError) as exc:
            return _error(502, f"step {step.label}: {exc}")
        except TimeoutError:
            return _error(504, f"step {step.label}: no answer within {self.timeout:g}s")
        return Answer(reply.status, reply.body)


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _loads_or_text(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")


def _predictions_to_instances(body: bytes) -> bytes:
    doc = _loads(body)
    if isinstance(doc, dict) and "predictions" in doc:
        return orjson.dumps({"instances": doc["predictions"]})
    return body


def _error(status: int, message: str) -> Answer:
    return Answer(status, orjson.dumps({"error": message}))


async def _serve(router: GraphRouter, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    http = HttpServer(router, max_body=MAX_BODY)
    await http.start(host, port, reuse_port=False)
    log.info("serving graph %s on %s:%d", router.name, host, port)
    await stop.wait()
    await http.shutdown(5.0)
    for pool in router.pools.values():
        pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trimaran.serving.graph")
    parser.add_argument("--config", default=os.environ.get("INFERENCE_GRAPH_CONFIG"), help="the graph, as JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s graph %(levelname)s %(message)s")
    if not args.config:
        parser.error("--config (or INFERENCE_GRAPH_CONFIG) is required")
    import uvloop

    router = GraphRouter(json.loads(args.config))
    gc.freeze()  # what start-up created lives as long as the process: keep full collections short
    uvloop.run(_serve(router, args.host, args.port))
    return 0
