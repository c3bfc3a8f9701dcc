"""MLflow models: a directory with an ``MLmodel`` file, served through its ``python_function`` flavour.

The flavours training code logs most are loaded here without MLflow, so the model server needs
neither MLflow nor its start-up time (``import mlflow.pyfunc`` alone takes seconds):

- ``mlflow.sklearn``: the estimator in ``model.skops`` (skops, with the trusted types the MLmodel
  lists), ``model.pkl`` (pickle or cloudpickle); its ``predict_fn`` (``predict``, ``predict_proba``...)
  is what is called;
- ``mlflow.pytorch``: ``data/model.pt2`` (torch.export, MLflow 3's default) through the PyTorch
  runtime, or ``data/model.pth`` (a cloudpickled module, the classes travel inside it);
- ``mlflow.xgboost``: the ``model_class`` it names (a Booster, an ``XGBClassifier``...) loading its
  ``data`` (``.ubj``, ``.json``, ``.xgb``).

Any other ``loader_module`` (a ``PythonModel``, LightGBM, ...) is loaded with
``mlflow.pyfunc.load_model`` when MLflow is installed in the server's environment, and refused at
load with the module's name otherwise. A directory without ``MLmodel``, or whose MLmodel has no
``python_function`` flavour, is refused naming the file.

The MLmodel's ``signature`` is the V2 metadata: tensor specs keep their names (``input-<i>`` /
``output-<i>`` for unnamed ones), dtypes and shapes; a column-based signature makes each column an
input of shape ``[-1]`` (as MLServer does), and a request may instead send the columns as one
``[-1, columns]`` matrix (Seldon's ndarray, V1 ``instances``). Requests are checked against the
signature: an unknown or missing input, or a dtype or shape it does not allow, is answered with
the input's name. Without a signature, one input of any name is passed to the model as it is.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import InferenceInputError, Model, ModelLoadError, TensorSpec, intra_op_threads
from trimaran.serving.runtimes._datatypes import numpy_to_datatype
from trimaran.serving.runtimes._registry import Runtime, load_model, register_runtime

MLMODEL = "MLmodel"
PYFUNC = "python_function"
# Column types of MLflow's schema (mlflow.types.DataType) -> V2 datatypes.
_COLUMN_DATATYPES = {"boolean": "BOOL", "integer": "INT32", "long": "INT64", "float": "FP32", "double": "FP64",
                     "string": "BYTES", "binary": "BYTES", "datetime": "BYTES"}

Predict = Callable[[Any], Any]


class MlflowModel(Model):
    """An MLflow model's predict function behind its signature (see the module docstring)."""

    platform = "mlflow"

    def __init__(self, predict: Predict, *, name: str, version: str, inputs: list[TensorSpec],
                 outputs: list[TensorSpec], columns: bool, frame_columns: list[str] | None) -> None:
        super().__init__(name, version, inputs, outputs)
        self._predict = predict
        self._columns = columns
        self._frame_columns = frame_columns

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        if not self.inputs:
            if len(inputs) != 1:
                raise InferenceInputError(f"model {self.name!r} takes one input; "
                                          f"got {', '.join(map(repr, inputs)) or 'none'}")
            return self._named(self._predict(np.asarray(next(iter(inputs.values())))))
        if self._columns:
            return self._named(self._predict(self._frame(self._as_columns(inputs))))
        checked = self._check_inputs(inputs)
        # One tensor goes as an array, several as a dict by name (what the pyfunc flavours take).
        return self._named(self._predict(checked[self.inputs[0].name] if len(self.inputs) == 1 else checked))

    def _as_columns(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Columns by name; one ``[-1, columns]`` matrix under another name is split into them."""
        names = [spec.name for spec in self.inputs]
        if len(inputs) == 1 and next(iter(inputs)) not in names:
            (key, value), = inputs.items()
            matrix = np.asarray(value)
            if matrix.ndim == 2 and matrix.shape[1] == len(names):
                inputs = {name: matrix[:, i] for i, name in enumerate(names)}
            else:
                raise InferenceInputError(
                    f"model {self.name!r} has no input {key!r}; its inputs are the columns "
                    f"{', '.join(map(repr, names))} (or one [-1, {len(names)}] matrix), got shape {list(matrix.shape)}")
        # A column may come as [-1] or [-1, 1].
        flat = {name: np.asarray(v).reshape(-1) if np.ndim(v) == 2 and np.shape(v)[1] == 1 else v
                for name, v in inputs.items()}
        return self._check_inputs(flat)

    def _frame(self, columns: dict[str, np.ndarray]) -> Any:
        ordered = [columns[spec.name] for spec in self.inputs]
        if self._frame_columns is None:
            return np.column_stack(ordered) if len(ordered) > 1 else ordered[0].reshape(-1, 1)
        import pandas as pd

        return pd.DataFrame({spec.name: columns[spec.name] for spec in self.inputs})

    def _named(self, result: Any) -> dict[str, np.ndarray]:
        """The model's answer by output name: the signature's names where it has them, else
        ``output-<i>`` (a DataFrame's columns and a dict's keys keep their own)."""
        if isinstance(result, dict):
            return {str(k): np.asarray(v) for k, v in result.items()}
        if hasattr(result, "columns") and hasattr(result, "to_numpy"):  # a pandas DataFrame
            return {str(c): result[c].to_numpy() for c in result.columns}
        if isinstance(result, tuple):  # several outputs (a list is one output's rows)
            values = [np.asarray(v) for v in result]
        else:
            values = [np.asarray(result.to_numpy() if hasattr(result, "to_numpy") else result)]
        names = [spec.name for spec in self.outputs] if len(self.outputs) == len(values) else []
        return {names[i] if names else f"output-{i}": v for i, v in enumerate(values)}


def _specs(schema: str | None, kind: str, artifact: Path) -> tuple[list[TensorSpec], bool]:
    """The tensor specs of a signature's ``inputs``/``outputs`` (a JSON string in MLmodel), and whether
    they are columns."""
    if not schema:
        return [], False
    try:
        entries = json.loads(schema) if isinstance(schema, str) else schema
    except ValueError as e:
        raise ModelLoadError(f"{artifact}: signature.{kind} is not JSON: {e}") from None
    specs: list[TensorSpec] = []
    columns = bool(entries) and all(entry.get("type") != "tensor" for entry in entries)
    prefix = "input" if kind == "inputs" else "output"
    for i, entry in enumerate(entries):
        if entry.get("type") == "tensor":
            spec = entry.get("tensor-spec") or {}
            try:
                datatype = numpy_to_datatype(np.dtype(spec.get("dtype")))
            except (TypeError, ValueError) as e:
                raise ModelLoadError(f"{artifact}: signature.{kind}[{i}]: dtype {spec.get('dtype')!r}: {e}") from None
            specs.append(TensorSpec(entry.get("name") or f"{prefix}-{i}", datatype,
                                    tuple(int(d) for d in spec.get("shape") or [-1])))
        elif entry.get("type") in _COLUMN_DATATYPES:
            specs.append(TensorSpec(entry.get("name") or f"{prefix}-{i}", _COLUMN_DATATYPES[entry["type"]], (-1,)))
        else:
            raise ModelLoadError(f"{artifact}: signature.{kind}[{i}] has type {entry.get('type')!r}, which the V2 "
                                 f"protocol cannot carry; types served: tensor, {', '.join(_COLUMN_DATATYPES)}")
    if not columns and any(entry.get("type") != "tensor" for entry in entries):
        raise ModelLoadError(f"{artifact}: signature.{kind} mixes tensors and columns")
    return specs, columns


def _load_sklearn(model_dir: Path, flavor: dict, pyfunc: dict) -> Predict:
    path = model_dir / str(pyfunc.get("model_path") or flavor.get("pickled_model") or "model.pkl")
    fmt = flavor.get("serialization_format") or ("skops" if path.suffix == ".skops" else "cloudpickle")
    try:
        if fmt == "skops":
            import skops.io

            # MLflow's own rule: the types trusted are those the model was logged with (skops' defaults if none).
            estimator = skops.io.load(path, trusted=flavor.get("skops_trusted_types"))
        else:
            # Unpickling runs code from the file: the model is trusted, as MLflow's pyfunc trusts it.
            with path.open("rb") as f:
                estimator = pickle.load(f)  # noqa: S301
    except Exception as e:
        hint = (" (log it with skops_trusted_types naming them)" if "untrusted" in str(e).lower() else "")
        raise ModelLoadError(f"cannot load the MLflow scikit-learn model {path} ({fmt}): "
                             f"{type(e).__name__}: {e}{hint}") from e
    method = str(pyfunc.get("predict_fn") or "predict")
    predict = getattr(estimator, method, None)
    if not callable(predict):
        raise ModelLoadError(f"{path}: the {type(estimator).__name__} has no {method}() (predict_fn in {MLMODEL})")
    return predict


def _load_pytorch(model_dir: Path, flavor: dict, pyfunc: dict) -> Predict:
    data = model_dir / str(pyfunc.get("data") or flavor.get("model_data") or "data")
    if (data / "model.pt2").is_file():
        inner = load_model(data / "model.pt2", name="inner", model_format="pytorch")

        def run_exported(x: Any) -> Any:
            arrays = x if isinstance(x, dict) else {inner.inputs[0].name: x}
            return inner.predict(arrays)

        return run_exported
    pickled = data / "model.pth"
    if not pickled.is_file():
        raise ModelLoadError(f"{data} holds neither model.pt2 nor model.pth (mlflow.pytorch.log_model's files)")
    import torch

    torch.set_num_threads(intra_op_threads())
    try:
        # mlflow.pytorch pickles the module with cloudpickle (its classes by value): the model is trusted.
        module = torch.load(pickled, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ModelLoadError(f"cannot load the MLflow PyTorch model {pickled}: {type(e).__name__}: {e}") from e
    module.eval()

    def run_module(x: Any) -> Any:
        with torch.inference_mode():
            out = module(torch.from_numpy(np.array(x)))
        return tuple(o.numpy() for o in out) if isinstance(out, (tuple, list)) else out.numpy()

    return run_module


def _load_xgboost(model_dir: Path, flavor: dict, pyfunc: dict) -> Predict:
    import importlib

    import xgboost

    path = model_dir / str(flavor.get("data") or pyfunc.get("data") or "model.xgb")
    class_path = str(flavor.get("model_class") or "xgboost.core.Booster")
    module_name, _, class_name = class_path.rpartition(".")
    if module_name.split(".")[0] != "xgboost":
        raise ModelLoadError(f"{model_dir / MLMODEL}: model_class {class_path} is not an XGBoost class")
    try:
        model = getattr(importlib.import_module(module_name), class_name)()
        model.load_model(str(path))
    except Exception as e:
        raise ModelLoadError(f"cannot load the MLflow XGBoost model {path}: {type(e).__name__}: {e}") from e
    if isinstance(model, xgboost.Booster):
        model.set_param({"nthread": intra_op_threads()})
        return lambda x: model.predict(xgboost.DMatrix(x))
    model.set_params(n_jobs=intra_op_threads())
    return model.predict


def _load_with_mlflow(model_dir: Path, loader: str) -> Predict:
    try:
        import mlflow.pyfunc
    except ImportError:
        raise ModelLoadError(f"{model_dir / MLMODEL}: loader_module {loader} is loaded here only by MLflow itself, "
                             "which is not installed in the model server's environment (pip install mlflow); "
                             "mlflow.sklearn and mlflow.pytorch models need no MLflow") from None
    try:
        return mlflow.pyfunc.load_model(str(model_dir)).predict
    except Exception as e:
        raise ModelLoadError(f"mlflow.pyfunc cannot load {model_dir}: {type(e).__name__}: {e}") from e


_NATIVE = {"mlflow.sklearn": ("sklearn", _load_sklearn), "mlflow.pytorch": ("pytorch", _load_pytorch),
           "mlflow.xgboost": ("xgboost", _load_xgboost)}


def read_mlmodel(model_dir: Path) -> dict:
    """The parsed ``MLmodel`` of ``model_dir``, with a python_function flavour. Raises ModelLoadError."""
    import yaml

    path = model_dir / MLMODEL
    try:
        meta = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ModelLoadError(f"{path} is not YAML: {e}") from None
    flavors = (meta or {}).get("flavors") if isinstance(meta, dict) else None
    if not isinstance(flavors, dict) or PYFUNC not in flavors:
        listed = ", ".join(flavors) if isinstance(flavors, dict) and flavors else "none"
        raise ModelLoadError(f"{path} has no {PYFUNC} flavour (flavours: {listed}); the MLflow server serves "
                             f"models through it: log the model with a flavour's log_model, or mlflow.pyfunc")
    return meta


@register_runtime
class MlflowRuntime(Runtime):
    format = "mlflow"
    looks_for = f"{MLMODEL} (an MLflow model directory with the {PYFUNC} flavour)"
    claims_directory = True

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.name == MLMODEL else None
        return path / MLMODEL if (path / MLMODEL).is_file() else None

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        model_dir = artifact.parent
        meta = read_mlmodel(model_dir)
        pyfunc = meta["flavors"][PYFUNC] or {}
        loader = str(pyfunc.get("loader_module") or "")
        if loader in _NATIVE:
            flavor_name, load = _NATIVE[loader]
            predict = load(model_dir, meta["flavors"].get(flavor_name) or {}, pyfunc)
        else:
            predict = _load_with_mlflow(model_dir, loader or "(none)")
        signature = meta.get("signature") or {}
        inputs, columns = _specs(signature.get("inputs"), "inputs", artifact)
        outputs, _ = _specs(signature.get("outputs"), "outputs", artifact)
        frame_columns = None
        if columns and loader == "mlflow.sklearn":
            # An estimator fitted on a DataFrame wants its columns back; one fitted on arrays wants a matrix.
            owner = getattr(predict, "__self__", None)
            frame_columns = list(getattr(owner, "feature_names_in_", [])) or None
        elif columns:
            frame_columns = [spec.name for spec in inputs]
        return MlflowModel(predict, name=name, version=version, inputs=inputs, outputs=outputs, columns=columns,
                           frame_columns=frame_columns)
