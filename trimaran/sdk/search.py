"""Search-space helpers, as ``kubeflow.katib.search``: each returns one Katib ``parameters[]`` entry.

The entry is a plain dict (``parameterType`` and ``feasibleSpace``, every value a string, as the
Experiment stores it); `TuningClient.tune` adds the ``name`` from the key of its ``parameters``
argument. Beyond Katib's SDK, ``double`` and ``int`` take ``log=True`` (``distribution:
logUniform``), and ``categorical`` remembers the Python values it was given, so the objective
receives ``64``, not ``"64"``.

    >>> from trimaran.sdk import search
    >>> search.double(1e-4, 1e-1, log=True)
    {'parameterType': 'double', 'feasibleSpace': {'min': '0.0001', 'max': '0.1', 'distribution': 'logUniform'}}
    >>> search.int(1, 8, step=2)
    {'parameterType': 'int', 'feasibleSpace': {'min': '1', 'max': '8', 'step': '2'}}
    >>> search.categorical(["adam", "sgd"])
    {'parameterType': 'categorical', 'feasibleSpace': {'list': ['adam', 'sgd']}}
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ParameterSpec", "categorical", "double", "int", "to_python"]

_int = builtins.int


class ParameterSpec(dict):
    """A Katib ``parameters[]`` entry without its name: ``{"parameterType", "feasibleSpace"}``.

    A dict, so it prints and compares as the manifest does. ``choices`` holds the Python values of a
    categorical parameter, in the order of ``feasibleSpace.list`` (None for double and int).
    """

    choices: tuple[Any, ...] | None = None

    def python_value(self, text: str) -> Any:
        """The value the objective receives for the Katib string ``text``."""
        return to_python(self["parameterType"], text, self._lookup())

    def _lookup(self) -> dict[str, Any] | None:
        if self.choices is None:
            return None
        return dict(zip(self["feasibleSpace"]["list"], self.choices, strict=True))


def _number(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (_int, float)):
        raise TypeError(f"{what} must be a number, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    return str(value)


def _bounds(kind: str, lo: Any, hi: Any, step: Any, log: bool) -> dict[str, str]:
    space = {"min": _number(lo, f"search.{kind}: min"), "max": _number(hi, f"search.{kind}: max")}
    if lo > hi:
        raise ValueError(f"search.{kind}: min ({lo}) must not be greater than max ({hi})")
    if step is not None:
        space["step"] = _number(step, f"search.{kind}: step")
        if step <= 0:
            raise ValueError(f"search.{kind}: step must be positive, not {step}")
    if log:
        if lo <= 0:
            raise ValueError(f"search.{kind}: log=True needs min > 0, not {lo}")
        space["distribution"] = "logUniform"
    return space


def double(min: float, max: float, step: float | None = None, log: bool = False) -> ParameterSpec:
    """A float parameter in ``[min, max]``: Katib's ``parameterType: double``.

    Args:
        min: Lower bound.
        max: Upper bound.
        step: Optional grid step (grid search needs one for doubles); values are ``min + k*step``.
        log: Sample on a log scale (``distribution: logUniform``); ``min`` must be positive.

    Example:
        >>> double(0.0, 0.5, step=0.1)
        {'parameterType': 'double', 'feasibleSpace': {'min': '0.0', 'max': '0.5', 'step': '0.1'}}
    """
    return ParameterSpec(parameterType="double", feasibleSpace=_bounds("double", min, max, step, log))


def int(min: builtins.int, max: builtins.int, step: builtins.int | None = None,
        log: bool = False) -> ParameterSpec:
    """An integer parameter in ``[min, max]`` (both included): Katib's ``parameterType: int``.

    Args:
        min: Lower bound.
        max: Upper bound.
        step: Optional step; values are ``min, min+step, ...``.
        log: Sample on a log scale (``distribution: logUniform``); ``min`` must be positive.

    Example:
        >>> int(16, 256, log=True)
        {'parameterType': 'int', 'feasibleSpace': {'min': '16', 'max': '256', 'distribution': 'logUniform'}}
    """
    for what, v in (("min", min), ("max", max), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, _int)):
            raise TypeError(f"search.int: {what} must be an int, not {v!r}")
    return ParameterSpec(parameterType="int", feasibleSpace=_bounds("int", min, max, step, log))


def categorical(list: Iterable[Any]) -> ParameterSpec:
    """One of the values in ``list``: Katib's ``parameterType: categorical``.

    The manifest holds the values as strings; the objective receives the values themselves
    (``search.categorical([32, 64])`` passes the int ``64``). Values must be distinct as strings.

    Example:
        >>> spec = categorical([32, 64, "auto"])
        >>> spec["feasibleSpace"]["list"], spec.python_value("64")
        (['32', '64', 'auto'], 64)
    """
    values = tuple(list)
    if not values:
        raise ValueError("search.categorical: the list must not be empty")
    texts = [v if isinstance(v, str) else str(v) for v in values]
    if len(set(texts)) != len(texts):
        raise ValueError(f"search.categorical: values must be distinct as strings, got {texts}")
    spec = ParameterSpec(parameterType="categorical", feasibleSpace={"list": texts})
    spec.choices = values
    return spec


def to_python(parameter_type: str, text: str, lookup: Mapping[str, Any] | None = None) -> Any:
    """A Katib assignment string as the Python value the objective receives.

    ``double`` gives a float, ``int`` an int, ``discrete`` an int or float, ``categorical`` the
    original value from ``lookup`` (the string itself without one).

    Example:
        >>> to_python("double", "0.5"), to_python("int", "3"), to_python("discrete", "2.5")
        (0.5, 3, 2.5)
    """
    if parameter_type == "double":
        return float(text)
    if parameter_type == "int":
        return _int(text)
    if parameter_type == "discrete":
        try:
            return _int(text)
        except ValueError:
            return float(text)
    if lookup is not None:
        return lookup.get(text, text)
    return text
