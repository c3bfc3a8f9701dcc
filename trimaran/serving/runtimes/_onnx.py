"""ONNX models run by ONNX Runtime."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, ModelLoadError, TensorSpec, find_artifact, intra_op_threads
from trimaran.serving.runtimes._registry import Runtime, register_runtime

# ONNX Runtime's type strings for tensor element types.
_DATATYPE_OF_ORT = {
    "tensor(bool)": "BOOL", "tensor(uint8)": "UINT8", "tensor(uint16)": "UINT16", "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64", "tensor(int8)": "INT8", "tensor(int16)": "INT16", "tensor(int32)": "INT32",
    "tensor(int64)": "INT64", "tensor(float16)": "FP16", "tensor(float)": "FP32", "tensor(double)": "FP64",
    "tensor(string)": "BYTES", "tensor(bfloat16)": "BF16",
}
# skl2onnx classifiers answer probabilities as a sequence of {label: probability} maps (ZipMap) by default.
_ZIPMAP_PREFIX = "seq(map("


def _spec(arg: Any) -> TensorSpec:
    if arg.type.startswith(_ZIPMAP_PREFIX):
        return TensorSpec(arg.name, "FP32", (-1, -1))
    datatype = _DATATYPE_OF_ORT.get(arg.type)
    if datatype is None:
        raise ModelLoadError(f"ONNX {arg.name!r} has type {arg.type}, which has no V2 datatype")
    # Symbolic ("batch") and unknown (None) dimensions are any size.
    return TensorSpec(arg.name, datatype, tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape))


class ONNXModel(Model):
    """An ``onnxruntime.InferenceSession``; inputs and outputs as the graph declares them.

    ``batchable`` only when every input's first dimension is free. A ZipMap output (a list of
    ``{label: probability}``) is answered as an FP32 matrix, one column per label in the map's order.
    """

    platform = "onnx_onnxv1"

    def __init__(self, session: Any, *, name: str, version: str) -> None:
        super().__init__(name, version, [_spec(a) for a in session.get_inputs()],
                         [_spec(a) for a in session.get_outputs()])
        self._session = session
        self._zipmaps = {a.name for a in session.get_outputs() if a.type.startswith(_ZIPMAP_PREFIX)}
        self.batchable = all(spec.shape and spec.shape[0] == -1 for spec in self.inputs)

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        feed = self._check_inputs(inputs)
        for spec in self.inputs:
            if spec.datatype == "BYTES":  # ONNX Runtime takes str elements only
                feed[spec.name] = np.vectorize(_text, otypes=[object])(feed[spec.name])
        names = [o.name for o in self.outputs if outputs is None or o.name in outputs] or None
        values = self._session.run(names, feed)
        result = {}
        for name, value in zip(names or [o.name for o in self.outputs], values, strict=True):
            if name in self._zipmaps:
                value = np.array([list(row.values()) for row in value], dtype=np.float32)
            result[name] = np.asarray(value)
        return result


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@register_runtime
class ONNXRuntime(Runtime):
    format = "onnx"
    looks_for = "model.onnx"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, (".onnx",))

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        import onnxruntime

        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = intra_op_threads()
        # The server scales with worker processes; parallel graph branches would only compete for their cores.
        so.inter_op_num_threads = 1
        so.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                     if p in onnxruntime.get_available_providers()]
        try:
            session = onnxruntime.InferenceSession(str(artifact), sess_options=so, providers=providers)
        except Exception as e:  # onnxruntime raises its own pybind exception types
            raise ModelLoadError(f"cannot load ONNX model {artifact}: {str(e).strip()}") from e
        return ONNXModel(session, name=name, version=version)
