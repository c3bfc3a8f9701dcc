"""Graph executors as real processes (``python -m trimaran.serving.seldon``) on free ports, and the models
and Seldon-shaped component classes they serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import REPO, poll
from tests.serving.conftest import free_port

# Seldon wrapper-shaped classes, as a user writes them (a ConfigMap or volume holds the file).
COMPONENTS = '''
import numpy as np


class Scale:
    """MODEL: multiplies by its INT parameter; drops the last column when asked to (a shape mismatch)."""

    def __init__(self, factor=1, drop_last=False):
        self.factor = factor
        self.drop_last = drop_last

    def predict(self, X, feature_names, meta=None):
        X = np.asarray(X, dtype=float)
        if self.drop_last and X.shape[1] == 3:
            X = X[:, :2]
        return X * self.factor

    def tags(self):
        return {"scaled_by": self.factor}


class ByFirstValue:
    """ROUTER: the child is the request's first value; text and JSON go to child 1."""

    def route(self, X, feature_names):
        if isinstance(X, np.ndarray) and X.dtype.kind in "iuf":
            return int(X.ravel()[0])
        return 1


class Echo:
    """MODEL: strData, binData and jsonData come back changed so the test sees this unit ran."""

    class_names = ["echo"]

    def __init__(self, suffix="!"):
        self.suffix = suffix
        self.feedback = []

    def predict(self, X, feature_names):
        if isinstance(X, str):
            return X.upper() + self.suffix
        if isinstance(X, bytes):
            return X[::-1]
        if isinstance(X, dict):
            return {"got": X, "suffix": self.suffix}
        return X

    def send_feedback(self, features, feature_names, reward, truth, routing=None):
        self.feedback.append(reward)

    def init_metadata(self):
        return {"inputs": [{"messagetype": "strData"}], "custom": {"author": "tests"}}


class Raw:
    """MODEL in Seldon's raw form: sees the whole message, answers jsonData with what it saw."""

    def predict_raw(self, message):
        return {"jsonData": {"keys": sorted(message), "puid": message["meta"]["puid"]}}
'''


class Executor:
    """One graph executor process; its log is in the failure message."""

    def __init__(self, config: dict, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"seldon-{self.port}.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trimaran.serving.seldon", "--config", json.dumps(config), "--port", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def wait_ready(self, timeout: float = 60) -> Executor:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"executor exited with {self.process.returncode}:\n{self.log_path.read_text()}")
            try:
                return self.client.get("/health/ping").status_code == 200
            except httpx.TransportError:
                return False

        poll(ready, timeout=timeout, what="the executor ready")
        return self

    def predict(self, body: dict, path: str = "/api/v1.0/predictions") -> httpx.Response:
        return self.client.post(path, json=body)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.client.close()
        self._log.close()


@pytest.fixture(scope="module")
def start_executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[dict], Executor]]:
    started: list[Executor] = []
    log_dir = tmp_path_factory.mktemp("seldon-logs")

    def start(config: dict) -> Executor:
        executor = Executor(config, log_dir)
        started.append(executor)
        return executor

    yield start
    for executor in started:
        executor.stop()


@pytest.fixture(scope="module")
def iris_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LogisticRegression on three separable classes, saved as SKLEARN_SERVER expects (model.joblib)."""
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    centers = np.array([[0, 0, 0, 0], [5, 5, 5, 5], [10, 0, 10, 0]], dtype=float)
    x = np.concatenate([c + rng.normal(0, 0.3, (20, 4)) for c in centers])
    y = np.repeat([0, 1, 2], 20)
    directory = tmp_path_factory.mktemp("iris")
    # Readable by pods as a model directory made with the usual umask is (mktemp's is 0700, and
    # pods' ids are never this user's when it is root).
    directory.chmod(0o755)
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), directory / "model.joblib")
    return directory


@pytest.fixture(scope="module")
def components_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("components")
    (directory / "components.py").write_text(COMPONENTS)
    return directory
