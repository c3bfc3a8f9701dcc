"""The digits model as a BentoML 1.4 service, for `bentoml serve` in the benchmark's bentoml venv:

    MODEL_PATH=model.joblib BENTO_WORKERS=2 bentoml serve bentoml_digits:Digits --port N   (cwd: bench/serving)

`POST /predict` takes `{"input": [[64 floats], ...]}` and answers the classes as a JSON list, BentoML's own
protocol for a numpy array argument; readiness is `GET /readyz`.
"""

import os

import bentoml
import joblib
import numpy as np


@bentoml.service(workers=int(os.environ.get("BENTO_WORKERS", "1")), traffic={"timeout": 30})
class Digits:
    def __init__(self) -> None:
        self.model = joblib.load(os.environ["MODEL_PATH"])

    @bentoml.api
    def predict(self, input: np.ndarray) -> np.ndarray:  # noqa: A002 - the JSON field clients send
        return self.model.predict(input)
