"""The stored trials of an experiment as the search algorithms and early-stopping rules read them.

Everything an algorithm knows is rebuilt from here on every call, so a restarted control plane
suggests exactly what it would have suggested before the crash.
"""

from __future__ import annotations

from collections.abc import Sequence

from trimaran.controllers.conditions import is_true
from trimaran.store import NotFound, Store
from trimaran.tuning import TrialRecord
from trimaran.tuning._labels import EXPERIMENT_LABEL
from trimaran.tuning.metrics import objective_value

# The order trials were created in (creation timestamps have whole seconds only).
SEQUENCE_ANNOTATION = "trimaran.io/sequence"

_STATES = {
    "Succeeded": "succeeded",
    "Failed": "failed",
    "EarlyStopped": "early_stopped",
    "MetricsUnavailable": "metrics_unavailable",
    "Killed": "killed",
}


def experiment_of(store: Store, trial: dict) -> dict | None:
    name = (trial["metadata"].get("labels") or {}).get(EXPERIMENT_LABEL)
    if not name:
        return None
    try:
        return store.get("Experiment", trial["metadata"]["namespace"], name)
    except NotFound:
        return None


def experiment_trials(store: Store, experiment: dict) -> list[dict]:
    """The experiment's trials in the order they were created; shared: read them, do not modify them.

    Listed on every pass of the experiment and of an early-stopping check, so the store hands back
    the objects it decoded before; decoding them all each time made a long experiment quadratic.
    """
    ns, name = experiment["metadata"]["namespace"], experiment["metadata"]["name"]
    trials = store.list("Trial", ns, label_selector={EXPERIMENT_LABEL: name}, shared=True)
    return sorted(trials, key=lambda t: int((t["metadata"].get("annotations") or {}).get(SEQUENCE_ANNOTATION, 0)))


def metric_value(observation: dict | None, metric: str, strategy: str) -> float | None:
    """Katib's rule: the trial's value of ``metric`` under its metricStrategy (min, max or latest)."""
    summary = {m["name"]: m for m in (observation or {}).get("metrics") or [] if "name" in m}
    return objective_value(summary, metric, strategy)


def strategy_for(spec: dict, metric: str) -> str:
    for s in spec["objective"].get("metricStrategies") or []:
        if s.get("name") == metric:
            return s.get("value", "latest")
    return "min" if spec["objective"]["type"] == "minimize" else "max"


MULTI_OBJECTIVE_ALGORITHMS = ("nsga2",)


def objectives(spec: dict) -> list[tuple[str, str]] | None:
    """The (metric, direction) pairs of a multi-objective experiment, else None.

    A Trimaran extension of Katib's single objective: with a multi-objective algorithm (``nsga2``)
    the objectives are ``objectiveMetricName`` then each of ``additionalMetricNames``; their
    directions come from the algorithm setting ``objective_types`` ("maximize,minimize", one per
    objective in that order; default: the experiment's ``type`` for all), and each trial is judged
    on every metric's latest value.
    """
    if spec["algorithm"]["algorithmName"] not in MULTI_OBJECTIVE_ALGORITHMS:
        return None
    metrics = [spec["objective"]["objectiveMetricName"], *(spec["objective"].get("additionalMetricNames") or [])]
    settings = {s["name"]: str(s["value"]) for s in spec["algorithm"].get("algorithmSettings") or []}
    raw = settings.get("objective_types")
    types = [t.strip() for t in raw.split(",")] if raw else [spec["objective"]["type"]] * len(metrics)
    if len(types) != len(metrics) or any(t not in ("minimize", "maximize") for t in types):
        raise ValueError(f"objective_types {raw!r} must give minimize or maximize for each of {metrics}")
    return list(zip(metrics, types, strict=True))


def trial_records(store: Store, experiment: dict, trials: list[dict] | None = None) -> list[TrialRecord]:
    """The experiment's trials as records; pass ``trials`` when the caller has just listed them."""
    spec = experiment["spec"]
    objective = spec["objective"]["objectiveMetricName"]
    strategy = strategy_for(spec, objective)
    if trials is None:
        trials = experiment_trials(store, experiment)
    multi = objectives(spec)
    curves = _Curves(store, experiment["metadata"]["namespace"], [t["metadata"]["name"] for t in trials], objective)
    records = []
    for trial in trials:
        status = trial.get("status") or {}
        state = next((v for k, v in _STATES.items() if is_true(status, k)), "running")
        assignments = {a["name"]: str(a["value"]) for a in trial["spec"].get("parameterAssignments") or []}
        value = metric_value(status.get("observation"), objective, strategy) if state != "running" else None
        values = None
        if multi and state == "succeeded":
            values = [metric_value(status.get("observation"), metric, "latest") for metric, _ in multi]
            if any(v is None for v in values):
                values = None
        records.append(TrialRecord(name=trial["metadata"]["name"], assignments=assignments, state=state,
                                   value=value, values=values, intermediate=_Curve(curves, trial["metadata"]["name"]),
                                   labels=dict(trial["metadata"].get("labels") or {})))
    return records


class _Curves:
    """The objective's reports of some trials, read in one query when an algorithm first looks at
    one (random search and grid never do, so their suggestions cost no query)."""

    def __init__(self, store: Store, namespace: str, trials: list[str], metric: str) -> None:
        self._query = (store, namespace, trials, metric)
        self._curves: dict[str, list[tuple[int, float]]] | None = None

    def of(self, trial: str) -> list[tuple[int, float]]:
        if self._curves is None:
            store, namespace, trials, metric = self._query
            curves: dict[str, list[tuple[int, float]]] = {}
            for row in store.list_observations(namespace, trials=trials, metric=metric):
                curves.setdefault(row["trial"], []).append((int(row["step"]), float(row["value"])))
            self._curves = curves
        return self._curves.get(trial, [])


class _Curve(Sequence):
    """One trial's ``(step, value)`` reports (``TrialRecord.intermediate``), read when first looked at."""

    __slots__ = ("_curves", "_trial")

    def __init__(self, curves: _Curves, trial: str) -> None:
        self._curves, self._trial = curves, trial

    def __getitem__(self, index):  # noqa: ANN001, ANN204 - Sequence's signature: an int or a slice
        return self._curves.of(self._trial)[index]

    def __len__(self) -> int:
        return len(self._curves.of(self._trial))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(self._curves.of(self._trial))
