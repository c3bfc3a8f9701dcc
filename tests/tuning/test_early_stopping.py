"""Early stopping: medianstop's exact rule, the percentile rule it specialises, and ASHA's rungs."""

from __future__ import annotations

import pytest

from trimaran.tuning import SettingsError, TrialRecord, UnknownAlgorithmError
from trimaran.tuning.early_stopping import (
    AshaStopper,
    MedianStopper,
    PercentileStopper,
    available_early_stoppers,
    get_early_stopper,
    percentile,
)


def curve(name: str, values: list[float], state: str = "succeeded", first_step: int = 1) -> TrialRecord:
    return TrialRecord(name, {}, state, values[-1] if state != "running" else None,  # type: ignore[arg-type]
                       intermediate=[(first_step + i, v) for i, v in enumerate(values)])


# Three succeeded peers. Running averages up to step 4: 0.70, 0.75, 0.80 (median 0.75).
PEERS = [
    curve("a", [0.4, 0.7, 0.8, 0.9, 0.95]),
    curve("b", [0.6, 0.7, 0.8, 0.9, 0.95]),
    curve("c", [0.8, 0.8, 0.8, 0.8, 0.9]),
]


def test_defaults_and_names() -> None:
    assert available_early_stoppers() == ["asha", "medianstop"]
    assert get_early_stopper("medianstop", {}).settings == {"min_trials_required": 3, "start_step": 4}
    assert isinstance(get_early_stopper("medianstop", {}), PercentileStopper)
    with pytest.raises(UnknownAlgorithmError, match='unknown early stopping algorithm "hyperband"; known: asha'):
        get_early_stopper("hyperband", {})


@pytest.mark.parametrize(("settings", "message"), [
    ({"min_trials_required": "0"}, 'setting "min_trials_required": invalid value "0": must be an integer >= 1'),
    ({"start_step": "x"}, 'setting "start_step": invalid value "x": must be an integer'),
    ({"start_steps": "4"}, 'unknown setting "start_steps"; known settings: min_trials_required, start_step'),
])
def test_medianstop_settings_are_validated(settings: dict, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        get_early_stopper("medianstop", settings)
    assert message in str(err.value) and 'early stopping algorithm "medianstop"' in str(err.value)


def test_a_trial_is_not_judged_before_its_start_step_th_report() -> None:
    stopper = MedianStopper({})
    assert stopper.should_stop(curve("me", [0.1, 0.1, 0.1], "running"), PEERS, "maximize") is None
    reason = stopper.should_stop(curve("me", [0.1, 0.1, 0.1, 0.1], "running"), PEERS, "maximize",
                                 metric_name="accuracy")
    assert reason == "accuracy 0.1 at step 4 is below the median 0.75 of 3 completed trials at step 4"
    assert MedianStopper({"start_step": "2"}).should_stop(curve("me", [0.1, 0.1], "running"), PEERS,
                                                         "maximize") is not None


def test_the_threshold_is_the_median_of_running_averages_up_to_the_step() -> None:
    stopper = MedianStopper({})
    # Best so far 0.74 < median 0.75 of the averages at step 4: stop. (The peers' *values* at
    # step 4 are 0.9, 0.9, 0.8: a value-at-step rule would give 0.9.)
    assert stopper.should_stop(curve("me", [0.5, 0.6, 0.74, 0.7], "running"), PEERS, "maximize") is not None
    # Best so far equal to the median: not strictly worse, continue.
    assert stopper.should_stop(curve("me", [0.5, 0.6, 0.75, 0.7], "running"), PEERS, "maximize") is None
    # At step 5 the averages are 0.75, 0.79, 0.82: median 0.79.
    me5 = curve("me", [0.5, 0.6, 0.75, 0.7, 0.78], "running")
    assert "median 0.79 of 3 completed trials at step 5" in stopper.should_stop(me5, PEERS, "maximize")  # type: ignore[operator]
    # The check repeats at every later report: a trial that falls behind later is stopped then.
    assert stopper.should_stop(curve("me", [0.9, 0.9, 0.9, 0.9], "running"), PEERS, "maximize") is None
    late = [(s, 0.78) for s in range(1, 30)]
    long_peers = [TrialRecord(f"p{i}", {}, "succeeded", 0.9, intermediate=[(s, 0.9) for s in range(1, 30)])
                  for i in range(3)]
    assert stopper.should_stop(TrialRecord("me", {}, intermediate=late), long_peers, "maximize") is not None


def test_minimize_compares_the_lowest_value_against_the_median() -> None:
    losses = [curve(p.name, [1.0 - v for _, v in p.intermediate]) for p in PEERS]  # averages: 0.30, 0.25, 0.20
    stopper = MedianStopper({})
    reason = stopper.should_stop(curve("me", [0.9, 0.5, 0.26, 0.3], "running"), losses, "minimize", metric_name="loss")
    assert reason == "loss 0.26 at step 4 is above the median 0.25 of 3 completed trials at step 4"
    assert stopper.should_stop(curve("me", [0.9, 0.5, 0.24, 0.3], "running"), losses, "minimize") is None


def test_min_trials_required_counts_only_succeeded_trials_with_reports_by_the_step() -> None:
    stopper = MedianStopper({})
    me = curve("me", [0.1] * 4, "running")
    others = PEERS[:2] + [
        curve("r", [0.9] * 5, "running"),
        curve("f", [0.9] * 5, "failed"),
        curve("e", [0.9] * 5, "early_stopped"),
        curve("late", [0.9] * 5, first_step=10),  # no report at or before step 4
    ]
    assert stopper.should_stop(me, others, "maximize") is None
    assert stopper.should_stop(me, others + PEERS[2:], "maximize") is not None
    assert MedianStopper({"min_trials_required": "2"}).should_stop(me, others, "maximize") is not None


def test_finished_trials_are_never_stopped() -> None:
    assert MedianStopper({}).should_stop(curve("me", [0.0] * 6), PEERS, "maximize") is None


def test_percentile_rule_generalises_the_median() -> None:
    me = curve("me", [0.73] * 4, "running")
    assert percentile([0.70, 0.75, 0.80], 25) == pytest.approx(0.725)
    # Keeping the best 25% when maximizing compares against the 75th percentile of averages: 0.775.
    reason = PercentileStopper({}, percentile=25).should_stop(me, PEERS, "maximize")
    assert reason is not None and "below the 75th percentile 0.775" in reason
    # Keeping the best 75% compares against the 25th percentile, 0.725.
    assert PercentileStopper({}, percentile=75).should_stop(me, PEERS, "maximize") is None
    assert "above the 25th percentile 0.225" in PercentileStopper({}, percentile=25).should_stop(  # type: ignore[operator]
        curve("me", [0.3] * 4, "running"), [curve(t.name, [1 - v for _, v in t.intermediate]) for t in PEERS],
        "minimize")
    with pytest.raises(ValueError, match="percentile must be in"):
        PercentileStopper({}, percentile=100)


def test_median_of_an_even_number_of_trials_interpolates() -> None:
    four = PEERS + [curve("d", [1.0] * 5)]  # averages 0.70, 0.75, 0.80, 1.0: median 0.775
    assert "median 0.775 of 4" in MedianStopper({}).should_stop(curve("me", [0.77] * 4, "running"), four, "maximize")  # type: ignore[operator]


# -- ASHA -----------------------------------------------------------------------------------------------


def asha_curve(name: str, values: dict[int, float], state: str = "running") -> TrialRecord:
    return TrialRecord(name, {}, state, None, intermediate=sorted(values.items()))  # type: ignore[arg-type]


def test_asha_rungs_sit_on_the_step_axis() -> None:
    asha = AshaStopper({"min_resource": "2", "reduction_factor": "3", "min_early_stopping_rate": "1"})
    assert [asha.rung_step(k) for k in range(3)] == [6, 18, 54]
    assert get_early_stopper("asha", {"eta": "4"}).settings["reduction_factor"] == 4


def test_asha_first_to_reach_a_rung_continues_then_the_top_third_does() -> None:
    asha = AshaStopper({})  # rungs at steps 1, 3, 9, 27; eta 3
    first = asha_curve("a", {1: 0.5})
    assert asha.should_stop(first, [], "maximize") is None
    second = asha_curve("b", {1: 0.4})
    reason = asha.should_stop(second, [first], "maximize", metric_name="accuracy")
    assert reason == ("accuracy 0.4 at rung 0 (step 1) ranks 2 of the 2 trials that reached it; "
                      "only the best 1 continue")
    # Six at the rung: the best two continue.
    peers = [asha_curve(f"p{i}", {1: v}) for i, v in enumerate([0.9, 0.8, 0.3, 0.2, 0.1])]
    assert asha.should_stop(asha_curve("me", {1: 0.85}), peers, "maximize") is None
    assert asha.should_stop(asha_curve("me", {1: 0.75}), peers, "maximize") is not None
    assert asha.should_stop(asha_curve("me", {1: 0.75}), peers, "minimize") is not None
    assert asha.should_stop(asha_curve("me", {1: 0.15}), peers, "minimize") is None


def test_asha_judges_at_the_highest_rung_reached_with_the_value_that_crossed_it() -> None:
    asha = AshaStopper({})
    # me crossed rung 1 (step 3) with 0.6 at step 4; at rung 0 it was the worst, which no longer matters.
    me = asha_curve("me", {1: 0.0, 2: 0.1, 4: 0.6, 5: 0.1})
    rung1 = [asha_curve("p", {1: 0.9, 3: 0.5}), asha_curve("q", {1: 0.9, 3: 0.4}, "succeeded")]
    assert asha.should_stop(me, rung1, "maximize") is None  # 0.6 is best of 3 at rung 1
    rung1.append(asha_curve("r", {1: 0.9, 3: 0.7}, "early_stopped"))
    assert "at rung 1 (step 3) ranks 2 of the 4" in asha.should_stop(me, rung1, "maximize")  # type: ignore[operator]
    # Before any rung: nothing to judge; finished trials are never stopped.
    assert AshaStopper({"min_resource": "5"}).should_stop(me, rung1, "maximize") is None
    assert asha.should_stop(asha_curve("done", {1: 0.0}, "succeeded"), rung1, "maximize") is None


@pytest.mark.parametrize(("settings", "message"), [
    ({"reduction_factor": "1"}, 'setting "reduction_factor": invalid value "1"'),
    ({"min_resource": "0"}, 'setting "min_resource": invalid value "0"'),
    ({"min_early_stopping_rate": "-1"}, "must be an integer >= 0"),
])
def test_asha_settings_are_validated(settings: dict, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        get_early_stopper("asha", settings)
    assert message in str(err.value)
