"""pbt: generations of a population, read off the stored trials' labels."""

from __future__ import annotations

import random

import pytest

from tests.tuning.search_helpers import MIXED, check_point
from trimaran.tuning import (
    PBT_GENERATION_LABEL,
    PBT_MEMBER_LABEL,
    PBT_PARENT_LABEL,
    SearchSpace,
    SettingsError,
    TrialRecord,
    get_algorithm,
)
from trimaran.tuning.algorithms import clear_caches
from trimaran.tuning.algorithms._pbt import perturb

SPACE = SearchSpace.from_parameters([
    {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.0001", "max": "0.02", "step": "0.0001"}},
    {"name": "batch", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "8"}},
    {"name": "opt", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam", "rmsprop"]}},
])
SETTINGS = {"suggestion_trial_dir": "/var/log/katib/checkpoints/", "n_population": "5",
            "truncation_threshold": "0.4", "random_state": "3"}


def pbt(**overrides: str):  # noqa: ANN201
    return get_algorithm("pbt", {**SETTINGS, **overrides})


def score(a: dict[str, str]) -> float:
    return float(a["lr"]) * 100 + int(a["batch"])  # maximize


def create(trials: list[TrialRecord], out) -> list[TrialRecord]:  # noqa: ANN001
    """What the controller does: one trial per assignment, with the suggested labels."""
    return trials + [TrialRecord(f"t{len(trials) + i:02d}", a, labels=labels)
                     for i, (a, labels) in enumerate(zip(out.assignments, out.labels, strict=True))]


def finish(trials: list[TrialRecord], state: str = "succeeded") -> list[TrialRecord]:
    return [TrialRecord(t.name, t.assignments, state, score(dict(t.assignments)) if state == "succeeded" else None,
                        labels=t.labels) if not t.finished else t for t in trials]


def generation(trials: list[TrialRecord], g: int) -> dict[int, TrialRecord]:
    """Member index -> the latest trial of generation ``g``."""
    out = {}
    for t in trials:
        if t.labels[PBT_GENERATION_LABEL] == str(g):
            out[int(t.labels[PBT_MEMBER_LABEL])] = t
    return out


def run_generations(algorithm, count: int, generations: int) -> list[TrialRecord]:  # noqa: ANN001
    """``generations`` whole generations of 5, ``count`` trials at a time, each batch finishing."""
    trials: list[TrialRecord] = []
    while len(trials) < 5 * generations:
        out = algorithm.suggest(SPACE, trials, "maximize", min(count, 5 * generations - len(trials)))
        trials = finish(create(trials, out))
    return trials


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "message"), [
    ({"n_population": "5", "truncation_threshold": "0.2"}, 'setting "suggestion_trial_dir" is required'),
    ({"suggestion_trial_dir": "/c", "truncation_threshold": "0.2"}, 'setting "n_population" is required'),
    ({"suggestion_trial_dir": "/c", "n_population": "5"}, 'setting "truncation_threshold" is required'),
    ({"suggestion_trial_dir": "/c", "n_population": "4", "truncation_threshold": "0.2"},
     'setting "n_population": invalid value "4": should be an integer >= 5'),
    ({"suggestion_trial_dir": "/c", "n_population": "5", "truncation_threshold": "1.5"},
     'setting "truncation_threshold": invalid value "1.5": should be between 0 and 1, inclusive'),
    ({"suggestion_trial_dir": "/c", "n_population": "5", "truncation_threshold": "0.2", "resample_probability": "-1"},
     'setting "resample_probability": invalid value "-1": should be null to perturb at 0.8 or 1.2, or be between '
     '0 and 1, inclusive, to resample'),
    ({"suggestion_trial_dir": "checkpoints", "n_population": "5", "truncation_threshold": "0.2"},
     'setting "suggestion_trial_dir": invalid value "checkpoints": must be an absolute path'),
    ({"suggestion_trial_dir": "/c", "n_population": "5", "truncation_threshold": "0.2", "population": "5"},
     'unknown setting "population"'),
])
def test_settings_are_katibs_with_katibs_messages(settings: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match="^" + 'algorithm "pbt": ' + ".*") as err:
        get_algorithm("pbt", settings)
    assert message in str(err.value)


def test_katibs_simple_pbt_settings_are_accepted() -> None:
    algorithm = get_algorithm("pbt", [{"name": "suggestion_trial_dir", "value": "/var/log/katib/checkpoints/"},
                                      {"name": "n_population", "value": "40"},
                                      {"name": "truncation_threshold", "value": "0.2"}])
    assert algorithm.settings["n_population"] == 40 and algorithm.settings["resample_probability"] is None


def test_one_objective_only() -> None:
    with pytest.raises(SettingsError, match="optimizes one objective"):
        pbt().suggest(SPACE, [], ["maximize", "minimize"], 1)


# --- generation 0 --------------------------------------------------------------------------------


def test_generation_zero_samples_the_space_and_labels_each_member() -> None:
    out = pbt().suggest(MIXED, [], "minimize", 100)
    assert len(out.assignments) == 5 and not out.exhausted, "one generation at a time"
    for assignment in out.assignments:
        check_point(MIXED, assignment)
    assert out.labels == [{PBT_GENERATION_LABEL: "0", PBT_MEMBER_LABEL: str(m)} for m in range(5)]
    assert len({tuple(a.items()) for a in out.assignments}) == 5


def test_a_generation_fills_over_several_calls_as_slots_free() -> None:
    algorithm = pbt()
    trials: list[TrialRecord] = []
    for expected in (2, 2, 1, 0):
        out = algorithm.suggest(SPACE, trials, "maximize", 2)
        assert len(out.assignments) == expected
        trials = create(trials, out)
    assert [t.assignments for t in trials] == algorithm.suggest(SPACE, [], "maximize", 5).assignments
    assert "waiting for 5 trial(s)" in out.message


def test_the_next_generation_waits_for_every_member() -> None:
    algorithm = pbt()
    trials = create([], algorithm.suggest(SPACE, [], "maximize", 5))
    trials = finish(trials[:4]) + trials[4:]
    out = algorithm.suggest(SPACE, trials, "maximize", 5)
    assert out.assignments == [] and "generation 0: waiting for 1 trial(s)" in out.message
    out = algorithm.suggest(SPACE, finish(trials), "maximize", 5)
    assert {labels[PBT_GENERATION_LABEL] for labels in out.labels} == {"1"} and len(out.assignments) == 5


# --- exploit and explore -------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "threshold", "exploiting"), [("5", "0.4", 2), ("5", "0.2", 1), ("10", "0.25", 2),
                                                           ("6", "0", 0), ("5", "0.5", 2)])
def test_the_worst_fraction_exploits_the_best_and_the_rest_explore(n: str, threshold: str, exploiting: int) -> None:
    algorithm = pbt(n_population=n, truncation_threshold=threshold)
    size = int(n)
    trials = finish(create([], algorithm.suggest(SPACE, [], "maximize", size)))
    parents = generation(trials, 0)
    ranked = sorted(parents, key=lambda m: -score(dict(parents[m].assignments)))
    best, worst = ranked[:exploiting], ranked[size - exploiting:]

    out = algorithm.suggest(SPACE, trials, "maximize", size)
    children = dict(zip((int(labels[PBT_MEMBER_LABEL]) for labels in out.labels),
                        zip(out.assignments, out.labels, strict=True), strict=True))
    assert sorted(children) == list(range(size))
    exploited = [m for m, (_, labels) in children.items() if labels[PBT_PARENT_LABEL] != parents[m].name]
    assert sorted(exploited) == sorted(worst)
    for m, (assignment, labels) in children.items():
        check_point(SPACE, assignment)
        if m in worst:
            # The paper's exploit: the parent is the better trial, hyperparameters and checkpoint.
            source = next(t for t in parents.values() if t.name == labels[PBT_PARENT_LABEL])
            assert int(source.labels[PBT_MEMBER_LABEL]) in best and source.name != parents[m].name
            assert assignment == dict(source.assignments)
        else:
            assert labels[PBT_PARENT_LABEL] == parents[m].name
            assert assignment != dict(parents[m].assignments), "explore perturbs"


def test_perturbation_multiplies_by_0_8_or_1_2_within_bounds() -> None:
    rng = random.Random(0)
    lr = SPACE["lr"]
    seen = {perturb(lr, "0.01", rng) for _ in range(50)}
    assert seen == {"0.008", "0.012"}
    assert {perturb(lr, "0.02", rng) for _ in range(50)} == {"0.016", "0.02"}, "clamped to max"
    assert {perturb(lr, "0.0001", rng) for _ in range(50)} == {"0.0001", "0.0002"}, "at least a step up"
    batch = SPACE["batch"]
    assert {perturb(batch, "5", rng) for _ in range(50)} == {"4", "6"}
    assert {perturb(batch, "1", rng) for _ in range(50)} == {"1", "2"}, "ints move a step, clamped at min"
    assert {perturb(batch, "8", rng) for _ in range(50)} == {"6", "8"}, "8 * 0.8 rounds to 6"
    opt = SPACE["opt"]
    assert {perturb(opt, "adam", rng) for _ in range(50)} == {"sgd", "rmsprop"}
    assert {perturb(opt, "sgd", rng) for _ in range(50)} == {"adam"}, "the one neighbour at an end"
    for p in MIXED:
        for _ in range(30):
            value = p.decode(p.from_unit(rng.random()))
            new = perturb(p, value, rng)
            check_point(MIXED, {q.name: new if q.name == p.name else q.decode(q.from_unit(0.5)) for q in MIXED})
            if p.type in ("double",) and not p.step and p.distribution == "uniform":
                assert float(new) == pytest.approx(min(max(float(value) * 0.8, float(p.min)), float(p.max))) or \
                    float(new) == pytest.approx(min(max(float(value) * 1.2, float(p.min)), float(p.max)))


def test_resample_probability_redraws_from_the_prior_or_keeps() -> None:
    trials = finish(create([], pbt().suggest(SPACE, [], "maximize", 5)))
    keep = pbt(resample_probability="0", truncation_threshold="0").suggest(SPACE, trials, "maximize", 5)
    assert keep.assignments == [dict(t.assignments) for t in trials], "probability 0 keeps every value"
    redraw = pbt(resample_probability="1", truncation_threshold="0").suggest(SPACE, trials, "maximize", 5)
    for assignment in redraw.assignments:
        check_point(SPACE, assignment)
    changed = sum(a[p] != dict(t.assignments)[p] for a, t in zip(redraw.assignments, trials, strict=True)
                  for p in ("lr", "batch"))
    assert changed >= 8, "probability 1 redraws every value (a redraw may land on the same int)"
    lrs = {a["lr"] for a in redraw.assignments}
    assert not lrs <= {perturb(SPACE["lr"], t.assignments["lr"], random.Random(s)) for t in trials for s in range(20)}


# --- failures, determinism, restarts -------------------------------------------------------------


@pytest.mark.parametrize("state", ["failed", "killed", "metrics_unavailable"])
def test_a_trial_without_a_result_runs_again_as_it_was(state: str) -> None:
    algorithm = pbt()
    trials = finish(create([], algorithm.suggest(SPACE, [], "maximize", 5)))
    trials = create(trials, algorithm.suggest(SPACE, trials, "maximize", 5))
    failed = trials[7]
    trials = finish(trials[:7]) + finish([failed], state) + finish(trials[8:])
    out = algorithm.suggest(SPACE, trials, "maximize", 5)
    assert out.assignments == [dict(failed.assignments)]
    assert out.labels == [dict(failed.labels)] and PBT_PARENT_LABEL in failed.labels
    trials = finish(create(trials, out))
    assert generation(trials, 1)[int(failed.labels[PBT_MEMBER_LABEL])].name == "t10", "the re-run replaces it"
    out = algorithm.suggest(SPACE, trials, "maximize", 5)
    assert {labels[PBT_GENERATION_LABEL] for labels in out.labels} == {"2"}


def test_generation_zero_failures_rerun_without_a_parent() -> None:
    algorithm = pbt()
    trials = create([], algorithm.suggest(SPACE, [], "maximize", 5))
    trials = finish(trials[:1], "failed") + finish(trials[1:])
    out = algorithm.suggest(SPACE, trials, "maximize", 5)
    assert out.assignments == [dict(trials[0].assignments)]
    assert out.labels == [{PBT_GENERATION_LABEL: "0", PBT_MEMBER_LABEL: "0"}]


def test_deterministic_under_random_state_and_the_same_after_a_restart() -> None:
    first = run_generations(pbt(), 2, 4)
    clear_caches()
    again = run_generations(pbt(), 3, 4)  # another parallelism, a fresh object, empty caches
    assert [(t.assignments, t.labels) for t in first] == [(t.assignments, t.labels) for t in again]
    other = run_generations(pbt(random_state="4"), 2, 4)
    assert [t.assignments for t in other] != [t.assignments for t in first]
    # Every call on a prefix of the stored trials answers what the running process answered.
    for cut in range(0, len(first), 3):
        clear_caches()
        out = pbt().suggest(SPACE, first[:cut], "maximize", 2)
        assert [dict(t.assignments) for t in first[cut:cut + len(out.assignments)]] == out.assignments


def test_lineage_continues_generation_after_generation() -> None:
    trials = run_generations(pbt(), 5, 4)
    assert len(trials) == 20
    names = {t.name: t for t in trials}
    for g in (1, 2, 3):
        for child in generation(trials, g).values():
            parent = names[child.labels[PBT_PARENT_LABEL]]
            assert parent.labels[PBT_GENERATION_LABEL] == str(g - 1)
    best = [max(score(dict(t.assignments)) for t in generation(trials, g).values()) for g in range(4)]
    assert best[-1] >= best[0], "exploiting the best never loses it"
