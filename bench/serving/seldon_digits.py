"""The digits model in Seldon's Python wrapper shape, for `seldon-core-microservice` (Seldon Core 1.18's own
server, gunicorn + Flask) in the benchmark's seldon venv:

    MODEL_PATH=model.joblib seldon-core-microservice seldon_digits.Digits --service-type MODEL \
        --http-port N --workers 2   (cwd: bench/serving)

What SKLEARN_SERVER's image does with `method: predict`: load the joblib file, answer `predict(X)`.
"""

import os

import joblib


class Digits:
    def __init__(self) -> None:
        self.model = joblib.load(os.environ["MODEL_PATH"])

    def predict(self, X, features_names=None):
        return self.model.predict(X)
