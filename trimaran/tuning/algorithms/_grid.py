"""``grid``: every point of Katib's grid, once."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from trimaran.tuning._settings import Setting, SettingsSchema
from trimaran.tuning._space import SearchSpace
from trimaran.tuning._trial import TrialRecord
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions, require
from trimaran.tuning.errors import SearchSpaceError

__all__ = ["GridSearch", "grid_points"]


def grid_points(space: SearchSpace) -> list[tuple[str, ...]]:
    """Katib's grid for ``space``: the Cartesian product of each parameter's `grid_values`."""
    import itertools

    return list(itertools.product(*(p.grid_values() for p in space)))


@functools.lru_cache(maxsize=8)
def _order(size: int, seed: int | None) -> np.ndarray | None:
    # A fixed visiting order per experiment: a seeded permutation (None: index order). It depends
    # on random_state only, never on the trials, so every call walks the same sequence.
    if seed is None:
        return None
    return np.random.default_rng(seed).permutation(size)


class GridSearch(Algorithm):
    """Katib's ``grid``: each point of the Cartesian product, never twice.

    The grid is Katib's (``convert_to_combinations``): int ``range(min, max+1, step)`` (step 1 by
    default), double ``min + k*step`` up to max (``step`` is required; values are written
    decimal-exact, so ``0.1`` steps give ``"0.3"``, not ``"0.30000000000000004"``), and
    discrete/categorical lists as given. Distributions are ignored.

    Every stored trial takes its point, whatever its state: running trials are not suggested
    again, and neither are failed ones (as Optuna's GridSampler, which Katib wraps, treats them).
    The algorithm is exhausted when every point has been handed out.

    Order: with ``random_state`` the points are visited in a fixed seeded permutation (Katib's
    Optuna GridSampler visits a seeded random order too); without it, in index order: the first
    parameter varies slowest, the last fastest. Either way the order is a function of the
    settings only, so a restarted control plane continues where it stopped. Katib's GridSampler
    picks among the unvisited points at random on each call instead.

    Settings:
        random_state: Seed of the visiting order (int >= 0).
    """

    name = "grid"
    settings_schema = SettingsSchema(Setting("random_state", RANDOM_STATE, doc="seed of the visiting order"))
    supports_multi_objective = True

    def _validate(self, space: SearchSpace, objective: tuple[str, ...], max_trial_count: int | None) -> None:
        for i, p in enumerate(space):
            require(p.type != "double" or p.step is not None,
                    f'spec.parameters[{i}].feasibleSpace.step: Required value: grid needs a step for '
                    f'parameterType double (parameter "{p.name}")')
        if max_trial_count is not None:
            size = math.prod(len(p.grid_values()) for p in space)
            if max_trial_count > size:
                raise SearchSpaceError(
                    f"spec.maxTrialCount: Invalid value: {max_trial_count}: must not be greater than the "
                    f"number of grid points ({size})")

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        axes = [p.grid_values() for p in space]
        radix = [len(a) for a in axes]
        size = math.prod(radix)
        taken = _taken(space, trials, radix)
        left = size - len(taken)
        out: list[dict[str, str]] = []
        if count and left:
            order = _order(size, self.random_state)
            candidates = range(size) if order is None else order
            names = space.names
            for flat in candidates:
                flat = int(flat)
                if flat in taken:
                    continue
                out.append(dict(zip(names, (axes[d][i] for d, i in enumerate(_unflatten(flat, radix))), strict=True)))
                if len(out) == count:
                    break
        exhausted = len(out) == left
        return Suggestions(out, exhausted, f"all {size} grid points have been suggested" if exhausted else "")


def _taken(space: SearchSpace, trials: list[TrialRecord], radix: Sequence[int]) -> set[int]:
    params = space.parameters
    taken: set[int] = set()
    for t in trials:
        flat = 0
        for p, r in zip(params, radix, strict=True):
            text = t.assignments.get(p.name)
            i = None if text is None else p.grid_index(text)
            if i is None:
                break
            flat = flat * r + i
        else:
            taken.add(flat)
    return taken


def _unflatten(flat: int, radix: Sequence[int]) -> list[int]:
    out = [0] * len(radix)
    for d in range(len(radix) - 1, -1, -1):
        flat, out[d] = divmod(flat, radix[d])
    return out
