"""PyTorch programs: TorchScript archives (``torch.jit.save``) and ``torch.export`` archives (``torch.export.save``).

A ``torch.save`` of a module or a state_dict is not servable: unpickling it needs the Python class that
defined the model, which the model directory does not carry.
"""

from __future__ import annotations

import warnings
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, ModelLoadError, TensorSpec, find_artifact, intra_op_threads
from trimaran.serving.runtimes._datatypes import numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, register_runtime

SUFFIXES = (".pt2", ".pt", ".pth")


def _datatype(dtype: Any) -> str:
    import torch

    if dtype == torch.bfloat16:
        return "BF16"
    return numpy_to_datatype(torch.empty((), dtype=dtype).numpy().dtype)


def _named_outputs(value: Any) -> dict[str, Any]:
    """A program's return value by output name: a tensor is ``output-0``, a tuple or list ``output-<i>``,
    a dict keeps its keys."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return {f"output-{i}": v for i, v in enumerate(value)}
    return {"output-0": value}


class _TorchModel(Model):
    def __init__(self, program: Any, *, name: str, version: str, inputs: list[TensorSpec],
                 outputs: list[TensorSpec]) -> None:
        super().__init__(name, version, inputs, outputs)
        self._program = program

    def _call(self, arrays: list[np.ndarray], outputs: Collection[str] | None) -> dict[str, np.ndarray]:
        import torch

        # torch tensors are writable: a read-only array (decoded straight from a request buffer) is copied.
        tensors = [torch.from_numpy(np.ascontiguousarray(a) if a.flags.writeable else a.copy()) for a in arrays]
        # inference_mode: no autograd bookkeeping, and outputs convert to numpy without detach().
        with torch.inference_mode():
            result = self._program(*tensors)
        return {name: value.cpu().numpy() for name, value in _named_outputs(result).items()
                if outputs is None or name in outputs}


class TorchScriptModel(_TorchModel):
    """A TorchScript module. Its inputs are the tensor arguments of ``forward``, by name.

    TorchScript records neither dtypes nor shapes, so inputs are reported FP32 (what V1 JSON is decoded to)
    with only the batch dimension, ``[-1]``, and what arrives is passed on as it is: neither cast nor
    shape-checked. Outputs are named ``output-0`` (a tensor), ``output-<i>`` (a tuple), or the keys of a dict.
    """

    platform = "pytorch_torchscript"

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        checked = self._check_inputs(inputs, cast=False, shape=False)
        return self._call([checked[s.name] for s in self.inputs], outputs)


class ExportedProgramModel(_TorchModel):
    """A ``torch.export`` program: inputs and outputs with the dtypes and shapes it was exported with (dynamic
    dimensions are -1). Inputs are cast to the exported dtypes; ``batchable`` only when every input's first
    dimension was exported dynamic."""

    platform = "pytorch_torch_export"

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        checked = self._check_inputs(inputs)
        return self._call([checked[s.name] for s in self.inputs], outputs)


def _zip_names(artifact: Path) -> list[str]:
    try:
        with zipfile.ZipFile(artifact) as archive:
            return archive.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelLoadError(f"{artifact} is not a PyTorch archive (torch.jit.save or torch.export.save): {e}") from e


def _load_torchscript(artifact: Path, *, name: str, version: str) -> Model:
    import torch

    with warnings.catch_warnings():
        # torch.jit is deprecated in favour of torch.export, but TorchScript archives are what KServe serves.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            module = torch.jit.load(str(artifact), map_location="cpu")
        except Exception as e:
            raise ModelLoadError(f"cannot load TorchScript model {artifact}: {str(e).strip().splitlines()[0]}") from e
    module.eval()
    inputs = []
    for arg in module.forward.schema.arguments[1:]:  # [0] is self
        if isinstance(arg.type, torch.TensorType):
            inputs.append(TensorSpec(arg.name, "FP32", (-1,)))
        elif not arg.has_default_value():
            raise ModelLoadError(f"{artifact}: forward() takes {arg.name!r} of type {arg.type}, "
                                 "which a request cannot supply; only tensor arguments can be served")
    returns = module.forward.schema.returns[0].type
    if isinstance(returns, torch.TensorType):
        outputs = [TensorSpec("output-0", "FP32", (-1,))]
    elif isinstance(returns, torch.TupleType):
        outputs = [TensorSpec(f"output-{i}", "FP32", (-1,)) for i in range(len(returns.elements()))]
    else:  # dicts and lists: names or counts are known only once it has run
        outputs = []
    return TorchScriptModel(module, name=name, version=version, inputs=inputs, outputs=outputs)


def _load_exported(artifact: Path, *, name: str, version: str) -> Model:
    import torch
    from torch.utils import _pytree

    try:
        program = torch.export.load(str(artifact))
    except Exception as e:
        raise ModelLoadError(f"cannot load torch.export program {artifact}: {str(e).strip().splitlines()[0]}") from e

    def spec(tensor_name: str, value: Any) -> TensorSpec:
        dims = tuple(d if isinstance(d, int) else -1 for d in value.shape)  # SymInts are dynamic dimensions
        return TensorSpec(tensor_name, _datatype(value.dtype), dims)

    placeholders = {node.name: node.meta.get("val") for node in program.graph.nodes if node.op == "placeholder"}
    inputs = [spec(n, placeholders[n]) for n in program.graph_signature.user_inputs]
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    user_outputs = set(program.graph_signature.user_outputs)
    values = [arg.meta.get("val") for arg in output_node.args[0] if getattr(arg, "name", None) in user_outputs]
    outputs = [spec(n, v) for n, v in
               _named_outputs(_pytree.tree_unflatten(values, program.call_spec.out_spec)).items()]
    model = ExportedProgramModel(program.module(), name=name, version=version, inputs=inputs, outputs=outputs)
    model.batchable = all(s.shape and s.shape[0] == -1 for s in inputs)
    return model


@register_runtime
class PyTorchRuntime(Runtime):
    format = "pytorch"
    looks_for = "model.pt2 (torch.export.save), model.pt or model.pth (torch.jit.save)"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, SUFFIXES)

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        import torch

        torch.set_num_threads(intra_op_threads())
        names = _zip_names(artifact)
        if any(n.endswith("/archive_format") for n in names):
            return _load_exported(artifact, name=name, version=version)
        if any("/code/" in n for n in names):
            return _load_torchscript(artifact, name=name, version=version)
        raise ModelLoadError(f"{artifact} is a torch.save pickle (a module or a state_dict), which cannot be served "
                             "without the Python class that defines the model. Save it with "
                             "torch.jit.script(model).save(path) or torch.export.save(torch.export.export(...), path)")
