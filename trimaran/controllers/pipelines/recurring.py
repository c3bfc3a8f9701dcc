"""The RecurringRun controller: KFP's recurring runs (its ScheduledWorkflow on a cluster) as Runs made
on a cron or interval schedule.

Each pass makes the Run of the oldest fire time that is due, while fewer than ``maxConcurrency``
of its runs are unfinished; ``noCatchup`` skips to the newest missed time instead of running each
one. A Run's name comes from its fire time, so a pass repeated after a crash finds the Run it made
instead of making another. Runs outlive their recurring run, as in KFP; they carry its name in
``spec.recurringRun`` and the RECURRING_RUN_LABEL.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from trimaran.api import ManifestError, validate
from trimaran.api.pipelines import FINISHED_RUN_STATES, TRIMARAN_API_VERSION
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import set_condition
from trimaran.pipelines.schedule import latest_due, next_fire, parse_time
from trimaran.store import AlreadyExists, NotFound, Store

__all__ = ["RECURRING_RUN_LABEL", "RecurringRunReconciler"]

RECURRING_RUN_LABEL = "pipelines.trimaran.io/recurring-run"
# What a Run takes from its recurring run's spec (the rest is the schedule's).
_TEMPLATE = ("displayName", "description", "experiment", "pipelineSpec", "platformSpec", "pipelineVersionRef",
             "parameters", "pipelineRoot", "enableCaching", "serviceAccountName")
_BUSY_RECHECK = 5.0  # a full recurring run looks again this often too (its runs' events wake it first)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RecurringRunReconciler(Reconciler):
    name = "recurringruns"
    kinds = ("RecurringRun",)
    watches = ("Run",)

    def __init__(self, store: Store) -> None:
        super().__init__(store)

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        if event_kind == "Run":
            owner = (obj["metadata"].get("labels") or {}).get(RECURRING_RUN_LABEL)
            return [Key("RecurringRun", obj["metadata"]["namespace"], owner)] if owner else []
        return super().keys_for(event_kind, obj)

    def reconcile(self, key: Key) -> float | None:
        try:
            recurring = self.store.get("RecurringRun", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(recurring):
            return None
        status = copy.deepcopy(recurring.get("status") or {})
        before = copy.deepcopy(status)
        return self.settle_status(recurring, status, before, self._drive(recurring, status))

    def _drive(self, recurring: dict[str, Any], status: dict[str, Any]) -> float | None:
        spec = recurring["spec"]
        now = datetime.now(timezone.utc)
        if spec.get("mode") == "DISABLE":
            status.pop("nextRunTime", None)
            set_condition(status, "Enabled", "False", "Disabled", "the recurring run is disabled")
            return None
        set_condition(status, "Enabled", "True", "Enabled", "runs are made on the schedule")
        trigger = spec["trigger"]
        created = parse_time(recurring["metadata"].get("creationTimestamp")) or now
        last = parse_time(status.get("lastRunTime"))
        if spec.get("noCatchup"):
            fire = latest_due(trigger, created, last, now) or next_fire(trigger, created, last)
        else:
            fire = next_fire(trigger, created, last)
        if fire is None:
            status.pop("nextRunTime", None)
            set_condition(status, "Enabled", "False", "Ended", "the schedule has ended (its endTime passed)")
            return None
        status["nextRunTime"] = _rfc3339(fire)
        if fire > now:
            return (fire - now).total_seconds()
        if self._unfinished_runs(recurring) >= (spec.get("maxConcurrency") or 1):
            return _BUSY_RECHECK
        self._make_run(recurring, fire)
        status["lastRunTime"] = _rfc3339(fire)
        status["runsCreated"] = (status.get("runsCreated") or 0) + 1
        following = next_fire(trigger, created, fire)
        if following is None:
            status.pop("nextRunTime", None)
            return None
        status["nextRunTime"] = _rfc3339(following)
        return max(0.0, (following - now).total_seconds())

    def _unfinished_runs(self, recurring: dict[str, Any]) -> int:
        meta = recurring["metadata"]
        runs = self.store.list("Run", meta["namespace"], label_selector={RECURRING_RUN_LABEL: meta["name"]},
                               shared=True)
        return sum(1 for r in runs if (r.get("status") or {}).get("state") not in FINISHED_RUN_STATES)

    def _make_run(self, recurring: dict[str, Any], fire: datetime) -> None:
        meta, spec = recurring["metadata"], recurring["spec"]
        run_spec = {k: copy.deepcopy(spec[k]) for k in _TEMPLATE if spec.get(k) is not None}
        stamp = fire.strftime("%Y%m%d%H%M%S")
        run_spec["displayName"] = f"{spec.get('displayName') or meta['name']} {_rfc3339(fire)}"
        run_spec["recurringRun"] = meta["name"]
        run = {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run",
               "metadata": {"name": f"{meta['name'][:30]}-{stamp}", "namespace": meta["namespace"],
                            "labels": {RECURRING_RUN_LABEL: meta["name"]}},
               "spec": run_spec}
        try:
            run = validate(run).object
        except ManifestError as exc:  # the template was checked when the recurring run was stored
            self.store.record_event(recurring, "Warning", "FailedCreate", f"the run is not valid: {exc}")
            raise
        try:
            self.store.create(run)
        except AlreadyExists:
            return  # made by a pass before a crash
        self.store.record_event(recurring, "Normal", "RunCreated", f"created run {run['metadata']['name']}")
