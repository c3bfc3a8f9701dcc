"""Errors of the search algorithms and early-stopping rules, worded so a person can fix the manifest.

All of them are `ValueError`s: each one means "this input is wrong", and says which field of the
Experiment to change (``spec.algorithm.algorithmSettings``, ``spec.parameters[i]``...).
"""

from __future__ import annotations

__all__ = ["SearchSpaceError", "SettingsError", "TuningError", "UnknownAlgorithmError"]


class TuningError(ValueError):
    """Base class: the Experiment asks for something the tuner cannot do."""


class SearchSpaceError(TuningError):
    """``spec.parameters`` is invalid, or does not suit the chosen algorithm."""


class SettingsError(TuningError):
    """An ``algorithmSettings`` entry is unknown, missing or has a bad value."""


class UnknownAlgorithmError(TuningError):
    """``algorithmName`` names no algorithm that Trimaran implements."""
