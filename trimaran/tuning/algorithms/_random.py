"""``random``: independent uniform draws from each parameter's prior."""

from __future__ import annotations

import random

from trimaran.tuning._settings import Setting, SettingsSchema
from trimaran.tuning._space import SearchSpace
from trimaran.tuning._trial import TrialRecord
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions

__all__ = ["RandomSearch"]

# Rejection sampling gives up on a duplicate after this many draws per suggestion; past that the
# untaken points are enumerated (when there are few enough) or a repeat is accepted.
_MAX_DRAWS = 64
_MAX_ENUMERATE = 200_000


class RandomSearch(Algorithm):
    """Katib's ``random``: each parameter drawn independently from its distribution.

    Draws honour ``distribution`` (logUniform on a log scale; normal/logNormal by Katib's hyperopt
    mapping, truncated to [min, max]; see `trimaran.tuning.SearchSpace`). Unlike Katib's hyperopt
    service (kubeflow/katib#842, #1566), a space with only discrete values is sampled without
    replacement: a point already tried, running ones included, is not suggested again, and the
    algorithm is exhausted when every point has been tried. Continuous spaces never repeat in
    practice and are not checked.

    The same Optuna sampler is `optuna.samplers.RandomSampler`; this one draws directly from the
    parameter priors, with no study to build, so a call costs microseconds.

    Settings:
        random_state: Seed (int >= 0). The draws of a call depend on it and on the number of
            stored trials, so a restart repeats them exactly.

    Example:
        >>> from trimaran.tuning import SearchSpace, get_algorithm
        >>> space = SearchSpace.from_parameters([
        ...     {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.01", "max": "0.1"}}])
        >>> a = get_algorithm("random", {"random_state": "7"}).suggest(space, [], "minimize", 2)
        >>> a == get_algorithm("random", {"random_state": "7"}).suggest(space, [], "minimize", 2)
        True
    """

    name = "random"
    settings_schema = SettingsSchema(Setting("random_state", RANDOM_STATE, doc="seed"))
    supports_multi_objective = True

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        rng = random.Random(self.seed(len(trials)))
        params = space.parameters
        size = space.size
        if size is None:
            return Suggestions([{p.name: p.decode(p.from_unit(rng.random())) for p in params}
                                for _ in range(count)])
        taken = {k for k in (space.key(t.assignments) for t in trials) if k is not None}
        out: list[dict[str, str]] = []
        for _ in range(count):
            if len(taken) >= size:
                break
            point = None
            for _ in range(_MAX_DRAWS):
                cand = {p.name: p.decode(p.from_unit(rng.random())) for p in params}
                key = tuple(cand.values())
                if key not in taken:
                    point = cand
                    break
            if point is None:
                point = _pick_untaken(space, taken, rng) if size <= _MAX_ENUMERATE else cand
                key = tuple(point.values())
            taken.add(key)
            out.append(point)
        exhausted = len(taken) >= size
        return Suggestions(out, exhausted, "every point of the search space has been tried" if exhausted else "")


def _pick_untaken(space: SearchSpace, taken: set[tuple[str, ...]], rng: random.Random) -> dict[str, str]:
    import itertools

    axes = [p.values() or () for p in space]
    free = [combo for combo in itertools.product(*axes) if combo not in taken]
    return dict(zip(space.names, rng.choice(free), strict=True))
