"""Shared pieces of the search-algorithm tests: spaces, a controller-like loop, validity checks."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal

from trimaran.tuning import SearchSpace, TrialRecord
from trimaran.tuning.algorithms import Algorithm

MIXED = SearchSpace.from_parameters([
    {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "-5", "max": "10"}},
    {"name": "y", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1.5", "step": "0.1"}},
    {"name": "lr", "parameterType": "double",
     "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
    {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "9", "step": "2"}},
    {"name": "units", "parameterType": "int",
     "feasibleSpace": {"min": "8", "max": "512", "distribution": "logUniform"}},
    {"name": "opt", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam", "rmsprop"]}},
    {"name": "batch", "parameterType": "discrete", "feasibleSpace": {"list": ["16", "32", "64"]}},
])

_INT = re.compile(r"-?\d+")


def check_point(space: SearchSpace, assignment: dict[str, str]) -> None:
    """Assert that an assignment is a valid point of ``space``, written as Katib writes it."""
    assert list(assignment) == list(space.names), assignment
    for p in space:
        text = assignment[p.name]
        assert isinstance(text, str)
        if p.type in ("categorical", "discrete"):
            assert text in p.choices, (p.name, text)
            continue
        value = float(text)
        assert float(p.min) <= value <= float(p.max), (p.name, text)
        if p.type == "int":
            assert _INT.fullmatch(text), f"int written as {text!r}"
            if p.step and p.distribution != "logUniform":
                assert (int(text) - int(p.min)) % int(p.step) == 0, (p.name, text)
        elif p.step and p.distribution != "logUniform":
            k = (Decimal(text) - Decimal(p.min)) / Decimal(p.step)
            assert k == k.to_integral_value(), f"{p.name}={text} is off the {p.step} step"
        assert p.encode(text) is not None, (p.name, text)


def objective(assignment: dict[str, str]) -> float:
    """A deterministic objective over `MIXED` (any numeric parameters are used, others ignored)."""
    total = 0.0
    for name, text in assignment.items():
        try:
            v = float(text)
        except ValueError:
            total += 0.5 * (text != "adam")
            continue
        total += (math.log10(v) + 2.5) ** 2 if name == "lr" else ((v - 1.0) / 5.0) ** 2
    return total


def drive(algorithm: Algorithm, space: SearchSpace, n: int, *, batch: int = 1, objective_type: str = "minimize",
          f: Callable[[dict[str, str]], float] = objective,
          fail: Callable[[int], bool] = lambda i: False) -> list[TrialRecord]:
    """Run ``n`` trials the way the controller does: suggest ``batch``, create, finish, repeat.

    Trials of one batch finish in reverse order (the last one first), so the stored list has
    running trials ahead of finished ones, and trial i fails when ``fail(i)``.
    """
    trials: list[TrialRecord] = []
    while len(trials) < n:
        got = algorithm.suggest(space, trials, objective_type, min(batch, n - len(trials))).assignments
        if not got:
            break
        start = len(trials)
        for a in got:
            trials.append(TrialRecord(f"trial-{len(trials):04d}", a, "running"))
        for i in range(len(trials) - 1, start - 1, -1):
            t = trials[i]
            if fail(i):
                trials[i] = TrialRecord(t.name, t.assignments, "failed")
            else:
                trials[i] = TrialRecord(t.name, t.assignments, "succeeded", f(t.assignments))
    return trials


def finished(trial: TrialRecord, value: float, state: str = "succeeded",
             intermediate: Sequence[tuple[int, float]] = ()) -> TrialRecord:
    """A copy of ``trial`` with an outcome."""
    return TrialRecord(trial.name, trial.assignments, state, value, intermediate=intermediate)  # type: ignore[arg-type]
