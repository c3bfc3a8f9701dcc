"""Algorithms backed by an Optuna sampler, driven from an in-memory study rebuilt from the trials.

Each call builds (or brings up to date) an Optuna study holding one trial per stored trial, asks
the sampler ``count`` times and tells it nothing: the controller records the results, and the
next call sees them as stored trials. State mapping:

==========================================  =============================================
stored trial                                Optuna trial
==========================================  =============================================
running                                     RUNNING (constant liar, GP's pending points)
succeeded with a finite value               COMPLETE with that value (values)
early_stopped                               PRUNED with its intermediate values
failed, metrics_unavailable, killed;        FAIL (the sampler ignores it)
succeeded without a value
assignment outside the space                left out of the study
==========================================  =============================================

Rebuilding 200 trials costs ~6 ms, a multiple of a TPE ask, so the study is cached between calls
(a `WorkCache`). The cache is only a shortcut: an entry is reused when the new trial list
extends the one it was built from (same trials, running ones possibly finished, plus the trials
created from its last suggestions), which gives a study identical, as the sampler sees it, to a
fresh rebuild. Anything else (a restart, another experiment, an edited trial) rebuilds. Every
call also starts from a sampler in the state a new one seeded from ``random_state`` and the
number of trials would have (TPE's is reseeded in place, which is cheaper than building one), so
no sampler state leaks from one call to the next either; state a sampler does carry between asks
(GPSampler's kernel fits) is replayed from the trials by `OptunaAlgorithm.before_ask`.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from trimaran.tuning._space import Domain, SearchSpace
from trimaran.tuning._trial import TrialRecord, objective_values
from trimaran.tuning.algorithms._base import Algorithm, Suggestions, WorkCache

__all__ = ["OptunaAlgorithm", "fixed_search_space", "to_distribution"]

_STUDY_NAME = "trimaran"
# Optuna logs "A new study created in memory" at INFO for every study; one is built per rebuild.
logging.getLogger("optuna.storages._in_memory").setLevel(logging.WARNING)
_CACHE_SIZE = 8
_FAILED = (TrialState.FAIL, None, None)


def to_distribution(domain: Domain) -> BaseDistribution:
    """The Optuna distribution of a parameter's internal coordinate."""
    if domain.kind == "categorical":
        return CategoricalDistribution(domain.choices)
    if domain.kind == "int":
        return IntDistribution(int(domain.low), int(domain.high), log=domain.log, step=1 if domain.log else domain.step)
    return FloatDistribution(domain.low, domain.high, log=domain.log)


def fixed_search_space(space: SearchSpace) -> dict[str, BaseDistribution]:
    """The relative search space of every study built here: each parameter, single values left out.

    Optuna samplers infer it from the trials (an intersection over all of them, ~0.4 ms at 200
    trials with a fresh sampler); here every trial has every parameter, so it is known upfront.
    """
    out = {}
    for p in space:
        dist = to_distribution(p.domain)
        if not dist.single():
            out[p.name] = dist
    return out


def _view(record: TrialRecord, n_objectives: int) -> tuple[TrialState, tuple[float, ...] | None, dict | None]:
    """The Optuna state, values and intermediate values a stored trial maps to."""
    state = record.state
    if state == "running":
        return TrialState.RUNNING, None, None
    if state == "succeeded":
        vals = objective_values(record, n_objectives)
        return (TrialState.COMPLETE, vals, None) if vals is not None else _FAILED
    if state == "early_stopped" and n_objectives == 1:
        # TPE ranks pruned trials below complete ones, by how far they got and their last value.
        inter = {int(s): float(v) for s, v in record.intermediate if math.isfinite(v)}
        if not inter:
            vals = objective_values(record, 1)
            inter = {0: vals[0]} if vals else {}
        return TrialState.PRUNED, None, inter
    return _FAILED


def _key(record: TrialRecord) -> tuple:
    # What must not change for a cached row to stay valid: the state and the objective values.
    return (record.state, record.value, None if record.values is None else tuple(record.values))


@dataclass
class _Row:
    record: TrialRecord
    name: str
    assignments: Mapping[str, str]
    key: tuple
    trial_id: int | None
    state: TrialState | None


@dataclass
class _Study:
    """An in-memory study and which stored trial each of its trials stands for."""

    study: optuna.Study
    storage: InMemoryStorage
    study_id: int
    distributions: dict[str, BaseDistribution]
    rows: list[_Row] = field(default_factory=list)
    # Trials the sampler was asked for on the last call, not yet matched to stored trials.
    pending: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    reusable: bool = True
    # How many trials the study holds (the next trial's number).
    size: int = 0
    sampler: BaseSampler | None = None
    # State an algorithm derives from this study and may reuse while the study is (GP's kernel fits).
    extra: dict[str, Any] = field(default_factory=dict)


_CACHE: WorkCache[_Study] = WorkCache(_CACHE_SIZE)


class OptunaAlgorithm(Algorithm):
    """Base class of the algorithms that wrap an Optuna sampler.

    Subclasses implement `make_sampler`. Set ``cache_study = False`` when the sampler keeps state
    in trial attributes that a rebuilt study cannot reproduce exactly; the study is then rebuilt on
    every call.
    """

    cache_study: ClassVar[bool] = True

    @abc.abstractmethod
    def make_sampler(self, seed: int, space: SearchSpace, objective: tuple[str, ...]) -> BaseSampler:
        """A fresh sampler for one call, seeded with ``seed``."""

    def before_ask(self, entry: _Study, sampler: BaseSampler, objective: tuple[str, ...]) -> None:
        """Restore sampler state that a fresh sampler lacks, from the study alone (GP's kernel fits)."""

    def trial_system_attrs(self, number: int) -> dict[str, Any] | None:
        """System attributes for the study's trial ``number`` when it is rebuilt (NSGA-II's generation)."""
        return None

    def reseed_sampler(self, sampler: BaseSampler, seed: int) -> bool:
        """Reset a cached sampler to the state ``make_sampler(seed, ...)`` would give it.

        Building a sampler costs ~0.15 ms (two NumPy RandomStates), a sizeable part of a TPE ask;
        reseeding costs ~2 us. Return False (the default) when that cannot be done exactly; a new
        sampler is made then.
        """
        return False

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        if count == 0:
            return Suggestions([])
        seed = self.seed(len(trials))
        key = (type(self), tuple(sorted(self.raw_settings.items())), space, objective,
               trials[0].name if trials else None)
        entry = _CACHE.take(key) if self.cache_study else None
        if entry is not None and self._sync(entry, space, trials, objective):
            if entry.sampler is None or not self.reseed_sampler(entry.sampler, seed):
                entry.sampler = self.make_sampler(seed, space, objective)
        else:
            entry = self._build(space, trials, objective, self.make_sampler(seed, space, objective))
        study = entry.study
        study.sampler = entry.sampler  # type: ignore[assignment]
        self.before_ask(entry, entry.sampler, objective)  # type: ignore[arg-type]
        exact = all(p.exact for p in space)
        out = []
        for _ in range(count):
            trial = study.ask(entry.distributions)
            entry.size += 1
            assignment = space.decode(trial.params)
            # A later call that finds this trial stored must see the same params a rebuild would:
            # true when strings round-trip exactly (all but normal/logNormal parameters).
            entry.reusable &= exact
            entry.pending.append((trial._trial_id, assignment))
            out.append(assignment)
        if self.cache_study and entry.reusable:
            _CACHE.put(key, entry)
        return Suggestions(out)

    # -- building and syncing the study ---------------------------------------------------------
    def _build(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
               sampler: BaseSampler) -> _Study:
        storage = InMemoryStorage()
        directions = [StudyDirection.MINIMIZE if t == "minimize" else StudyDirection.MAXIMIZE for t in objective]
        study_id = storage.create_new_study(directions, study_name=_STUDY_NAME)
        study = optuna.Study(study_name=_STUDY_NAME, storage=storage, sampler=sampler)
        dists = {p.name: to_distribution(p.domain) for p in space}
        entry = _Study(study, storage, study_id, dists, sampler=sampler)
        for record in trials:
            self._append(entry, space, record, len(objective))
        return entry

    def _append(self, entry: _Study, space: SearchSpace, record: TrialRecord, n_objectives: int) -> None:
        params = space.encode(record.assignments)
        if params is None:
            # Not a point of this space (the space was edited, or another tool made the trial).
            entry.rows.append(_Row(record, record.name, record.assignments, _key(record), None, None))
            return
        state, values, inter = _view(record, n_objectives)
        frozen = create_trial(state=state, values=values, params=params, distributions=entry.distributions,
                              intermediate_values=inter, system_attrs=self.trial_system_attrs(entry.size))
        trial_id = entry.storage.create_new_trial(entry.study_id, template_trial=frozen)
        entry.size += 1
        entry.rows.append(_Row(record, record.name, record.assignments, _key(record), trial_id, state))

    def _finish(self, entry: _Study, row: _Row, record: TrialRecord, n_objectives: int) -> bool:
        """Bring a row up to date with its record; False when only a rebuild can."""
        row.record = record
        key = _key(record)
        if key == row.key:
            return True
        row.key = key
        if row.trial_id is None:
            return True
        state, values, inter = _view(record, n_objectives)
        if state == row.state and state == TrialState.RUNNING:
            return True
        if row.state != TrialState.RUNNING:
            return False  # a finished trial changed its outcome: rebuild
        for step, value in (inter or {}).items():
            entry.storage.set_trial_intermediate_value(row.trial_id, step, value)
        entry.storage.set_trial_state_values(row.trial_id, state, list(values) if values else None)
        row.state = state
        return True

    def _sync(self, entry: _Study, space: SearchSpace, trials: list[TrialRecord],
              objective: tuple[str, ...]) -> bool:
        """Update a cached study to ``trials``; False when it cannot be (then rebuild)."""
        rows, n_obj = entry.rows, len(objective)
        n = len(rows)
        if not entry.reusable or len(trials) < n + len(entry.pending):
            return False
        # Trials created from the last suggestions must come next, in the order suggested.
        for (_, assignment), record in zip(entry.pending, trials[n:], strict=False):
            if record.assignments != assignment:
                return False
        # zip stops at the shorter list: the cached rows are a prefix of the trials.
        for row, record in zip(rows, trials, strict=False):
            if record is row.record:
                continue  # the same object as last time: nothing can have changed
            if record.name != row.name or (record.assignments is not row.assignments
                                           and record.assignments != row.assignments):
                return False
            if not self._finish(entry, row, record, n_obj):
                return False
        for (trial_id, _), record in zip(entry.pending, trials[n:], strict=False):
            row = _Row(record, record.name, record.assignments, ("running", None, None), trial_id,
                       TrialState.RUNNING)
            rows.append(row)
            if not self._finish(entry, row, record, n_obj):
                return False
        entry.pending = []
        for record in trials[len(rows):]:
            self._append(entry, space, record, n_obj)
        return True
