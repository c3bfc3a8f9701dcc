"""Keras models saved as one ``.keras`` archive (or legacy ``.h5``), by tf-keras (Keras 2) or Keras 3.

The archive's ``metadata.json`` says which Keras wrote it, and that one loads it: the TFJob example
(examples/tf-multiworker) saves with tf-keras under ``TF_USE_LEGACY_KERAS=1``, whose objects Keras 3 would
have to translate.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import InferenceInputError, Model, ModelLoadError, TensorSpec, find_artifact
from trimaran.serving.runtimes._datatypes import datatype_to_numpy, numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, register_runtime
from trimaran.serving.runtimes._tensorflow import import_tensorflow


def _keras_version(artifact: Path) -> str:
    """The ``keras_version`` a ``.keras`` archive was written by; "2" for ``.h5`` files, which only Keras 2
    writes in full."""
    if artifact.suffix.lower() == ".h5":
        return "2"
    try:
        with zipfile.ZipFile(artifact) as archive:
            return str(json.loads(archive.read("metadata.json")).get("keras_version", "3"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
        raise ModelLoadError(f"{artifact} is not a Keras archive (model.save('....keras')): {e}") from e


def _keras_module(version: str) -> Any:
    import_tensorflow()
    if version.startswith("2"):
        try:
            import tf_keras

            return tf_keras
        except ImportError:
            pass  # Keras 3 reads most Keras 2 archives
    import keras

    return keras


def _spec(name: str, tensor: Any) -> TensorSpec:
    dtype = getattr(tensor.dtype, "as_numpy_dtype", tensor.dtype)  # tf.DType in Keras 2, a string in Keras 3
    dims = tuple(-1 if d is None else int(d) for d in tensor.shape)
    return TensorSpec(name, numpy_to_datatype(np.dtype(dtype)), dims)


class KerasModel(Model):
    """A Keras model called with ``predict_on_batch`` (warmed up at load with one row of zeros).

    Inputs are named as the model's input layers, outputs as its output layers (``output-<i>`` where Keras has
    no names); inputs are cast to the layers' dtypes. A subclassed model that was never called on named inputs
    reports no inputs and takes any single one.
    """

    platform = "tensorflow_keras"

    def __init__(self, keras_model: Any, *, name: str, version: str) -> None:
        super().__init__(name, version)
        self._keras_model = keras_model
        model_inputs = getattr(keras_model, "inputs", None) or []
        model_outputs = getattr(keras_model, "outputs", None) or []
        input_names = getattr(keras_model, "input_names", None) or [t.name.split(":")[0] for t in model_inputs]
        output_names = getattr(keras_model, "output_names", None) or [f"output-{i}" for i in range(len(model_outputs))]
        self.inputs = [_spec(n, t) for n, t in zip(input_names, model_inputs, strict=True)]
        self.outputs = [_spec(n, t) for n, t in zip(output_names, model_outputs, strict=True)]
        self.batchable = all(s.shape and s.shape[0] == -1 for s in self.inputs)
        if self.inputs:
            # The first call traces and caches Keras' predict function: done here, it neither slows the first
            # request nor races between threads calling at once.
            self.predict({s.name: np.zeros([1 if d == -1 else d for d in s.shape], datatype_to_numpy(s.datatype))
                          for s in self.inputs})

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        if self.inputs:
            checked = self._check_inputs(inputs)
            arrays = [checked[s.name] for s in self.inputs]
        elif len(inputs) == 1:
            arrays = [np.asarray(next(iter(inputs.values())))]
        else:
            raise InferenceInputError(f"model {self.name!r} takes one input; got {', '.join(map(repr, inputs))}")
        result = self._keras_model.predict_on_batch(arrays if len(arrays) > 1 else arrays[0])
        values = result if isinstance(result, (list, tuple)) else [result]
        names = [o.name for o in self.outputs] or [f"output-{i}" for i in range(len(values))]
        return {n: np.asarray(v) for n, v in zip(names, values, strict=True) if outputs is None or n in outputs}


@register_runtime
class KerasRuntime(Runtime):
    format = "keras"
    looks_for = "model.keras (Keras model.save) or model.h5"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, (".keras", ".h5"))

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        version_written = _keras_version(artifact)
        keras = _keras_module(version_written)
        try:
            # compile=False: serving needs neither the optimizer nor the loss, whose custom objects may be missing.
            model = keras.models.load_model(str(artifact), compile=False)
        except Exception as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelLoadError(f"cannot load Keras model {artifact} (written by Keras {version_written}) with "
                                 f"{keras.__name__} {keras.__version__}: {reason}") from e
        return KerasModel(model, name=name, version=version)
