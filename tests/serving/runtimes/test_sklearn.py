"""scikit-learn runtime: real estimators trained on sklearn's shipped datasets."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits, load_iris
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from trimaran.serving.runtimes import InferenceInputError, TensorSpec, detect_format, load_model


def test_pipeline_on_digits_predicts_like_sklearn(tmp_path: Path) -> None:
    x, y = load_digits(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=200)).fit(x, y)
    joblib.dump(pipe, tmp_path / "model.joblib")

    assert detect_format(tmp_path) == "sklearn"
    model = load_model(tmp_path, name="digits", version="3")
    assert (model.name, model.version, model.platform) == ("digits", "3", "sklearn")
    assert model.inputs == [TensorSpec("input-0", "FP32", (-1, 64))]
    assert model.outputs == [TensorSpec("output-0", "INT64", (-1,)), TensorSpec("probabilities", "FP64", (-1, 10))]
    assert model.batchable and not model.payload_level

    # predict_proba only when asked for, as MLServer's predict_proba output: it doubles the cost.
    assert set(model.predict({"input-0": x[:2]})) == {"output-0"}
    out = model.predict({"input-0": x[:50]}, outputs=["output-0", "probabilities"])
    np.testing.assert_array_equal(out["output-0"], pipe.predict(x[:50]))
    np.testing.assert_allclose(out["probabilities"], pipe.predict_proba(x[:50]))
    assert model.metadata()["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}]


@pytest.mark.parametrize("filename", ["model.pkl", "model.pickle", "iris.pkl"])
def test_pickled_classifier_with_string_labels(tmp_path: Path, filename: str) -> None:
    x, y = load_iris(return_X_y=True)
    names = np.array(load_iris().target_names)[y]
    clf = SVC().fit(x, names)  # no predict_proba without probability=True
    (tmp_path / filename).write_bytes(pickle.dumps(clf))

    model = load_model(tmp_path, name="iris")
    assert [o.name for o in model.outputs] == ["output-0"]
    assert model.outputs[0].datatype == "BYTES"
    out = model.predict({"input-0": x.astype(np.float32)})
    np.testing.assert_array_equal(out["output-0"], clf.predict(x.astype(np.float32)))


def test_regressor_from_a_single_file(tmp_path: Path) -> None:
    x, y = load_diabetes(return_X_y=True)
    reg = LinearRegression().fit(x, y)
    joblib.dump(reg, tmp_path / "reg.joblib")

    model = load_model(tmp_path / "reg.joblib", name="diabetes")
    assert model.outputs == [TensorSpec("output-0", "FP64", (-1,))]
    np.testing.assert_allclose(model.predict({"input-0": x[:7]})["output-0"], reg.predict(x[:7]))


def test_estimator_fitted_on_a_dataframe_gets_its_columns(tmp_path: Path) -> None:
    frame = load_iris(as_frame=True).frame
    features = frame.drop(columns="target")
    clf = LogisticRegression(max_iter=500).fit(features, frame["target"])
    joblib.dump(clf, tmp_path / "model.joblib")

    model = load_model(tmp_path, name="iris")
    with warnings.catch_warnings(action="error"):  # no "X does not have valid feature names"
        out = model.predict({"input-0": features.to_numpy()[:5]})
    np.testing.assert_array_equal(out["output-0"], clf.predict(features[:5]))


def test_bad_inputs_name_the_input(tmp_path: Path) -> None:
    x, y = load_iris(return_X_y=True)
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), tmp_path / "model.joblib")
    model = load_model(tmp_path, name="iris")

    with pytest.raises(InferenceInputError, match="'features'"):
        model.predict({"features": x})
    with pytest.raises(InferenceInputError, match="input 'input-0' of model 'iris' is missing"):
        model.predict({})
    with pytest.raises(InferenceInputError, match=r"shape \[4\]"):
        model.predict({"input-0": x[0]})
    with pytest.raises(InferenceInputError, match="no signature 'classify'"):
        model.predict({"input-0": x}, signature_name="classify")



def test_text_pipeline_takes_strings(tmp_path: Path) -> None:
    texts = ["good movie", "great film", "bad movie", "awful film", "good fun", "awful plot"]
    labels = [1, 1, 0, 0, 1, 0]
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(texts, labels)
    joblib.dump(pipe, tmp_path / "model.joblib")

    model = load_model(tmp_path, name="sentiment")
    assert model.inputs == []  # a vectorizer does not record n_features_in_
    queries = np.array(["great fun", "awful movie"], dtype=object)
    out = model.predict({"text": queries}, outputs=["output-0", "probabilities"])
    np.testing.assert_array_equal(out["output-0"], pipe.predict(queries))
    np.testing.assert_allclose(out["probabilities"], pipe.predict_proba(queries))
    with pytest.raises(InferenceInputError, match="takes one input"):
        model.predict({"a": queries, "b": queries})
