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

# Imported for registration; the order is the detection order.
from trimaran.serving.runtimes import _tensorflow, _keras, _onnx, _pytorch, _xgboost, _lightgbm, _sklearn  # noqa: F401  isort: skip
from trimaran.serving.runtimes._base import InferenceInputError, Model, ModelLoadError, TensorSpec
from trimaran.serving.runtimes._datatypes import datatype_to_numpy, numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, detect_format, load_model, register_runtime, runtime_names

__all__ = [
    "InferenceInputError",
    "Model",
    "ModelLoadError",
    "Runtime",
    "TensorSpec",
    "datatype_to_numpy",
    "detect_format",
    "load_model",
    "numpy_to_datatype",
    "register_runtime",
    "runtime_names",
]
