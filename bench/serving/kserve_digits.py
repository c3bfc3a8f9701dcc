"""KServe's scikit-learn predictor for the serving benchmark; runs in the KServe virtual environment.

    python kserve_digits.py --model_dir DIR --model_name digits [KServe ModelServer options]

The `sklearnserver` package is not on PyPI (KServe ships it only in its container image), so this
does what its `SKLearnModel` does: load the one `*.joblib` file of the model dir, decode the V2
request with `kserve.utils.utils.get_predict_input`, `model.predict`, and encode the answer with
`get_predict_response`. All server options are KServe's own (`kserve.model_server.parser`).
"""

import argparse
import pathlib

import joblib
import kserve
from kserve import Model, ModelServer
from kserve.utils.utils import get_predict_input, get_predict_response


class SKLearnModel(Model):
    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.load()

    def load(self) -> bool:
        files = sorted(pathlib.Path(self.model_dir).glob("*.joblib"))
        if len(files) != 1:
            raise RuntimeError(f"expected one .joblib file in {self.model_dir}, found {files}")
        self._model = joblib.load(files[0])
        self.ready = True
        return self.ready

    def predict(self, payload, headers=None):
        return get_predict_response(payload, self._model.predict(get_predict_input(payload)), self.name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--model_dir", required=True)
    args, _ = parser.parse_known_args()
    ModelServer().start([SKLearnModel(args.model_name, args.model_dir)])
