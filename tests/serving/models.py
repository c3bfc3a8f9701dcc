"""Small estimators the server tests pickle; the server process imports them from here (PYTHONPATH=REPO)."""

from __future__ import annotations

import time

import numpy as np


class EchoRows:
    """``predict`` answers ``2 * X[:, 0]`` after sleeping ``max(X[:, 1])`` seconds: each row's answer is its own,
    and a request chooses how long the model takes."""

    n_features_in_ = 2

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if len(x):
            time.sleep(float(x[:, 1].max()))
        return x[:, 0] * 2


class Constant:
    """``predict`` answers ``value`` for every row: which version answered is visible in the output."""

    n_features_in_ = 2

    def __init__(self, value: int) -> None:
        self.value = value

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.full(len(x), self.value, dtype=np.int64)


def write_version(base, version: int, estimator: object) -> None:
    """Drop ``estimator`` in as ``base/version`` atomically (written aside, then renamed), as a deployment
    should, so that a poll never sees half a file."""
    import joblib

    staging = base.parent / f".staging-{base.name}-{version}"
    staging.mkdir()
    joblib.dump(estimator, staging / "model.joblib")
    staging.rename(base / str(version))
