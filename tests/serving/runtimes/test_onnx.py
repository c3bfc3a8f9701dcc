"""ONNX runtime: scikit-learn models converted with skl2onnx."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from skl2onnx import to_onnx
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

from trimaran.serving.runtimes import InferenceInputError, Model, ModelLoadError, TensorSpec, detect_format, load_model


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray, LogisticRegression]:
    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    return x, y, LogisticRegression(max_iter=500).fit(x, y)


def test_classifier_without_zipmap(tmp_path: Path, iris: tuple) -> None:
    x, _, clf = iris
    onx = to_onnx(clf, x[:1], options={id(clf): {"zipmap": False}}, target_opset=17)
    (tmp_path / "model.onnx").write_bytes(onx.SerializeToString())

    assert detect_format(tmp_path) == "onnx"
    model = load_model(tmp_path, name="iris")
    assert model.platform == "onnx_onnxv1"
    assert model.inputs == [TensorSpec("X", "FP32", (-1, 4))]
    assert model.outputs == [TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 3))]
    assert model.batchable

    out = model.predict({"X": x})
    expected = onnxruntime.InferenceSession(onx.SerializeToString()).run(None, {"X": x})
    np.testing.assert_array_equal(out["label"], expected[0])
    np.testing.assert_array_equal(out["probabilities"], expected[1])
    np.testing.assert_array_equal(out["label"], clf.predict(x))
    # Only the outputs asked for; float64 and int rows are cast to the graph's float.
    assert set(model.predict({"X": x[:3].astype(np.float64)}, outputs=["label"])) == {"label"}
    np.testing.assert_array_equal(model.predict({"X": np.ones((1, 4), dtype=np.int64)})["label"],
                                  clf.predict(np.ones((1, 4))))


def test_zipmap_probabilities_become_a_matrix(tmp_path: Path, iris: tuple) -> None:
    x, _, clf = iris
    (tmp_path / "iris.onnx").write_bytes(to_onnx(clf, x[:1], target_opset=17).SerializeToString())

    model = load_model(tmp_path, name="iris", model_format="onnx")
    assert model.outputs[1] == TensorSpec("output_probability", "FP32", (-1, -1))
    probabilities = model.predict({"X": x[:6]})["output_probability"]
    assert probabilities.shape == (6, 3)
    np.testing.assert_allclose(probabilities, clf.predict_proba(x[:6]), rtol=1e-4, atol=1e-6)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    # The onnx package writes a newer IR version than the installed ONNX Runtime may read.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fixed_batch_graph_with_two_inputs_is_not_batchable(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"])], "add",
        [helper.make_tensor_value_info("a", TensorProto.DOUBLE, [1, 3]),
         helper.make_tensor_value_info("b", TensorProto.DOUBLE, [1, 3])],
        [helper.make_tensor_value_info("sum", TensorProto.DOUBLE, [1, 3])])
    onnx.save(_model(graph), tmp_path / "model.onnx")

    model = load_model(tmp_path, name="add")
    assert model.inputs == [TensorSpec("a", "FP64", (1, 3)), TensorSpec("b", "FP64", (1, 3))]
    assert not model.batchable
    a, b = np.array([[1.0, 2, 3]]), np.array([[10.0, 20, 30]])
    np.testing.assert_array_equal(model.predict({"a": a, "b": b})["sum"], a + b)
    with pytest.raises(InferenceInputError, match="'b' of model 'add' is missing"):
        model.predict({"a": a})
    with pytest.raises(InferenceInputError, match=r"shape \[2, 3\]"):
        model.predict({"a": np.vstack([a, a]), "b": np.vstack([b, b])})
    with pytest.raises(InferenceInputError, match="datatype <U1"):
        model.predict({"a": np.array([["x", "y", "z"]]), "b": b})


def test_string_input(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["words"], ["same"])], "echo",
        [helper.make_tensor_value_info("words", TensorProto.STRING, ["n"])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, ["n"])])
    onnx.save(_model(graph), tmp_path / "model.onnx")

    model = load_model(tmp_path, name="echo")
    assert model.inputs == [TensorSpec("words", "BYTES", (-1,))]
    out = model.predict({"words": np.array([b"hello", "w\u00f6rld"], dtype=object)})["same"]
    assert list(out) == ["hello", "w\u00f6rld"]


def test_corrupt_onnx_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(ModelLoadError, match=r"cannot load ONNX model .*model\.onnx"):
        load_model(tmp_path, name="m")


def test_intra_op_threads_from_the_environment(tmp_path: Path, iris: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    x, _, clf = iris
    (tmp_path / "model.onnx").write_bytes(to_onnx(clf, x[:1], target_opset=17).SerializeToString())

    def session_options(model: Model) -> onnxruntime.SessionOptions:
        return model._session.get_session_options()

    assert session_options(load_model(tmp_path, name="m")).intra_op_num_threads == 1
    monkeypatch.setenv("TRIMARAN_INTRA_OP_THREADS", "2")
    assert session_options(load_model(tmp_path, name="m")).intra_op_num_threads == 2
    monkeypatch.setenv("TRIMARAN_INTRA_OP_THREADS", "many")
    with pytest.raises(ModelLoadError, match="TRIMARAN_INTRA_OP_THREADS='many' is not an integer"):
        load_model(tmp_path, name="m")
