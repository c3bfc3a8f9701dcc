"""``bayesianoptimization``: Gaussian-process Bayesian optimisation (Optuna's GPSampler)."""

from __future__ import annotations

import importlib.util
import logging

from optuna.samplers import BaseSampler, RandomSampler, TPESampler

from trimaran.tuning._settings import Setting, SettingsSchema, choice, integer
from trimaran.tuning._space import SearchSpace
from trimaran.tuning.algorithms._base import RANDOM_STATE
from trimaran.tuning.algorithms._optuna import OptunaAlgorithm

__all__ = ["BayesianOptimization", "gp_available"]

log = logging.getLogger(__name__)


def gp_available() -> bool:
    """Whether Optuna's GPSampler can run here (it needs torch)."""
    return importlib.util.find_spec("torch") is not None


class BayesianOptimization(OptunaAlgorithm):
    """Katib's ``bayesianoptimization``, served by `optuna.samplers.GPSampler` instead of skopt.

    How Katib's skopt settings map:

    ==================  =========================  ==============================================
    skopt setting       allowed (default)          here
    ==================  =========================  ==============================================
    base_estimator      GP, RF, ET, GBRT (GP)      GP: GPSampler (Matern-5/2 kernel, fitted by
                                                   marginal likelihood). RF/ET/GBRT have no
                                                   Optuna counterpart: the tree-based density
                                                   model TPE (multivariate) is used instead.
    n_initial_points    int >= 0 (10)              ``n_startup_trials`` (random points first);
                                                   at least 1, the GP needs one observation.
    acq_func            gp_hedge, LCB, EI, PI,     accepted, not used: GPSampler always uses
                        EIps, PIps (gp_hedge)      log expected improvement (its batch version
                                                   for running trials).
    acq_optimizer       auto, sampling, lbfgs      accepted, not used: GPSampler samples
                        (auto)                     candidates then refines them with L-BFGS-B,
                                                   which is skopt's "auto".
    random_state        int >= 0 (unset)           ``seed``
    ==================  =========================  ==============================================

    skopt treats every double as log-uniform whatever its ``distribution``; Trimaran honours the
    declared distribution. Running trials are passed to the GP as pending points, so parallel
    suggestions do not collapse onto one point (skopt's ``ask(n_points)`` can return duplicates,
    kubeflow/katib#1700). Without torch, TPE is used and a warning is logged.

    Cost grows as O(n^3) in trials (about 0.1-1 s per suggestion at 100 trials on 2 cores).
    """

    name = "bayesianoptimization"
    settings_schema = SettingsSchema(
        Setting("base_estimator", choice("GP", "RF", "ET", "GBRT"), "GP", doc="surrogate model"),
        Setting("n_initial_points", integer(0), 10, doc="random points before the model is used"),
        Setting("acq_func", choice("gp_hedge", "LCB", "EI", "PI", "EIps", "PIps"), "gp_hedge",
                doc="acquisition function (GPSampler uses log EI)"),
        Setting("acq_optimizer", choice("auto", "sampling", "lbfgs"), "auto", doc="acquisition optimiser"),
        Setting("random_state", RANDOM_STATE, doc="seed"),
    )
    supports_multi_objective = True

    def make_sampler(self, seed: int, space: SearchSpace, objective: tuple[str, ...]) -> BaseSampler:
        s = self.settings
        startup = max(1, s["n_initial_points"])
        if s["base_estimator"] == "GP" and gp_available():
            from optuna.samplers import GPSampler

            return GPSampler(seed=seed, n_startup_trials=startup, independent_sampler=RandomSampler(seed=seed),
                             warn_independent_sampling=False)
        if s["base_estimator"] == "GP":
            log.warning("bayesianoptimization: torch is not installed, so GPSampler cannot run; using TPE")
        return TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=startup)
