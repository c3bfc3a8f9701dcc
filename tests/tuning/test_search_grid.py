"""grid: exactly Katib's grid, each point once, running and failed points included."""

from __future__ import annotations

import itertools

import pytest

from trimaran.tuning import SearchSpace, SearchSpaceError, TrialRecord, get_algorithm
from trimaran.tuning.algorithms import grid_points

SPACE = SearchSpace.from_parameters([
    {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "7", "step": "3"}},
    {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "0.5", "step": "0.2"}},
    {"name": "opt", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam"]}},
])
KATIB_GRID = [  # int range(1, 8, 3) x numpy.arange(0.1, 0.7, 0.2) <= 0.5 x list
    dict(zip(("layers", "lr", "opt"), combo, strict=True))
    for combo in itertools.product(("1", "4", "7"), ("0.1", "0.3", "0.5"), ("sgd", "adam"))
]


@pytest.mark.parametrize("settings", [{}, {"random_state": "3"}])
def test_grid_enumerates_katibs_grid_once_then_is_exhausted(settings: dict) -> None:
    grid = get_algorithm("grid", settings)
    trials: list[TrialRecord] = []
    while True:
        out = grid.suggest(SPACE, trials, "maximize", 4)
        trials += [TrialRecord(f"t{len(trials) + i}", a, "succeeded", 1.0) for i, a in enumerate(out.assignments)]
        if out.exhausted:
            break
        assert len(out.assignments) == 4
    assert sorted(map(str, (t.assignments for t in trials))) == sorted(map(str, KATIB_GRID))
    assert len(trials) == 18
    assert grid.suggest(SPACE, trials, "maximize", 4).assignments == []
    assert grid.suggest(SPACE, trials, "maximize", 0).exhausted


def test_without_random_state_points_come_in_index_order() -> None:
    out = get_algorithm("grid", {}).suggest(SPACE, [], "maximize", 18)
    assert out.assignments == KATIB_GRID and out.exhausted
    assert grid_points(SPACE) == [tuple(p.values()) for p in KATIB_GRID]


def test_random_state_gives_a_fixed_shuffled_order() -> None:
    a = get_algorithm("grid", {"random_state": "3"}).suggest(SPACE, [], "maximize", 18).assignments
    b = get_algorithm("grid", {"random_state": "3"}).suggest(SPACE, [], "maximize", 18).assignments
    c = get_algorithm("grid", {"random_state": "4"}).suggest(SPACE, [], "maximize", 18).assignments
    assert a == b and a != KATIB_GRID and a != c
    # Asking in pieces walks the same order.
    grid = get_algorithm("grid", {"random_state": "3"})
    first = grid.suggest(SPACE, [], "maximize", 5).assignments
    rest = grid.suggest(SPACE, [TrialRecord(f"t{i}", p) for i, p in enumerate(first)], "maximize", 13).assignments
    assert first + rest == a


@pytest.mark.parametrize("state", ["running", "failed", "killed", "metrics_unavailable", "early_stopped"])
def test_points_of_stored_trials_are_never_suggested_again(state: str) -> None:
    taken = [TrialRecord(f"t{i}", p, state) for i, p in enumerate(KATIB_GRID[::2])]
    out = get_algorithm("grid", {}).suggest(SPACE, taken, "maximize", 100)
    assert out.assignments == KATIB_GRID[1::2] and out.exhausted


def test_stored_values_are_matched_by_value_not_spelling() -> None:
    taken = [TrialRecord("t0", {"layers": "1.0", "lr": "0.10", "opt": "sgd"}),
             TrialRecord("t1", {"layers": "1", "lr": "0.30000000000000004", "opt": "sgd"}),
             TrialRecord("t2", {"layers": "2", "lr": "0.1", "opt": "sgd"})]  # not a grid point
    out = get_algorithm("grid", {}).suggest(SPACE, taken, "maximize", 100).assignments
    assert len(out) == 16 and KATIB_GRID[0] not in out and KATIB_GRID[2] not in out


def test_grid_needs_steps_for_doubles_and_enough_points() -> None:
    grid = get_algorithm("grid", {})
    no_step = SearchSpace.from_parameters([
        {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "0.5"}}])
    with pytest.raises(SearchSpaceError, match=r"spec.parameters\[0\].feasibleSpace.step: Required value"):
        grid.suggest(no_step, [], "maximize", 1)
    grid.validate(SPACE, "maximize", max_trial_count=18)
    with pytest.raises(SearchSpaceError, match=r"must not be greater than the number of grid points \(18\)"):
        grid.validate(SPACE, "maximize", max_trial_count=19)


def test_a_large_grid_is_not_materialised() -> None:
    import tracemalloc

    big = SearchSpace.from_parameters([
        {"name": n, "parameterType": "int", "feasibleSpace": {"min": "1", "max": "100"}} for n in ("a", "b", "c")])
    grid = get_algorithm("grid", {"random_state": "1"})
    tracemalloc.start()
    try:
        out = grid.suggest(big, [], "maximize", 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(out.assignments) == 10
    # A shuffled order of the 10^6 point indices is 8 MB; the points themselves as dicts would be ~190 MB.
    assert peak < 32 * 2**20, peak
