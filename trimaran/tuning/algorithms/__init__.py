"""Search algorithms by Katib's ``algorithmName``: `get_algorithm` returns one from the registry.

================================  ==============================================================
name                              implementation
================================  ==============================================================
``random``                        `RandomSearch`: draws from the parameter priors
``grid``                          `GridSearch`: Katib's grid, each point once
``bayesianoptimization``          `BayesianOptimization`: Optuna GPSampler (skopt settings)
``tpe``                           `TpeSearch`: Optuna TPE, independent (hyperopt's tpe)
``multivariate-tpe``              `MultivariateTpeSearch`: Optuna TPE, multivariate
``cmaes``                         `CmaEsSearch`: CMA-ES (cmaes library), replayed from trials
``sobol``                         `SobolSearch`: the Sobol sequence
``hyperband``                     `Hyperband`: Katib's brackets
``pbt``                           `PopulationBasedTraining`: Katib's population-based training, in
                                  synchronous generations; trials start from a copy of their
                                  parent's checkpoint directory (needs ``resumePolicy: FromVolume``)
``nsga2``                         `NSGA2Search`: Optuna NSGA-II, the multi-objective default
================================  ==============================================================

Katib's ``enas`` and ``darts`` are not implemented; asking for them says so.
Adding an algorithm means writing a module with an `Algorithm` subclass and listing it in
``_BUILTIN`` below (or calling `register_algorithm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trimaran.tuning._settings import normalize_settings
from trimaran.tuning.algorithms._base import Algorithm, Suggestions, clear_caches
from trimaran.tuning.algorithms._cmaes import CmaEsSearch
from trimaran.tuning.algorithms._gp import BayesianOptimization
from trimaran.tuning.algorithms._grid import GridSearch, grid_points
from trimaran.tuning.algorithms._hyperband import Hyperband, Rung, hyperband_schedule
from trimaran.tuning.algorithms._nsga2 import NSGA2Search
from trimaran.tuning.algorithms._optuna import OptunaAlgorithm
from trimaran.tuning.algorithms._pbt import PopulationBasedTraining
from trimaran.tuning.algorithms._random import RandomSearch
from trimaran.tuning.algorithms._sobol import SobolSearch
from trimaran.tuning.algorithms._tpe import MultivariateTpeSearch, TpeSearch
from trimaran.tuning.errors import UnknownAlgorithmError

__all__ = [
    "MULTI_OBJECTIVE_DEFAULT",
    "Algorithm",
    "BayesianOptimization",
    "CmaEsSearch",
    "GridSearch",
    "Hyperband",
    "MultivariateTpeSearch",
    "NSGA2Search",
    "OptunaAlgorithm",
    "PopulationBasedTraining",
    "RandomSearch",
    "Rung",
    "SobolSearch",
    "Suggestions",
    "TpeSearch",
    "available_algorithms",
    "clear_caches",
    "get_algorithm",
    "grid_points",
    "hyperband_schedule",
    "register_algorithm",
]

#: The algorithm to use when an experiment has several objectives and names none that supports them.
MULTI_OBJECTIVE_DEFAULT = "nsga2"

_BUILTIN: tuple[type[Algorithm], ...] = (
    RandomSearch, GridSearch, BayesianOptimization, TpeSearch, MultivariateTpeSearch, CmaEsSearch,
    SobolSearch, Hyperband, PopulationBasedTraining, NSGA2Search,
)
_REGISTRY: dict[str, type[Algorithm]] = {}
# Katib algorithms deliberately left out, with the reason a user gets.
_NOT_IMPLEMENTED = {
    "enas": "neural architecture search (nasConfig) is not implemented in Trimaran",
    "darts": "neural architecture search (nasConfig) is not implemented in Trimaran",
}


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Make ``cls`` available to `get_algorithm` under ``cls.name`` and ``cls.aliases``.

    Usable as a class decorator. Raises `ValueError` if a name is already taken by another class.
    """
    for name in (cls.name, *cls.aliases):
        if not name:
            raise ValueError(f"{cls.__name__} has no name")
        other = _REGISTRY.get(name)
        if other is not None and other is not cls:
            raise ValueError(f'algorithm name "{name}" is already registered by {other.__name__}')
        _REGISTRY[name] = cls
    return cls


for _cls in _BUILTIN:
    register_algorithm(_cls)


def available_algorithms() -> list[str]:
    """Every name `get_algorithm` accepts (aliases included), sorted."""
    return sorted(_REGISTRY)


def get_algorithm(name: str, settings: Mapping[str, Any] | list[Mapping[str, Any]] | None = None) -> Algorithm:
    """The algorithm Katib calls ``name``, configured with ``algorithmSettings``.

    Example:
        >>> get_algorithm("tpe", {"random_state": "1", "n_startup_trials": "5"})
        TpeSearch({'random_state': '1', 'n_startup_trials': '5'})

    Args:
        name: Katib's ``algorithmName`` (``random``, ``grid``, ``tpe``...).
        settings: ``algorithmSettings`` as ``{name: value}`` or Katib's ``[{name, value}]`` list.

    Raises:
        UnknownAlgorithmError: ``name`` is not known; the message lists the known names.
        SettingsError: a setting is unknown, missing or invalid.
    """
    cls = _REGISTRY.get(name)
    if cls is None:
        known = ", ".join(available_algorithms())
        if name in _NOT_IMPLEMENTED:
            raise UnknownAlgorithmError(f'algorithm "{name}": {_NOT_IMPLEMENTED[name]}; available: {known}')
        raise UnknownAlgorithmError(f'unknown algorithm "{name}"; known algorithms: {known}')
    return cls(normalize_settings(settings))
