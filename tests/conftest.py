"""Fixtures shared by the whole suite."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import REPO

# Every control plane of the suite takes a fixed floor of free disk for its node's DiskPressure, not
# a share of the disk: the default (5% of the home's filesystem) is crossed on a machine whose disk
# is nearly full before the suite starts, and then every pod waits Pending. The disk tests set
# their own thresholds on a small tmpfs.
os.environ.setdefault("TRIMARAN_EVICTION_HARD", "nodefs.available<256Mi")

if TYPE_CHECKING:
    from trimaran.cli.client import Client


@dataclass
class ControlPlaneHandle:
    home: Path
    env: dict[str, str]

    def cli(self, *args: str, check: bool = True, input: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "trimaran.cli", *args], env=self.env, capture_output=True,
                              text=True, input=input, timeout=timeout, cwd=REPO)
        if check and proc.returncode != 0:
            explained = self._explain_wait(args) if args[:1] == ("wait",) else ""
            raise AssertionError(f"trimaran {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}{explained}")
        return proc

    def _explain_wait(self, args: tuple[str, ...]) -> str:
        """What a failed wait's object and this plane's pods looked like, so that a timeout in CI,
        where nothing can be inspected afterwards, says where it stood."""
        namespace = next((a.split("=", 1)[1] for a in args if a.startswith("--namespace=")), None)
        if namespace is None and "-n" in args[:-1]:
            namespace = args[args.index("-n") + 1]
        scope = ["-n", namespace] if namespace else []
        refs = [a for a in args[1:] if "/" in a and not a.startswith("-")]
        parts = []
        for argv in ([*(["describe", *ref.split("/", 1)] for ref in refs)], [["get", "pods", "-A", "-o", "wide"]]):
            for command in argv:
                shown = self.cli(*command, *scope, check=False, timeout=60)
                parts.append(f"$ trimaran {' '.join(command)}\n{shown.stdout}{shown.stderr}")
        # The node's conditions that hold and its taints: pods Pending on a node with DiskPressure
        # look merely stuck otherwise.
        nodes = self.cli("get", "nodes", "-o", "json", check=False, timeout=60)
        try:
            for node in json.loads(nodes.stdout)["items"]:
                held = [f"{c['type']} ({c.get('message', '')})" for c in node["status"].get("conditions", [])
                        if c.get("status") == "True"]
                parts.append(f"node {node['metadata']['name']}: {'; '.join(held)}; taints "
                             f"{node['spec'].get('taints') or []}")
        except (ValueError, LookupError, TypeError):
            parts.append(f"$ trimaran get nodes\n{nodes.stdout}{nodes.stderr}")
        listed = self.cli("get", "pods", *scope, "-o", "name", check=False, timeout=60).stdout.split()
        for pod in listed[:6]:
            shown = self.cli("logs", pod.removeprefix("pod/"), *scope, check=False, timeout=60)
            tail = "\n".join((shown.stdout + shown.stderr).splitlines()[-25:])
            parts.append(f"$ trimaran logs {pod} (last 25 lines)\n{tail}")
        return "\n--- where it stood ---\n" + "\n".join(parts)

    def get(self, kind: str, name: str, namespace: str = "default") -> dict:
        """One object as the API returns it. Through this process's HTTP client rather than a CLI
        process: tests poll it, and a process per poll kept a core busy beside the test."""
        from trimaran.cli.client import APIError

        for attempt in range(2):
            api = self.api()
            try:
                return api.get(api.resolve(kind), namespace, name)
            except APIError as exc:
                if exc.status != 503 or attempt:
                    raise
                self._clients.client = None  # a restarted control plane: its new address
        raise AssertionError("unreachable")

    def log(self, pod: str, namespace: str = "default", container: str | None = None) -> str:
        """A pod's log so far, through the API (``pods/log``), for tests that poll it."""
        return b"".join(self.api().log(namespace, pod, container)).decode(errors="replace")

    def api(self):  # noqa: ANN201 -- a trimaran.cli.client.Client
        """This thread's client of the plane's API (one kept-alive connection per thread)."""
        clients = self.__dict__.setdefault("_clients", threading.local())
        if getattr(clients, "client", None) is None:
            clients.client = self.client()
        return clients.client

    def pod_processes(self) -> list:
        """Every process of this control plane's pods: shims, sandboxes and what runs inside them."""
        import psutil

        home = str(self.home)
        found = []
        for proc in psutil.process_iter(["cmdline", "environ", "cwd"]):
            try:
                env = proc.info["environ"] or {}
                cmdline = " ".join(proc.info["cmdline"] or [])
                cwd = proc.info["cwd"] or ""
            except (psutil.Error, KeyError):
                continue
            # A shim started ahead names no run: once it has one it works in its directory.
            if "TRIMARAN_POD_UID" in env and env.get("TRIMARAN_HOME") == home or (
                    "runtime/shim.py" in cmdline and (home in cmdline or cwd.startswith(home + "/"))):
                found.append(proc)
        return found

    def endpoint(self) -> tuple[str, str, ssl.SSLContext]:
        """The API's URL, the user's token and an SSL context trusting the home's CA (from the kubeconfig)."""
        from trimaran.server.kubeconfig import kubeconfig_path, read_endpoint

        found = read_endpoint(kubeconfig_path(self.home))
        return found.server, found.token or "", ssl.create_default_context(cadata=(found.ca_pem or b"").decode())

    def client(self):  # noqa: ANN201
        from trimaran.cli.client import Client

        return Client.connect(self.home, autostart=False)


def _stop_everything(home: Path) -> None:
    from trimaran.server.daemon import stop_pods, stop_server

    stop_server(home)
    stop_pods(home, grace_seconds=1.0)


@contextmanager
def module_plane(tmp_path_factory: pytest.TempPathFactory, label: str) -> Iterator[ControlPlaneHandle]:
    """A real control plane for a whole test module (a module-scoped fixture's body), with its own
    TRIMARAN_HOME, which the test process sees as its own while it runs."""
    from trimaran.server.daemon import start_server

    home = tmp_path_factory.mktemp(label) / "home"
    old = os.environ.get("TRIMARAN_HOME")
    os.environ["TRIMARAN_HOME"] = str(home)
    try:
        start_server(home=home)
        yield ControlPlaneHandle(home=home, env=dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO)))
    finally:
        _stop_everything(home)
        if old is None:
            os.environ.pop("TRIMARAN_HOME", None)
        else:
            os.environ["TRIMARAN_HOME"] = old


def shared_plane(label: str) -> Callable[..., Iterator[ControlPlaneHandle]]:
    """A module-scoped ``plane`` fixture, for a test file whose tests name their own objects and may
    share one control plane: ``plane = shared_plane("tuning")`` at the top of the file."""

    @pytest.fixture(scope="module")
    def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
        with module_plane(tmp_path_factory, label) as handle:
            yield handle

    return plane


@pytest.fixture(scope="module")
def api(plane: ControlPlaneHandle) -> Iterator[Client]:
    """An API client of the file's control plane, for files whose ``plane`` is module-scoped (``shared_plane``)."""
    client = plane.client()
    yield client
    client.close()


@pytest.fixture
def plane_with(tmp_path: Path) -> Iterator[Callable[..., ControlPlaneHandle]]:
    """Start a real control plane in the background, with its own TRIMARAN_HOME and extra env
    (e.g. ``TRIMARAN_NODE_CPU`` to give the node a chosen capacity)."""
    from trimaran.server.daemon import start_server

    started: list[Path] = []
    old = os.environ.get("TRIMARAN_HOME")

    def start(**extra_env: str) -> ControlPlaneHandle:
        home = tmp_path / f"home{len(started)}"
        env = dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO), **extra_env)
        saved = {k: os.environ.get(k) for k in extra_env}
        os.environ.update(extra_env)
        os.environ["TRIMARAN_HOME"] = str(home)
        # Stopped at teardown even when the start times out: a slow start still runs afterwards.
        started.append(home)
        try:
            start_server(home=home)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return ControlPlaneHandle(home=home, env=env)

    try:
        yield start
    finally:
        for home in started:
            _stop_everything(home)
        if old is None:
            os.environ.pop("TRIMARAN_HOME", None)
        else:
            os.environ["TRIMARAN_HOME"] = old


@pytest.fixture
def plane(plane_with: Callable[..., ControlPlaneHandle]) -> ControlPlaneHandle:
    """A real control plane in the background, with its own TRIMARAN_HOME."""
    return plane_with()


@pytest.fixture
def fresh_plane(plane_with: Callable[..., ControlPlaneHandle]) -> ControlPlaneHandle:
    """A control plane of the test's own, in a file whose ``plane`` is shared (``shared_plane``):
    for a test that stops or kills it, or counts everything in its home."""
    return plane_with()
