"""XGBoost Boosters saved with ``save_model`` (JSON, UBJSON or the legacy binary format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, ModelLoadError, find_artifact, intra_op_threads, read_head
from trimaran.serving.runtimes._registry import Runtime, register_runtime
from trimaran.serving.runtimes._trees import BoosterModel


class XGBoostModel(BoosterModel):
    """An ``xgboost.Booster``: ``input-0`` FP32 ``[-1, num_features]`` (XGBoost computes in float32),
    ``output-0`` what ``Booster.predict`` returns (probabilities for ``binary:logistic``/``multi:softprob``)."""

    platform = "xgboost"

    def _run(self, x: np.ndarray) -> np.ndarray:
        # inplace_predict skips building a DMatrix and is thread-safe; the values equal Booster.predict's.
        return self._booster.inplace_predict(x, validate_features=False)


def _is_xgboost_json(file: Path) -> bool:
    # model.json is also a common name for other JSON; an XGBoost model starts with its "learner".
    return file.name.lower().endswith(".ubj") or file.name.lower().endswith(".bst") or b'"learner"' in read_head(file)


@register_runtime
class XGBoostRuntime(Runtime):
    format = "xgboost"
    looks_for = "model.bst, model.json or model.ubj (Booster.save_model)"

    def find(self, path: Path) -> Path | None:
        return find_artifact(path, (".bst", ".ubj", ".json"), check=_is_xgboost_json)

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        import xgboost

        try:
            booster = xgboost.Booster(params={"nthread": intra_op_threads()}, model_file=str(artifact))
        except xgboost.core.XGBoostError as e:
            raise ModelLoadError(f"cannot load XGBoost model {artifact}: {str(e).strip().splitlines()[0]}") from e
        return XGBoostModel(booster, booster.num_features(), name=name, version=version)
