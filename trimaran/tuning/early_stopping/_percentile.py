"""``medianstop``: Katib's median stopping rule, as a percentile rule at 50% (like Optuna's pruners)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from trimaran.tuning._settings import Setting, SettingsSchema, integer
from trimaran.tuning._trial import TrialRecord, normalize_objective
from trimaran.tuning.early_stopping._base import EarlyStopper, finite_reports

__all__ = ["MedianStopper", "PercentileStopper", "percentile"]

_SETTINGS = SettingsSchema(
    Setting("min_trials_required", integer(1), 3, doc="succeeded trials needed before any trial is stopped"),
    Setting("start_step", integer(1), 4, doc="reports a trial makes before it can be stopped"),
)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation (NumPy's default method)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _ordinal(q: float) -> str:
    if q == 50:
        return "the median"
    n = int(q) if float(q).is_integer() else q
    suffix = "th" if isinstance(n, float) or 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"the {n}{suffix} percentile"


class PercentileStopper(EarlyStopper):
    """Stop a trial whose best value so far is worse than a percentile of its finished peers.

    The rule, checked whenever the trial reports (its latest report at step s):

    1. The trial must have made at least ``start_step`` reports.
    2. Its peers are the **succeeded** trials with a report at or before step s; each contributes
       the **running average** of its values up to step s. At least ``min_trials_required``
       peers are needed.
    3. The threshold is the ``percentile``-th percentile of those averages for minimize, and the
       (100 - ``percentile``)-th for maximize, as in Optuna's PercentilePruner: ``percentile=25``
       lets only trials in the best quarter continue, in both directions.
    4. The trial stops when its best value so far (lowest for minimize, highest for maximize) is
       strictly worse than the threshold.

    Args:
        settings: ``min_trials_required`` (int >= 1, default 3) and ``start_step`` (int >= 1,
            default 4), Katib's medianstop settings.
        percentile: In (0, 100): the share of trials, best first, that may continue; 50 is the
            median.

    Example:
        >>> from trimaran.tuning import TrialRecord
        >>> done = [TrialRecord(f"t{i}", {}, "succeeded", 0.9, intermediate=[(1, 0.7), (2, 0.8)])
        ...         for i in range(3)]
        >>> me = TrialRecord("me", {}, "running", intermediate=[(1, 0.5), (2, 0.6)])
        >>> PercentileStopper({"start_step": "2"}, percentile=50).should_stop(me, done, "maximize",
        ...                                                                    metric_name="accuracy")
        'accuracy 0.6 at step 2 is below the median 0.75 of 3 completed trials at step 2'
    """

    name = "percentile"
    settings_schema = _SETTINGS

    def __init__(self, settings: Mapping[str, str] | None = None, *, percentile: float = 50.0) -> None:
        super().__init__(settings)
        if not 0.0 < percentile < 100.0:
            raise ValueError(f"percentile must be in (0, 100), got {percentile}")
        self.percentile = percentile

    def should_stop(self, trial: TrialRecord, others: Sequence[TrialRecord], objective_type: str, *,
                    metric_name: str = "objective") -> str | None:
        (direction,) = normalize_objective(objective_type)
        if trial.finished:
            return None
        reports = finite_reports(trial)
        if len(reports) < self.settings["start_step"]:
            return None
        step = reports[-1][0]
        values = [v for _, v in reports]
        maximize = direction == "maximize"
        best = max(values) if maximize else min(values)
        averages = []
        for other in others:
            if other.state != "succeeded" or other.name == trial.name:
                continue
            upto = [v for s, v in finite_reports(other) if s <= step]
            if upto:
                averages.append(sum(upto) / len(upto))
        if len(averages) < self.settings["min_trials_required"]:
            return None
        q = 100.0 - self.percentile if maximize else self.percentile
        threshold = percentile(averages, q)
        if (best < threshold) if maximize else (best > threshold):
            side = "below" if maximize else "above"
            return (f"{metric_name} {best:.6g} at step {step} is {side} {_ordinal(q)} "
                    f"{threshold:.6g} of {len(averages)} completed trials at step {step}")
        return None


class MedianStopper(PercentileStopper):
    """Katib's ``medianstop``: `PercentileStopper` at the 50th percentile.

    Katib's settings and defaults: ``min_trials_required`` 3, ``start_step`` 4. Its rule, per the
    Katib docs and Google Vizier: stop a trial whose best objective value by step s is worse than
    the median of the running averages of the completed trials' objective values up to step s.

    How it differs from Katib's code (katib.md 2.11): Katib's service averages the *first
    start_step* values of each succeeded trial and takes the **mean** of those averages (not the
    median), attaches that number as a rule to trials created afterwards, and the metrics
    collector compares once, at the start_step-th report. Here the median is used (as documented),
    the averages are taken up to the step being judged, and the check repeats at every report from
    the start_step-th on (Vizier's rule), so a trial that falls behind later is stopped too. At the
    start_step-th report of a trial whose peers report at the same steps, the two agree except for
    mean versus median.

    Example:
        >>> from trimaran.tuning.early_stopping import get_early_stopper
        >>> get_early_stopper("medianstop", {"min_trials_required": "2"}).settings
        {'min_trials_required': 2, 'start_step': 4}
    """

    name = "medianstop"

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        super().__init__(settings, percentile=50.0)
