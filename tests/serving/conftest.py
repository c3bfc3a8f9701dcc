"""Fixtures for the model server tests: models on disk and real server processes on free ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import REPO, poll


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ModelServer:
    """A ``python -m trimaran.serving`` process; its log goes to a file the failure message shows."""

    def __init__(self, model_dir: Path, log_dir: Path, *, name: str = "digits", grpc: bool = True,
                 extra_args: tuple[str, ...] = (), **options: object) -> None:
        self.name = name
        self.http_port = free_port()
        self.grpc_port = free_port() if grpc else 0
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        args = [sys.executable, "-m", "trimaran.serving", "--model-name", name, "--model-dir", str(model_dir),
                "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port)]
        options.setdefault("workers", 1)
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        args += extra_args  # repeatable options, which keyword arguments cannot say
        self.log_path = log_dir / f"server-{self.http_port}.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # pickled test models import tests.serving.models
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> ModelServer:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                return self.client.get("/v2/health/ready").status_code == 200
            except httpx.TransportError:
                return False

        poll(ready, timeout=timeout, what=f"server ready\n{self.log()}")
        return self

    def wait_live(self, timeout: float = 30) -> ModelServer:
        def live() -> bool:
            try:
                return self.client.get("/v2/health/live").status_code == 200
            except httpx.TransportError:
                return False

        poll(live, timeout=timeout, what=f"server live\n{self.log()}")
        return self

    def worker_pids(self) -> list[int]:
        import psutil

        return [p.pid for p in psutil.Process(self.process.pid).children()]

    def stop(self) -> int:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ModelServer]]:
    """``start_server(model_dir, **cli_options)``: a started server, stopped after the test."""
    servers: list[ModelServer] = []

    def start(model_dir: Path, **options: object) -> ModelServer:
        server = ModelServer(model_dir, tmp_path, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def digits() -> tuple:
    """The digits data (scaled to [0, 1]) and a LogisticRegression fitted on a few rows: a quick fit, and the
    kind of model the acceptance benchmark serves."""
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    x, y = load_digits(return_X_y=True)
    x = x / 16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence is beside the point here
        return x, LogisticRegression(max_iter=300).fit(x[:300], y[:300])


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory: pytest.TempPathFactory, digits: tuple) -> Path:
    """A TF Serving layout with version 1 of the digits model."""
    import joblib

    base = tmp_path_factory.mktemp("digits")
    (base / "1").mkdir()
    joblib.dump(digits[1], base / "1" / "model.joblib")
    return base


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("module")


def deadline(seconds: float) -> Callable[[], bool]:
    """A callable that is True until ``seconds`` from now."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() < end
