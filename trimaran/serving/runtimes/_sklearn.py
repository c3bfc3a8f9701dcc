"""scikit-learn estimators and pipelines saved with joblib or pickle."""

from __future__ import annotations

import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import InferenceInputError, Model, ModelLoadError, TensorSpec, find_artifact
from trimaran.serving.runtimes._datatypes import numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, register_runtime

SUFFIXES = (".joblib", ".pkl", ".pickle")


class SKLearnModel(Model):
    """``output-0`` is ``estimator.predict``; ``probabilities`` is ``predict_proba`` where the estimator has it,
    computed only when a request names it (as MLServer's ``predict_proba`` output): it would double the
    cost of every request for an answer most callers do not read.

    Inputs are passed to the estimator in the dtype they arrive in (scikit-learn converts them itself);
    the declared FP32 is what V1 JSON is decoded to. An estimator fitted on a DataFrame gets one with its
    ``feature_names_in_`` as columns, so column-selecting pipelines work.
    """

    platform = "sklearn"

    def __init__(self, estimator: Any, *, name: str, version: str) -> None:
        n_features = getattr(estimator, "n_features_in_", None)
        inputs = [TensorSpec("input-0", "FP32", (-1, int(n_features)))] if n_features is not None else []
        super().__init__(name, version, inputs)
        self._estimator = estimator
        self._columns = getattr(estimator, "feature_names_in_", None)
        self._has_proba = hasattr(estimator, "predict_proba")
        self.outputs = self._probe_outputs(n_features)

    def _probe_outputs(self, n_features: int | None) -> list[TensorSpec]:
        # The format does not record output dtypes or widths: predicting one row of zeros shows them. A
        # pipeline that rejects zeros (string columns) gets the declared guess instead.
        classes = getattr(self._estimator, "classes_", None)
        fallback = [TensorSpec("output-0", numpy_to_datatype(np.asarray(classes).dtype) if classes is not None
                               else "FP64", (-1,))]
        if self._has_proba and classes is not None:
            fallback.append(TensorSpec("probabilities", "FP64", (-1, len(classes))))
        if n_features is None:
            return fallback
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = self.predict({"input-0": np.zeros((1, int(n_features)))},
                                     outputs=[spec.name for spec in fallback])
        except Exception:
            return fallback
        return [TensorSpec(name, numpy_to_datatype(value.dtype), (-1, *value.shape[1:]))
                for name, value in found.items()]

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        x = self._check_inputs(inputs, cast=False)["input-0"] if self.inputs else _only_input(self.name, inputs)
        if self._columns is not None and x.ndim == 2:
            import pandas as pd

            x = pd.DataFrame(x, columns=self._columns)
        result = {"output-0": np.asarray(self._estimator.predict(x))}
        if self._has_proba and outputs is not None and "probabilities" in outputs:
            result["probabilities"] = np.asarray(self._estimator.predict_proba(x))
        return result


def _only_input(model: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    if len(inputs) != 1:
        raise InferenceInputError(f"model {model!r} takes one input; got {', '.join(map(repr, inputs)) or 'none'}")
    return np.asarray(next(iter(inputs.values())))


@register_runtime
class SKLearnRuntime(Runtime):
    format = "sklearn"
    looks_for = "model.joblib, model.pkl or model.pickle (joblib.dump or pickle of an estimator)"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, SUFFIXES)

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        import joblib

        try:
            # joblib.load reads plain pickles too. Unpickling runs code from the file: the model is trusted.
            estimator = joblib.load(artifact)
        except Exception as e:
            raise ModelLoadError(f"cannot load scikit-learn model {artifact}: {type(e).__name__}: {e}") from e
        if not callable(getattr(estimator, "predict", None)):
            raise ModelLoadError(f"{artifact} holds a {type(estimator).__name__}, not an estimator with predict()")
        return SKLearnModel(estimator, name=name, version=version)
