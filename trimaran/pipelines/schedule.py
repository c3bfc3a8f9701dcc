"""Recurring runs' schedules: KFP's cron (six fields, seconds first, or the usual five) and intervals.

Cron expressions are cronsim's (Vixie cron's rules, a sixth field for seconds first as KFP's
robfig/cron writes them); times are UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from cronsim import CronSim, CronSimError

__all__ = ["cron_errors", "latest_due", "next_fire", "parse_time"]

def cron_errors(expression: str) -> list[str]:
    """What is wrong with a cron expression; empty when it is valid."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return [f"must have 5 or 6 fields (seconds first), has {len(fields)}"]
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=timezone.utc))
    except CronSimError as exc:
        return [str(exc)]
    return []


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time (or Python's isoformat, as kfp.Client sends it) as an aware UTC datetime."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def next_fire(trigger: dict[str, Any], created: datetime, after: datetime | None) -> datetime | None:
    """The first fire time of ``trigger`` (a RecurringRun's ``spec.trigger``) later than ``after``
    (none yet: the first one); None when the schedule has ended.

    An interval schedule fires at its start (``startTime``, else ``created``) plus whole intervals;
    a cron schedule at its expression's times, from its start on.
    """
    periodic, cron = trigger.get("periodicSchedule"), trigger.get("cronSchedule")
    schedule = periodic or cron or {}
    start = parse_time(schedule.get("startTime")) or created
    end = parse_time(schedule.get("endTime"))
    if periodic:
        interval = timedelta(seconds=int(periodic["intervalSecond"]))
        if after is None or after < start:
            fire = start + interval
        else:
            fire = start + ((after - start) // interval + 1) * interval
    else:
        base = after if after is not None and after >= start else start - timedelta(seconds=1)
        # cronsim steps from `base` to the first matching time strictly after it (whole seconds).
        base = base.replace(microsecond=0)
        try:
            fire = next(CronSim(schedule["cron"], base))
        except StopIteration:
            return None
    if end is not None and fire > end:
        return None
    return fire


def latest_due(trigger: dict[str, Any], created: datetime, after: datetime | None, now: datetime
               ) -> datetime | None:
    """The last fire time later than ``after`` and not later than ``now`` (a schedule that does not
    catch up runs only that one of those it missed); None when none is due."""
    first = next_fire(trigger, created, after)
    if first is None or first > now:
        return None
    periodic = trigger.get("periodicSchedule")
    end = parse_time((periodic or trigger.get("cronSchedule") or {}).get("endTime"))
    limit = min(now, end) if end is not None else now
    if periodic:
        start = parse_time(periodic.get("startTime")) or created
        interval = timedelta(seconds=int(periodic["intervalSecond"]))
        return max(first, start + ((limit - start) // interval) * interval)
    # The newest cron time at or before the limit: cronsim steps backwards from just after it.
    latest = next(CronSim(trigger["cronSchedule"]["cron"], limit.replace(microsecond=0) + timedelta(seconds=1),
                          reverse=True))
    return max(first, latest)
