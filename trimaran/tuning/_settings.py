"""Declarative ``algorithmSettings`` schemas: each algorithm lists its settings by Katib's names.

Katib passes every setting as a ``{name, value}`` pair of strings. An algorithm declares a
`SettingsSchema` of `Setting` entries, and `SettingsSchema.parse` turns the raw strings into typed
values, rejecting unknown names (as Katib's hyperopt, optuna, skopt and medianstop services do)
with a message that lists the names the algorithm knows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trimaran.tuning.errors import SettingsError

__all__ = ["Setting", "SettingsSchema", "choice", "integer", "normalize_settings", "number", "text"]

Parser = Callable[[str], Any]


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    """A parser for whole numbers in ``[minimum, maximum]`` ("3" and "3.0" are both 3)."""

    def parse(raw: str) -> int:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("must be an integer") from None
        if not value.is_integer():
            raise ValueError("must be an integer")
        out = int(value)
        if minimum is not None and out < minimum:
            raise ValueError(f"must be an integer >= {minimum}")
        if maximum is not None and out > maximum:
            raise ValueError(f"must be an integer <= {maximum}")
        return out

    return parse


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    min_inclusive: bool = True,
    max_inclusive: bool = True,
) -> Parser:
    """A parser for finite floats within the given bounds."""

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("must be a number") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        low_ok = minimum is None or (value >= minimum if min_inclusive else value > minimum)
        high_ok = maximum is None or (value <= maximum if max_inclusive else value < maximum)
        if not (low_ok and high_ok):
            lo = "" if minimum is None else f"{minimum} {'<=' if min_inclusive else '<'} "
            hi = "" if maximum is None else f" {'<=' if max_inclusive else '<'} {maximum}"
            raise ValueError(f"must be a number with {lo}value{hi}")
        return value

    return parse


def choice(*options: str) -> Parser:
    """A parser accepting one of ``options`` exactly as written (Katib compares case-sensitively)."""

    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError("must be one of " + ", ".join(options))
        return raw

    return parse


def text(raw: str) -> str:
    """A parser for a non-empty string."""
    if not raw.strip():
        raise ValueError("must not be empty")
    return raw


@dataclass(frozen=True)
class Setting:
    """One named setting.

    Args:
        name: Katib's name for it, e.g. ``n_startup_trials``.
        parse: Turns the string into a typed value; raises `ValueError` with a short phrase
            ("must be an integer >= 0") when the string is not acceptable.
        default: The value when the manifest does not set it (``None``: unset).
        required: Whether the manifest must set it (Katib's hyperband ``r_l``).
        doc: One line for error messages and documentation.
    """

    name: str
    parse: Parser
    default: Any = None
    required: bool = False
    doc: str = ""


class SettingsSchema:
    """The settings one algorithm accepts.

    Example:
        >>> schema = SettingsSchema(Setting("random_state", integer(0)))
        >>> schema.parse("random", {"random_state": "42"})
        {'random_state': 42}
        >>> schema.parse("random", {"seed": "1"})
        Traceback (most recent call last):
        ...
        trimaran.tuning.errors.SettingsError: algorithm "random": unknown setting "seed"; known settings: random_state

    Args:
        settings: The accepted settings.
        aliases: Other names accepted for a setting (``n_EI_candidates`` from Katib's hyperopt
            service for ``n_ei_candidates`` from its optuna service). Setting both is an error.
    """

    def __init__(self, *settings: Setting, aliases: Mapping[str, str] | None = None) -> None:
        self.settings = {s.name: s for s in settings}
        self.aliases = dict(aliases or {})

    @property
    def names(self) -> list[str]:
        """Every accepted name, aliases included, sorted."""
        return sorted([*self.settings, *self.aliases])

    def parse(self, algorithm: str, raw: Mapping[str, str], *, kind: str = "algorithm") -> dict[str, Any]:
        """Typed values for every setting (defaults filled in); raises `SettingsError`."""
        out: dict[str, Any] = {}
        seen_from: dict[str, str] = {}
        for given, value in raw.items():
            name = self.aliases.get(given, given)
            setting = self.settings.get(name)
            if setting is None:
                known = ", ".join(self.names) or "(none)"
                raise SettingsError(f'{kind} "{algorithm}": unknown setting "{given}"; known settings: {known}')
            if name in seen_from:
                raise SettingsError(
                    f'{kind} "{algorithm}": settings "{seen_from[name]}" and "{given}" are the same setting; '
                    "set only one")
            seen_from[name] = given
            try:
                out[name] = setting.parse(str(value).strip())
            except ValueError as err:
                raise SettingsError(
                    f'{kind} "{algorithm}": setting "{given}": invalid value "{value}": {err}') from None
        for name, setting in self.settings.items():
            if name in out:
                continue
            if setting.required:
                doc = f" ({setting.doc})" if setting.doc else ""
                raise SettingsError(f'{kind} "{algorithm}": setting "{name}" is required{doc}')
            out[name] = setting.default
        return out


def normalize_settings(settings: Mapping[str, Any] | Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    """Katib's ``[{name, value}]`` list or a plain mapping, as a ``{name: str(value)}`` dict."""
    if settings is None:
        return {}
    if isinstance(settings, Mapping):
        return {str(k): str(v) for k, v in settings.items()}
    out: dict[str, str] = {}
    for item in settings:
        name = str(item.get("name", ""))
        if name in out:
            raise SettingsError(f'setting "{name}" is given twice')
        out[name] = str(item.get("value", ""))
    return out
