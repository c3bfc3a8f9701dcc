"""batch/v1 CronJob, defaulted and validated as kube-apiserver does, and its schedule.

A schedule is read as kube-controller-manager reads it, by robfig/cron's ``ParseStandard``: five
fields (minute, hour, day of month, month, day of week; names ``jan``/``mon`` in any case, ``?`` for
``*``, ``N/step`` for ``N-max/step``), the ``@yearly``... ``@hourly`` descriptors and ``@every
<duration>``, with robfig's error words, which kube-apiserver puts after ``spec.schedule: Invalid
value``. The times a parsed schedule fires at are cronsim's (the library recurring runs use), fed a
canonical expression of the parsed fields, so robfig's day rule holds: day of month and day of week
are ANDed when either is a bare ``*`` (a stepped ``*/2`` is not), else ORed; and robfig's way across
daylight saving (a time in the gap is skipped, one in the overlap fires twice).
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in batch.py.

import dataclasses
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from trimaran.api.batch import Job, JobSpec
from trimaran.api.errors import FieldError
from trimaran.api.meta import ApiModel, Int32, NonNegInt64, ObjectMeta, Resource
from trimaran.api.printers import AGE, PrinterColumn, age

__all__ = [
    "API_VERSION", "CRONJOB_COLUMNS", "MANUAL_INSTANTIATE_ANNOTATION", "SCHEDULED_TIMESTAMP_ANNOTATION", "CronJob",
    "CronSchedule", "load_time_zone", "local_time_zone", "parse_schedule",
]

API_VERSION = "batch/v1"
# On each Job the controller makes: its nominal time, RFC 3339 in the CronJob's time zone.
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
# On a Job `kubectl create job --from=cronjob/X` makes.
MANUAL_INSTANTIATE_ANNOTATION = "cronjob.kubernetes.io/instantiate"
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
# The controller appends "-<minutes since the epoch>" (11 characters) and a Job's name is a label value.
MAX_NAME_LENGTH = 52
_TIME_ZONE_PART = re.compile(r"[A-Za-z.\-_0-9+]{1,14}")

# robfig/cron's bounds per field, and the names it knows (lower case, matched case-insensitively).
_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_FIELDS = ((0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _DAYS))
_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                      "h": 3600.0}
_GO_DURATION_PART = re.compile(r"([0-9]*)(\.[0-9]*)?([^0-9.]*)")


def load_time_zone(name: str) -> tzinfo:
    """Go's ``time.LoadLocation``: ``""`` and ``UTC`` are UTC, else an IANA name.

    Raises:
        ValueError: with Go's words, ``unknown time zone NAME``.
    """
    if name in ("", "UTC"):
        return timezone.utc
    if name == "Local":
        return local_time_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name}") from None


def local_time_zone() -> tzinfo:
    """The zone of this machine, as Go's ``time.Local``: ``$TZ``, else ``/etc/localtime``'s, else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        try:
            target = os.path.realpath("/etc/localtime")
        except OSError:
            target = ""
        name = target.partition("/zoneinfo/")[2]
    try:
        return load_time_zone(name)
    except ValueError:
        return timezone.utc


@dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule: a cron expression in canonical form (cronsim's), or a constant interval."""

    zone: tzinfo
    expression: str = ""
    every: timedelta | None = None

    def next(self, after: datetime) -> datetime | None:
        """The first time after ``after`` (whole seconds) this schedule fires; None where robfig's
        ``Next`` gives the zero time (a day that never comes, such as February 30th)."""
        if self.every is not None:
            return after.replace(microsecond=0) + self.every
        try:
            # Six fields (robfig's seconds, always 0): cronsim then steps in absolute time across a
            # daylight-saving change, as robfig does (a time in the gap is skipped, one in the overlap
            # fires twice), rather than as Debian's cron, which it mimics for five fields.
            return next(CronSim("0 " + self.expression, after.astimezone(self.zone))).astimezone(timezone.utc)
        except (CronSimError, StopIteration):
            return None


def _atoi(text: str) -> int:
    """Go's ``strconv.Atoi`` with robfig's ``mustParseInt`` words."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax')
    number = int(text)
    if not -2**63 <= number < 2**63:
        raise ValueError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": value out of range')
    if number < 0:
        raise ValueError(f"negative number ({number}) not allowed: {text}")
    return number


def _int_or_name(text: str, names: dict[str, int] | None) -> int:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    return _atoi(text)


def _range(expr: str, low: int, high: int, names: dict[str, int] | None) -> tuple[set[int], bool]:
    """robfig's ``getRange``: the values of one comma-separated term and whether it is a bare star."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    star = False
    if low_and_high[0] in ("*", "?"):
        start, end, star = low, high, True
    else:
        start = _int_or_name(low_and_high[0], names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], names)
        else:
            raise ValueError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _atoi(range_and_step[1])
        if len(low_and_high) == 1:  # "N/step" is "N-max/step"
            end = high
        if step > 1:
            star = False
    else:
        raise ValueError(f"too many slashes: {expr}")
    if start < low:
        raise ValueError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise ValueError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise ValueError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise ValueError(f"step of range should be a positive number: {expr}")
    return set(range(start, end + 1, step)), star


def _go_duration(text: str) -> timedelta:
    """Go's ``time.ParseDuration``, with its words."""
    quoted = f'"{text}"'
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return timedelta(0)
    if not rest:
        raise ValueError(f"time: invalid duration {quoted}")
    total = 0.0
    while rest:
        match = _GO_DURATION_PART.match(rest)
        whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3)
        if not whole and len(fraction) <= 1:
            raise ValueError(f"time: invalid duration {quoted}")
        if not unit:
            raise ValueError(f"time: missing unit in duration {quoted}")
        if unit not in _GO_DURATION_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration {quoted}')
        total += float((whole or "0") + (fraction if len(fraction) > 1 else "")) * _GO_DURATION_UNITS[unit]
        rest = rest[match.end():]
    return timedelta(seconds=-total if negative else total)


def parse_schedule(spec: str, zone: tzinfo | None = None) -> CronSchedule:
    """robfig/cron's ``ParseStandard``: a ``TZ=``/``CRON_TZ=`` prefix, a descriptor, or five fields.

    ``zone`` is where the fields are read when no prefix names one (the controller's local zone).

    Raises:
        ValueError: the schedule is not valid, in robfig's words.
    """
    if not spec:
        raise ValueError("empty spec string")
    zone = zone or timezone.utc
    if spec.startswith(("TZ=", "CRON_TZ=")):
        space = spec.find(" ")
        name = spec[spec.index("=") + 1:space if space >= 0 else len(spec)]
        try:
            zone = load_time_zone(name)
        except ValueError as exc:
            raise ValueError(f"provided bad location {name}: {exc}") from None
        spec = spec[space:].strip() if space >= 0 else ""
    if spec.startswith("@"):
        if spec.startswith("@every "):
            try:
                delay = _go_duration(spec[len("@every "):])
            except ValueError as exc:
                raise ValueError(f"failed to parse duration {spec}: {exc}") from None
            return CronSchedule(zone, every=max(timedelta(seconds=int(delay.total_seconds())), timedelta(seconds=1)))
        if spec not in _DESCRIPTORS:
            raise ValueError(f"unrecognized descriptor: {spec}")
        spec = _DESCRIPTORS[spec]
    fields = spec.split()
    if len(fields) != 5:
        raise ValueError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    canonical = []
    for i, (text, (low, high, names)) in enumerate(zip(fields, _FIELDS, strict=True)):
        values: set[int] = set()
        star = False
        for term in (t for t in text.split(",") if t):
            more, term_star = _range(term, low, high, names)
            values |= more
            star = star or term_star
        # A bare star (robfig's starBit) stays "*", which is how cronsim learns to AND the day fields;
        # a full day field without one ("1-31") must not read as a star.
        full = values == set(range(low, high + 1)) and i not in (2, 4)
        canonical.append("*" if star or full else ",".join(map(str, sorted(values))))
    if "" in canonical:  # a field of commas only: robfig's empty bit set, which never fires
        return CronSchedule(zone, expression="0 0 31 2 *")
    return CronSchedule(zone, expression=" ".join(canonical))


def schedule_errors(schedule: str, time_zone: str | None) -> list[str]:
    """``validateScheduleFormat`` on create: robfig's parse error, and TZ in the schedule refused."""
    errors = []
    try:
        parse_schedule(schedule)
    except ValueError as exc:
        errors.append(str(exc))
    if "TZ" in schedule:
        errors.append("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    return errors


def time_zone_errors(name: str) -> list[str]:
    """``validateTimeZone``: an IANA name, not ``Local``."""
    if not name:
        return ["timeZone must be nil or non-empty string"]
    for part in name.split("/"):
        if part in (".", "..") or part.startswith("-") or not _TIME_ZONE_PART.fullmatch(part):
            return [f"unknown time zone {name}"]
    if name.lower() == "local":
        return ["timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"]
    try:
        load_time_zone(name)
    except ValueError as exc:
        return [str(exc)]
    return []


class JobTemplateSpec(ApiModel):
    """The Job each run is stamped from: its labels and annotations, and its spec."""

    metadata: ObjectMeta | None = None
    spec: JobSpec


class ObjectReference(ApiModel):
    """core v1 ObjectReference: an active Job of the CronJob."""

    api_version: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class CronJobSpec(ApiModel):
    schedule: str
    time_zone: str | None = None
    starting_deadline_seconds: NonNegInt64 | None = None
    concurrency_policy: str | None = None
    suspend: bool | None = None
    job_template: JobTemplateSpec
    successful_jobs_history_limit: Int32 | None = None
    failed_jobs_history_limit: Int32 | None = None


class CronJobStatus(ApiModel):
    active: list[ObjectReference] | None = None
    last_schedule_time: str | None = None
    last_successful_time: str | None = None


class CronJob(Resource):
    """batch/v1 CronJob."""

    spec: CronJobSpec
    status: CronJobStatus | None = None

    def set_defaults(self) -> None:
        """Kubernetes' ``SetDefaults_CronJob`` (the template's Job spec is not defaulted, as upstream)."""
        spec = self.spec
        if not spec.concurrency_policy:
            spec.concurrency_policy = "Allow"
        if spec.suspend is None:
            spec.suspend = False
        if spec.successful_jobs_history_limit is None:
            spec.successful_jobs_history_limit = 3
        if spec.failed_jobs_history_limit is None:
            spec.failed_jobs_history_limit = 1

    def check(self) -> list[FieldError]:
        """``ValidateCronJobCreate``'s rules."""
        errs = super().check()
        spec = self.spec
        name = self.metadata.name or ""
        if len(name) > MAX_NAME_LENGTH:
            errs.append(FieldError.invalid("metadata.name", name, f"must be no more than {MAX_NAME_LENGTH} characters"))
        if not spec.schedule:
            errs.append(FieldError.required("spec.schedule"))
        else:
            errs += [FieldError.invalid("spec.schedule", spec.schedule, e)
                     for e in schedule_errors(spec.schedule, spec.time_zone)]
        if spec.time_zone is not None:
            errs += [FieldError.invalid("spec.timeZone", spec.time_zone, e) for e in time_zone_errors(spec.time_zone)]
        if spec.concurrency_policy not in CONCURRENCY_POLICIES:
            errs.append(FieldError.not_supported("spec.concurrencyPolicy", spec.concurrency_policy,
                                                 CONCURRENCY_POLICIES))
        for field, value in (("successfulJobsHistoryLimit", spec.successful_jobs_history_limit),
                             ("failedJobsHistoryLimit", spec.failed_jobs_history_limit)):
            if value is not None and value < 0:
                errs.append(FieldError.invalid(f"spec.{field}", value, "must be greater than or equal to 0"))
        errs += self._template_errors()
        return errs

    def _template_errors(self) -> list[FieldError]:
        """``ValidateJobTemplateSpec``: the Job's spec rules, and no selector of the user's."""
        template = self.spec.job_template
        job = Job.model_construct(api_version="batch/v1", kind="Job", metadata=ObjectMeta(name="template"),
                                  spec=template.spec)
        prefix = "spec.jobTemplate."
        errs = [dataclasses.replace(e, path=prefix + e.path) for e in job.check() if e.path.startswith("spec.")]
        if template.metadata is not None:
            errs += template.metadata.check("spec.jobTemplate.metadata", None)
        if template.spec.selector is not None:
            errs.append(FieldError.invalid("spec.jobTemplate.spec.selector", template.spec.selector.to_dict(),
                                           "`selector` will be auto-generated"))
        if template.spec.manual_selector:
            errs.append(FieldError.not_supported("spec.jobTemplate.spec.manualSelector", True, ("nil", "false")))
        return errs


def _suspend(obj: dict) -> str:
    value = (obj.get("spec") or {}).get("suspend")
    return "<unset>" if value is None else str(bool(value))


def _last_schedule(obj: dict) -> str:
    value = (obj.get("status") or {}).get("lastScheduleTime")
    return age(value) if value else "<none>"


def _containers(obj: dict) -> list[dict[str, Any]]:
    job = ((obj.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
    return ((job.get("template") or {}).get("spec") or {}).get("containers") or []


# kube-apiserver's printCronJob columns.
CRONJOB_COLUMNS = (
    PrinterColumn("Schedule", value=lambda o: (o.get("spec") or {}).get("schedule", "")),
    PrinterColumn("Timezone", value=lambda o: (o.get("spec") or {}).get("timeZone") or "<none>"),
    PrinterColumn("Suspend", "boolean", value=_suspend),
    PrinterColumn("Active", "integer", value=lambda o: len((o.get("status") or {}).get("active") or [])),
    PrinterColumn("Last Schedule", value=_last_schedule),
    AGE,
    PrinterColumn("Containers", priority=1, value=lambda o: ",".join(c.get("name", "") for c in _containers(o))),
    PrinterColumn("Images", priority=1, value=lambda o: ",".join(c.get("image", "") for c in _containers(o))),
    PrinterColumn("Selector", priority=1, value=lambda o: "<none>"),
)
