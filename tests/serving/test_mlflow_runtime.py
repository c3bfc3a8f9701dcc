"""The mlflow modelFormat: model directories written by MLflow itself (mlflow.sklearn.save_model,
mlflow.pytorch.save_model), loaded without MLflow for those flavours, their signatures as V2
metadata; bad directories and requests refused with the file or the input named. (A model server
answering V2 and V1 REST over an MLflow model logged by a training job: tests/e2e/test_seed002_mlflow.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris
from sklearn.linear_model import LogisticRegression

from trimaran.serving.runtimes import InferenceInputError, ModelLoadError, TensorSpec, detect_format, load_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs mlflow to write models")


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, LogisticRegression]:
    x, y = load_digits(return_X_y=True)
    return x, y, LogisticRegression(max_iter=300).fit(x[:600], y[:600])


def _save_sklearn(path: Path, estimator: object, x: object, **kwargs: object) -> Path:
    import mlflow.sklearn
    from mlflow.models import infer_signature

    mlflow.sklearn.save_model(estimator, str(path), signature=infer_signature(x, estimator.predict(x)),
                              pip_requirements=["scikit-learn"], **kwargs)
    return path


@pytest.mark.parametrize("serialization", ["skops", "cloudpickle"])
def test_sklearn_flavour_serves_its_signature(tmp_path: Path, digits, serialization: str) -> None:
    x, _, clf = digits
    model_dir = _save_sklearn(tmp_path / "m", clf, x[:5], serialization_format=serialization)

    # MLmodel claims the directory although model.pkl is an sklearn runtime file too.
    assert detect_format(model_dir) == "mlflow"
    model = load_model(model_dir, name="digits")
    assert model.platform == "mlflow"
    assert model.inputs == [TensorSpec("input-0", "FP64", (-1, 64))]
    assert model.outputs == [TensorSpec("output-0", "INT64", (-1,))]
    out = model.predict({"input-0": x[600:650]})
    np.testing.assert_array_equal(out["output-0"], clf.predict(x[600:650]))
    # Signature mismatches name the input: width, an unknown name, a missing one, text for numbers.
    with pytest.raises(InferenceInputError, match=r"input 'input-0' has shape \[2, 63\].*\[-1, 64\]"):
        model.predict({"input-0": x[:2, :63]})
    with pytest.raises(InferenceInputError, match="no input 'pixels'"):
        model.predict({"pixels": x[:2]})
    with pytest.raises(InferenceInputError, match="input 'input-0' has datatype <U1"):
        model.predict({"input-0": np.full((1, 64), "a")})


def test_column_signature_takes_columns_or_one_matrix(tmp_path: Path) -> None:
    iris = load_iris(as_frame=True)
    frame = iris.data.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    clf = LogisticRegression(max_iter=300).fit(frame, iris.target)
    model_dir = _save_sklearn(tmp_path / "iris", clf, frame.head(), serialization_format="cloudpickle")

    model = load_model(model_dir, name="iris", model_format="mlflow")
    assert [(s.name, s.datatype, s.shape) for s in model.inputs] == [
        ("sepal_length", "FP64", (-1,)), ("sepal_width", "FP64", (-1,)),
        ("petal_length", "FP64", (-1,)), ("petal_width", "FP64", (-1,))]
    want = clf.predict(frame.head(3))
    by_column = {name: frame[name].to_numpy()[:3] for name in frame.columns}
    np.testing.assert_array_equal(model.predict(by_column)["output-0"], want)
    # [-1, 1] columns and the whole matrix (Seldon's ndarray, V1 instances) work too.
    as_2d = {name: v.reshape(-1, 1) for name, v in by_column.items()}
    np.testing.assert_array_equal(model.predict(as_2d)["output-0"], want)
    np.testing.assert_array_equal(model.predict({"input-0": frame.to_numpy()[:3]})["output-0"], want)
    with pytest.raises(InferenceInputError, match="input 'petal_width' of model 'iris' is missing"):
        model.predict({k: v for k, v in by_column.items() if k != "petal_width"})
    with pytest.raises(InferenceInputError, match=r"no input 'input-0'.*got shape \[3, 3\]"):
        model.predict({"input-0": frame.to_numpy()[:3, :3]})


@pytest.mark.parametrize("serialization", ["pt2", "pickle"])
def test_pytorch_flavour(tmp_path: Path, serialization: str) -> None:
    """MLflow 3's default torch.export program, and the cloudpickled module MLflow 2 wrote (seed 002's
    ``mlflow.pytorch.log_model(model, "model")``), whose class travels inside it."""
    torch = pytest.importorskip("torch")
    import mlflow.pytorch

    net = torch.nn.Sequential(torch.nn.Linear(64, 10))
    example = np.zeros((2, 64), dtype=np.float32)
    mlflow.pytorch.save_model(net, str(tmp_path / "net"), input_example=example, pip_requirements=["torch"],
                              serialization_format=serialization)
    assert (tmp_path / "net" / "data" / ("model.pt2" if serialization == "pt2" else "model.pth")).is_file()
    model = load_model(tmp_path / "net", name="net")
    assert model.inputs == [TensorSpec("input-0", "FP32", (-1, 64))]
    assert model.outputs == [TensorSpec("output-0", "FP32", (-1, 10))]
    rows = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(rows)).numpy()
    np.testing.assert_allclose(model.predict({"input-0": rows})["output-0"], want, rtol=1e-5)


@pytest.mark.parametrize("wrapper", [True, False])
def test_xgboost_flavour(tmp_path: Path, digits, wrapper: bool) -> None:
    xgb = pytest.importorskip("xgboost")
    import mlflow.xgboost

    x, y, _ = digits
    if wrapper:
        booster = xgb.XGBClassifier(n_estimators=5, max_depth=2).fit(x[:300], y[:300])
        want = booster.predict(x[600:620])
    else:
        booster = xgb.train({"max_depth": 2}, xgb.DMatrix(x[:300], label=y[:300]), num_boost_round=5)
        want = booster.predict(xgb.DMatrix(x[600:620]))
    mlflow.xgboost.save_model(booster, str(tmp_path / "xgb"), pip_requirements=["xgboost"])
    model = load_model(tmp_path / "xgb", name="xgb")
    np.testing.assert_allclose(model.predict({"input-0": x[600:620]})["output-0"], want)


def test_other_flavours_load_through_mlflow_pyfunc(tmp_path: Path) -> None:
    """A PythonModel has no loader here: MLflow's own pyfunc loads it, when installed (it is in this venv)."""
    import mlflow.pyfunc
    from mlflow.models import infer_signature

    class Doubler(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 - MLflow's signature
            return np.asarray(model_input) * 2

    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    mlflow.pyfunc.save_model(str(tmp_path / "double"), python_model=Doubler(), pip_requirements=["numpy"],
                             signature=infer_signature(rows, rows * 2))
    model = load_model(tmp_path / "double", name="double")
    assert model.inputs == [TensorSpec("input-0", "FP32", (-1, 3))]
    np.testing.assert_array_equal(model.predict({"input-0": rows})["output-0"], rows * 2)


def test_bad_model_directories_are_named(tmp_path: Path, digits) -> None:
    x, _, clf = digits
    with pytest.raises(ModelLoadError, match=r"modelFormat 'mlflow' needs MLmodel"):
        load_model(tmp_path, name="empty", model_format="mlflow")
    model_dir = _save_sklearn(tmp_path / "m", clf, x[:5])
    mlmodel = model_dir / "MLmodel"
    text = mlmodel.read_text()
    mlmodel.write_text(text.replace("python_function:", "not_pyfunc:"))
    with pytest.raises(ModelLoadError, match=r"MLmodel has no python_function flavour \(flavours: not_pyfunc, sklearn"):
        load_model(model_dir, name="m")
    mlmodel.write_text(text.replace("predict_fn: predict", "predict_fn: transform_all"))
    with pytest.raises(ModelLoadError, match=r"LogisticRegression has no transform_all\(\)"):
        load_model(model_dir, name="m")
