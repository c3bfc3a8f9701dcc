"""Recurring runs' schedules: KFP's cron (six fields, seconds first, or the usual five) and intervals."""

from __future__ import annotations

__all__ = ["cron_errors"]


def cron_errors(expression: str) -> list[str]:
    """What is wrong with a cron expression; empty when it is valid."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return [f"must have 5 or 6 fields (seconds first), has {len(fields)}"]
    return []
