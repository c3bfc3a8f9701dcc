"""`report_metrics`: the push collector inside a trial process, an in-memory recorder in-process.

Inside a trial started by the control plane (mode ``process``, or any Experiment with
``metricsCollectorSpec.collector.kind: Push``) it posts to the control plane, exactly as
`trimaran.tuning.metrics.push.report_metrics`. While `TuningClient.tune` runs an objective in
the caller's process (mode ``in-process``), a context variable points at that trial's recorder
and the call records in memory; no environment or control plane is involved.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from trimaran.tuning.metrics import push

__all__ = ["TrialStopped", "report_metrics"]


class TrialStopped(BaseException):  # noqa: N818 (a signal like SystemExit, not an error)
    """Raised by `report_metrics` inside an in-process trial that must stop now: the early-stopping
    rule stopped it, or the experiment finished while it ran.

    It derives from BaseException, like SystemExit, so that an objective's ``except Exception``
    does not swallow it; the tuner catches it and records the trial as EarlyStopped or Killed.
    """

    def __init__(self, reason: str, state: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.state = state


class _Recorder(Protocol):
    def record(self, metrics: list[tuple[str, float]], step: int | None) -> None: ...


#: The in-process trial the current thread (or task) runs, if any.
CURRENT: ContextVar[_Recorder | None] = ContextVar("trimaran_sdk_trial", default=None)


def parse_metrics(metrics: Mapping[str, Any], step: int | None) -> list[tuple[str, float]]:
    """``(name, float)`` pairs, with the push collector's rules: numbers or numeric strings only."""
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"step must be a non-negative integer, not {step!r}")
    out = []
    for name, raw in metrics.items():
        if isinstance(raw, bool):
            raise ValueError(f"metric {name!r}: {raw!r} is not a number")
        if type(raw) is float:
            out.append((str(name), raw))
            continue
        try:
            out.append((str(name), float(raw)))
        except (TypeError, ValueError):
            raise ValueError(f"metric {name!r}: {raw!r} is not a number") from None
    return out


def report_metrics(metrics: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
    """Report metric values of the running trial (Katib's ``kubeflow.katib.report_metrics``).

    In a trial process the values go to the control plane (the ``Push`` collector); in an
    in-process trial they go to the tuner's recorder. Either way each metric gets one observation
    at ``step`` (with ``step=None`` each metric's reports are numbered 0, 1, 2, ...). The objective
    metric's values feed the early-stopping rule; in-process, a trial that must stop gets
    `TrialStopped` raised from this call.

    In-process, the trial is found through a context variable: call this from the objective's own
    thread (a thread the objective starts itself begins with an empty context; run its work with
    ``contextvars.copy_context().run`` to report from there).

    Example:
        >>> from trimaran.sdk import TuningClient, report_metrics, search
        >>> def objective(params):
        ...     for epoch in range(3):
        ...         report_metrics({"loss": (params["x"] - 1) ** 2 / (epoch + 1)}, step=epoch)
        >>> result = TuningClient().tune("curve", objective=objective, parameters={"x": search.double(0, 2)},
        ...                              max_trial_count=2, parallel_trial_count=1, mode="in-process")
        >>> [len(t.observations) for t in result.trials]
        [3, 3]

    Args:
        metrics: Metric name to number (numeric strings are accepted, as Katib's SDK does).
        step: The training step these values belong to, or None.
        **kwargs: Passed to the push helper in a trial process (``timeout``, ``environ``).

    Raises:
        ValueError: a value is not a number, or ``step`` is not a non-negative int.
        NotInTrialError: called outside any trial.
        ReportError: the control plane refused the values.
    """
    recorder = CURRENT.get()
    if recorder is None:
        push.report_metrics(metrics, step, **kwargs)
        return
    recorder.record(parse_metrics(metrics, step), step)


def as_number(value: Any) -> float | None:
    """An objective's return value as a metric value: ints, floats, NumPy/PyTorch scalars; else None."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(type(value), "__float__"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
