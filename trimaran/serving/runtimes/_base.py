"""The interface between the model server and a loaded model, and helpers the runtimes share."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from trimaran.serving.runtimes._datatypes import datatype_to_numpy

DEFAULT_SIGNATURE = "serving_default"


class TensorSpec(NamedTuple):
    """One input or output tensor of a model, as V2 model metadata reports it.

    ``shape`` uses -1 for a dimension of any size (the batch dimension, usually the first).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The V2 metadata form: ``{"name", "datatype", "shape"}``."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


class ModelLoadError(Exception):
    """A model could not be loaded; the message names the file and what failed."""


class InferenceInputError(ValueError):
    """A request's tensors do not fit the model (an unknown or missing input, a wrong dtype or shape)."""


class Model(ABC):
    """A loaded model version that the server calls.

    Tensor-level models (every runtime but ``custom``) implement :meth:`predict`: named numpy arrays in,
    named numpy arrays out, with the names of :attr:`inputs` and :attr:`outputs`. Payload-level models
    (``payload_level = True``) implement :meth:`infer_payload` instead and see the request body as the
    client sent it.

    Attributes:
        name: the model's name (the InferenceService's, or ``--model-name``).
        version: the version directory's name ("1" for a lone model).
        platform: the V2 platform string, e.g. ``"sklearn"``, ``"onnx_onnxv1"``, ``"tensorflow_savedmodel"``.
        inputs: what the format says of its inputs; ``[]`` when it says nothing.
        outputs: likewise for outputs.
        batchable: rows are independent, so the server may concatenate requests along dimension 0 and
            split the outputs; False when the model fixes its batch size.
        payload_level: True for custom Python models, which are served through :meth:`infer_payload`.
    """

    platform: str = "custom"
    batchable: bool = True
    payload_level: bool = False

    def __init__(self, name: str, version: str, inputs: list[TensorSpec] | None = None,
                 outputs: list[TensorSpec] | None = None) -> None:
        self.name = name
        self.version = version
        self.inputs: list[TensorSpec] = list(inputs or [])
        self.outputs: list[TensorSpec] = list(outputs or [])

    @abstractmethod
    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        """Run the model on named arrays and return named arrays.

        Args:
            inputs: one array per input name. An unknown or missing name raises InferenceInputError.
            signature_name: which signature to call (TensorFlow); None is the default signature. Other
                runtimes accept only None or ``"serving_default"``.
            outputs: the output names wanted; None is all. A runtime may skip work for outputs not asked
                for (scikit-learn then does not call ``predict_proba``), and may return more.
        """

    async def infer_payload(self, payload: Any, headers: dict[str, str]) -> Any:
        """Serve a request body as the client sent it (payload-level models only)."""
        raise NotImplementedError(f"model {self.name!r} ({self.platform}) is served at tensor level: use predict()")

    def signature_names(self) -> list[str]:
        """The signatures :meth:`predict` accepts by name; the first is the default."""
        return [DEFAULT_SIGNATURE]

    def signature_specs(self, signature_name: str | None = None) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """(inputs, outputs) of one signature; for most formats, :attr:`inputs` and :attr:`outputs`."""
        self._check_signature(signature_name)
        return self.inputs, self.outputs

    def metadata(self) -> dict[str, Any]:
        """V2 model metadata (``GET /v2/models/{name}``) without ``versions``, which the server knows."""
        return {"name": self.name, "platform": self.platform,
                "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs]}

    def close(self) -> None:  # noqa: B027 - most runtimes hold nothing to release
        """Release what the model holds (sessions, threads); the model is not called afterwards."""

    def _check_signature(self, signature_name: str | None) -> str:
        names = self.signature_names()
        if signature_name is None:
            return names[0]
        if signature_name not in names:
            raise InferenceInputError(f"model {self.name!r} has no signature {signature_name!r}; "
                                      f"it has {', '.join(map(repr, names))}")
        return signature_name

    def _check_inputs(self, inputs: dict[str, np.ndarray], specs: list[TensorSpec] | None = None,
                      *, cast: bool = True, shape: bool = True) -> dict[str, np.ndarray]:
        """``inputs`` validated against ``specs`` (default :attr:`inputs`): every name known and present,
        numeric arrays cast to the declared dtype where that loses no kind (int -> float, float64 -> float32),
        rank and fixed dimensions as declared. ``cast``/``shape`` False skip those checks for formats
        that do not record dtypes or shapes."""
        specs = self.inputs if specs is None else specs
        known = {spec.name: spec for spec in specs}
        unknown = [name for name in inputs if name not in known]
        if unknown:
            raise InferenceInputError(f"model {self.name!r} has no input {unknown[0]!r}; "
                                      f"its inputs are {', '.join(map(repr, known)) or 'not declared'}")
        missing = [name for name in known if name not in inputs]
        if missing:
            raise InferenceInputError(f"input {missing[0]!r} of model {self.name!r} is missing")
        checked = {}
        for name, value in inputs.items():
            spec = known[name]
            array = np.asarray(value)
            if cast:
                array = _cast(name, array, spec.datatype)
            fits = not shape or (len(spec.shape) == array.ndim and all(
                want in (-1, got) for want, got in zip(spec.shape, array.shape, strict=True)))
            if not fits:
                raise InferenceInputError(f"input {name!r} has shape {list(array.shape)}; model {self.name!r} "
                                          f"expects {list(spec.shape)} (-1: any size)")
            checked[name] = array
        return checked


def _cast(name: str, array: np.ndarray, datatype: str) -> np.ndarray:
    want = datatype_to_numpy(datatype)
    if array.dtype == want:
        return array
    if want.kind == "O":
        if array.dtype.kind in "OSU":
            return array.astype(object)
    elif array.dtype.kind in "biuf" and np.can_cast(array.dtype, want, "same_kind"):
        return array.astype(want)
    raise InferenceInputError(f"input {name!r} has datatype {array.dtype}; the model expects {datatype}")


def intra_op_threads() -> int:
    """Threads per operator for frameworks with their own pools: ``TRIMARAN_INTRA_OP_THREADS``, default 1.

    The server runs one model per worker process and scales by processes; a framework that starts one
    thread per core in each of them would oversubscribe the machine.
    """
    raw = os.environ.get("TRIMARAN_INTRA_OP_THREADS", "1")
    try:
        threads = int(raw)
    except ValueError:
        raise ModelLoadError(f"TRIMARAN_INTRA_OP_THREADS={raw!r} is not an integer") from None
    if threads < 1:
        raise ModelLoadError(f"TRIMARAN_INTRA_OP_THREADS={raw!r} must be at least 1")
    return threads


def find_artifact(path: Path, suffixes: Iterable[str], *, check: Any = None) -> Path | None:
    """The model file in ``path`` with one of ``suffixes``: ``path`` itself if it is such a file; in a
    directory, ``model.<suffix>`` if present, else the only such file. None when there is none.

    ``check(file) -> bool`` further filters candidates by content (formats that share a suffix). Several
    candidates and no ``model.*`` among them raise ModelLoadError: which one to serve is the user's call.
    """
    suffixes = tuple(suffixes)

    def fits(file: Path) -> bool:
        return file.is_file() and file.name.lower().endswith(suffixes) and (check is None or check(file))

    if path.is_file():
        return path if fits(path) else None
    candidates = sorted(file for file in path.iterdir() if fits(file))
    preferred = [file for file in candidates if file.name.lower().startswith("model.")]
    if len(preferred) == 1:
        return preferred[0]
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise ModelLoadError(f"{path} holds several model files ({', '.join(f.name for f in candidates)}); "
                             f"keep one, or name the one to serve model{candidates[0].suffix}")
    return None


def read_head(file: Path, size: int = 4096) -> bytes:
    """The first bytes of a file, for formats recognised by content; empty if it cannot be read."""
    try:
        with file.open("rb") as f:
            return f.read(size)
    except OSError:
        return b""
