"""``tpe`` and ``multivariate-tpe``: Optuna's Tree-structured Parzen Estimator."""

from __future__ import annotations

import math
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from trimaran.tuning._settings import Setting, SettingsSchema, integer, number
from trimaran.tuning._space import SearchSpace
from trimaran.tuning.algorithms._base import RANDOM_STATE
from trimaran.tuning.algorithms._optuna import OptunaAlgorithm, fixed_search_space

__all__ = ["MultivariateTpeSearch", "TpeSearch"]

_COMMON = (
    Setting("random_state", RANDOM_STATE, doc="seed"),
    Setting("n_startup_trials", integer(0), 10, doc="random trials before the model is used"),
    Setting("n_ei_candidates", integer(1), 24, doc="candidates scored by expected improvement"),
)


class _HyperoptGamma:
    """hyperopt's split: the best ``ceil(gamma * sqrt(n))`` trials (at most 25) form the good group."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma

    def __call__(self, n: int) -> int:
        return min(math.ceil(self.gamma * math.sqrt(n)), 25)


class _TPESampler(TPESampler):
    """TPESampler told its search space upfront, and reseedable in place."""

    def __init__(self, fixed_space: dict[str, BaseDistribution], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fixed_space = fixed_space
        self._seed_attrs = (hasattr(self, "_rng") and hasattr(getattr(self, "_random_sampler", None), "_rng"))

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._fixed_space if self._multivariate else {}

    def reseed(self, seed: int) -> bool:
        # TPESampler(seed=s) seeds both its own RandomState and its startup RandomSampler's with s.
        if not self._seed_attrs:
            return False
        self._rng.rng.seed(seed)
        self._random_sampler._rng.rng.seed(seed)
        return True


class TpeSearch(OptunaAlgorithm):
    """Katib's ``tpe``: independent TPE (one density per parameter), as hyperopt's ``tpe.suggest``.

    Runs `optuna.samplers.TPESampler` with ``multivariate=False`` and ``constant_liar=True``
    (running trials count as bad results, so parallel suggestions spread out, as Katib's optuna
    service forces). Katib serves ``tpe`` with hyperopt; Trimaran accepts the setting names of
    both the hyperopt and the optuna services.

    Settings:
        random_state: Seed (int >= 0).
        n_startup_trials: Random trials before TPE is used (default 10; Katib's hyperopt service
            uses only the first batch, Optuna's default of 10 is kept here).
        n_ei_candidates: Candidates drawn per suggestion and ranked by expected improvement
            (default 24). hyperopt's name ``n_EI_candidates`` is accepted too.
        gamma: hyperopt's fraction in (0, 1): the best ``ceil(gamma * sqrt(n))`` trials (at most
            25) are the "good" group. Unset: Optuna's rule, ``min(ceil(0.1 n), 25)``.
        prior_weight: Weight of the prior (> 0, default 1.0).

    Example:
        >>> from trimaran.tuning import get_algorithm
        >>> get_algorithm("tpe", {"n_EI_candidates": "48", "gamma": "0.25"}).settings["n_ei_candidates"]
        48
    """

    name = "tpe"
    settings_schema = SettingsSchema(
        *_COMMON,
        Setting("gamma", number(0, 1, min_inclusive=False, max_inclusive=False), doc="hyperopt's gamma"),
        Setting("prior_weight", number(0, min_inclusive=False), doc="weight of the prior"),
        aliases={"n_EI_candidates": "n_ei_candidates"},
    )
    supports_multi_objective = True
    multivariate = False

    def make_sampler(self, seed: int, space: SearchSpace, objective: tuple[str, ...]) -> BaseSampler:
        s = self.settings
        kwargs: dict[str, Any] = {}
        if s.get("gamma") is not None:
            kwargs["gamma"] = _HyperoptGamma(s["gamma"])
        if s.get("prior_weight") is not None:
            kwargs["prior_weight"] = s["prior_weight"]
        return _TPESampler(fixed_search_space(space), seed=seed, multivariate=self.multivariate, constant_liar=True,
                           n_startup_trials=s["n_startup_trials"], n_ei_candidates=s["n_ei_candidates"], **kwargs)

    def reseed_sampler(self, sampler: BaseSampler, seed: int) -> bool:
        return isinstance(sampler, _TPESampler) and sampler.reseed(seed)


class MultivariateTpeSearch(TpeSearch):
    """Katib's ``multivariate-tpe``: TPE with one joint density over all parameters.

    `optuna.samplers.TPESampler` with ``multivariate=True`` and ``constant_liar=True``, as
    Katib's optuna service runs it (and Optuna 5's default TPE).

    Settings:
        random_state: Seed (int >= 0).
        n_startup_trials: Random trials before TPE is used (default 10).
        n_ei_candidates: Candidates per suggestion (default 24).
    """

    name = "multivariate-tpe"
    settings_schema = SettingsSchema(*_COMMON)
    multivariate = True
