"""Katib's tuning engine: search algorithms, early stopping and metrics, as pure functions of trials.

The search algorithms and early-stopping rules take the stored trials as plain data
(`TrialRecord`) and return what to do next; they keep no state of their own, so a control plane
that restarts rebuilds them from the stored trials and carries on exactly.

    >>> from trimaran.tuning import SearchSpace, TrialRecord, get_algorithm
    >>> space = SearchSpace.from_parameters([
    ...     {"name": "lr", "parameterType": "double",
    ...      "feasibleSpace": {"min": "0.001", "max": "0.1", "distribution": "logUniform"}},
    ...     {"name": "batch", "parameterType": "discrete", "feasibleSpace": {"list": ["32", "64"]}}])
    >>> tpe = get_algorithm("tpe", {"random_state": "1"})
    >>> out = tpe.suggest(space, [], "maximize", count=2)
    >>> len(out.assignments), out.exhausted
    (2, False)

Packages: `trimaran.tuning.algorithms` (``get_algorithm``), `trimaran.tuning.early_stopping`
(``get_early_stopper``), `trimaran.tuning.metrics` (metrics collection). The algorithm and
early-stopping names below are loaded lazily, so importing this package (or its metrics
subpackage) does not import Optuna.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trimaran._lazy import lazy_exports
from trimaran.tuning._labels import PBT_GENERATION_LABEL, PBT_MEMBER_LABEL, PBT_PARENT_LABEL
from trimaran.tuning._rules import SEARCH_SPACE_EXHAUSTED, Outcome, experiment_outcome, trials_wanted
from trimaran.tuning._space import Domain, Parameter, SearchSpace
from trimaran.tuning._trial import (
    FINISHED_STATES,
    ObjectiveType,
    TrialRecord,
    TrialState,
    normalize_objective,
    objective_values,
    pareto_front,
)
from trimaran.tuning.errors import SearchSpaceError, SettingsError, TuningError, UnknownAlgorithmError

_LAZY = {
    "algorithms": ["Algorithm", "Suggestions", "get_algorithm", "available_algorithms", "register_algorithm",
                   "MULTI_OBJECTIVE_DEFAULT"],
    "early_stopping": ["EarlyStopper", "get_early_stopper", "available_early_stoppers"],
}
__getattr__, _ = lazy_exports(__name__, _LAZY)

__all__ = [
    "SEARCH_SPACE_EXHAUSTED",
    "Outcome",
    "experiment_outcome",
    "trials_wanted",
    "FINISHED_STATES",
    "MULTI_OBJECTIVE_DEFAULT",
    "PBT_GENERATION_LABEL",
    "PBT_MEMBER_LABEL",
    "PBT_PARENT_LABEL",
    "Algorithm",
    "Domain",
    "EarlyStopper",
    "ObjectiveType",
    "Parameter",
    "SearchSpace",
    "SearchSpaceError",
    "SettingsError",
    "Suggestions",
    "TrialRecord",
    "TrialState",
    "TuningError",
    "UnknownAlgorithmError",
    "available_algorithms",
    "available_early_stoppers",
    "get_algorithm",
    "get_early_stopper",
    "normalize_objective",
    "objective_values",
    "pareto_front",
    "register_algorithm",
]

if TYPE_CHECKING:
    from trimaran.tuning.algorithms import (
        MULTI_OBJECTIVE_DEFAULT,
        Algorithm,
        Suggestions,
        available_algorithms,
        get_algorithm,
        register_algorithm,
    )
    from trimaran.tuning.early_stopping import EarlyStopper, available_early_stoppers, get_early_stopper

