"""Every search algorithm: valid points, determinism, restart equivalence, settings validation."""

from __future__ import annotations

import pytest

from tests.tuning.search_helpers import MIXED, check_point, drive, objective
from trimaran.tuning import (
    SearchSpace,
    SearchSpaceError,
    SettingsError,
    TrialRecord,
    UnknownAlgorithmError,
    available_algorithms,
    get_algorithm,
)
from trimaran.tuning.algorithms import clear_caches

# sobol filters scipy's power-of-2 warning when imported; pytest resets filters for each test.
pytestmark = pytest.mark.filterwarnings("ignore:The balance properties of Sobol:UserWarning")

SEED = {"random_state": "11"}
# Settings and trial counts that keep each algorithm's test fast (the GP costs ~0.1 s per call).
CASES = {
    "random": ({}, 30),
    "tpe": ({"n_startup_trials": "5"}, 30),
    "multivariate-tpe": ({"n_startup_trials": "5"}, 30),
    "bayesianoptimization": ({"n_initial_points": "4"}, 7),
    "cmaes": ({}, 30),
    "sobol": ({}, 30),
    "nsga2": ({"population_size": "6"}, 30),
}


def make(name: str, **extra: str):
    return get_algorithm(name, {**SEED, **CASES[name][0], **extra})


def test_every_katib_algorithm_name_is_available() -> None:
    names = set(available_algorithms())
    assert {"random", "grid", "bayesianoptimization", "tpe", "multivariate-tpe", "cmaes", "sobol",
            "hyperband"} <= names
    assert {"nsga2", "nsgaii"} <= names


@pytest.mark.parametrize("name", sorted(CASES))
def test_suggestions_are_valid_points_of_the_space(name: str) -> None:
    trials = drive(make(name), MIXED, CASES[name][1], batch=3)
    assert len(trials) == CASES[name][1]
    for t in trials:
        check_point(MIXED, dict(t.assignments))


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_random_state_gives_the_same_trials(name: str) -> None:
    n = CASES[name][1]
    first = [t.assignments for t in drive(make(name), MIXED, n, batch=2)]
    clear_caches()
    second = [t.assignments for t in drive(make(name), MIXED, n, batch=2)]
    assert first == second
    other = [t.assignments for t in drive(make(name, random_state="12"), MIXED, n, batch=2)]
    assert other != first


@pytest.mark.parametrize("name", sorted(CASES))
def test_successive_calls_do_not_repeat_themselves(name: str) -> None:
    algorithm = make(name)
    a = algorithm.suggest(MIXED, [], "minimize", 1).assignments[0]
    b = algorithm.suggest(MIXED, [TrialRecord("t0", a, "running")], "minimize", 1).assignments[0]
    assert a != b


@pytest.mark.parametrize("name", [*sorted(CASES), "grid", "hyperband"])
def test_a_restart_suggests_exactly_what_the_running_process_would(name: str) -> None:
    """Drive the algorithm as a controller does, recording each call; then answer every call again
    from the stored trials alone, with a fresh object and no cache: the answers must be equal."""
    space = MIXED
    settings = {**SEED, **CASES.get(name, ({}, 0))[0]}
    if name == "grid":
        space = SearchSpace.from_parameters([
            {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "4"}},
            {"name": "b", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1", "step": "0.25"}},
            {"name": "c", "parameterType": "categorical", "feasibleSpace": {"list": ["u", "v"]}}])
    if name == "hyperband":
        settings.update(resource_name="layers", r_l="9")
    algorithm = get_algorithm(name, settings)
    trials: list[TrialRecord] = []
    calls: list[tuple[list[TrialRecord], list[dict[str, str]]]] = []
    rounds = 4 if name == "bayesianoptimization" else 14
    for step in range(rounds):
        snapshot = list(trials)
        got = algorithm.suggest(space, snapshot, "minimize", 3).assignments
        calls.append((snapshot, got))
        for a in got:
            trials.append(TrialRecord(f"t{len(trials):03d}", a, "running"))
        # Finish all but the newest running trial, in a scrambled order of outcomes.
        for i, t in enumerate(trials[:-1]):
            if t.state != "running":
                continue
            if i % 7 == 3:
                trials[i] = TrialRecord(t.name, t.assignments, "failed")
            elif i % 11 == 5:
                trials[i] = TrialRecord(t.name, t.assignments, "early_stopped", objective(t.assignments) + 1,
                                        intermediate=[(1, 5.0), (2, 4.0)])
            elif i % 13 == 8:
                trials[i] = TrialRecord(t.name, t.assignments, "killed")
            else:
                trials[i] = TrialRecord(t.name, t.assignments, "succeeded", objective(t.assignments))
        if step == 4:
            # A trial from outside the space (an edited experiment, another tool).
            trials.append(TrialRecord("foreign", {n: "nonsense" for n in space.names}, "succeeded", -100.0))
        if step == 7 and trials[0].state == "succeeded":
            # A finished trial's outcome is rewritten (metrics arrived late): caches must notice.
            trials[0] = TrialRecord(trials[0].name, trials[0].assignments, "succeeded", 1000.0)
    assert sum(len(got) for _, got in calls) > 10
    for snapshot, got in calls:
        clear_caches()
        fresh = get_algorithm(name, settings)
        assert fresh.suggest(space, snapshot, "minimize", 3).assignments == got


def test_records_rebuilt_as_new_objects_hit_the_same_answers() -> None:
    # The controller reads new TrialRecord objects from the store on every call.
    algorithm = make("multivariate-tpe")
    trials = drive(algorithm, MIXED, 20, batch=2)
    copies = [TrialRecord(t.name, dict(t.assignments), t.state, t.value) for t in trials]
    clear_caches()
    expected = make("multivariate-tpe").suggest(MIXED, copies, "minimize", 2)
    assert algorithm.suggest(MIXED, trials, "minimize", 2) == expected
    assert algorithm.suggest(MIXED, copies, "minimize", 2) == expected


def test_random_search_without_replacement_on_a_finite_space() -> None:
    space = SearchSpace.from_parameters([
        {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "3"}},
        {"name": "b", "parameterType": "categorical", "feasibleSpace": {"list": ["x", "y"]}}])
    algorithm = get_algorithm("random", SEED)
    trials = [TrialRecord("r0", {"a": "1", "b": "x"}, "running")]
    out = algorithm.suggest(space, trials, "minimize", 10)
    assert len(out.assignments) == 5 and out.exhausted
    keys = {(a["a"], a["b"]) for a in out.assignments} | {("1", "x")}
    assert len(keys) == 6
    assert algorithm.suggest(space, trials + [TrialRecord(f"t{i}", a) for i, a in enumerate(out.assignments)],
                             "minimize", 1) == type(out)([], True)


def test_sobol_points_follow_the_sequence_by_trial_count() -> None:
    space = SearchSpace.from_parameters([
        {"name": "a", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}},
        {"name": "b", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}}])
    sobol = get_algorithm("sobol", {})
    first4 = sobol.suggest(space, [], "minimize", 4).assignments
    assert first4[0] == {"a": "0.0", "b": "0.0"} and first4[1] == {"a": "0.5", "b": "0.5"}
    trials = [TrialRecord(f"t{i}", a, "failed") for i, a in enumerate(first4[:2])]
    assert sobol.suggest(space, trials, "minimize", 2).assignments == first4[2:]


def test_cmaes_moves_towards_the_optimum() -> None:
    space = SearchSpace.from_parameters([
        {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "-5", "max": "5"}},
        {"name": "y", "parameterType": "double", "feasibleSpace": {"min": "-5", "max": "5"}}])

    def sphere(a: dict[str, str]) -> float:
        return (float(a["x"]) - 1) ** 2 + (float(a["y"]) + 2) ** 2

    trials = drive(get_algorithm("cmaes", SEED), space, 120, f=sphere)
    assert min(t.value for t in trials[:12]) > min(t.value for t in trials[-12:])  # type: ignore[type-var]
    assert min(t.value for t in trials) < 0.05  # type: ignore[type-var]


@pytest.mark.parametrize("strategy", ["none", "ipop", "bipop"])
def test_cmaes_restarts_are_replayed_deterministically(strategy: str) -> None:
    space = SearchSpace.from_parameters([
        {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "-1", "max": "1"}},
        {"name": "y", "parameterType": "double", "feasibleSpace": {"min": "-1", "max": "1"}}])

    def flat(a: dict[str, str]) -> float:
        return 1.0  # CMA-ES detects a flat fitness and stops after ~20 generations

    settings = {**SEED, "restart_strategy": strategy}
    algorithm = get_algorithm("cmaes", settings)
    trials = drive(algorithm, space, 300, f=flat)
    again = drive(get_algorithm("cmaes", settings), space, 300, f=flat)
    assert [t.assignments for t in trials] == [t.assignments for t in again]
    numeric = [space["x"], space["y"]]
    run = algorithm._replay(numeric, trials, minimize=True).run
    if strategy == "none":
        assert run.optimizer.population_size == 6  # 4 + floor(3 ln 2), never restarted
    elif strategy == "ipop":
        assert run.optimizer.population_size in (12, 24, 48)  # doubled at each restart
    else:
        assert run.optimizer.population_size != 6 or not run.large


def test_bayesianoptimization_maps_skopt_settings() -> None:
    from optuna.samplers import GPSampler, TPESampler

    gp = get_algorithm("bayesianoptimization", {"acq_func": "EI", "acq_optimizer": "lbfgs", "n_initial_points": "3"})
    assert isinstance(gp.make_sampler(1, MIXED, ("minimize",)), GPSampler)
    rf = get_algorithm("bayesianoptimization", {"base_estimator": "RF"})
    assert isinstance(rf.make_sampler(1, MIXED, ("minimize",)), TPESampler)


@pytest.mark.parametrize(("name", "settings", "message"), [
    ("random", {"seed": "1"}, 'algorithm "random": unknown setting "seed"; known settings: random_state'),
    ("random", {"random_state": "-1"}, 'setting "random_state": invalid value "-1": must be an integer >= 0'),
    ("tpe", {"n_startup_trials": "abc"}, "must be an integer"),
    ("tpe", {"gamma": "1.5"}, 'setting "gamma": invalid value "1.5"'),
    ("tpe", {"n_EI_candidates": "4", "n_ei_candidates": "5"}, "are the same setting"),
    ("multivariate-tpe", {"gamma": "0.25"}, "known settings: n_ei_candidates, n_startup_trials, random_state"),
    ("bayesianoptimization", {"base_estimator": "XGB"}, "must be one of GP, RF, ET, GBRT"),
    ("bayesianoptimization", {"acq_func": "ucb"}, "must be one of gp_hedge, LCB, EI, PI, EIps, PIps"),
    ("cmaes", {"restart_strategy": "lipop"}, "must be one of none, None, ipop, bipop"),
    ("cmaes", {"sigma": "0"}, 'setting "sigma": invalid value "0"'),
    ("hyperband", {"r_l": "9"}, 'setting "resource_name" is required'),
    ("hyperband", {"resource_name": "epochs"}, 'setting "r_l" is required'),
    ("hyperband", {"resource_name": "epochs", "r_l": "9", "eta": "1"}, "must be greater than 1"),
    ("nsga2", {"population_size": "1"}, "must be an integer >= 2"),
])
def test_settings_are_validated_by_katibs_names(name: str, settings: dict, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        get_algorithm(name, settings)
    assert message in str(err.value)


def test_settings_as_katibs_name_value_list() -> None:
    algorithm = get_algorithm("tpe", [{"name": "random_state", "value": 5}, {"name": "n_EI_candidates", "value": "8"}])
    assert algorithm.settings["random_state"] == 5 and algorithm.settings["n_ei_candidates"] == 8


def test_unknown_algorithms_are_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownAlgorithmError) as err:
        get_algorithm("annealing", {})
    assert 'unknown algorithm "annealing"' in str(err.value) and "multivariate-tpe" in str(err.value)
    with pytest.raises(UnknownAlgorithmError, match="neural architecture search"):
        get_algorithm("enas", {})


def test_space_checks() -> None:
    one_numeric = SearchSpace.from_parameters([
        {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}},
        {"name": "c", "parameterType": "categorical", "feasibleSpace": {"list": ["a", "b"]}}])
    with pytest.raises(SearchSpaceError, match="cmaes only supports two or more dimensional"):
        get_algorithm("cmaes", {}).suggest(one_numeric, [], "minimize", 1)
    with pytest.raises(SearchSpaceError, match='"epochs" is not one of spec.parameters'):
        get_algorithm("hyperband", {"resource_name": "epochs", "r_l": "9"}).suggest(one_numeric, [], "minimize", 1)
    with pytest.raises(SettingsError, match='algorithm "cmaes" optimizes one objective'):
        get_algorithm("cmaes", {}).suggest(MIXED, [], ["minimize", "maximize"], 1)
    with pytest.raises(ValueError, match='objective type "minimise"'):
        get_algorithm("random", {}).suggest(MIXED, [], "minimise", 1)


def test_trials_outside_the_space_are_ignored() -> None:
    foreign = [TrialRecord(f"f{i}", {"x": "99"}, "succeeded", float(i)) for i in range(12)]
    for name in ("tpe", "cmaes", "nsga2", "random", "sobol"):
        for a in make(name).suggest(MIXED, foreign, "minimize", 2).assignments:
            check_point(MIXED, a)


def test_count_zero_only_reports_exhaustion() -> None:
    assert make("tpe").suggest(MIXED, [], "minimize", 0).assignments == []
    with pytest.raises(ValueError, match="count must be >= 0"):
        make("tpe").suggest(MIXED, [], "minimize", -1)


NORMAL = SearchSpace.from_parameters([
    {"name": "w", "parameterType": "double", "feasibleSpace": {"min": "-1", "max": "1", "distribution": "normal"}},
    {"name": "lr", "parameterType": "double",
     "feasibleSpace": {"min": "0.0001", "max": "1", "distribution": "logNormal"}},
    {"name": "k", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "10", "distribution": "normal"}},
    {"name": "d", "parameterType": "double",
     "feasibleSpace": {"min": "0", "max": "1", "step": "0.1", "distribution": "normal"}},
])


@pytest.mark.parametrize("name", ["random", "tpe", "multivariate-tpe", "cmaes", "sobol", "nsga2"])
def test_normal_distributions_work_with_every_sampler(name: str) -> None:
    # Strings of normal parameters do not round-trip exactly, so Optuna studies are rebuilt on
    # every call: the answers must still be deterministic and valid.
    trials = drive(make(name), NORMAL, 24, batch=3)
    for t in trials:
        check_point(NORMAL, dict(t.assignments))
        assert t.assignments["k"].isdigit()
    clear_caches()
    assert [t.assignments for t in drive(make(name), NORMAL, 24, batch=3)] == [t.assignments for t in trials]
