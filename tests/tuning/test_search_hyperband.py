"""hyperband: Katib's brackets, read off the stored trials."""

from __future__ import annotations

import pytest

from trimaran.tuning import SearchSpace, TrialRecord, get_algorithm
from trimaran.tuning.algorithms import hyperband_schedule

SPACE = SearchSpace.from_parameters([
    {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.001", "max": "0.1"}},
    {"name": "epochs", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "9"}},
])
SETTINGS = {"resource_name": "epochs", "r_l": "9", "eta": "3", "random_state": "2"}


def score(a: dict[str, str]) -> float:
    return float(a["lr"]) * int(a["epochs"])  # maximize: larger lr and more epochs are better


def finish_all(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [TrialRecord(t.name, t.assignments, "succeeded", score(dict(t.assignments))) if not t.finished else t
            for t in trials]


def add(trials: list[TrialRecord], assignments: list[dict[str, str]]) -> list[TrialRecord]:
    return trials + [TrialRecord(f"t{len(trials) + i:02d}", a) for i, a in enumerate(assignments)]


def test_schedule_matches_katibs_formulas() -> None:
    assert [[(r.size, r.resource) for r in b] for b in hyperband_schedule(9, 3)] == [
        [(9, 1), (3, 3), (1, 9)], [(5, 3), (2, 9)], [(3, 9)]]
    # s_max = floor(log_10(1000)) = 3 (Katib's int(log(1000)/log(10)) gives 2 in floating point).
    assert len(hyperband_schedule(1000, 10)) == 4
    assert [[(r.size, r.resource) for r in b] for b in hyperband_schedule(8, 2)][0] == [
        (8, 1), (4, 2), (2, 4), (1, 8)]


def test_brackets_run_rung_by_rung_and_promote_the_best() -> None:
    hb = get_algorithm("hyperband", SETTINGS)
    out = hb.suggest(SPACE, [], "maximize", 100)
    assert len(out.assignments) == 9 and not out.exhausted
    assert {a["epochs"] for a in out.assignments} == {"1"}
    trials = add([], out.assignments)

    # Rung 1 waits for every rung-0 trial.
    waiting = hb.suggest(SPACE, finish_all(trials[:-1]) + trials[-1:], "maximize", 100)
    assert waiting.assignments == [] and not waiting.exhausted and "waiting for 1 trial" in waiting.message

    trials = finish_all(trials)
    out = hb.suggest(SPACE, trials, "maximize", 100)
    best3 = sorted(trials, key=lambda t: -(t.value or 0))[:3]
    assert out.assignments == [{"lr": t.assignments["lr"], "epochs": "3"} for t in best3]
    trials = finish_all(add(trials, out.assignments))
    out = hb.suggest(SPACE, trials, "maximize", 100)
    best = max(trials[9:], key=lambda t: t.value or 0)
    # The last rung of bracket 2, then bracket 1's new configurations (brackets do not wait).
    assert out.assignments[0] == {"lr": best.assignments["lr"], "epochs": "9"}
    assert [a["epochs"] for a in out.assignments[1:]] == ["3"] * 5
    trials = finish_all(add(trials, out.assignments))
    out = hb.suggest(SPACE, trials, "maximize", 100)
    best2 = sorted(trials[13:18], key=lambda t: -(t.value or 0))[:2]
    # Bracket 1's last rung (its best 2 at 9 epochs) and bracket 0's 3 new configurations at 9.
    assert out.assignments[:2] == [{"lr": t.assignments["lr"], "epochs": "9"} for t in best2]
    assert [a["epochs"] for a in out.assignments] == ["9"] * 5 and out.exhausted
    trials = finish_all(add(trials, out.assignments))
    assert len(trials) == 23
    assert hb.suggest(SPACE, trials, "maximize", 100).exhausted


def test_a_rung_fills_over_several_calls_and_count_is_respected() -> None:
    hb = get_algorithm("hyperband", SETTINGS)
    trials: list[TrialRecord] = []
    for _ in range(4):
        out = hb.suggest(SPACE, trials, "maximize", 2)
        assert len(out.assignments) == 2
        trials = add(trials, out.assignments)
    all_at_once = hb.suggest(SPACE, [], "maximize", 100).assignments
    assert [t.assignments for t in trials] == all_at_once[:8]  # slots are seeded by position


def test_failed_trials_are_not_promoted() -> None:
    hb = get_algorithm("hyperband", SETTINGS)
    trials = add([], hb.suggest(SPACE, [], "minimize", 9).assignments)
    trials = [TrialRecord(t.name, t.assignments, "failed") if i != 4 else
              TrialRecord(t.name, t.assignments, "succeeded", 1.0) for i, t in enumerate(trials)]
    out = hb.suggest(SPACE, trials, "minimize", 100)
    assert out.assignments[0] == {"lr": trials[4].assignments["lr"], "epochs": "3"}
    # Only one promoted to rung 1; it must finish before rung 2.
    assert len(out.assignments) == 1


@pytest.mark.parametrize("eta", ["0", "-2"])
def test_eta_at_or_below_zero_means_three(eta: str) -> None:
    hb = get_algorithm("hyperband", {**SETTINGS, "eta": eta})
    assert hb.eta == 3.0
