"""Early-stopping rules by Katib's ``earlyStopping.algorithmName``; `get_early_stopper` picks one.

================  ================================================================================
name              rule
================  ================================================================================
``medianstop``    `MedianStopper`: Katib's median stopping rule (a `PercentileStopper` at 50%)
``asha``          `AshaStopper`: asynchronous successive halving on the step axis
================  ================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trimaran.tuning._settings import normalize_settings
from trimaran.tuning.early_stopping._asha import AshaStopper
from trimaran.tuning.early_stopping._base import EarlyStopper
from trimaran.tuning.early_stopping._percentile import MedianStopper, PercentileStopper, percentile
from trimaran.tuning.errors import UnknownAlgorithmError

__all__ = [
    "AshaStopper",
    "EarlyStopper",
    "MedianStopper",
    "PercentileStopper",
    "available_early_stoppers",
    "get_early_stopper",
    "percentile",
    "register_early_stopper",
]

_REGISTRY: dict[str, type[EarlyStopper]] = {}


def register_early_stopper(cls: type[EarlyStopper]) -> type[EarlyStopper]:
    """Make ``cls`` available to `get_early_stopper` under ``cls.name``."""
    other = _REGISTRY.get(cls.name)
    if other is not None and other is not cls:
        raise ValueError(f'early-stopping name "{cls.name}" is already registered by {other.__name__}')
    _REGISTRY[cls.name] = cls
    return cls


for _cls in (MedianStopper, AshaStopper):
    register_early_stopper(_cls)


def available_early_stoppers() -> list[str]:
    """Every name `get_early_stopper` accepts, sorted."""
    return sorted(_REGISTRY)


def get_early_stopper(name: str, settings: Mapping[str, Any] | list[Mapping[str, Any]] | None = None) -> EarlyStopper:
    """The early-stopping rule Katib calls ``name``, configured with its ``algorithmSettings``.

    Example:
        >>> get_early_stopper("medianstop", {"start_step": "5"})
        MedianStopper({'start_step': '5'})

    Raises:
        UnknownAlgorithmError: ``name`` is not known; the message lists the known names.
        SettingsError: a setting is unknown or invalid.
    """
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnknownAlgorithmError(f'unknown early stopping algorithm "{name}"; known: '
                                    + ", ".join(available_early_stoppers()))
    return cls(normalize_settings(settings))
