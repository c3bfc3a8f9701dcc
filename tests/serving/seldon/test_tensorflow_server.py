"""Seed 000's SeldonDeployment shape: TENSORFLOW_SERVER with its signature_name and model_name parameters, over
the Seldon protocol and, with ``protocol: tensorflow``, TF Serving's REST predict."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.serving.seldon.conftest import Executor

pytestmark = pytest.mark.heavy

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

WEIGHTS = np.arange(8, dtype=np.float32).reshape(4, 2)


class Mnistish(tf.Module):
    """Two signatures, so the parameter decides which one answers."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(WEIGHTS)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="images")])
    def predict_images(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": tf.matmul(images, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def total(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"sum": tf.reduce_sum(x, axis=1)}


@pytest.fixture(scope="module")
def mnist_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mnist-model")  # TF Serving's layout: the newest version is served
    module = Mnistish()
    tf.saved_model.save(module, str(base / "1"),
                        signatures={"serving_default": module.total, "predict_images": module.predict_images})
    return base


def _seed_graph(model_dir: Path) -> dict:
    # Seed 000 as written, its gs:// modelUri replaced by the local copy.
    return {"children": [], "implementation": "TENSORFLOW_SERVER", "modelUri": str(model_dir), "name": "mnist-model",
            "type": "MODEL",
            "parameters": [{"name": "signature_name", "type": "STRING", "value": "predict_images"},
                           {"name": "model_name", "type": "STRING", "value": "mnist-model"}]}


def test_seed_000_tensorflow_server_seldon_and_tensorflow_protocols(
        start_executor: Callable[[dict], Executor], mnist_model: Path) -> None:
    # One executor (TensorFlow takes long to import on a busy machine): protocol tensorflow adds TF Serving's
    # predict beside the Seldon protocol's routes.
    server = start_executor({"name": "tfserving", "predictor": "default", "protocol": "tensorflow",
                             "graph": _seed_graph(mnist_model),
                             "sources": {"mnist-model": {"modelDir": str(mnist_model)}}}).wait_ready(timeout=240)
    rows = [[1, 0, 0, 0], [0, 1, 1, 0]]
    expected = (np.asarray(rows, dtype=np.float32) @ WEIGHTS).tolist()
    answer = server.predict({"data": {"ndarray": rows}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["ndarray"] == expected
    metadata = server.client.get("/api/v1.0/metadata/mnist-model").json()
    assert metadata["name"] == "mnist-model" and metadata["platform"] == "tensorflow_savedmodel"
    predicted = server.predict({"instances": rows}, "/v1/models/mnist-model:predict")
    assert predicted.status_code == 200, predicted.text
    assert predicted.json() == {"predictions": expected}
