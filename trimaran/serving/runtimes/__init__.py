"""Model runtimes: load a model version's files into a :class:`Model` the server calls.

One private module per format registers its runtime (:func:`register_runtime`); frameworks are imported
only when a model of theirs is loaded, so importing this package imports neither torch nor TensorFlow.

============  ==========================================================  =================================
modelFormat   files (``model.<suffix>``, or the only file with the suffix)  platform
============  ==========================================================  =================================
custom        ``model.py`` (a class in KServe's shape; wins over the rest)  custom (payload level)
mlflow        ``MLmodel`` (python_function flavour; wins over its files)  mlflow
tensorflow    ``saved_model.pb`` + ``variables/``                           tensorflow_savedmodel
keras         ``.keras`` (tf-keras or Keras 3), ``.h5``                     tensorflow_keras
onnx          ``.onnx``                                                     onnx_onnxv1
pytorch       ``.pt2`` (torch.export), ``.pt``/``.pth`` (TorchScript)       pytorch_torch_export / _torchscript
xgboost       ``.bst``, ``.ubj``, ``.json`` (Booster.save_model)            xgboost
lightgbm      ``.txt``, ``.lgb`` (Booster.save_model)                       lightgbm
sklearn       ``.joblib``, ``.pkl``, ``.pickle``                            sklearn
============  ==========================================================  =================================

Frameworks with thread pools (ONNX Runtime, torch, TensorFlow, XGBoost, LightGBM) get
``TRIMARAN_INTRA_OP_THREADS`` threads (default 1): the server scales with worker processes.

Example::

    from pathlib import Path
    from trimaran.serving.runtimes import detect_format, load_model

    detect_format(Path("models/iris/1"))            # "sklearn"
    model = load_model(Path("models/iris/1"), name="iris")
    model.inputs                                     # [TensorSpec("input-0", "FP32", (-1, 4))]
    model.predict({"input-0": rows})                 # {"output-0": labels, "probabilities": ...}
"""

from __future__ import annotations

# Imported to register their runtimes, in detection order: a model.py and an MLmodel first (they may load files
# of the other formats themselves), the sklearn pickle suffixes last.
from trimaran.serving.runtimes import _custom, _mlflow, _tensorflow, _keras, _onnx  # noqa: F401  isort: skip
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
