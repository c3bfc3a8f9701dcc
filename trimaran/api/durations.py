"""Go-style single-unit durations, as Knative annotations and kubectl's ``--timeout`` write them.

A module of its own, without pydantic, so that the CLI's fast verbs can read ``--timeout``."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?")


def parse_duration(text: str) -> float:
    """A Go-style single-unit duration (``500ms``, ``6s``, ``2m``, ``1h``) or bare seconds → seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"invalid duration {text!r}: use e.g. 30s, 500ms, 5m")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]
