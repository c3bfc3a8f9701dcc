"""TensorFlow SavedModels (a directory with ``saved_model.pb``), called through their serving signatures."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import (
    DEFAULT_SIGNATURE,
    Model,
    ModelLoadError,
    TensorSpec,
    intra_op_threads,
)
from trimaran.serving.runtimes._datatypes import numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, register_runtime

MARKERS = ("saved_model.pb", "saved_model.pbtxt")


def import_tensorflow() -> Any:
    """TensorFlow, its thread pools sized by ``TRIMARAN_INTRA_OP_THREADS`` (they can be sized only before
    its first operation; later, what is set stays)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no oneDNN/CUDA banner per worker process
    import tensorflow as tf

    threads = intra_op_threads()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass
    return tf


def tf_spec(name: str, spec: Any) -> TensorSpec:
    """A TensorSpec from a ``tf.TensorSpec``; unknown dimensions (and an unknown rank, as one) are -1."""
    dims = spec.shape.as_list() if spec.shape.rank is not None else [None]
    return TensorSpec(name, numpy_to_datatype(spec.dtype.as_numpy_dtype),
                      tuple(-1 if d is None else int(d) for d in dims))


class SavedModel(Model):
    """A SavedModel's signatures, called by name: ``predict(..., signature_name="...")``, default
    ``serving_default`` (else the first). :attr:`inputs`/:attr:`outputs` are the default signature's; inputs
    are cast to its dtypes. ``batchable`` when every input of the default signature has a free first dimension.
    """

    platform = "tensorflow_savedmodel"

    def __init__(self, loaded: Any, *, name: str, version: str) -> None:
        super().__init__(name, version)
        self._loaded = loaded  # keeps the variables the signatures read alive
        names = sorted(loaded.signatures.keys())
        if DEFAULT_SIGNATURE in names:
            names.insert(0, names.pop(names.index(DEFAULT_SIGNATURE)))
        self._signatures = {n: loaded.signatures[n] for n in names}
        self._specs = {n: self._describe(f) for n, f in self._signatures.items()}
        # A signature input of unknown rank accepts any shape: shapes are checked only where all ranks are known.
        self._ranked = {n: all(s.shape.rank is not None for s in f.structured_input_signature[1].values())
                        for n, f in self._signatures.items()}
        self.inputs, self.outputs = self._specs[names[0]]
        self.batchable = all(s.shape and s.shape[0] == -1 for s in self.inputs)

    @staticmethod
    def _describe(function: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
        _, kwargs = function.structured_input_signature
        outputs = function.structured_outputs
        return ([tf_spec(n, s) for n, s in kwargs.items()], [tf_spec(n, s) for n, s in outputs.items()])

    def signature_names(self) -> list[str]:
        return list(self._signatures)

    def signature_specs(self, signature_name: str | None = None) -> tuple[list[TensorSpec], list[TensorSpec]]:
        return self._specs[self._check_signature(signature_name)]

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        import tensorflow as tf

        signature = self._check_signature(signature_name)
        specs, _ = self._specs[signature]
        checked = self._check_inputs(inputs, specs, shape=self._ranked[signature])
        result = self._signatures[signature](**{n: tf.constant(a) for n, a in checked.items()})
        return {n: t.numpy() for n, t in result.items() if outputs is None or n in outputs}


@register_runtime
class TensorFlowRuntime(Runtime):
    format = "tensorflow"
    looks_for = "saved_model.pb (tf.saved_model.save)"

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path.parent if path.name in MARKERS else None
        return path if any((path / m).is_file() for m in MARKERS) else None

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        tf = import_tensorflow()
        try:
            loaded = tf.saved_model.load(str(artifact))
        except Exception as e:
            reason = str(e).strip().splitlines()[0]
            raise ModelLoadError(f"cannot load TensorFlow SavedModel {artifact}: {reason}") from e
        if not loaded.signatures:
            raise ModelLoadError(f"SavedModel {artifact} has no signatures to serve; save it with "
                                 "tf.saved_model.save(obj, path, signatures=...)")
        return SavedModel(loaded, name=name, version=version)
