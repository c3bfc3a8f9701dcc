"""Several objectives: pareto_front, and NSGA-II (the default) driven from stored trials."""

from __future__ import annotations

import math

import pytest

from trimaran.tuning import MULTI_OBJECTIVE_DEFAULT, SearchSpace, TrialRecord, get_algorithm, pareto_front
from trimaran.tuning.algorithms import clear_caches

SPACE = SearchSpace.from_parameters([
    {"name": f"x{i}", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}} for i in range(4)])


def zdt1(a: dict[str, str]) -> list[float]:
    """ZDT1: both minimized; the Pareto front is x1..x3 = 0, f2 = 1 - sqrt(f1)."""
    x = [float(a[f"x{i}"]) for i in range(4)]
    g = 1 + 9 * sum(x[1:]) / 3
    return [x[0], g * (1 - math.sqrt(x[0] / g))]


def run(algorithm_name: str, n: int, settings: dict[str, str]) -> list[TrialRecord]:
    algorithm = get_algorithm(algorithm_name, settings)
    trials: list[TrialRecord] = []
    while len(trials) < n:
        for a in algorithm.suggest(SPACE, trials, ["minimize", "minimize"], 4).assignments:
            trials.append(TrialRecord(f"t{len(trials):03d}", a, "succeeded", values=zdt1(a)))
    return trials


def hypervolume(points: list[list[float]], ref: tuple[float, float] = (1.1, 11.0)) -> float:
    front = sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1])
    volume, last_y = 0.0, ref[1]
    for x, y in front:
        if y < last_y:
            volume += (ref[0] - x) * (last_y - y)
            last_y = y
    return volume


def test_pareto_front_keeps_the_non_dominated_succeeded_trials() -> None:
    ts = [
        TrialRecord("a", {}, "succeeded", values=[1.0, 5.0]),
        TrialRecord("b", {}, "succeeded", values=[2.0, 2.0]),
        TrialRecord("b2", {}, "succeeded", values=[2.0, 2.0]),  # a tie: both stay
        TrialRecord("c", {}, "succeeded", values=[3.0, 3.0]),  # dominated by b
        TrialRecord("d", {}, "succeeded", values=[4.0, 1.0]),
        TrialRecord("e", {}, "failed", values=[0.0, 0.0]),
        TrialRecord("f", {}, "running"),
        TrialRecord("g", {}, "succeeded", values=[float("nan"), 0.0]),
        TrialRecord("h", {}, "succeeded", values=[0.5]),  # wrong number of values
    ]
    assert [t.name for t in pareto_front(ts, ["minimize", "minimize"])] == ["a", "b", "b2", "d"]
    # Maximizing the first objective instead: d (4, 1) dominates c and b's first value loses.
    assert [t.name for t in pareto_front(ts, ["maximize", "minimize"])] == ["d"]
    single = [TrialRecord("p", {}, "succeeded", 0.3), TrialRecord("q", {}, "succeeded", 0.1),
              TrialRecord("r", {}, "succeeded", 0.1)]
    assert [t.name for t in pareto_front(single, "minimize")] == ["q", "r"]


def test_nsga2_is_the_multi_objective_default_and_beats_random_search() -> None:
    assert MULTI_OBJECTIVE_DEFAULT == "nsga2"
    settings = {"random_state": "5", "population_size": "16"}
    nsga = run("nsga2", 160, settings)
    rand = run("random", 160, {"random_state": "5"})
    hv_nsga = hypervolume([list(t.values) for t in pareto_front(nsga, ["minimize", "minimize"])])  # type: ignore[arg-type]
    hv_rand = hypervolume([list(t.values) for t in pareto_front(rand, ["minimize", "minimize"])])  # type: ignore[arg-type]
    assert hv_nsga > hv_rand
    clear_caches()
    assert [t.assignments for t in run("nsga2", 160, settings)] == [t.assignments for t in nsga]


@pytest.mark.parametrize("name", ["random", "tpe", "multivariate-tpe", "sobol", "grid"])
def test_other_algorithms_accept_several_objectives(name: str) -> None:
    space = SPACE
    if name == "grid":
        space = SearchSpace.from_parameters([
            {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "3"}}])
    algorithm = get_algorithm(name, {"random_state": "1"})
    trials = [TrialRecord(f"t{i}", a, "succeeded", values=[float(i), -float(i)])
              for i, a in enumerate(algorithm.suggest(space, [], ["minimize", "maximize"], 2).assignments)]
    assert algorithm.suggest(space, trials, ["minimize", "maximize"], 1).assignments
