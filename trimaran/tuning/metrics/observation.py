"""One metric observation, and the per-trial summary Katib keeps in ``status.observation.metrics``
(katib.md §1.2, §1.4)."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

#: The value Katib reports for a metric that never appeared in the trial's output.
UNAVAILABLE = "unavailable"

Strategy = Literal["min", "max", "latest"]


@dataclass(frozen=True)
class Observation:
    """One value of one metric.

    ``step`` is the training step the value belongs to (see each parser for where it comes from);
    ``timestamp`` is seconds since the epoch, or None when the source carried no time (Katib's
    zero time), in which case the order of arrival is the order.
    """

    metric: str
    value: float
    step: int
    timestamp: float | None = None


def format_value(value: float) -> str:
    """The string Katib's status shows for a value: the shortest text that reads back to it.

    float32 values (every TensorBoard scalar) are shortened to their own precision so that 0.3
    written as float32 shows as ``0.3``, not ``0.30000001192092896``, as Katib's own collector
    (``str(numpy.float32)``) shows it.
    """
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    if value == int(value) and abs(value) < 1e16:
        return repr(float(value))
    try:
        packed = struct.pack("<f", value)
    except OverflowError:
        return repr(value)
    if struct.unpack("<f", packed)[0] == value:
        for precision in range(6, 10):
            text = f"{value:.{precision}g}"
            if struct.pack("<f", float(text)) == packed:
                return repr(float(text))
    return repr(value)


def summarize(observations: Iterable[Observation], metric_names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per metric, ``{"min", "max", "latest"}`` as strings, in ``metric_names`` order.

    A metric that never appeared gets ``"unavailable"`` for all three (Katib does this for the
    objective; giving it to every requested metric keeps the status shape uniform). ``latest`` is
    the last observation in the order given (callers pass arrival order). NaN values count as
    ``latest`` but not for min/max, since comparisons with NaN would make min/max depend on order;
    a metric seen only as NaN has min/max ``"nan"``.
    """
    wanted = set(metric_names)
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    latest: dict[str, float] = {}
    for obs in observations:
        if obs.metric not in wanted:
            continue
        value = float(obs.value)
        latest[obs.metric] = value
        if math.isnan(value):
            continue
        if obs.metric not in lows or value < lows[obs.metric]:
            lows[obs.metric] = value
        if obs.metric not in highs or value > highs[obs.metric]:
            highs[obs.metric] = value
    out: dict[str, dict[str, str]] = {}
    for name in metric_names:
        if name not in latest:
            out[name] = {"min": UNAVAILABLE, "max": UNAVAILABLE, "latest": UNAVAILABLE}
            continue
        last = format_value(latest[name])
        out[name] = {
            "min": format_value(lows[name]) if name in lows else last,
            "max": format_value(highs[name]) if name in highs else last,
            "latest": last,
        }
    return out


def objective_value(summary: dict[str, dict[str, str]], name: str, strategy: Strategy) -> float | None:
    """The value that ranks the trial, per Katib's ``getObjectiveMetricValue``.

    ``min`` reads ``min`` and falls back to ``latest`` when ``min`` is ``"unavailable"``; likewise
    ``max``; ``latest`` reads ``latest``. None when the metric is missing or the chosen string is
    not a number (``"unavailable"``).
    """
    if strategy not in ("min", "max", "latest"):
        raise ValueError(f"unknown metric strategy {strategy!r}: expected min, max or latest")
    entry = summary.get(name)
    if not entry:
        return None
    text = entry.get(strategy, UNAVAILABLE)
    if strategy != "latest" and text == UNAVAILABLE:
        text = entry.get("latest", UNAVAILABLE)
    try:
        return float(text)
    except (TypeError, ValueError):
        return None
