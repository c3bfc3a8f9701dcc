"""Katib's rules for an experiment's end, the one copy the controller and the SDK's in-process mode
both ask (so the two cannot drift)."""

from __future__ import annotations

import ast
from pathlib import Path

from trimaran.tuning import experiment_outcome, trials_wanted

ROOT = Path(__file__).resolve().parents[2] / "trimaran"


def _outcome(**given: object) -> tuple[str, str, str] | None:
    args = {"objective_type": "maximize", "goal": None, "best_name": None, "best_value": None, "failed": 0,
            "max_failed": None, "completed": 0, "max_trials": None, **given}
    return experiment_outcome(**args)  # type: ignore[arg-type]


def test_the_goal_is_checked_first_and_both_ways() -> None:
    reached = _outcome(goal=0.9, best_name="e-1", best_value=0.95, failed=3, max_failed=3, completed=9, max_trials=9)
    assert reached == ("Succeeded", "ExperimentGoalReached",
                       "Experiment has succeeded because the objective goal 0.9 was reached by e-1 (0.95)")
    assert _outcome(goal=0.9, best_name="e-1", best_value=0.9) is not None  # the goal itself counts
    assert _outcome(goal=0.9, best_name="e-1", best_value=0.89) is None
    assert _outcome(objective_type="minimize", goal=0.1, best_name="e", best_value=0.05) is not None
    assert _outcome(objective_type="minimize", goal=0.1, best_name="e", best_value=0.2) is None


def test_failures_end_it_before_the_trial_count() -> None:
    failed = _outcome(failed=2, max_failed=2, completed=5, max_trials=5)
    assert failed is not None and failed.condition == "Failed" and failed.reason == "ExperimentFailed"
    assert _outcome(failed=0, max_failed=0) is None  # no failure yet, even with a limit of 0
    done = _outcome(failed=1, max_failed=2, completed=5, max_trials=5)
    assert done is not None and done.reason == "ExperimentMaxTrialsReached"
    assert _outcome(completed=4, max_trials=5) is None


def test_trials_wanted_stops_at_the_trial_count() -> None:
    assert trials_wanted(3, None, 100) == 3
    assert trials_wanted(3, 10, 8) == 2
    assert trials_wanted(3, 10, 10) == 0


def test_no_other_module_words_an_experiments_end() -> None:
    """The rules' messages are written in the rules' module alone."""
    words = ("Experiment has succeeded because", "Experiment has failed because")
    found = []
    for path in ROOT.rglob("*.py"):
        if path.name == "_rules.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(words):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert found == []
