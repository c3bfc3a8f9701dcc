"""XGBoost and LightGBM runtimes: tiny boosters trained on sklearn's shipped datasets."""

from __future__ import annotations

from pathlib import Path

import lightgbm
import numpy as np
import pytest
import xgboost
from sklearn.datasets import load_diabetes, load_iris

from trimaran.serving.runtimes import InferenceInputError, ModelLoadError, TensorSpec, detect_format, load_model


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_iris(return_X_y=True)
    return x.astype(np.float32), y


@pytest.mark.parametrize("filename", ["model.json", "model.ubj", "iris.json"])
def test_xgboost_multiclass(tmp_path: Path, iris: tuple[np.ndarray, np.ndarray], filename: str) -> None:
    x, y = iris
    booster = xgboost.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 2, "nthread": 1},
                            xgboost.DMatrix(x, label=y), num_boost_round=5)
    booster.save_model(tmp_path / filename)

    assert detect_format(tmp_path) == "xgboost"
    model = load_model(tmp_path, name="iris")
    assert model.platform == "xgboost"
    assert model.inputs == [TensorSpec("input-0", "FP32", (-1, 4))]
    assert model.outputs == [TensorSpec("output-0", "FP32", (-1, 3))]
    # float64 rows are cast to the declared FP32, as XGBoost itself does.
    got = model.predict({"input-0": x[:20].astype(np.float64)})["output-0"]
    np.testing.assert_allclose(got, booster.predict(xgboost.DMatrix(x[:20])), rtol=1e-6)


def test_xgboost_regression_single_file(tmp_path: Path) -> None:
    x, y = load_diabetes(return_X_y=True)
    booster = xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(x, label=y), num_boost_round=4)
    booster.save_model(tmp_path / "diabetes.ubj")

    model = load_model(tmp_path / "diabetes.ubj", name="d", model_format="xgboost")
    assert model.outputs == [TensorSpec("output-0", "FP32", (-1,))]
    np.testing.assert_allclose(model.predict({"input-0": x[:9]})["output-0"],
                               booster.predict(xgboost.DMatrix(x[:9])), rtol=1e-6)
    with pytest.raises(InferenceInputError, match=r"shape \[9, 3\]"):
        model.predict({"input-0": x[:9, :3]})


def test_a_json_that_is_not_xgboost_is_not_detected(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text('{"hello": "world"}')
    with pytest.raises(ModelLoadError, match="no model recognised"):
        detect_format(tmp_path)


def test_corrupt_xgboost_model_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.bst").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelLoadError, match=r"cannot load XGBoost model .*model\.bst"):
        load_model(tmp_path, name="m")


def test_lightgbm_multiclass(tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = iris
    booster = lightgbm.train({"objective": "multiclass", "num_class": 3, "num_leaves": 4, "verbose": -1,
                              "num_threads": 1}, lightgbm.Dataset(x, label=y), num_boost_round=5)
    booster.save_model(tmp_path / "model.txt")

    assert detect_format(tmp_path) == "lightgbm"
    model = load_model(tmp_path, name="iris", version="2")
    assert (model.platform, model.version) == ("lightgbm", "2")
    assert model.inputs == [TensorSpec("input-0", "FP64", (-1, 4))]
    assert model.outputs == [TensorSpec("output-0", "FP64", (-1, 3))]
    np.testing.assert_array_equal(model.predict({"input-0": x})["output-0"], booster.predict(x))


def test_lightgbm_lgb_suffix_and_a_text_file_that_is_not_a_model(tmp_path: Path) -> None:
    x, y = load_diabetes(return_X_y=True)
    booster = lightgbm.train({"num_leaves": 4, "verbose": -1, "num_threads": 1}, lightgbm.Dataset(x, label=y),
                             num_boost_round=3)
    booster.save_model(tmp_path / "diabetes.lgb")
    (tmp_path / "notes.txt").write_text("trained on diabetes\n")

    model = load_model(tmp_path, name="d")
    assert model.platform == "lightgbm"
    np.testing.assert_array_equal(model.predict({"input-0": x[:5]})["output-0"], booster.predict(x[:5]))


def test_wrong_model_format_says_what_it_needs(tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text("tree\nversion=v4\n")
    with pytest.raises(ModelLoadError, match=r"modelFormat 'xgboost' needs .*model\.bst.*contents: model\.txt"):
        load_model(tmp_path, name="m", model_format="xgboost")
    with pytest.raises(ModelLoadError, match=r"cannot load LightGBM model .*model\.txt"):
        load_model(tmp_path, name="m")
