"""``cmaes``: CMA-ES whose state is replayed from the stored trials on every call."""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

import cmaes
import numpy as np

from trimaran.tuning._seeding import derive_seed
from trimaran.tuning._settings import Setting, SettingsSchema, choice, number
from trimaran.tuning._space import Parameter, SearchSpace
from trimaran.tuning._trial import TrialRecord, objective_values
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions, numeric_parameters, require

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
    not told.

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
        run = self._replay(numeric, trials, objective[0] == "minimize")
        seed = self.seed(len(trials))
        optimizer = run.optimizer
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
        return Suggestions(out)

    def _replay(self, numeric: list[Parameter], trials: list[TrialRecord], minimize: bool) -> _Run:
        dim = len(numeric)
        sign = 1.0 if minimize else -1.0
        solutions: list[tuple[np.ndarray, float]] = []
        for t in trials:
            if t.state != "succeeded":
                continue
            vals = objective_values(t, 1)
            if vals is None:
                continue
            coords = []
            for p in numeric:
                text = t.assignments.get(p.name)
                value = None if text is None else p.encode(text)
                if value is None:
                    break
                coords.append(p.to_unit(value))
            else:
                solutions.append((np.clip(np.array(coords), 0.0, 1.0), sign * vals[0]))

        # The replay's own random draws (restart points, BIPOP's sizes) must not vary between
        # calls even without random_state, or the replayed distribution would jump around.
        anchor = self.random_state
        if anchor is None:
            anchor = zlib.crc32(trials[0].name.encode()) if trials else 0
        rng = np.random.RandomState(derive_seed(anchor, _RESTART_SALT))
        sigma0 = self.settings["sigma"] or 1.0 / 6.0
        popsize0 = 4 + math.floor(3 * math.log(dim))
        strategy = self.settings["restart_strategy"].lower()
        bounds = np.array([[0.0, 1.0]] * dim)

        def start(mean: np.ndarray, sigma: float, popsize: int) -> cmaes.CMA:
            return cmaes.CMA(mean=mean, sigma=sigma, bounds=bounds, population_size=popsize,
                             n_max_resampling=10 * dim, seed=int(rng.randint(1, 2**31 - 2)))

        run = _Run(start(np.full(dim, 0.5), sigma0, popsize0), large=True)
        n_large = 0
        budget = {True: 0, False: 0}
        i = 0
        while i + run.optimizer.population_size <= len(solutions):
            size = run.optimizer.population_size
            run.optimizer.tell(solutions[i:i + size])
            i += size
            if strategy == "none" or not run.optimizer.should_stop():
                continue
            budget[run.large] += size * run.optimizer.generation
            mean = rng.uniform(0.0, 1.0, dim)
            if strategy == "ipop":
                run = _Run(start(mean, sigma0, size * 2), large=True)
            elif budget[False] < budget[True]:
                # BIPOP's small regime: a population between the default and half the largest so
                # far, and a smaller step size, each drawn at random.
                largest = popsize0 * 2**n_large
                popsize = max(2, math.floor(popsize0 * (0.5 * largest / popsize0) ** (rng.uniform() ** 2)))
                run = _Run(start(mean, sigma0 * 10 ** (-2 * rng.uniform()), popsize), large=False)
            else:
                n_large += 1
                run = _Run(start(mean, sigma0, popsize0 * 2**n_large), large=True)
        return run
