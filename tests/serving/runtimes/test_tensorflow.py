"""TensorFlow runtimes: a SavedModel with two signatures, and the tf-keras ``.keras`` file the TFJob example saves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import REPO
from trimaran.serving.runtimes import InferenceInputError, ModelLoadError, TensorSpec, detect_format, load_model

pytestmark = pytest.mark.heavy

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")


class Scorer(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.string, name="tag")])
    def serve(self, x: tf.Tensor, tag: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": tf.matmul(x, self.w), "tag_length": tf.strings.length(tag)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def total(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"sum": tf.reduce_sum(x, axis=1)}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Scorer]:
    path = tmp_path_factory.mktemp("tf") / "1"
    scorer = Scorer()
    tf.saved_model.save(scorer, str(path), signatures={"serving_default": scorer.serve, "total": scorer.total})
    return path, scorer


def test_saved_model_signatures(saved_model: tuple[Path, Scorer]) -> None:
    path, scorer = saved_model
    assert detect_format(path) == "tensorflow"
    assert detect_format(path / "saved_model.pb") == "tensorflow"
    model = load_model(path, name="scorer", version="1")
    assert model.platform == "tensorflow_savedmodel"
    assert model.signature_names() == ["serving_default", "total"]
    assert sorted(model.inputs) == [TensorSpec("tag", "BYTES", (-1,)), TensorSpec("x", "FP32", (-1, 4))]
    assert sorted(model.outputs) == [TensorSpec("tag_length", "INT32", (-1,)), TensorSpec("y", "FP32", (-1, 2))]
    assert model.batchable

    x = np.random.default_rng(0).normal(size=(5, 4))  # float64: cast to the signature's float32
    out = model.predict({"x": x, "tag": np.array([b"a", b"bb", "ccc", b"", b"eeee"], dtype=object)})
    np.testing.assert_allclose(out["y"], scorer.serve(tf.constant(x, tf.float32), tf.constant([""] * 5))["y"].numpy())
    np.testing.assert_array_equal(out["tag_length"], [1, 2, 3, 0, 4])

    assert model.signature_specs("total") == ([TensorSpec("x", "FP32", (-1, 4))], [TensorSpec("sum", "FP32", (-1,))])
    total = model.predict({"x": x}, signature_name="total")
    np.testing.assert_allclose(total["sum"], x.astype(np.float32).sum(1), rtol=1e-6)
    with pytest.raises(InferenceInputError, match="'tag' of model 'scorer' is missing"):
        model.predict({"x": x})
    with pytest.raises(InferenceInputError, match="no signature 'classify'"):
        model.predict({"x": x}, signature_name="classify")


def test_saved_model_without_variables_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01garbage")
    with pytest.raises(ModelLoadError, match=r"cannot load TensorFlow SavedModel .*"):
        load_model(tmp_path, name="m")


def test_the_tfjob_examples_keras_file(tmp_path: Path) -> None:
    """Build, train briefly and save the model exactly as examples/tf-multiworker/train.py does (tf.keras under
    TF_USE_LEGACY_KERAS=1, in a process of its own since the variable must precede the TensorFlow import)."""
    code = f"""
import sys, numpy as np
sys.path.insert(0, {str(REPO / "examples" / "tf-multiworker")!r})
import train  # sets TF_USE_LEGACY_KERAS=1 before importing TensorFlow
tf = train.tf
x_tr, y_tr, x_te, _ = train.load_data()
model = train.build_model(hidden=16)
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x_tr[:256], y_tr[:256], epochs=1, verbose=0)
model.save({str(tmp_path / "digits.keras")!r})
np.save({str(tmp_path / "x.npy")!r}, x_te[:20])
np.save({str(tmp_path / "logits.npy")!r}, model(x_te[:20], training=False).numpy())
print(type(model).__module__)
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("tf_keras"), proc.stdout  # the example's model is a tf-keras one
    x, logits = np.load(tmp_path / "x.npy"), np.load(tmp_path / "logits.npy")
    (tmp_path / "x.npy").unlink()
    (tmp_path / "logits.npy").unlink()

    assert detect_format(tmp_path) == "keras"
    model = load_model(tmp_path, name="digits")
    assert model.platform == "tensorflow_keras"
    assert [(s.datatype, s.shape) for s in model.inputs] == [("FP32", (-1, 64))]
    assert [(s.datatype, s.shape) for s in model.outputs] == [("FP32", (-1, 10))]
    out = model.predict({model.inputs[0].name: x})
    np.testing.assert_allclose(out[model.outputs[0].name], logits, rtol=1e-5, atol=1e-5)


def test_keras3_file_with_two_inputs(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    a = keras.Input(shape=(3,), name="a")
    b = keras.Input(shape=(2,), name="b")
    merged = keras.layers.Concatenate()([a, b])
    net = keras.Model([a, b], [keras.layers.Dense(1, name="score")(merged), keras.layers.Dense(2, name="aux")(merged)])
    net.save(tmp_path / "model.keras")
    xa, xb = np.ones((4, 3), np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)

    model = load_model(tmp_path, name="two", model_format="keras")
    assert model.inputs == [TensorSpec("a", "FP32", (-1, 3)), TensorSpec("b", "FP32", (-1, 2))]
    assert [(o.datatype, o.shape) for o in model.outputs] == [("FP32", (-1, 1)), ("FP32", (-1, 2))]
    out = model.predict({"a": xa, "b": xb})
    expected = net.predict_on_batch([xa, xb])
    for spec, value in zip(model.outputs, expected, strict=True):
        np.testing.assert_allclose(out[spec.name], value, rtol=1e-6)


def test_corrupt_keras_file(tmp_path: Path) -> None:
    (tmp_path / "model.keras").write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match=r"model\.keras is not a Keras archive"):
        load_model(tmp_path, name="m")
