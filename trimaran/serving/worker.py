"""One worker process: its own event loop (uvloop), HTTP and gRPC servers on the shared ports, and its own copy
of the model. The supervisor (:mod:`trimaran.serving.server`) starts it as
``python -m trimaran.serving.worker INDEX`` with the configuration in ``TRIMARAN_SERVING_CONFIG``.

SIGTERM drains: stop accepting, finish in-flight requests (up to ``drain_timeout``), exit 0. The worker also
exits when its supervisor dies (the supervisor sets PR_SET_PDEATHSIG to SIGTERM; the parent pid is checked
once at start for a supervisor that died before that took effect).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys

from trimaran.serving.config import ServerConfig

CONFIG_ENV = "TRIMARAN_SERVING_CONFIG"
PARENT_ENV = "TRIMARAN_SERVING_PARENT"
log = logging.getLogger("trimaran.serving")


def setup_logging(tag: str) -> None:
    """One line per event on stderr, tagged with the process (``supervisor`` or ``worker N``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [{tag} %(process)d] %(message)s",
                                           "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger("trimaran.serving")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


async def serve_worker(config: ServerConfig, index: int) -> None:
    """Serve until SIGTERM or SIGINT, then drain."""
    from trimaran.serving.dataplane import DataPlane
    from trimaran.serving.http import HttpServer
    from trimaran.serving.metrics import ServerMetrics
    from trimaran.serving.rest import RestApp

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = ServerMetrics()
    plane = DataPlane(config, metrics)
    # Listen only once the first load has been tried: the kernel then never hands a connection to a worker
    # that is still loading while its siblings serve (readiness would flap between workers). A first load
    # that fails still listens, to say why it is not ready.
    first_load = loop.create_task(plane.poll())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({first_load, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        first_load.cancel()
        plane.stop()
        return
    first_load.result()
    app = RestApp(plane, metrics, config.max_body_bytes)
    handler, payload_logger = app, None
    if config.log_url:
        from trimaran.serving.logger import LoggingApp, PayloadLogger, SinkConfig

        shown = f"[{config.host}]" if ":" in config.host else config.host
        sink = SinkConfig(config.log_url, config.log_mode,
                          config.log_source or f"http://{shown}:{config.http_port}/",
                          extensions=config.log_extensions)
        payload_logger = PayloadLogger(sink, capacity=config.log_queue, on_outcome=metrics.log_event)
        payload_logger.start()
        handler = LoggingApp(app, payload_logger, _is_inference)
    http = HttpServer(handler, max_body=config.max_body_bytes, keepalive_timeout=config.keepalive_timeout,
                      on_crash=app.crashed)
    await http.start(config.host, config.http_port)
    grpc_server = None
    if config.grpc_port:
        from trimaran.serving.grpc_service import start_grpc_server

        grpc_server = await start_grpc_server(plane, metrics, config.host, config.grpc_port)
    loader = loop.create_task(plane.run())
    _tune_collector()
    log.info("worker %d serving (model %s from %s)", index, config.model_name, config.model_dir)
    await stop.wait()
    log.info("worker %d draining (up to %g s)", index, config.drain_timeout)
    drains = [http.shutdown(config.drain_timeout)]
    if grpc_server is not None:
        drains.append(grpc_server.shutdown(config.drain_timeout))
    await asyncio.gather(*drains)
    if payload_logger is not None:
        await payload_logger.close()
    loader.cancel()
    plane.stop()
    log.info("worker %d stopped", index)


# Young-generation collections every this many allocations instead of 700: a request allocates hundreds of
# objects that refcounting frees, and collecting every few requests took ~2 % of the CPU at 4,000 small requests/s.
GC_YOUNG_THRESHOLD = 20_000


def _tune_collector() -> None:
    """Keep the cyclic garbage collector off the request path. What start-up created (the servers, the modules
    imported since the model loaded) is frozen now; what the first requests create once (the framework's lazily
    imported modules and caches) is frozen at the first full collection after that. Left in the collector's
    sight, a full collection walks them all (60-80 ms each, measured during a worker's start-up)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    frozen = False

    def freeze_after_first_full(phase: str, info: dict) -> None:
        # Left registered (the collector walks its callback list while calling them), it does nothing after.
        nonlocal frozen
        if not frozen and phase == "stop" and info["generation"] == 2:
            frozen = True
            gc.freeze()

    gc.callbacks.append(freeze_after_first_full)


def _is_inference(path: str) -> bool:
    """The paths KServe's agent logs: V1 ``:predict``/``:explain`` and V2 ``/infer``."""
    return path.endswith(("/infer", ":predict", ":explain"))


def main() -> None:
    index = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    setup_logging(f"worker {index}")
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        log.error("worker %d: the supervisor exited before the worker started", index)
        sys.exit(1)
    config = ServerConfig.from_dict(json.loads(os.environ[CONFIG_ENV]))
    import uvloop

    try:
        uvloop.run(serve_worker(config, index))
    except OSError as exc:
        log.error("worker %d cannot serve: %s", index, exc)
        sys.exit(3)


if __name__ == "__main__":
    main()
