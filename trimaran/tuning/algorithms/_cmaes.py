"""``cmaes``: CMA-ES whose state is replayed from the stored trials on every call."""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field

import cmaes
import numpy as np

from trimaran.tuning._seeding import derive_seed
from trimaran.tuning._settings import Setting, SettingsSchema, choice, number
from trimaran.tuning._space import Parameter, SearchSpace
from trimaran.tuning._trial import TrialRecord, objective_values
from trimaran.tuning.algorithms._base import (
    RANDOM_STATE,
    Algorithm,
    Suggestions,
    WorkCache,
    numeric_parameters,
    require,
)

__all__ = ["CmaEsSearch"]

# Salts that keep the replay's random draws apart from the suggestion draws.
_RESTART_SALT = 0x5245
_EPS = 1e-12


@dataclass
class _Run:
    """One CMA-ES run of a (possibly restarted) replay."""

    optimizer: cmaes.CMA
    large: bool


class CmaEsSearch(Algorithm):
    """Katib's ``cmaes``, with the ``cmaes`` library (which Optuna's CmaEsSampler also wraps).

    Optuna's CmaEsSampler keeps the evolving distribution in trial attributes that stored trials
    do not have, so a study rebuilt from them would restart CMA-ES from scratch on every call.
    Instead the distribution is *replayed*: starting from the centre of the space, the succeeded
    trials, in creation order, are told to the optimizer a generation (``population_size``
    trials) at a time; new points are drawn from the resulting distribution. The replay is
    deterministic, so the suggestions are a pure function of the stored trials. With parallel
    trials a trial is counted in the generation its completion order gives, which can differ from
    the generation it was drawn in (Optuna has the same effect); failed and running trials are
    not told. The replay of the previous call is cached and continued when the trials it told are
    unchanged, so a call costs about as much as one Optuna ask (a restart replays from scratch,
    with the same result).

    int and double parameters are searched in the unit cube (log-scaled for logUniform, rounded
    for int and stepped doubles); categorical and discrete parameters are drawn uniformly and
    independently, as in Katib's goptuna and Optuna's samplers. Katib requires at least two int or
    double parameters, and so does this.

    Settings:
        random_state: Seed (int >= 0).
        sigma: Initial step size, as a fraction of each parameter's range (> 0). Default 1/6:
            goptuna's and Optuna's ``min(range)/6`` in the normalised space.
        restart_strategy: ``none`` (default; also ``None``), ``ipop`` (restart with twice the
            population when a run converges) or ``bipop`` (alternate large and small populations,
            Hansen 2009). Optuna 5 dropped restarts; here they are part of the replay.
    """

    name = "cmaes"
    settings_schema = SettingsSchema(
        Setting("random_state", RANDOM_STATE, doc="seed"),
        Setting("sigma", number(0, min_inclusive=False), doc="initial step size in the normalised space"),
        Setting("restart_strategy", choice("none", "None", "ipop", "bipop"), "none", doc="restart strategy"),
    )

    def _validate(self, space: SearchSpace, objective: tuple[str, ...], max_trial_count: int | None) -> None:
        require(len(numeric_parameters(space)) >= 2,
                "spec.parameters: cmaes only supports two or more dimensional continuous search space "
                "(at least two int or double parameters)")

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        if count == 0:
            return Suggestions([])
        numeric = [space[n] for n in numeric_parameters(space)]
        minimize = objective[0] == "minimize"
        key = (tuple(sorted(self.raw_settings.items())), tuple(numeric), minimize,
               trials[0].name if trials else None)
        replay = self._replay(numeric, trials, minimize, _CACHE.take(key))
        seed = self.seed(len(trials))
        optimizer = replay.run.optimizer
        # The cmaes library draws from its own RandomState; Optuna reseeds it the same way.
        optimizer._rng.seed(seed)
        rng = random.Random(seed)
        out = []
        for _ in range(count):
            x = optimizer.ask()
            point = {p.name: p.decode(p.from_unit(min(max(float(u), 0.0), 1.0 - _EPS)))
                     for p, u in zip(numeric, x, strict=True)}
            out.append({p.name: point[p.name] if p.name in point else p.decode(p.from_unit(rng.random()))
                        for p in space})
        _CACHE.put(key, replay)
        return Suggestions(out)

    def _replay(self, numeric: list[Parameter], trials: list[TrialRecord], minimize: bool,
                cached: _Replay | None = None) -> _Replay:
        """The CMA-ES state after telling the succeeded trials, a generation at a time.

        ``cached`` is an earlier replay of the same experiment: when its told trials are still the
        first succeeded ones, with the same values, telling continues from it (the result is the
        same as replaying from scratch; telling is deterministic). Otherwise it starts over.
        """
        sign = 1.0 if minimize else -1.0
        parsed = cached.parsed if cached is not None else {}
        solutions = _solutions(numeric, trials, sign, parsed)
        replay = cached
        if replay is None or len(solutions) < len(replay.told) or any(
                told[0] != s[0] or told[1] is not s[1] or told[2] != s[2]
                for told, s in zip(replay.told, solutions, strict=False)):
            replay = self._start(numeric, trials, parsed)
        dim = len(numeric)
        strategy = self.settings["restart_strategy"].lower()
        i = len(replay.told)
        while i + replay.run.optimizer.population_size <= len(solutions):
            run = replay.run
            size = run.optimizer.population_size
            batch = solutions[i:i + size]
            run.optimizer.tell([(x, y) for _, x, y in batch])
            replay.told.extend(batch)
            i += size
            if strategy == "none" or not run.optimizer.should_stop():
                continue
            replay.budget[run.large] += size * run.optimizer.generation
            mean = replay.rng.uniform(0.0, 1.0, dim)
            if strategy == "ipop":
                replay.run = _Run(replay.start(mean, replay.sigma0, size * 2), large=True)
            elif replay.budget[False] < replay.budget[True]:
                # BIPOP's small regime: a population between the default and half the largest so
                # far, and a smaller step size, each drawn at random.
                largest = replay.popsize0 * 2**replay.n_large
                popsize = max(2, math.floor(replay.popsize0 * (0.5 * largest / replay.popsize0)
                                            ** (replay.rng.uniform() ** 2)))
                sigma = replay.sigma0 * 10 ** (-2 * replay.rng.uniform())
                replay.run = _Run(replay.start(mean, sigma, popsize), large=False)
            else:
                replay.n_large += 1
                replay.run = _Run(replay.start(mean, replay.sigma0, replay.popsize0 * 2**replay.n_large), large=True)
        return replay

    def _start(self, numeric: list[Parameter], trials: list[TrialRecord],
               parsed: dict[str, tuple[tuple, np.ndarray | None]]) -> _Replay:
        dim = len(numeric)
        # The replay's own random draws (restart points, BIPOP's sizes) must not vary between
        # calls even without random_state, or the replayed distribution would jump around.
        anchor = self.random_state
        if anchor is None:
            anchor = zlib.crc32(trials[0].name.encode()) if trials else 0
        replay = _Replay(
            rng=np.random.RandomState(derive_seed(anchor, _RESTART_SALT)),
            sigma0=self.settings["sigma"] or 1.0 / 6.0,
            popsize0=4 + math.floor(3 * math.log(dim)),
            bounds=np.array([[0.0, 1.0]] * dim),
            parsed=parsed,
        )
        replay.run = _Run(replay.start(np.full(dim, 0.5), replay.sigma0, replay.popsize0), large=True)
        return replay


@dataclass
class _Replay:
    """A CMA-ES replay: the runs so far, and which trials have been told."""

    rng: np.random.RandomState
    sigma0: float
    popsize0: int
    bounds: np.ndarray
    # Trial name -> (what the coordinates were computed from, the coordinates or None).
    parsed: dict[str, tuple[tuple, np.ndarray | None]]
    run: _Run = None  # type: ignore[assignment]
    told: list[tuple[str, np.ndarray, float]] = field(default_factory=list)
    n_large: int = 0
    budget: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})

    def start(self, mean: np.ndarray, sigma: float, popsize: int) -> cmaes.CMA:
        dim = len(mean)
        return cmaes.CMA(mean=mean, sigma=sigma, bounds=self.bounds, population_size=popsize,
                         n_max_resampling=10 * dim, seed=int(self.rng.randint(1, 2**31 - 2)))


_CACHE: WorkCache[_Replay] = WorkCache()


def _solutions(numeric: list[Parameter], trials: list[TrialRecord], sign: float,
               parsed: dict[str, tuple[tuple, np.ndarray | None]]) -> list[tuple[str, np.ndarray, float]]:
    """(name, unit-cube coordinates, signed value) of each succeeded trial, in creation order."""
    out = []
    for t in trials:
        if t.state != "succeeded":
            continue
        vals = objective_values(t, 1)
        if vals is None:
            continue
        memo = parsed.get(t.name)
        if memo is None or (memo[0][0] is not t.assignments and memo[0][0] != t.assignments):
            coords = []
            for p in numeric:
                text = t.assignments.get(p.name)
                value = None if text is None else p.encode(text)
                if value is None:
                    break
                coords.append(p.to_unit(value))
            x = np.clip(np.array(coords), 0.0, 1.0) if len(coords) == len(numeric) else None
            memo = parsed[t.name] = ((t.assignments,), x)
        if memo[1] is not None:
            out.append((t.name, memo[1], sign * vals[0]))
    return out
