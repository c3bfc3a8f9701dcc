"""Format detection, the registry and load errors; none of these needs a heavy framework."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

from trimaran.serving.runtimes import (
    ModelLoadError,
    datatype_to_numpy,
    detect_format,
    load_model,
    numpy_to_datatype,
    runtime_names,
)


@pytest.fixture(scope="module")
def iris_clf() -> LogisticRegression:
    x, y = load_iris(return_X_y=True)
    return LogisticRegression(max_iter=500).fit(x, y)


def test_importing_the_runtimes_imports_no_framework() -> None:
    code = ("import sys, trimaran.serving.runtimes as r; "
            "heavy = [m for m in ('torch', 'tensorflow', 'xgboost', 'lightgbm', 'onnxruntime', 'sklearn', 'keras', "
            "'tf_keras') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_runtime_names_are_kserve_model_formats() -> None:
    assert runtime_names() == ["custom", "mlflow", "tensorflow", "keras", "onnx", "pytorch", "xgboost", "lightgbm",
                               "sklearn"]


def test_empty_directory_lists_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no model recognised") as info:
        detect_format(tmp_path)
    assert "empty" in str(info.value) and "model.joblib" in str(info.value)
    with pytest.raises(ModelLoadError, match="no model recognised"):
        load_model(tmp_path, name="m")


def test_a_base_path_is_recognised_as_one(tmp_path: Path, iris_clf: LogisticRegression) -> None:
    (tmp_path / "1").mkdir()
    joblib.dump(iris_clf, tmp_path / "1" / "model.joblib")
    with pytest.raises(ModelLoadError, match="looks like a base path"):
        load_model(tmp_path, name="m")
    assert load_model(tmp_path / "1", name="m").platform == "sklearn"


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope", name="m")


def test_unrecognised_files_are_listed(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hello")
    with pytest.raises(ModelLoadError, match=r"contents: README\.md"):
        detect_format(tmp_path)


def test_corrupt_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.joblib").write_bytes(b"this is not a pickle")
    with pytest.raises(ModelLoadError, match=r"cannot load scikit-learn model .*model\.joblib"):
        load_model(tmp_path, name="m")


def test_wrong_model_format_says_what_it_needs(tmp_path: Path, iris_clf: LogisticRegression) -> None:
    joblib.dump(iris_clf, tmp_path / "model.joblib")
    with pytest.raises(ModelLoadError, match="no runtime for modelFormat 'caffe'"):
        load_model(tmp_path, name="m", model_format="caffe")
    assert load_model(tmp_path, name="m", model_format="SKLearn").platform == "sklearn"


def test_several_candidates_without_a_model_file_is_an_error(tmp_path: Path, iris_clf: LogisticRegression) -> None:
    joblib.dump(iris_clf, tmp_path / "a.joblib")
    joblib.dump(iris_clf, tmp_path / "b.pkl")
    with pytest.raises(ModelLoadError, match=r"several model files \(a\.joblib, b\.pkl\)"):
        detect_format(tmp_path)
    joblib.dump(iris_clf, tmp_path / "model.joblib")
    assert load_model(tmp_path, name="m").predict({"input-0": np.zeros((1, 4))})["output-0"].shape == (1,)


def test_a_non_estimator_pickle_is_rejected(tmp_path: Path) -> None:
    joblib.dump({"weights": [1, 2]}, tmp_path / "model.pkl")
    with pytest.raises(ModelLoadError, match="holds a dict, not an estimator"):
        load_model(tmp_path, name="m")


@pytest.mark.parametrize(("datatype", "dtype"), [("BOOL", np.bool_), ("UINT16", np.uint16), ("INT64", np.int64),
                                                 ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64)])
def test_datatypes_round_trip(datatype: str, dtype: type) -> None:
    assert datatype_to_numpy(datatype) == np.dtype(dtype)
    assert numpy_to_datatype(np.dtype(dtype)) == datatype


def test_bytes_and_unsupported_datatypes() -> None:
    assert datatype_to_numpy("BYTES") == np.dtype(object)
    assert numpy_to_datatype(np.array(["a", "bc"]).dtype) == "BYTES"
    assert numpy_to_datatype(np.array([b"a"]).dtype) == "BYTES"
    assert numpy_to_datatype(np.dtype(">i4")) == "INT32"
    with pytest.raises(ValueError, match="BF16"):
        datatype_to_numpy("BF16")
    with pytest.raises(ValueError, match="complex"):
        numpy_to_datatype(np.complex64)


def test_two_formats_in_one_directory_need_a_model_format(tmp_path: Path, iris_clf: LogisticRegression) -> None:
    joblib.dump(iris_clf, tmp_path / "model.joblib")
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"several formats: model\.onnx \(onnx\), model\.joblib \(sklearn\)"):
        detect_format(tmp_path)
    assert load_model(tmp_path, name="m", model_format="sklearn").platform == "sklearn"
    (tmp_path / "model.py").write_text("class M:\n    def __init__(self, name): ...\n    def predict(self, p): ...\n")
    assert detect_format(tmp_path) == "custom"
