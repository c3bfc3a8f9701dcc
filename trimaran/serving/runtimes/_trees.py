"""Shared by the gradient-boosting runtimes: one feature matrix in, the booster's prediction out."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, TensorSpec
from trimaran.serving.runtimes._datatypes import datatype_to_numpy, numpy_to_datatype


class BoosterModel(Model):
    """A booster over one ``input-0`` matrix of ``n_features`` columns, answering one ``output-0``.

    The output's dtype and width are not recorded in the file: predicting one row of zeros at load time
    shows them (a multi-class booster answers ``[-1, classes]``).
    """

    input_datatype = "FP32"

    def __init__(self, booster: Any, n_features: int, *, name: str, version: str) -> None:
        super().__init__(name, version, [TensorSpec("input-0", self.input_datatype, (-1, n_features))])
        self._booster = booster
        probe = self._run(np.zeros((1, n_features), dtype=datatype_to_numpy(self.input_datatype)))
        self.outputs = [TensorSpec("output-0", numpy_to_datatype(probe.dtype), (-1, *probe.shape[1:]))]

    def _run(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        self._check_signature(signature_name)
        return {"output-0": np.asarray(self._run(self._check_inputs(inputs)["input-0"]))}
