"""A port the router cannot listen on shows on the InferenceService (IngressReady False, reason PortInUse,
and a Warning event) and is moved, instead of leaving the service silently not Ready.

The reconciler runs against a real store and a real router (on its own event loop in this process),
reading the routes file the reconciler writes; another socket holds the service's port. The replica
pods are only objects here: nothing runs them, so only the routing side becomes ready."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.serving.reconciler import InferenceServiceReconciler
from trimaran.serving.router import Router
from trimaran.store import SQLiteStore

KEY = Key("InferenceService", "default", "iris")


class RunningRouter:
    """The router serving ``routes`` on an event loop of its own, until `stop`."""

    def __init__(self, routes: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(Router(routes).run(), self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.task.cancel)
        try:
            self.task.result(timeout=10)
        except BaseException:  # noqa: BLE001 - cancelled is the expected end
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "t.db")
    s.ensure_namespace("default")
    yield s
    s.close()


def _condition(store: SQLiteStore, ctype: str) -> dict:
    obj = store.get("InferenceService", "default", "iris")
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_a_service_port_held_by_another_process_is_shown_and_moved(tmp_path: Path, store: SQLiteStore) -> None:
    home = tmp_path / "home"
    (home / "volumes" / "default" / "models" / "iris").mkdir(parents=True)
    store.create(validate({
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": "default"},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://models/iris"}}},
    }).object)
    reconciler = InferenceServiceReconciler(store, home)
    reconciler.reconcile(KEY)
    routes_path = home / "serving" / "routes.json"
    taken = json.loads(routes_path.read_text())["services"]["default/iris"]["port"]
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    router = RunningRouter(routes_path)
    try:
        def reported() -> dict:
            reconciler.reconcile(KEY)
            cond = _condition(store, "IngressReady")
            return cond if cond.get("reason") == "PortInUse" else {}

        cond = poll(reported, timeout=20, what="IngressReady PortInUse")
        assert cond["status"] == "False" and str(taken) in cond["message"] and "default/iris" in cond["message"]
        ready = _condition(store, "Ready")
        assert ready["status"] == "False"
        warnings = [e for e in store.list_events("InferenceService", "default", "iris") if e["reason"] == "PortInUse"]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning" and str(taken) in warnings[0]["message"]

        def routed() -> bool:
            reconciler.reconcile(KEY)
            return _condition(store, "IngressReady").get("status") == "True"

        poll(routed, timeout=20, what="IngressReady once the service has moved")
        moved = json.loads(routes_path.read_text())["services"]["default/iris"]["port"]
        status = store.get("InferenceService", "default", "iris")["status"]
        assert moved != taken and status["url"] == f"http://127.0.0.1:{moved}"
        socket.create_connection(("127.0.0.1", moved), timeout=5).close()  # the router listens there now
    finally:
        router.stop()
        squatter.close()
