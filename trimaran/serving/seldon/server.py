"""``python -m trimaran.serving.seldon --config JSON --port N``: one predictor's graph behind Seldon's
REST API, one process per replica.

Paths (also under the ingress prefix ``/seldon/<namespace>/<name>``): ``POST /api/v1.0/predictions``,
``POST /api/v1.0/feedback``, ``GET /api/v1.0/metadata[/<unit>]``, ``GET /health/ping``, ``GET /ready``; with
``protocol: tensorflow`` also TF Serving's ``POST /v1/models/<name>:predict`` (``instances`` in,
``predictions`` out) running the whole graph.

The configuration (JSON, written by the SeldonDeployment controller)::

    {"name": "my-sdep", "namespace": "ns", "predictor": "default", "protocol": "seldon",
     "graph": {...the predictor's graph, units' ``logger`` included...},
     "sources": {"clf": {"modelDir": "/mnt/seldon/clf"}, "remote": {"modelUri": "gs://b/m"},
                 "mine": {"class": "MyModel", "paths": ["/mnt/code"]}}}
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson

from trimaran.jsonbody import BodyError
from trimaran.jsonbody import loads as load_json
from trimaran.serving.http import HttpServer, Request, Response
from trimaran.serving.logger import SELDON_TYPES, PayloadLogger, SinkConfig
from trimaran.serving.seldon.graph import Graph, walk_config
from trimaran.serving.seldon.protocol import SeldonError
from trimaran.serving.seldon.units import make_unit

__all__ = ["SeldonApp", "build_graph", "main"]

log = logging.getLogger("trimaran.serving.seldon")
MAX_BODY = 64 * 1024 * 1024


def build_graph(config: dict[str, Any]) -> Graph:
    """The executor for ``config``; a remote ``modelUri`` is downloaded with `trimaran.serving.storage.fetch`."""
    sources = {name: dict(source) for name, source in (config.get("sources") or {}).items()}
    for source in sources.values():
        if source.get("modelUri") and not source.get("modelDir"):
            from trimaran.serving.storage import fetch

            cache = Path(os.environ.get("TRIMARAN_STORAGE_CACHE") or Path(tempfile.gettempdir()) / "seldon-models")
            source["modelDir"] = str(fetch(source["modelUri"], cache))
    predictor = str(config.get("predictor") or config.get("name") or "graph")
    return Graph(predictor, make_unit(config["graph"], sources), _loggers(config))


def _loggers(config: dict[str, Any]) -> dict[str, PayloadLogger]:
    """A payload logger per unit with a ``logger.url`` (Seldon's executor's event types and extensions)."""
    name = str(config.get("name") or "")
    namespace = str(config.get("namespace") or "default")
    predictor = str(config.get("predictor") or "")
    loggers = {}
    for unit in walk_config(config["graph"]):
        spec = unit.get("logger") or {}
        if spec.get("url"):
            loggers[unit["name"]] = PayloadLogger(SinkConfig(
                spec["url"], spec.get("mode") or "all", f"http://{name}-{predictor}.{namespace}:8000/", SELDON_TYPES,
                {"modelid": unit["name"], "inferenceservicename": name, "namespace": namespace,
                 "endpoint": predictor}))
    return loggers


class SeldonApp:
    """The HTTP handler: Seldon's routes over one `Graph`."""

    def __init__(self, graph: Graph, protocol: str = "seldon") -> None:
        self.graph = graph
        self.protocol = protocol

    def __call__(self, req: Request) -> Response:
        path = req.path
        if path.startswith("/seldon/"):
            parts = path.split("/", 4)  # "", "seldon", namespace, name, rest
            path = "/" + (parts[4] if len(parts) > 4 else "")
        try:
            return self._route(req, path.rstrip("/") or "/")
        except SeldonError as exc:
            return _json(exc.body(), exc.http_status)

    def _route(self, req: Request, path: str) -> Response:
        if path in ("/api/v1.0/predictions", "/api/v0.1/predictions"):
            _method(req, "POST")
            return _json(self.graph.predict(_body(req)))
        if path in ("/api/v1.0/feedback", "/api/v0.1/feedback"):
            _method(req, "POST")
            return _json(self.graph.feedback(_body(req)))
        if path == "/api/v1.0/metadata":
            return _json(self.graph.metadata())
        if path.startswith("/api/v1.0/metadata/"):
            return _json(self.graph.metadata(path.rsplit("/", 1)[1]))
        if path in ("/health/ping", "/live", "/ready", "/health/status"):
            return Response(200, b"pong", "text/plain")
        if self.protocol == "tensorflow" and path.startswith("/v1/models/"):
            return self._tf_serving(req, path)
        raise SeldonError(f"no route {req.method} {req.path}", 404, "NOT_FOUND")

    def _tf_serving(self, req: Request, path: str) -> Response:
        """TF Serving's REST predict over the whole graph (as Seldon's ``/v1/models/:predict``)."""
        if not path.endswith(":predict"):
            return _json({"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                                    "status": {"error_code": "OK", "error_message": ""}}]})
        _method(req, "POST")
        body = _body(req)
        if not isinstance(body, dict) or not ({"instances", "inputs"} & set(body)):
            return _json({"error": "the request needs instances or inputs"}, 400)
        try:
            out = self.graph.predict({"data": {"ndarray": body.get("instances", body.get("inputs"))}})
        except SeldonError as exc:
            return _json({"error": exc.info}, exc.http_status)
        data = out.get("data") or {}
        return _json({"predictions": data.get("ndarray", out.get("jsonData"))})


def _method(req: Request, allowed: str) -> None:
    if req.method != allowed:
        raise SeldonError(f"{req.path} takes {allowed}, not {req.method}", 405, "METHOD_NOT_ALLOWED")


def _body(req: Request) -> Any:
    """JSON, or a form with the message in its ``json`` field (what Seldon's client sends a microservice)."""
    body = req.body
    if req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = parse_qs(body.decode("utf-8", "replace"))
        if "json" not in fields:
            raise SeldonError("a form body carries the SeldonMessage in its json field")
        body = fields["json"][0].encode()
    try:
        return load_json(body)
    except BodyError as exc:
        raise SeldonError(f"the body is not JSON: {exc}") from None


def _json(obj: Any, status: int = 200) -> Response:
    return Response(status, orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY))


def _crashed(_req: Request, exc: BaseException) -> Response:
    log.exception("request failed", exc_info=exc)
    return _json(SeldonError(f"internal error: {type(exc).__name__}: {exc}", 500,
                             "MICROSERVICE_INTERNAL_ERROR").body(), 500)


async def _serve(app: SeldonApp, host: str, port: int, reuse_port: bool = False) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    for payload_logger in app.graph.loggers.values():
        payload_logger.start()
    http = HttpServer(app, max_body=MAX_BODY, on_crash=_crashed)
    await http.start(host, port, reuse_port=reuse_port)
    log.info("serving %s on %s:%d", app.graph.name, host, port)
    await stop.wait()
    await http.shutdown(5.0)
    await asyncio.gather(*(payload_logger.close() for payload_logger in app.graph.loggers.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trimaran.serving.seldon")
    parser.add_argument("--config", default=os.environ.get("SELDON_GRAPH_CONFIG"),
                        help="the graph configuration: JSON, or @FILE")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "9000")))
    parser.add_argument("--reuse-port", action="store_true",
                        help="SO_REUSEPORT: several executors share the port, the kernel spreads connections")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s seldon %(levelname)s %(message)s")
    if not args.config:
        parser.error("--config (or SELDON_GRAPH_CONFIG) is required")
    text = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
    config = json.loads(text)
    try:
        graph = build_graph(config)
    except Exception as exc:  # a unit that cannot load: say which, and exit so the pod shows it
        log.error("cannot build the graph: %s", exc)
        return 2
    # What loading created (frameworks' modules, the models) lives as long as the process: out of the
    # collector's sight, the full collections that many short-lived request objects trigger stay short
    # instead of stalling every request in flight (as the model server's workers do).
    gc.freeze()
    import uvloop

    uvloop.run(_serve(SeldonApp(graph, str(config.get("protocol") or "seldon")), args.host, args.port,
                      args.reuse_port))
    logging.shutdown()
    # Every request is answered: skip the interpreter's teardown, which takes seconds with TensorFlow loaded.
    os._exit(0)
