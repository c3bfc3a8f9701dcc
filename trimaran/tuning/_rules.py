"""Katib's rules for an experiment's course, written once for both places that run them: the
Experiment controller (trials are Jobs) and the SDK's in-process mode (trials are calls).

How many trials to run, and when and how the experiment ends, checked in Katib's order: the goal
reached, too many failed trials, ``maxTrialCount`` completed (katib.md §1.6, §1.7).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SEARCH_SPACE_EXHAUSTED", "Outcome", "experiment_outcome", "goal_reached", "trials_wanted"]


class Outcome(NamedTuple):
    """How an experiment ended: the condition made True, its reason and message."""

    condition: str  # "Succeeded" or "Failed"
    reason: str
    message: str


SEARCH_SPACE_EXHAUSTED = Outcome("Succeeded", "ExperimentSuggestionEndReached",
                                 "Experiment has succeeded because the search space is exhausted")


def goal_reached(value: float, goal: float, objective_type: str) -> bool:
    """Whether ``value`` meets ``goal`` (at least it when maximizing, at most when minimizing)."""
    return value >= goal if objective_type == "maximize" else value <= goal


def trials_wanted(parallel: int, max_trials: int | None, completed: int) -> int:
    """How many trials should be running: ``parallelTrialCount``, less near ``maxTrialCount``."""
    return parallel if max_trials is None else min(parallel, max_trials - completed)


def experiment_outcome(*, objective_type: str, goal: float | None, best_name: str | None,
                       best_value: float | None, failed: int, max_failed: int | None, completed: int,
                       max_trials: int | None) -> Outcome | None:
    """The experiment's end, or ``None`` while it runs on. ``failed`` counts trials Failed or
    without metrics; ``completed`` counts every finished trial."""
    if goal is not None and best_name is not None and best_value is not None \
            and goal_reached(best_value, goal, objective_type):
        return Outcome("Succeeded", "ExperimentGoalReached",
                       f"Experiment has succeeded because the objective goal {goal:g} was reached by "
                       f"{best_name} ({best_value:g})")
    if max_failed is not None and failed > 0 and failed >= max_failed:
        return Outcome("Failed", "ExperimentFailed",
                       f"Experiment has failed because {failed} trials failed (maxFailedTrialCount {max_failed})")
    if max_trials is not None and completed >= max_trials:
        return Outcome("Succeeded", "ExperimentMaxTrialsReached",
                       f"Experiment has succeeded because max trial count ({max_trials}) has been reached")
    return None
