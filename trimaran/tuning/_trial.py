"""What the tuner knows about a trial: `TrialRecord`, plain data read from the store.

The algorithms and early-stopping rules take lists of these and nothing else, so their output is
a function of the stored trials alone: a control plane that restarts rebuilds the same state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FINISHED_STATES",
    "ObjectiveType",
    "TrialRecord",
    "TrialState",
    "normalize_objective",
    "objective_values",
    "pareto_front",
]

TrialState = Literal["running", "succeeded", "failed", "early_stopped", "metrics_unavailable", "killed"]
ObjectiveType = Literal["minimize", "maximize"]

_STATES = frozenset(("running", "succeeded", "failed", "early_stopped", "metrics_unavailable", "killed"))
FINISHED_STATES = _STATES - {"running"}


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """One stored trial, as the search algorithms see it.

    Example:
        >>> TrialRecord("exp-abc12345", {"lr": "0.01"}, "succeeded", value=0.93,
        ...             intermediate=[(1, 0.71), (2, 0.88)])  # doctest: +ELLIPSIS
        TrialRecord(name='exp-abc12345', ...)

    Args:
        name: The Trial's name (unique within the experiment).
        assignments: Parameter name to Katib string, as the trial received them.
        state: ``running`` (anything not finished), ``succeeded``, ``failed``, ``early_stopped``,
            ``metrics_unavailable`` or ``killed``.
        value: The objective metric's value under its metricStrategy (min, max or latest);
            None while running or when unavailable.
        values: For multi-objective tuning, one value per objective, in the order of the objective
            types passed to the algorithm.
        intermediate: ``(step, value)`` reports of the objective metric, in report order.
        labels: The Trial's labels; algorithms that place a trial within a scheme of their own
            (pbt's generation, member and parent) read it back from here.
    """

    name: str
    assignments: Mapping[str, str]
    state: TrialState = "running"
    value: float | None = None
    values: Sequence[float] | None = None
    intermediate: Sequence[tuple[int, float]] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state not in _STATES:
            raise ValueError(f"trial {self.name}: unknown state {self.state!r}; expected one of "
                             + ", ".join(sorted(_STATES)))

    @property
    def finished(self) -> bool:
        """Whether the trial has ended, whatever the outcome."""
        return self.state != "running"


def normalize_objective(objective: str | Sequence[str]) -> tuple[str, ...]:
    """Objective types as a tuple (one per objective); raises `ValueError` for anything else."""
    types = (objective,) if isinstance(objective, str) else tuple(objective)
    if not types:
        raise ValueError("objective: at least one objective type (minimize or maximize) is needed")
    for t in types:
        if t not in ("minimize", "maximize"):
            raise ValueError(f'objective type "{t}": must be "minimize" or "maximize"')
    return types


def objective_values(record: TrialRecord, n_objectives: int) -> tuple[float, ...] | None:
    """The record's finite objective values, or None when it has none to rank by.

    Single-objective records carry ``value`` (or a one-element ``values``); multi-objective ones
    ``values`` of the right length. NaN and infinities count as missing.
    """
    if n_objectives == 1:
        v = record.value
        if v is None and record.values is not None and len(record.values) == 1:
            v = record.values[0]
        if v is None or not math.isfinite(v):
            return None
        return (float(v),)
    vals = record.values
    if vals is None or len(vals) != n_objectives or not all(math.isfinite(x) for x in vals):
        return None
    return tuple(float(x) for x in vals)


def pareto_front(trials: Sequence[TrialRecord], objectives: str | Sequence[str]) -> list[TrialRecord]:
    """The succeeded trials that no other succeeded trial dominates, in their stored order.

    A trial dominates another when it is at least as good in every objective and better in one.
    With one objective this is the best trial (every trial tied for best).

    Example:
        >>> ts = [TrialRecord("a", {}, "succeeded", values=[1.0, 4.0]),
        ...       TrialRecord("b", {}, "succeeded", values=[2.0, 2.0]),
        ...       TrialRecord("c", {}, "succeeded", values=[3.0, 3.0])]
        >>> [t.name for t in pareto_front(ts, ["minimize", "minimize"])]
        ['a', 'b']

    Args:
        trials: Stored trials; only succeeded ones with finite values take part.
        objectives: ``minimize``/``maximize`` per objective, matching ``TrialRecord.values``.
    """
    types = normalize_objective(objectives)
    signs = [1.0 if t == "minimize" else -1.0 for t in types]
    scored: list[tuple[TrialRecord, tuple[float, ...]]] = []
    for t in trials:
        if t.state != "succeeded":
            continue
        vals = objective_values(t, len(types))
        if vals is not None:
            scored.append((t, tuple(s * v for s, v in zip(signs, vals, strict=True))))
    front = []
    for t, a in scored:
        dominated = False
        for _, b in scored:
            pairs = list(zip(b, a, strict=True))
            if b is not a and all(x <= y for x, y in pairs) and any(x < y for x, y in pairs):
                dominated = True
                break
        if not dominated:
            front.append(t)
    return front
