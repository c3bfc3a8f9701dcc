"""``asha``: asynchronous successive halving on the step axis."""

from __future__ import annotations

import math
from collections.abc import Sequence

from trimaran.tuning._settings import Setting, SettingsSchema, integer, number
from trimaran.tuning._trial import TrialRecord, normalize_objective
from trimaran.tuning.early_stopping._base import EarlyStopper, finite_reports

__all__ = ["AshaStopper"]

_EPS = 1e-9


class AshaStopper(EarlyStopper):
    """Asynchronous successive halving (Li et al., MLSys 2020) as an early-stopping rule.

    Not a Katib algorithm (Katib only has ``medianstop``). Rungs sit on the step axis at
    ``min_resource * reduction_factor ** (min_early_stopping_rate + k)`` for k = 0, 1, ...
    A trial's value at a rung is its first report at or after the rung's step. A running trial is
    judged at the highest rung it has reached, against every other trial (any state) that has
    reached that rung: it continues while it ranks in the top ``max(1, floor(n / reduction_factor))``
    of those n trials (itself included), and stops otherwise.

    As in ASHA, nobody waits for a rung to fill: the first trial to reach a rung always continues.
    Unlike Optuna's SuccessiveHalvingPruner, which records a verdict the first time a trial reaches
    a rung, this rule is a pure function of the stored reports and cannot remember one; a trial is
    re-judged at its highest rung at each report, against the trials that have reached it since,
    until it reaches the next rung. So it can be stopped a little later than ASHA would have
    promoted it, never earlier.

    Settings:
        min_resource: Step of the first rung (> 0, default 1).
        reduction_factor: eta, the promotion ratio (> 1, default 3; ``eta`` is accepted too).
        min_early_stopping_rate: s, which shifts the first rung to ``min_resource * eta**s``
            (int >= 0, default 0).

    Example:
        >>> from trimaran.tuning import TrialRecord
        >>> peers = [TrialRecord(f"t{i}", {}, "running", intermediate=[(1, v)]) for i, v in enumerate([0.9, 0.8])]
        >>> me = TrialRecord("me", {}, "running", intermediate=[(1, 0.5)])
        >>> AshaStopper({}).should_stop(me, peers, "maximize", metric_name="accuracy")
        'accuracy 0.5 at rung 0 (step 1) ranks 3 of the 3 trials that reached it; only the best 1 continue'
    """

    name = "asha"
    settings_schema = SettingsSchema(
        Setting("min_resource", number(0, min_inclusive=False), 1.0, doc="step of the first rung"),
        Setting("reduction_factor", number(1, min_inclusive=False), 3.0, doc="promotion ratio eta"),
        Setting("min_early_stopping_rate", integer(0), 0, doc="rung offset s"),
        aliases={"eta": "reduction_factor"},
    )

    def rung_step(self, k: int) -> float:
        """The step at which rung ``k`` sits."""
        s = self.settings
        return s["min_resource"] * s["reduction_factor"] ** (s["min_early_stopping_rate"] + k)

    def should_stop(self, trial: TrialRecord, others: Sequence[TrialRecord], objective_type: str, *,
                    metric_name: str = "objective") -> str | None:
        (direction,) = normalize_objective(objective_type)
        if trial.finished:
            return None
        reports = finite_reports(trial)
        if not reports:
            return None
        latest = max(s for s, _ in reports)
        k = -1
        while self.rung_step(k + 1) <= latest + _EPS:
            k += 1
        if k < 0:
            return None
        rung = self.rung_step(k)
        mine = _rung_value(reports, rung)
        assert mine is not None  # the trial has a report at or after the rung step
        sign = -1.0 if direction == "maximize" else 1.0
        better = 0
        n = 1
        for other in others:
            if other.name == trial.name:
                continue
            value = _rung_value(finite_reports(other), rung)
            if value is None:
                continue
            n += 1
            if sign * value < sign * mine:
                better += 1
        keep = max(1, math.floor(n / self.settings["reduction_factor"] + _EPS))
        if better < keep:
            return None
        step = int(rung) if float(rung).is_integer() else rung
        return (f"{metric_name} {mine:.6g} at rung {k} (step {step}) ranks {better + 1} of the {n} trials "
                f"that reached it; only the best {keep} continue")


def _rung_value(reports: list[tuple[int, float]], rung: float) -> float | None:
    for s, v in reports:
        if s >= rung - _EPS:
            return v
    return None
