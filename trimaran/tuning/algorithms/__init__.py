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

An algorithm's module, and the libraries it uses (Optuna, NumPy, SciPy, cmaes), is imported the
first time its name is asked for: the control plane starts without them and loads only what its
experiments use. Adding an algorithm means writing a module with an `Algorithm` subclass and
listing it in ``_BUILTIN`` below (or calling `register_algorithm`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trimaran.tuning._settings import normalize_settings
from trimaran.tuning.algorithms._base import Algorithm, Suggestions, clear_caches
from trimaran.tuning.errors import UnknownAlgorithmError

if TYPE_CHECKING:
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
    "algorithm_class",
    "available_algorithms",
    "clear_caches",
    "get_algorithm",
    "grid_points",
    "hyperband_schedule",
    "register_algorithm",
]

#: The algorithm to use when an experiment has several objectives and names none that supports them.
MULTI_OBJECTIVE_DEFAULT = "nsga2"

# Every name (aliases included) -> "module:class": only where to find the class. What the
# algorithm is (its name and aliases, settings, objectives) is declared once, on the class;
# tests/tuning/test_lazy_imports.py checks that each class answers to the names listed here.
_BUILTIN: dict[str, str] = {
    "random": "trimaran.tuning.algorithms._random:RandomSearch",
    "grid": "trimaran.tuning.algorithms._grid:GridSearch",
    "bayesianoptimization": "trimaran.tuning.algorithms._gp:BayesianOptimization",
    "tpe": "trimaran.tuning.algorithms._tpe:TpeSearch",
    "multivariate-tpe": "trimaran.tuning.algorithms._tpe:MultivariateTpeSearch",
    "cmaes": "trimaran.tuning.algorithms._cmaes:CmaEsSearch",
    "sobol": "trimaran.tuning.algorithms._sobol:SobolSearch",
    "hyperband": "trimaran.tuning.algorithms._hyperband:Hyperband",
    "pbt": "trimaran.tuning.algorithms._pbt:PopulationBasedTraining",
    "nsga2": "trimaran.tuning.algorithms._nsga2:NSGA2Search",
    "nsgaii": "trimaran.tuning.algorithms._nsga2:NSGA2Search",
}
# Helpers this package exports from the algorithms' modules, imported on first access like them.
_HELPERS: dict[str, str] = {
    "grid_points": "trimaran.tuning.algorithms._grid",
    "hyperband_schedule": "trimaran.tuning.algorithms._hyperband",
    "Rung": "trimaran.tuning.algorithms._hyperband",
    "OptunaAlgorithm": "trimaran.tuning.algorithms._optuna",
}
_REGISTRY: dict[str, type[Algorithm]] = {}
# Katib algorithms deliberately left out, with the reason a user gets.
_NOT_IMPLEMENTED = {
    "enas": "neural architecture search (nasConfig) is not implemented in Trimaran",
    "darts": "neural architecture search (nasConfig) is not implemented in Trimaran",
}


def _builtin_class(path: str) -> type[Algorithm]:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Make ``cls`` available to `get_algorithm` under ``cls.name`` and ``cls.aliases``.

    Usable as a class decorator. Raises `ValueError` if a name is already taken by another class
    (a built-in name is taken by its built-in class, loaded or not).
    """
    for name in (cls.name, *cls.aliases):
        if not name:
            raise ValueError(f"{cls.__name__} has no name")
        other = _REGISTRY.get(name)
        builtin = _BUILTIN.get(name)
        if other is None and builtin is not None and builtin != f"{cls.__module__}:{cls.__qualname__}":
            raise ValueError(f'algorithm name "{name}" is already registered by {builtin.rpartition(":")[2]}')
        if other is not None and other is not cls:
            raise ValueError(f'algorithm name "{name}" is already registered by {other.__name__}')
    for name in (cls.name, *cls.aliases):
        _REGISTRY[name] = cls
    return cls


def available_algorithms() -> list[str]:
    """Every name `get_algorithm` accepts (aliases included), sorted; imports no algorithm."""
    return sorted(_BUILTIN.keys() | _REGISTRY.keys())


def algorithm_class(name: str) -> type[Algorithm]:
    """The class Katib's ``name`` stands for, importing its module the first time it is asked for.

    Raises:
        UnknownAlgorithmError: ``name`` is not known; the message lists the known names.
    """
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    path = _BUILTIN.get(name)
    if path is None:
        known = ", ".join(available_algorithms())
        if name in _NOT_IMPLEMENTED:
            raise UnknownAlgorithmError(f'algorithm "{name}": {_NOT_IMPLEMENTED[name]}; available: {known}')
        raise UnknownAlgorithmError(f'unknown algorithm "{name}"; known algorithms: {known}')
    # Two threads asking for a name the first time both get the same class: imports are
    # serialised per module, and registering a class twice is a no-op.
    return register_algorithm(_builtin_class(path))


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
    return algorithm_class(name)(normalize_settings(settings))


def __getattr__(name: str) -> Any:
    # The classes and helpers above stay importable from here without loading every algorithm.
    paths = {path.rpartition(":")[2]: path for path in _BUILTIN.values()}
    if name in paths:
        return _builtin_class(paths[name])
    if name in _HELPERS:
        return getattr(importlib.import_module(_HELPERS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
