"""batch/v1 CronJob → a Job per scheduled time, as kube-controller-manager's CronJob controller v2.

A pass reads the CronJob's Jobs (those it controls), brings ``status.active`` and
``lastSuccessfulTime`` up to date, then asks the schedule for the most recent time due since
``lastScheduleTime`` (or the CronJob's creation, or now minus ``startingDeadlineSeconds``): a time
too late for the deadline is ``MissSchedule``, one already run is skipped, ``Forbid`` waits for the
active Jobs, ``Replace`` deletes them, and the Job ``<cronjob>-<minutes since the epoch>`` is created
with the ``batch.kubernetes.io/cronjob-scheduled-timestamp`` annotation. Finished Jobs beyond the
history limits are deleted, oldest start first. The pass requeues itself for the next time due
(plus 100 ms, as upstream). Events carry upstream's reasons and words.

The clock is injectable (``clock``), so the scheduling is tested without waiting for minutes.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo

from trimaran.api.cronjob import (
    SCHEDULED_TIMESTAMP_ANNOTATION,
    CronSchedule,
    load_time_zone,
    local_time_zone,
    parse_schedule,
)
from trimaran.api.errors import ManifestError
from trimaran.api.loader import validate
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import is_true, parse_rfc3339
from trimaran.controllers.gc import request_delete
from trimaran.controllers.pods import owner_reference
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["CronJobReconciler", "most_recent_schedule_time"]

# Past this many missed times since the last run, upstream warns (and still runs the latest).
_MANY_MISSED = 100
# The requeue lands this long after the time due, so the pass sees it due.
_NEXT_SCHEDULE_DELTA = 0.1


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_rfc3339(moment: datetime) -> str:
    """Go's ``time.RFC3339`` in the moment's zone: ``Z`` for a zero offset, else ``+01:00``."""
    text = moment.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith(("+00:00", "-00:00")) else text


def most_recent_schedule_time(cronjob: dict, now: datetime, schedule: CronSchedule, with_deadline: bool,
                              ) -> tuple[datetime, datetime | None, int, str | None]:
    """Upstream's ``mostRecentScheduleTime``: the earliest time considered, the most recent time due
    at ``now`` (None if none), how many were missed (an estimate), and an error for a schedule that
    never fires twice."""
    meta, spec, status = cronjob["metadata"], cronjob["spec"], cronjob.get("status") or {}
    earliest = parse_rfc3339(status.get("lastScheduleTime") or meta["creationTimestamp"])
    deadline = spec.get("startingDeadlineSeconds")
    if with_deadline and deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=int(deadline)))
    never = "time difference between two schedules is less than 1 second"
    t1 = schedule.next(earliest)
    if t1 is None:
        return earliest, None, 0, never
    if now < t1:
        return earliest, None, 0, None
    t2 = schedule.next(t1)
    if t2 is not None and now < t2:
        return earliest, t1, 0, None
    between = round((t2 - t1).total_seconds()) if t2 is not None else 0
    if between < 1:
        return earliest, None, 0, never
    # As upstream: count the intervals to now, step back one, and let the schedule find the last.
    missed = int((now - t1).total_seconds()) // between + 1
    recent = None
    moment = schedule.next(t1 + timedelta(seconds=(missed - 2) * between))
    while moment is not None and moment <= now:
        recent, moment = moment, schedule.next(moment)
    return earliest, recent, missed, None


def _finished(job: dict) -> str | None:
    """``Complete`` or ``Failed`` for a finished Job, else None."""
    status = job.get("status") or {}
    return next((c for c in ("Complete", "Failed") if is_true(status, c)), None)


def _start_order(job: dict) -> tuple:
    """Upstream's ``byJobStartTime``: by start time (none last), then name."""
    started = (job.get("status") or {}).get("startTime")
    return (started is None, started or "", job["metadata"]["name"])


class CronJobReconciler(Reconciler):
    name = "cronjob"
    kinds = ("CronJob",)
    watches = ("Job",)

    def __init__(self, store: Store, *, clock: Callable[[], datetime] | None = None,
                 local_zone: tzinfo | None = None) -> None:
        """``clock`` says what time it is (aware); ``local_zone`` is where a schedule without a
        ``timeZone`` is read (the machine's, as kube-controller-manager's ``time.Local``)."""
        super().__init__(store)
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.local_zone = local_zone or local_time_zone()

    def reconcile(self, key: Key) -> float | None:
        try:
            cronjob = self.store.get("CronJob", key.namespace, key.name)
        except NotFound:
            return None
        jobs = [j for j in self.store.list("Job", key.namespace, owner_uid=cronjob["metadata"]["uid"])
                if any(r.get("controller") and r.get("uid") == cronjob["metadata"]["uid"]
                       for r in j["metadata"].get("ownerReferences") or [])]
        status = copy.deepcopy(cronjob.get("status") or {})
        before = copy.deepcopy(status)
        view = {**cronjob, "status": status}
        requeue = self._sync(view, jobs, self.clock())
        self._clean_up(view, jobs)
        if not status.get("active"):
            status.pop("active", None)
        return self.settle_status(cronjob, status, before, requeue)

    # -- one pass, as upstream's syncCronJob ------------------------------------------------------
    def _sync(self, cronjob: dict, jobs: list[dict], now: datetime) -> float | None:
        status = cronjob["status"]
        active = status.setdefault("active", [])
        active_uids = {ref.get("uid") for ref in active}
        for job in jobs:
            meta = job["metadata"]
            finished = _finished(job)
            if meta["uid"] not in active_uids and not finished:
                self._event(cronjob, "Warning", "UnexpectedJob",
                            f"Saw a job that the controller did not create or forgot: {meta['name']}")
            elif meta["uid"] in active_uids and finished:
                active[:] = [r for r in active if r.get("uid") != meta["uid"]]
                self._event(cronjob, "Normal", "SawCompletedJob",
                            f"Saw completed job: {meta['name']}, condition: {finished}")
            elif finished == "Complete":
                # A Job need not be active to count: its success is the latest one's time.
                completed = (job.get("status") or {}).get("completionTime")
                if completed and (not status.get("lastSuccessfulTime") or
                                  parse_rfc3339(completed) > parse_rfc3339(status["lastSuccessfulTime"])):
                    status["lastSuccessfulTime"] = completed
        children = {j["metadata"]["uid"] for j in jobs}
        for ref in list(active):
            if ref.get("uid") in children:
                continue
            try:
                self.store.get("Job", ref.get("namespace") or cronjob["metadata"]["namespace"], ref.get("name", ""))
            except NotFound:
                self._event(cronjob, "Normal", "MissingJob", f"Active job went missing: {ref.get('name')}")
                active.remove(ref)
        if is_being_deleted(cronjob):
            return None
        spec = cronjob["spec"]
        time_zone = spec.get("timeZone")
        if time_zone is not None:
            try:
                load_time_zone(time_zone)
            except ValueError as exc:
                self._event(cronjob, "Warning", "UnknownTimeZone", f"invalid timeZone: {json.dumps(time_zone)}: {exc}")
                return None
        if spec.get("suspend"):
            return None
        schedule_text = spec.get("schedule", "")
        if "TZ" in schedule_text:
            self._event(cronjob, "Warning", "UnsupportedSchedule",
                        f"CRON_TZ or TZ used in schedule {json.dumps(schedule_text)} is not officially supported, "
                        f"see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details")
        elif time_zone is not None:
            schedule_text = f"TZ={time_zone} {schedule_text}"
        try:
            schedule = parse_schedule(schedule_text, self.local_zone)
        except ValueError as exc:
            self._event(cronjob, "Warning", "UnparseableSchedule",
                        f"unparseable schedule: {json.dumps(spec.get('schedule', ''))} : {exc}")
            return None
        _, scheduled, missed, error = most_recent_schedule_time(cronjob, now, schedule, True)
        if error is not None:
            self._event(cronjob, "Warning", "InvalidSchedule", f"invalid schedule: {spec.get('schedule')} : {error}")
            return None
        if scheduled is None:
            return self._next_in(cronjob, now, schedule)
        if missed > _MANY_MISSED:
            self._event(cronjob, "Warning", "TooManyMissedTimes", "too many missed start times. Set or decrease "
                        ".spec.startingDeadlineSeconds or check clock skew")
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None and scheduled + timedelta(seconds=int(deadline)) < now:
            self._event(cronjob, "Warning", "MissSchedule", "Missed scheduled time to start a job: "
                        + scheduled.astimezone(timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000"))
            return self._next_in(cronjob, now, schedule)
        name = f"{cronjob['metadata']['name']}-{int(scheduled.timestamp()) // 60}"
        if any(r.get("name") == name for r in active) or status.get("lastScheduleTime") == _rfc3339(scheduled):
            return self._next_in(cronjob, now, schedule)
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and active:
            self._event(cronjob, "Normal", "JobAlreadyActive",
                        "Not starting job because prior execution is running and concurrency policy is Forbid")
            return self._next_in(cronjob, now, schedule)
        if policy == "Replace":
            for ref in list(active):
                try:
                    job = self.store.get("Job", ref.get("namespace") or cronjob["metadata"]["namespace"],
                                         ref.get("name", ""))
                except NotFound:
                    active.remove(ref)
                    continue
                self._delete_job(cronjob, job)
        try:
            job = self._create_job(cronjob, name, scheduled)
        except AlreadyExists:
            return self._next_in(cronjob, now, schedule)  # made by another actor, as upstream assumes
        except ManifestError as exc:
            self._event(cronjob, "Warning", "FailedCreate", f"Error creating job: {'; '.join(exc.problems)}")
            return self._next_in(cronjob, now, schedule)
        self._event(cronjob, "Normal", "SuccessfulCreate", f"Created job {name}")
        meta = job["metadata"]
        active.append({"kind": "Job", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                       "apiVersion": "batch/v1", "resourceVersion": meta["resourceVersion"]})
        status["lastScheduleTime"] = _rfc3339(scheduled)
        return self._next_in(cronjob, now, schedule)

    def _next_in(self, cronjob: dict, now: datetime, schedule: CronSchedule) -> float | None:
        """Upstream's ``nextScheduleTimeDuration``: seconds until the pass after the next time due."""
        earliest, recent, missed, error = most_recent_schedule_time(cronjob, now, schedule, False)
        base = now if error is not None or (recent is None and missed > 1) else recent or earliest
        moment = schedule.next(base)
        if moment is None:
            return None
        return max((moment - now).total_seconds() + _NEXT_SCHEDULE_DELTA, _NEXT_SCHEDULE_DELTA)

    def _create_job(self, cronjob: dict, name: str, scheduled: datetime) -> dict:
        """Upstream's ``getJobFromTemplate2``, created through the Job's defaults (its selector
        needs the uid, given here as kube-apiserver gives it before defaulting)."""
        template = cronjob["spec"]["jobTemplate"]
        tmeta = template.get("metadata") or {}
        zone = load_time_zone(cronjob["spec"].get("timeZone") or "")
        annotations = {**(tmeta.get("annotations") or {}),
                       SCHEDULED_TIMESTAMP_ANNOTATION: _go_rfc3339(scheduled.astimezone(zone))}
        uid = str(uuid.uuid4())
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": cronjob["metadata"]["namespace"], "uid": uid,
                            "labels": dict(tmeta.get("labels") or {}), "annotations": annotations,
                            "ownerReferences": [owner_reference(cronjob)]},
               "spec": copy.deepcopy(template.get("spec") or {})}
        return self.store.create(validate(job).object, uid=uid)

    def _delete_job(self, cronjob: dict, job: dict) -> bool:
        """Upstream's ``deleteJob``: the Job (its pods follow) and its place in ``active``."""
        try:
            request_delete(self.store, job, "Background")
        except NotFound:
            pass
        except Conflict as exc:
            self._event(cronjob, "Warning", "FailedDelete", f"Deleted job: {exc}")
            return False
        active = cronjob["status"].get("active") or []
        active[:] = [r for r in active if r.get("uid") != job["metadata"]["uid"]]
        self._event(cronjob, "Normal", "SuccessfulDelete", f"Deleted job {job['metadata']['name']}")
        return True

    def _clean_up(self, cronjob: dict, jobs: list[dict]) -> None:
        """Upstream's ``cleanupFinishedJobs``: finished Jobs beyond the history limits, oldest first."""
        spec = cronjob["spec"]
        for outcome, limit in (("Complete", spec.get("successfulJobsHistoryLimit")),
                               ("Failed", spec.get("failedJobsHistoryLimit"))):
            if limit is None:
                continue
            finished = sorted((j for j in jobs if _finished(j) == outcome), key=_start_order)
            for job in finished[:max(0, len(finished) - int(limit))]:
                self._delete_job(cronjob, job)

    def _event(self, cronjob: dict, type_: str, reason: str, message: str) -> None:
        self.store.record_event(cronjob, type_, reason, message)  # type: ignore[arg-type]
