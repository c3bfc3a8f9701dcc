"""What an in-process tuning run returns: `TuningResult` and its `TrialResult` rows.

Both can be shown as the Katib objects a control plane would store (`TuningResult.experiment`,
`TrialResult.trial`), so `TuningClient.get_experiment`, `list_trials` and
`get_optimal_hyperparameters` answer the same shapes for either mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trimaran.tuning._labels import EXPERIMENT_LABEL, TRIAL_LABEL
from trimaran.tuning.metrics.observation import Observation, summarize

__all__ = ["ExperimentFailedError", "OptimalTrial", "TrialResult", "TuningResult"]



class OptimalTrial(dict):
    """The best trial: a dict ``{"name", "parameters", "metrics"}`` with typed parameters, that
    also answers KatibClient's ``V1beta1OptimalTrial`` attributes, so code written for
    ``kubeflow.katib`` reads it unchanged.

    Example:
        >>> best = OptimalTrial("exp-1", {"lr": 0.01}, {"lr": "0.01"},
        ...                     [{"name": "loss", "min": "0.1", "max": "0.9", "latest": "0.1"}])
        >>> best["parameters"], best.best_trial_name, best.parameter_assignments
        ({'lr': 0.01}, 'exp-1', [{'name': 'lr', 'value': '0.01'}])
        >>> best.observation["metrics"][0]["latest"]
        '0.1'
    """

    def __init__(self, name: str, parameters: dict[str, Any], assignments: dict[str, str],
                 metrics: list[dict[str, str]]) -> None:
        super().__init__(name=name, parameters=parameters, metrics=metrics)
        self._assignments = dict(assignments)

    @property
    def best_trial_name(self) -> str:
        """Katib's ``bestTrialName``."""
        return self["name"]

    @property
    def parameter_assignments(self) -> list[dict[str, str]]:
        """Katib's ``parameterAssignments``: ``[{"name", "value"}]``, values as Katib strings."""
        return [{"name": k, "value": v} for k, v in self._assignments.items()]

    @property
    def observation(self) -> dict[str, Any]:
        """Katib's ``observation``: ``{"metrics": [{"name", "min", "max", "latest"}]}``."""
        return {"metrics": self["metrics"]}


@dataclass(eq=False)
class TrialResult:
    """One in-process trial.

    Attributes:
        name: ``<experiment>-<index>``, zero-padded, in creation order.
        parameters: What the objective received (typed values, fixed parameters included).
        assignments: The searched parameters as Katib strings (the Trial's ``parameterAssignments``).
        state: Katib's condition: ``Succeeded``, ``Failed``, ``EarlyStopped``, ``MetricsUnavailable``
            or ``Killed`` (still running when the experiment ended).
        value: The objective metric under its strategy (min when minimizing, max when maximizing);
            None when it was never reported.
        observations: Every reported value as ``(metric, step, value)``, in report order.
        message: Why the trial ended when it did not succeed (a traceback for ``Failed``).
        duration: Seconds the objective ran.
    """

    name: str
    parameters: dict[str, Any]
    assignments: dict[str, str]
    state: str = "Running"
    value: float | None = None
    observations: list[tuple[str, int, float]] = field(default_factory=list)
    message: str = ""
    duration: float = 0.0
    metric_names: Sequence[str] = field(default=(), repr=False)

    @property
    def metrics(self) -> list[dict[str, str]]:
        """Katib's ``status.observation.metrics``: ``[{"name", "min", "max", "latest"}]`` as strings."""
        obs = [Observation(m, v, s) for m, s, v in self.observations]
        return [{"name": n, **values} for n, values in summarize(obs, list(self.metric_names)).items()]

    def trial(self, namespace: str, experiment: str) -> dict[str, Any]:
        """The Trial object a control plane would store for this trial."""
        labels = {EXPERIMENT_LABEL: experiment, TRIAL_LABEL: self.name}
        status: dict[str, Any] = {"conditions": [{"type": self.state, "status": "True",
                                                 "reason": f"Trial{self.state}", "message": self.message}]}
        if self.state != "Killed":
            status["observation"] = {"metrics": self.metrics}
        return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
                "metadata": {"name": self.name, "namespace": namespace, "labels": labels},
                "spec": {"parameterAssignments": [{"name": k, "value": v} for k, v in self.assignments.items()]},
                "status": status}


class ExperimentFailedError(RuntimeError):
    """The experiment ended Failed (too many failed trials), or did not reach the wanted condition.

    ``result`` holds the in-process `TuningResult` (None for an experiment on the control plane);
    ``experiment`` the Experiment object as last read.
    """

    def __init__(self, message: str, result: TuningResult | None = None,
                 experiment: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.experiment = experiment


@dataclass(eq=False)
class TuningResult:
    """The outcome of `TuningClient.tune` in mode ``in-process``.

    Attributes:
        name: The experiment's name.
        namespace: Its namespace (in-process results are kept per process, by namespace and name).
        condition: ``Succeeded`` or ``Failed``.
        reason: Katib's reason (``ExperimentMaxTrialsReached``, ``ExperimentGoalReached``,
            ``ExperimentSuggestionEndReached``, ``ExperimentFailed``).
        message: Katib's message for the reason.
        trials: Every trial, in creation order.
        best_trial: The trial with the best objective value (Katib's ``currentOptimalTrial``).
        spec: The Experiment's ``spec`` as validated (what mode ``process`` would apply, without
            the trial template).
        elapsed: Seconds the whole run took.
    """

    name: str
    namespace: str
    condition: str
    reason: str
    message: str
    trials: list[TrialResult]
    best_trial: TrialResult | None
    spec: dict[str, Any] = field(repr=False)
    elapsed: float = 0.0

    @property
    def best_parameters(self) -> dict[str, Any] | None:
        """The best trial's parameters, as the objective received them."""
        return None if self.best_trial is None else self.best_trial.parameters

    @property
    def best_value(self) -> float | None:
        """The best trial's objective value."""
        return None if self.best_trial is None else self.best_trial.value

    def optimal_hyperparameters(self) -> OptimalTrial | None:
        """What `TuningClient.get_optimal_hyperparameters` answers (an `OptimalTrial`), with the
        searched parameters only (as the Trial's ``parameterAssignments``), typed."""
        best = self.best_trial
        if best is None:
            return None
        return OptimalTrial(best.name, {k: best.parameters[k] for k in best.assignments}, best.assignments,
                            best.metrics)

    def experiment(self) -> dict[str, Any]:
        """The Experiment object (with Katib's status) a control plane would store."""
        counts = {"Succeeded": "trialsSucceeded", "Failed": "trialsFailed", "Killed": "trialsKilled",
                  "EarlyStopped": "trialsEarlyStopped", "MetricsUnavailable": "trialMetricsUnavailable"}
        lists = {"Succeeded": "succeededTrialList", "Failed": "failedTrialList", "Killed": "killedTrialList",
                 "EarlyStopped": "earlyStoppedTrialList", "MetricsUnavailable": "metricsUnavailableTrialList"}
        status: dict[str, Any] = {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "ExperimentCreated",
                 "message": "Experiment is created"},
                {"type": "Running", "status": "False", "reason": self.reason, "message": self.message},
                {"type": self.condition, "status": "True", "reason": self.reason, "message": self.message},
            ],
            "trials": len(self.trials),
        }
        for t in self.trials:
            if t.state in counts:
                status[counts[t.state]] = status.get(counts[t.state], 0) + 1
                status.setdefault(lists[t.state], []).append(t.name)
        best = self.best_trial
        if best is not None:
            status["currentOptimalTrial"] = {
                "bestTrialName": best.name,
                "parameterAssignments": [{"name": k, "value": v} for k, v in best.assignments.items()],
                "observation": {"metrics": best.metrics},
            }
        return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "annotations": {"sdk.trimaran.io/mode": "in-process"}},
                "spec": self.spec, "status": status}
