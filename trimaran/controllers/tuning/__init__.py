"""Katib's kinds: Experiments ask the search algorithm for trials; Trials run jobs and collect metrics."""

from trimaran.controllers.tuning.experiment import ExperimentReconciler
from trimaran.controllers.tuning.trial import TrialReconciler, trial_state

__all__ = ["ExperimentReconciler", "TrialReconciler", "trial_state"]
