"""LightGBM Boosters saved with ``save_model`` (the text format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, ModelLoadError, find_artifact, intra_op_threads, read_head
from trimaran.serving.runtimes._registry import Runtime, register_runtime
from trimaran.serving.runtimes._trees import BoosterModel


class LightGBMModel(BoosterModel):
    """A ``lightgbm.Booster``: ``input-0`` FP64 ``[-1, num_feature]`` (LightGBM compares thresholds in float64,
    so float32 inputs could land on the other side of a split), ``output-0`` what ``Booster.predict`` returns."""

    platform = "lightgbm"
    input_datatype = "FP64"

    def __init__(self, booster: Any, n_features: int, *, name: str, version: str, threads: int) -> None:
        self._threads = threads
        super().__init__(booster, n_features, name=name, version=version)

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self._booster.predict(x, num_threads=self._threads)


def _is_lightgbm_text(file: Path) -> bool:
    return read_head(file, 64).startswith(b"tree\n")


@register_runtime
class LightGBMRuntime(Runtime):
    format = "lightgbm"
    looks_for = "model.txt or model.lgb (Booster.save_model)"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, (".txt", ".lgb"), check=_is_lightgbm_text)

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        import lightgbm

        try:
            booster = lightgbm.Booster(model_file=str(artifact))
        except lightgbm.basic.LightGBMError as e:
            raise ModelLoadError(f"cannot load LightGBM model {artifact}: {e}") from e
        return LightGBMModel(booster, booster.num_feature(), name=name, version=version, threads=intra_op_threads())
