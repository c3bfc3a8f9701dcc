"""``hyperband``: Katib's bracket scheme, read off the stored trials instead of saved state."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from trimaran.tuning._settings import Setting, SettingsSchema, number, text
from trimaran.tuning._space import SearchSpace
from trimaran.tuning._trial import TrialRecord, objective_values
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions, require
from trimaran.tuning.errors import SettingsError

__all__ = ["Hyperband", "Rung", "hyperband_schedule"]

# Resources are written as int(r); r_l * eta**-s is often 0.999... in floating point.
_EPS = 1e-9


@dataclass(frozen=True)
class Rung:
    """One rung of a bracket: how many configurations run, and with how much resource.

    For rung 0, ``size`` new random configurations; for rung i > 0, at most ``size`` of the best
    configurations of rung i-1 (fewer when some of those failed).
    """

    bracket: int
    index: int
    size: int
    resource: int


def _eta(raw: float | None) -> float:
    # Katib's rule: eta <= 0 (or unset) means 3.
    return 3.0 if raw is None or raw <= 0 else raw


def _s_max(r_l: float, eta: float) -> int:
    # The largest s with eta**s <= r_l. Katib computes int(log(r_l)/log(eta)), which floating
    # point makes 2 for r_l=1000, eta=10.
    s = 0
    while eta ** (s + 1) <= r_l * (1 + _EPS):
        s += 1
    return s


def hyperband_schedule(r_l: float, eta: float = 3) -> list[list[Rung]]:
    """Katib's brackets for max resource ``r_l`` and reduction factor ``eta``, outermost first.

    ``s_max = floor(log_eta(r_l))``; bracket s (from s_max down to 0) starts
    ``n = ceil((s_max+1) * eta**s / (s+1))`` configurations at resource ``r = r_l * eta**-s``;
    rung i keeps the best ``ceil(ceil(n * eta**-(i-1)) / eta)`` of rung i-1 at ``r * eta**i``.

    Example:
        >>> [[(r.size, r.resource) for r in b] for b in hyperband_schedule(9, 3)]
        [[(9, 1), (3, 3), (1, 9)], [(5, 3), (2, 9)], [(3, 9)]]
    """
    eta = _eta(eta)
    s_max = _s_max(r_l, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) * eta**s / (s + 1) - _EPS)
        r = r_l * eta ** (-s)
        rungs = [Rung(s, 0, n, int(r + _EPS))]
        for i in range(1, s + 1):
            previous = math.ceil(n * eta ** (-(i - 1)) - _EPS)
            rungs.append(Rung(s, i, math.ceil(previous / eta - _EPS), int(r * eta**i + _EPS)))
        brackets.append(rungs)
    return brackets


class Hyperband(Algorithm):
    """Katib's ``hyperband``: successive halving in brackets, synchronous per rung.

    The schedule is `hyperband_schedule`. Trials fill its slots in creation order: the first
    ``n`` trials are rung 0 of the outermost bracket, the next ones its rung 1, and so on. So the
    state Katib keeps in ``Suggestion.status.algorithmSettings`` (``current_s``, ``current_i``,
    ``evaluating_trials``...) is read off the stored trials, and a restart loses nothing.

    A rung-0 slot gets a random configuration (drawn from the parameter priors; Katib samples
    uniformly) with the resource parameter set to the rung's resource. A later rung waits until
    every trial of the previous rung has finished, then promotes the best succeeded ones (failed
    trials are never promoted) with the resource multiplied by eta, copying their other
    assignments. Brackets do not wait for each other. The algorithm is exhausted once every slot
    of every bracket has a trial.

    Differences from Katib: Katib validates ``parallelTrialCount >= eta**s_max`` because its state
    machine needs a whole rung per call; here a rung can fill over several calls, so any
    parallelism works. Katib also overrides the first bracket's ``n`` with the request size (a
    hack in its service); the documented formula is used here.

    Settings:
        resource_name: Required. The parameter that carries the resource (epochs, steps...); its
            sampled value is replaced by the rung's resource.
        r_l: Required. Maximum resource per configuration (> 0).
        eta: Reduction factor (default 3; <= 0 means 3, as in Katib; must otherwise be > 1).
        random_state: Seed for the random configurations (not a Katib setting; Katib's
            hyperband ignores unknown settings).
    """

    name = "hyperband"
    settings_schema = SettingsSchema(
        Setting("resource_name", text, required=True, doc="the parameter that carries the resource"),
        Setting("r_l", number(0, min_inclusive=False), required=True, doc="maximum resource per configuration"),
        Setting("eta", number(), 3.0, doc="reduction factor"),
        Setting("random_state", RANDOM_STATE, doc="seed"),
    )

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        super().__init__(settings)
        eta = _eta(self.settings["eta"])
        if eta <= 1:
            raise SettingsError(f'algorithm "hyperband": setting "eta": invalid value "{self.raw_settings["eta"]}": '
                                "must be greater than 1 (or <= 0 for the default 3)")
        self.eta = eta
        self.schedule = hyperband_schedule(self.settings["r_l"], eta)

    def _validate(self, space: SearchSpace, objective: tuple[str, ...], max_trial_count: int | None) -> None:
        name = self.settings["resource_name"]
        require(name in space, f'algorithm "hyperband": setting "resource_name": "{name}" is not one of '
                               f"spec.parameters ({', '.join(space.names)})")

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        resource_name = self.settings["resource_name"]
        sign = 1.0 if objective[0] == "minimize" else -1.0
        out: list[dict[str, str]] = []
        position = 0  # index into trials of the current rung's first slot
        new_slot = 0  # running count of rung-0 slots, which seeds each new configuration
        for rungs in self.schedule:
            previous: list[TrialRecord] = []
            for rung in rungs:
                resource = str(rung.resource)
                if rung.index == 0:
                    configs: list[dict[str, str]] = []
                    for j in range(rung.size):
                        configs.append(self._random_config(space, new_slot + j, resource_name, resource))
                    new_slot += rung.size
                else:
                    ranked = sorted(
                        (t for t in previous if t.state == "succeeded" and objective_values(t, 1) is not None),
                        key=lambda t: sign * objective_values(t, 1)[0])  # type: ignore[index]
                    configs = [{**{p: t.assignments.get(p, "") for p in space.names}, resource_name: resource}
                               for t in ranked[:rung.size]]
                members = trials[position:position + len(configs)]
                position += len(configs)
                for config in configs[len(members):]:
                    if len(out) == count:
                        return Suggestions(out, False)
                    out.append(config)
                last_rung = rung.index == len(rungs) - 1
                if len(members) < len(configs):
                    if last_rung:
                        continue  # the next bracket does not depend on this one
                    return Suggestions(out, False, f"bracket {rung.bracket} rung {rung.index} must finish before "
                                                   f"its best trials are promoted")
                running = sum(1 for t in members if not t.finished)
                if running and not last_rung:
                    return Suggestions(out, False, f"waiting for {running} trial(s) of bracket {rung.bracket} "
                                                   f"rung {rung.index} to finish before promoting")
                previous = members
        return Suggestions(out, True, "every hyperband bracket has been scheduled")

    def _random_config(self, space: SearchSpace, slot: int, resource_name: str, resource: str) -> dict[str, str]:
        rng = random.Random(self.seed(slot))
        config = {p.name: p.decode(p.from_unit(rng.random())) for p in space}
        config[resource_name] = resource
        return config
