"""The control plane process: store, node, controllers and the HTTP API in one process."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from trimaran.controllers.base import ControllerManager
from trimaran.controllers.batch import BatchJobReconciler
from trimaran.controllers.kubelet import Kubelet
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.serving import InferenceServiceReconciler
from trimaran.controllers.training import TrainingJobReconciler
from trimaran.controllers.tuning import ExperimentReconciler, TrialReconciler
from trimaran.controllers.volumes import ClaimReconciler
from trimaran.runtime import LocalRuntime, Node
from trimaran.server.daemon import clear_server_info, home_dir, write_server_info
from trimaran.store import Store, open_store

log = logging.getLogger(__name__)


@dataclass
class ControlPlane:
    store: Store
    manager: ControllerManager
    kubelet: Kubelet
    trials: TrialReconciler
    home: Path

    def stop(self) -> None:
        self.manager.stop()
        self.kubelet.shutdown()


def build_control_plane(home: Path | None = None) -> ControlPlane:
    home = home or home_dir()
    home.mkdir(parents=True, exist_ok=True)
    store = open_store(home / "trimaran.db")
    store.ensure_namespace("default")
    node = Node.from_env()
    runtime = LocalRuntime(home, node=node)
    kubelet = Kubelet(store, runtime, node)
    trials = TrialReconciler(store, runtime)
    ports = PortAllocator()  # one allocator: training replicas and serving replicas share loopback
    manager = ControllerManager(store, [
        TrainingJobReconciler(store, ports), BatchJobReconciler(store), ClaimReconciler(store, home),
        ExperimentReconciler(store), trials, InferenceServiceReconciler(store, home, ports, runtime), kubelet])
    return ControlPlane(store=store, manager=manager, kubelet=kubelet, trials=trials, home=home)


def serve(host: str = "127.0.0.1", port: int = 0, home: Path | None = None) -> None:
    """Run the control plane in the foreground until SIGTERM/SIGINT.

    Binding anywhere but loopback requires a bearer token, written to ``server.json`` (mode 0600).
    """
    import uvicorn

    from trimaran.server.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plane = build_control_plane(home)
    token = secrets.token_urlsafe(24)
    require_token = host not in ("127.0.0.1", "localhost", "::1")
    app = create_app(plane, token=token if require_token else None)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    def started() -> None:
        sock = server.servers[0].sockets[0]
        bound_port = sock.getsockname()[1]
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown}:{bound_port}"
        write_server_info(plane.home, url=url, pid=os.getpid(), token=token if require_token else None)
        # Trials push metrics here (report_metrics); controllers start once the address is known.
        plane.trials.api_url = url
        plane.trials.api_token = token if require_token else None
        plane.manager.start()
        log.info("control plane listening on %s:%s (home %s)", host, bound_port, plane.home)

    stop_event = threading.Event()

    def on_signal(signum, frame):  # noqa: ANN001 - signal handler signature
        server.should_exit = True
        stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    original_startup = server.startup

    async def startup(sockets=None):  # noqa: ANN001 - uvicorn's signature
        await original_startup(sockets=sockets)
        started()

    server.startup = startup  # type: ignore[method-assign]
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    try:
        server.run()
    finally:
        plane.stop()
        clear_server_info(plane.home, os.getpid())
