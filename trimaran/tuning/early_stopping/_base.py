"""The abstract early-stopping rule: a trial and its siblings in, a reason to stop (or None) out."""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from trimaran.tuning._settings import SettingsSchema
from trimaran.tuning._trial import TrialRecord

__all__ = ["EarlyStopper", "finite_reports"]


def finite_reports(trial: TrialRecord) -> list[tuple[int, float]]:
    """The trial's ``(step, value)`` reports with finite values, in report order."""
    return [(int(s), float(v)) for s, v in trial.intermediate if v is not None and math.isfinite(v)]


class EarlyStopper(abc.ABC):
    """An early-stopping rule by Katib's ``earlyStopping.algorithmName``.

    `should_stop` is a pure function of the records it is given: the controller calls it whenever a
    running trial reports new values, with every other trial of the experiment, and stops the
    trial (condition ``EarlyStopped``) when it returns a reason.

    Args:
        settings: Katib's ``earlyStopping.algorithmSettings`` as ``{name: value}`` strings.
    """

    name: ClassVar[str] = ""
    settings_schema: ClassVar[SettingsSchema] = SettingsSchema()

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.raw_settings: dict[str, str] = {str(k): str(v) for k, v in (settings or {}).items()}
        self.settings: dict[str, Any] = self.settings_schema.parse(self.name, self.raw_settings,
                                                                   kind="early stopping algorithm")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.raw_settings!r})"

    @abc.abstractmethod
    def should_stop(self, trial: TrialRecord, others: Sequence[TrialRecord], objective_type: str, *,
                    metric_name: str = "objective") -> str | None:
        """Why ``trial`` should stop now, in words for the trial's condition message, or None.

        Args:
            trial: The trial to judge; only running trials are ever stopped.
            others: Every other trial of the experiment, any state.
            objective_type: ``minimize`` or ``maximize``.
            metric_name: The objective metric's name, used in the message.
        """
