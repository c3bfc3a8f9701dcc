"""Model runtimes: load a model version's files into a :class:`Model` the server calls.

One private module per format registers its runtime (:func:`register_runtime`); frameworks are imported
only when a model of theirs is loaded, so importing this package does not import torch or TensorFlow.

Example::

    from pathlib import Path
    from trimaran.serving.runtimes import detect_format, load_model

    detect_format(Path("models/iris/1"))            # "sklearn"
    model = load_model(Path("models/iris/1"), name="iris")
    model.inputs                                     # [TensorSpec("input-0", "FP32", (-1, 4))]
"""

from __future__ import annotations

# Imported to register their runtimes, in detection order: a model.py first (it may load files of the other
# formats itself), the sklearn pickle suffixes last.
from trimaran.serving.runtimes import _custom, _tensorflow, _keras, _onnx  # noqa: F401  isort: skip
from trimaran.serving.runtimes import _pytorch, _xgboost, _lightgbm, _sklearn  # noqa: F401  isort: skip
from trimaran.serving.runtimes._base import InferenceInputError, Model, ModelLoadError, TensorSpec
from trimaran.serving.runtimes._datatypes import datatype_to_numpy, numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, detect_format, load_model, register_runtime, runtime_names
from trimaran.serving.runtimes._transformer import PredictorError, TransformerModel

__all__ = [
    "InferenceInputError",
    "Model",
    "ModelLoadError",
    "PredictorError",
    "Runtime",
    "TensorSpec",
    "TransformerModel",
    "datatype_to_numpy",
    "detect_format",
    "load_model",
    "numpy_to_datatype",
    "register_runtime",
    "runtime_names",
]
