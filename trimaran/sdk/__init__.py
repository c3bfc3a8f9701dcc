"""Trimaran's Python SDK: tune a Python function as a Katib Experiment, as ``kubeflow.katib`` does.

    >>> from trimaran.sdk import TuningClient, report_metrics, search
    >>> def objective(params):
    ...     loss = (params["x"] - 2) ** 2 + params["lr"]
    ...     report_metrics({"loss": loss})
    >>> result = TuningClient().tune(
    ...     "first", objective=objective,
    ...     parameters={"x": search.double(-5, 5), "lr": search.double(1e-4, 1e-1, log=True)},
    ...     objective_metric_name="loss", objective_type="minimize",
    ...     algorithm_name="tpe", algorithm_settings={"random_state": 0},
    ...     max_trial_count=40, parallel_trial_count=1, mode="in-process")
    >>> result.best_value < 1.0
    True

``mode="process"`` (the default) runs the same experiment on the control plane, each trial a Job
(see `TuningClient.tune`); follow it with `TuningClient.wait_for_experiment_condition` and read
the best trial with `TuningClient.get_optimal_hyperparameters`, as with Katib's ``KatibClient``.

Names:
    `TuningClient`: ``tune``, ``get_experiment``, ``list_experiments``, ``list_trials``,
    ``wait_for_experiment_condition``, ``get_optimal_hyperparameters``, ``delete_experiment``.
    `search`: ``double``, ``int``, ``categorical``.
    `report_metrics`: report from inside a trial (either mode).
    `TuningResult`, `TrialResult`: what an in-process run returns; `OptimalTrial`: the best trial.
    `ExperimentFailedError`, `TrialStopped`.
"""

from __future__ import annotations

from trimaran.sdk import search
from trimaran.sdk._metrics import TrialStopped, report_metrics
from trimaran.sdk._results import ExperimentFailedError, OptimalTrial, TrialResult, TuningResult
from trimaran.sdk.client import TuningClient

__all__ = [
    "ExperimentFailedError",
    "OptimalTrial",
    "TrialResult",
    "TrialStopped",
    "TuningClient",
    "TuningResult",
    "report_metrics",
    "search",
]
