"""``nsga2``: NSGA-II, the default for several objectives (not a Katib algorithm)."""

from __future__ import annotations

from typing import Any

from optuna.samplers import BaseSampler, NSGAIISampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from trimaran.tuning._settings import Setting, SettingsSchema, integer, number
from trimaran.tuning._space import SearchSpace
from trimaran.tuning.algorithms._base import RANDOM_STATE
from trimaran.tuning.algorithms._optuna import OptunaAlgorithm

__all__ = ["NSGA2Search"]


class _StatelessNSGAII(NSGAIISampler):
    # Optuna assigns a trial's generation when it is asked for, from the trials complete at that
    # moment, and keeps it in the trial's system attributes, which stored trials do not carry.
    # Here trial number k belongs to generation k // population_size: a rule a rebuilt study
    # reproduces exactly.
    def get_trial_generation(self, study: Study, trial: FrozenTrial) -> int:
        generation = trial.number // self.population_size  # type: ignore[operator]
        study._storage.set_trial_system_attr(trial._trial_id, self._get_generation_key(), generation)
        return generation


class NSGA2Search(OptunaAlgorithm):
    """NSGA-II (`optuna.samplers.NSGAIISampler`), for one or several objectives.

    Katib has no multi-objective tuning; Trimaran accepts a list of objective types and uses this
    algorithm by default for them (`MULTI_OBJECTIVE_DEFAULT`). Generations are fixed blocks of
    ``population_size`` trials in creation order; each generation's children are bred from the
    non-dominated, crowding-sorted survivors of the previous generations' complete trials.

    Settings:
        random_state: Seed (int >= 0).
        population_size: Trials per generation (int >= 2, default 50).
        mutation_prob: Probability of mutating each parameter (default 1/number of parameters).
        crossover_prob: Probability of crossover (default 0.9).
        swapping_prob: Probability of taking each parameter from the other parent (default 0.5).
    """

    name = "nsga2"
    aliases = ("nsgaii",)
    settings_schema = SettingsSchema(
        Setting("random_state", RANDOM_STATE, doc="seed"),
        Setting("population_size", integer(2), 50, doc="trials per generation"),
        Setting("mutation_prob", number(0, 1), doc="mutation probability per parameter"),
        Setting("crossover_prob", number(0, 1), 0.9, doc="crossover probability"),
        Setting("swapping_prob", number(0, 1), 0.5, doc="uniform-crossover swapping probability"),
    )
    supports_multi_objective = True
    cache_study = False

    def make_sampler(self, seed: int, space: SearchSpace, objective: tuple[str, ...]) -> BaseSampler:
        s = self.settings
        return _StatelessNSGAII(seed=seed, population_size=s["population_size"], mutation_prob=s["mutation_prob"],
                                crossover_prob=s["crossover_prob"], swapping_prob=s["swapping_prob"])

    def trial_system_attrs(self, number: int) -> dict[str, Any] | None:
        return {_StatelessNSGAII._get_generation_key(): number // self.settings["population_size"]}
