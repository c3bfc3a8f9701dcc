"""The abstract search algorithm: stored trials in, suggestions out."""

from __future__ import annotations

import abc
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from trimaran.tuning._seeding import derive_seed
from trimaran.tuning._settings import SettingsSchema, integer
from trimaran.tuning._space import SearchSpace
from trimaran.tuning._trial import TrialRecord, normalize_objective
from trimaran.tuning.errors import SearchSpaceError, SettingsError

__all__ = ["Algorithm", "RANDOM_STATE", "Suggestions", "WorkCache", "clear_caches"]

T = TypeVar("T")

# Every Katib backend names its seed ``random_state`` (an int >= 0).
RANDOM_STATE = integer(0)


@dataclass(frozen=True)
class Suggestions:
    """What an algorithm proposes next.

    Args:
        assignments: Parameter assignments for new trials (Katib strings, in declaration order);
            fewer than asked for when the algorithm has fewer to give, or must wait (hyperband
            waits for a rung to finish before promoting).
        exhausted: True when the algorithm will never suggest anything beyond ``assignments``:
            grid has handed out every point, hyperband has filled every bracket. The experiment
            ends (Katib's ``ExperimentSuggestionEndReached``) once those trials finish.
        message: Why fewer than asked for were returned, for events and status messages.
        labels: Labels for each new trial, in the order of ``assignments`` (empty when the
            algorithm sets none). The controller puts them on the Trial, so the algorithm reads
            them back from `TrialRecord.labels` on its next call (pbt's generation and parent).
    """

    assignments: list[dict[str, str]]
    exhausted: bool = False
    message: str = field(default="", compare=False, repr=False)
    labels: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.labels and len(self.labels) != len(self.assignments):
            raise ValueError(f"{len(self.labels)} label sets for {len(self.assignments)} assignments")


class Algorithm(abc.ABC):
    """A search algorithm by Katib's ``algorithmName``, a pure function of the stored trials.

    `suggest` reads nothing but its arguments: no state is carried from one call to the next that
    changes its answer, so a control plane that crashed and restarted suggests exactly what it
    would have suggested. (Implementations may cache work between calls, but a cache miss gives
    the same answer.) With a ``random_state`` setting the answer is deterministic: it depends on
    ``random_state`` and the stored trials, and moves on with every new trial.

    Subclasses declare ``name`` (Katib's algorithm name), ``settings_schema`` (by Katib's setting
    names) and implement `_suggest`; `validate` adds checks of the search space.

    Example:
        >>> from trimaran.tuning import SearchSpace, get_algorithm
        >>> space = SearchSpace.from_parameters([
        ...     {"name": "x", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "3"}}])
        >>> grid = get_algorithm("grid", {})
        >>> grid.suggest(space, [], "maximize", 5)
        Suggestions(assignments=[{'x': '1'}, {'x': '2'}, {'x': '3'}], exhausted=True, labels=[])

    Args:
        settings: Katib's ``algorithmSettings`` as ``{name: value}`` strings.
    """

    name: ClassVar[str] = ""
    #: Other names accepted by `get_algorithm` (e.g. ``nsgaii`` for ``nsga2``).
    aliases: ClassVar[tuple[str, ...]] = ()
    settings_schema: ClassVar[SettingsSchema] = SettingsSchema()
    #: Whether the algorithm accepts several objectives.
    supports_multi_objective: ClassVar[bool] = False

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.raw_settings: dict[str, str] = {str(k): str(v) for k, v in (settings or {}).items()}
        self.settings: dict[str, Any] = self.settings_schema.parse(self.name, self.raw_settings)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.raw_settings!r})"

    @property
    def random_state(self) -> int | None:
        """The ``random_state`` setting, or None."""
        return self.settings.get("random_state")

    def validate(self, space: SearchSpace, objective: str | Sequence[str], *,
                 max_trial_count: int | None = None) -> None:
        """Check that the algorithm can search ``space`` for ``objective`` (Katib's
        ``ValidateAlgorithmSettings``); raises `SearchSpaceError` or `SettingsError`.

        Args:
            space: The search space.
            objective: ``minimize``/``maximize``, or one per objective.
            max_trial_count: ``spec.maxTrialCount`` when known (grid checks it against its size).
        """
        types = normalize_objective(objective)
        if len(types) > 1 and not self.supports_multi_objective:
            raise SettingsError(
                f'algorithm "{self.name}" optimizes one objective; for {len(types)} objectives use '
                '"nsga2" (or random, grid, sobol, tpe, multivariate-tpe, bayesianoptimization)')
        self._validate(space, types, max_trial_count)

    def suggest(self, space: SearchSpace, trials: Sequence[TrialRecord], objective: str | Sequence[str],
                count: int) -> Suggestions:
        """Up to ``count`` new assignments, given every stored trial of the experiment.

        Args:
            space: The search space.
            trials: Every trial of the experiment in creation order, running ones included (so
                they are not suggested again).
            objective: ``minimize``/``maximize``, or a list of them for several objectives
                (then ``TrialRecord.values`` holds one value per objective).
            count: How many new trials the controller can start now (parallelTrialCount minus
                the running ones); 0 only asks whether the algorithm is exhausted.
        """
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        types = normalize_objective(objective)
        self.validate(space, types)
        return self._suggest(space, list(trials), types, count)

    def seed(self, *salt: int) -> int:
        """A seed for this call: ``random_state`` mixed with ``salt`` (usually ``len(trials)``)."""
        return derive_seed(self.random_state, *salt)

    def _validate(self, space: SearchSpace, objective: tuple[str, ...], max_trial_count: int | None) -> None:  # noqa: B027
        """Algorithm-specific checks of the space; the default accepts any space."""

    @abc.abstractmethod
    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        """The algorithm itself; arguments are validated and normalized."""


class WorkCache(Generic[T]):
    """A small LRU of work an algorithm may reuse on its next call (a study, a CMA-ES replay).

    Only a shortcut: an algorithm must give the same answer on a miss, so a restarted control
    plane (empty caches) suggests exactly what the running one would. An entry is taken out while
    in use and put back after, so two threads never work on one entry.
    """

    _all: ClassVar[list[WorkCache[Any]]] = []

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()
        WorkCache._all.append(self)

    def take(self, key: Hashable) -> T | None:
        """Remove and return the entry for ``key``, if any."""
        with self._lock:
            return self._entries.pop(key, None)

    def put(self, key: Hashable, entry: T) -> None:
        """Store ``entry`` as the most recently used, evicting the least recently used."""
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def clear_caches() -> None:
    """Forget all cached work, as a control-plane restart does; suggestions do not change."""
    for cache in WorkCache._all:
        cache.clear()


def numeric_parameters(space: SearchSpace) -> list[str]:
    """Names of the int and double parameters."""
    return [p.name for p in space if p.type in ("int", "double")]


def require(condition: bool, message: str) -> None:
    """Raise `SearchSpaceError` with ``message`` unless ``condition``."""
    if not condition:
        raise SearchSpaceError(message)
