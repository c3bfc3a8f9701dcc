"""Experiment tracking of tuning trials: each Trial an MLflow run, when MLflow is configured.

Off unless ``MLFLOW_TRACKING_URI`` is set in the control plane's environment; then
:func:`tracker_from_env` imports MLflow's client (``mlflow-skinny`` is enough) and returns an
:class:`MlflowTracker`. Without the variable, or without MLflow installed, trials are tracked by
the no-op :class:`Tracker` and nothing else changes.

What lands in MLflow
====================

* **Experiment** ``<namespace>/<name>`` of the Katib Experiment (Katib names are unique per
  namespace only, so the namespace keeps two namespaces' ``mnist`` apart). Created on the first
  trial, tagged ``katib.experiment``, ``katib.namespace``, ``katib.algorithm``.
* **One run per Trial**, named after the trial, started at the trial's ``startTime``:

  - params: the trial's ``parameterAssignments``;
  - metrics: every stored observation (the metric's name, its value, step and timestamp), so the
    run's metric history is the trial's curve exactly as the store holds it;
  - tags: ``katib.experiment``, ``katib.trial``, ``katib.namespace``, ``katib.algorithm``,
    ``katib.objective`` (metric name), ``katib.objective_type``, ``katib.early_stopping``
    (where set), ``trimaran.trial_uid``, and ``trimaran.trial_state`` (the Trial's condition);
  - status at the end: FINISHED (Succeeded), FAILED (Failed, MetricsUnavailable), KILLED
    (EarlyStopped, Killed, or the Trial deleted while running), end time the ``completionTime``.

One run per trial, across restarts
==================================

The run id is written on the Trial (annotation ``trimaran.io/mlflow-run-id``), so a restarted
control plane keeps logging to the same run. A crash between creating the run and writing the
annotation is covered too: before creating a run the tracker looks for one tagged with the trial's
uid. Once the run is terminated the annotation ``trimaran.io/mlflow-run-status`` records it, and
the trial needs no MLflow call again (a restart does not touch finished trials' runs).

Each observation is logged once: the tracker counts the trial's stored observations already in
the run; after a restart, or a request whose outcome is unknown, it recounts them by comparing the
run's metric history with the store and logs only what is missing.

MLflow unreachable
==================

Tracking never holds tuning up: a failed request logs a warning and pauses all MLflow calls for
a back-off (2 s doubling to 60 s, or to ``TRIMARAN_MLFLOW_BACKOFF_MAX`` seconds) instead of
failing the reconcile; what was not logged is logged on a later pass. The client's own retries
(minutes by default) are turned down so that one call cannot stall the trial controller
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` 0 and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` 10 s, unless set). An
error that retrying cannot fix (the run was deleted, a value MLflow rejects) stops tracking of
that trial only, with a warning.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from trimaran.api.labels import EXPERIMENT_LABEL
from trimaran.store import Conflict, NotFound, Store

log = logging.getLogger(__name__)

RUN_ID_ANNOTATION = "trimaran.io/mlflow-run-id"
RUN_STATUS_ANNOTATION = "trimaran.io/mlflow-run-status"
TRIAL_UID_TAG = "trimaran.trial_uid"
TRIAL_STATE_TAG = "trimaran.trial_state"

# Trial condition -> MLflow RunStatus.
RUN_STATUS = {
    "Succeeded": "FINISHED",
    "Failed": "FAILED",
    "MetricsUnavailable": "FAILED",
    "EarlyStopped": "KILLED",
    "Killed": "KILLED",
}
BACKOFF_MIN = 2.0
BACKOFF_MAX = 60.0
BATCH = 1000  # MLflow's limit of metrics per log_batch request
_CLIENT_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


class Tracker:
    """Where the trial controller reports trials; this one does nothing (tracking off).

    Calls come from the trial controller's thread. A method that writes the Trial (annotations)
    refreshes the ``trial`` passed in (resourceVersion, annotations) when its write succeeded, so
    the controller's following status write does not conflict with it.
    """

    enabled = False

    def start(self, trial: dict) -> None:
        """The trial's job was created: make sure the trial has its run."""

    def observe(self, trial: dict) -> None:
        """The trial may have new stored observations: log those not logged yet."""

    def finish(self, trial: dict, state: str) -> float | None:
        """The trial ended in ``state`` (its status is stored): log what is left and end the run.
        Returns seconds until the controller should call again (MLflow unreachable), else None."""
        return None

    def deleted(self, namespace: str, name: str) -> None:
        """The trial is gone from the store: end its run, if it is still open."""


@dataclass
class _Run:
    run_id: str
    annotated: bool  # the run id is on the Trial
    logged: int | None = None  # the trial's stored observations in the run; None: recount from MLflow
    state: str | None = None  # the trimaran.trial_state tag as last set


class _Permanent(Exception):
    """An MLflow error that retrying cannot fix."""


class MlflowTracker(Tracker):
    enabled = True

    def __init__(self, store: Store, tracking_uri: str, client: Any = None) -> None:
        for name, value in _CLIENT_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        if client is None:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=tracking_uri)
        self.store = store
        self.uri = tracking_uri
        self.client = client
        self._runs: dict[str, _Run] = {}  # trial uid -> its run
        self._names: dict[tuple[str, str], str] = {}  # (namespace, trial name) -> trial uid
        self._experiments: dict[str, str] = {}  # MLflow experiment name -> id
        self._broken: set[str] = set()  # trial uids not tracked any more (a permanent error)
        self._down_until = 0.0
        self._backoff = 0.0
        self.backoff_max = float(os.environ.get("TRIMARAN_MLFLOW_BACKOFF_MAX") or BACKOFF_MAX)
        self._lock = threading.RLock()

    # -- the Tracker interface ------------------------------------------------------------------
    def start(self, trial: dict) -> None:
        with self._lock:
            self._guarded(trial, lambda: self._run(trial))

    def observe(self, trial: dict) -> None:
        with self._lock:
            self._guarded(trial, lambda: self._sync(trial))

    def finish(self, trial: dict, state: str) -> float | None:
        with self._lock:
            if _annotations(trial).get(RUN_STATUS_ANNOTATION):
                self._forget(trial)
                return None
            done = self._guarded(trial, lambda: self._end(trial, state))
            if done or trial["metadata"]["uid"] in self._broken:
                self._forget(trial)
                return None
            return max(self._down_until - time.monotonic(), 0.05)

    def deleted(self, namespace: str, name: str) -> None:
        with self._lock:
            uid = self._names.pop((namespace, name), None)
            run = self._runs.pop(uid, None) if uid else None
            if uid in self._broken:
                self._broken.discard(uid)
                return
            if run is None or not self._available():
                return
            try:
                self.client.set_tag(run.run_id, TRIAL_STATE_TAG, "Deleted")
                self.client.set_terminated(run.run_id, "KILLED")
            except Exception as exc:  # noqa: BLE001 - tracking must never break tuning
                log.warning("MLflow: could not end run %s of deleted trial %s/%s: %s",
                            run.run_id, namespace, name, exc)

    # -- failures -------------------------------------------------------------------------------
    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _guarded(self, trial: dict, action: Any) -> Any:
        """Run ``action`` unless MLflow is in back-off; turn every error into a warning."""
        if not self._available():
            return None
        meta = trial["metadata"]
        try:
            result = action()
        except _Permanent as exc:
            self._broken.add(meta["uid"])
            log.warning("MLflow tracking of trial %s/%s stops: %s", meta["namespace"], meta["name"], exc)
            return None
        except Exception as exc:  # noqa: BLE001 - tracking must never break tuning
            run = self._runs.get(meta["uid"])
            if run is not None:
                run.logged = None  # the request may or may not have landed: recount next time
            self._backoff = min(max(self._backoff * 2, BACKOFF_MIN), self.backoff_max)
            self._down_until = time.monotonic() + self._backoff
            log.warning("MLflow at %s failed for trial %s/%s (%s); tuning goes on, retrying in %.0fs",
                        self.uri, meta["namespace"], meta["name"], _short(exc), self._backoff)
            return None
        if self._backoff:
            log.info("MLflow at %s is reachable again", self.uri)
            self._backoff = 0.0
        return result

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as exc:
            if _is_permanent(exc):
                raise _Permanent(f"{method}: {_short(exc)}") from exc
            raise

    # -- the run --------------------------------------------------------------------------------
    def _run(self, trial: dict) -> _Run | None:
        meta = trial["metadata"]
        uid = meta["uid"]
        if _annotations(trial).get(RUN_STATUS_ANNOTATION) or uid in self._broken:
            return None  # tracked to the end already, or not tracked any more
        run = self._runs.get(uid)
        if run is None:
            run_id = _annotations(trial).get(RUN_ID_ANNOTATION)
            if run_id:
                run = _Run(run_id, annotated=True)  # a restarted controller: the run exists
            else:
                run = _Run(self._create_run(trial), annotated=False, logged=None, state="Created")
            self._runs[uid] = run
            self._names[(meta["namespace"], meta["name"])] = uid
        if not run.annotated:
            run.annotated = self._annotate(trial, {RUN_ID_ANNOTATION: run.run_id})
        return run

    def _create_run(self, trial: dict) -> str:
        meta, spec = trial["metadata"], trial["spec"]
        experiment = self._katib_experiment(trial)
        exp_name = (experiment or {}).get("metadata", {}).get("name") or _experiment_label(trial) or meta["name"]
        exp_spec = (experiment or {}).get("spec") or {}
        algorithm = (exp_spec.get("algorithm") or {}).get("algorithmName", "")
        experiment_id = self._experiment_id(meta["namespace"], exp_name, algorithm)
        tags = {
            "katib.experiment": exp_name,
            "katib.trial": meta["name"],
            "katib.namespace": meta["namespace"],
            "katib.algorithm": algorithm,
            "katib.objective": spec["objective"]["objectiveMetricName"],
            "katib.objective_type": spec["objective"].get("type", ""),
            TRIAL_UID_TAG: meta["uid"],
            TRIAL_STATE_TAG: "Created",
        }
        early = (exp_spec.get("earlyStopping") or {}).get("algorithmName")
        if early:
            tags["katib.early_stopping"] = early
        # A run created by a pass that crashed before annotating the trial is this trial's run.
        found = self._call("search_runs", [experiment_id], filter_string=f"tags.`{TRIAL_UID_TAG}` = '{meta['uid']}'",
                           max_results=1)
        if found:
            run_id = found[0].info.run_id
        else:
            started = _millis((trial.get("status") or {}).get("startTime"))
            run_id = self._call("create_run", experiment_id, start_time=started, tags=tags,
                                run_name=meta["name"]).info.run_id
        from mlflow.entities import Param

        params = [Param(str(a["name"]), str(a["value"])) for a in spec.get("parameterAssignments") or []]
        if params:
            self._call("log_batch", run_id, params=params)  # the same values again are fine
        log.info("MLflow: trial %s/%s is run %s of experiment %s", meta["namespace"], meta["name"], run_id,
                 experiment_id)
        return run_id

    def _experiment_id(self, namespace: str, name: str, algorithm: str) -> str:
        full = f"{namespace}/{name}"
        cached = self._experiments.get(full)
        if cached:
            return cached
        found = self._call("get_experiment_by_name", full)
        if found is None:
            try:
                experiment_id = self._call("create_experiment", full, tags={
                    "katib.experiment": name, "katib.namespace": namespace, "katib.algorithm": algorithm})
            except _Permanent:
                found = self._call("get_experiment_by_name", full)  # created meanwhile by someone else
                if found is None:
                    raise
                experiment_id = found.experiment_id
        elif found.lifecycle_stage != "active":
            raise _Permanent(f"MLflow experiment {full!r} is deleted; restore it or delete it for good")
        else:
            experiment_id = found.experiment_id
        self._experiments[full] = experiment_id
        return experiment_id

    def _katib_experiment(self, trial: dict) -> dict | None:
        name = _experiment_label(trial)
        if not name:
            return None
        try:
            return self.store.get("Experiment", trial["metadata"]["namespace"], name)
        except NotFound:
            return None

    # -- metrics --------------------------------------------------------------------------------
    def _sync(self, trial: dict) -> bool:
        """Log the trial's stored observations that the run lacks; True when it has them all."""
        run = self._run(trial)
        if run is None:
            return False
        meta = trial["metadata"]
        rows = [r for r in self.store.list_observations(meta["namespace"], trials=[meta["name"]])
                if r.get("trialUid") in (None, meta["uid"])]
        if run.logged is None:
            pending = self._missing(run.run_id, rows)
        else:
            pending = rows[run.logged:]
        if pending:
            from mlflow.entities import Metric

            metrics = [Metric(str(r["metric"]), float(r["value"]), _obs_millis(r["timestamp"]), int(r["step"]))
                       for r in pending]
            run.logged = None  # until every batch has landed
            for i in range(0, len(metrics), BATCH):
                self._call("log_batch", run.run_id, metrics=metrics[i:i + BATCH])
        run.logged = len(rows)
        if run.state != "Running" and _is_true(trial, "Running"):
            self._call("set_tag", run.run_id, TRIAL_STATE_TAG, "Running")
            run.state = "Running"
        return True

    def _missing(self, run_id: str, rows: Sequence[dict]) -> list[dict]:
        """The rows that the run's metric history does not hold yet (after a restart or an error)."""
        keys = {str(r["metric"]) for r in rows}
        have: Counter = Counter()
        for key in sorted(keys):
            for m in self._call("get_metric_history", run_id, key):
                have[(m.key, int(m.step), int(m.timestamp), repr(float(m.value)))] += 1
        missing = []
        for r in rows:
            point = (str(r["metric"]), int(r["step"]), _obs_millis(r["timestamp"]), repr(float(r["value"])))
            if have[point] > 0:
                have[point] -= 1
            else:
                missing.append(r)
        return missing

    # -- the end --------------------------------------------------------------------------------
    def _end(self, trial: dict, state: str) -> bool:
        run = self._run(trial)
        if run is None:
            return False
        if not self._sync(trial):
            return False
        status = RUN_STATUS.get(state, "FINISHED")
        self._call("set_tag", run.run_id, TRIAL_STATE_TAG, state)
        run.state = state
        ended = _millis((trial.get("status") or {}).get("completionTime"))
        self._call("set_terminated", run.run_id, status, end_time=ended)
        if not run.annotated:
            return False  # the next pass writes the run id, then ends the run again (harmless)
        if not self._annotate(trial, {RUN_STATUS_ANNOTATION: status}):
            return False
        self._forget(trial)
        return True

    def _forget(self, trial: dict) -> None:
        meta = trial["metadata"]
        self._runs.pop(meta["uid"], None)
        self._names.pop((meta["namespace"], meta["name"]), None)

    # -- the Trial ------------------------------------------------------------------------------
    def _annotate(self, trial: dict, values: dict[str, str]) -> bool:
        """Write annotations on the Trial (``update`` keeps its status). Only against the
        resourceVersion the caller holds, so the caller's next status write cannot overwrite a
        status someone else wrote meanwhile; on a conflict the next pass tries again."""
        updated = copy.deepcopy(trial)
        updated.pop("status", None)
        annotations = updated["metadata"].setdefault("annotations", {}) or {}
        annotations.update(values)
        updated["metadata"]["annotations"] = annotations
        try:
            stored = self.store.update(updated)
        except (Conflict, NotFound):
            return False
        trial["metadata"]["annotations"] = stored["metadata"].get("annotations") or {}
        trial["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return True


def tracker_from_env(store: Store, environ: dict[str, str] | None = None) -> Tracker:
    """:class:`MlflowTracker` when ``MLFLOW_TRACKING_URI`` is set, else the no-op :class:`Tracker`."""
    env = os.environ if environ is None else environ
    uri = (env.get("MLFLOW_TRACKING_URI") or "").strip()
    if not uri:
        return Tracker()
    try:
        tracker = MlflowTracker(store, uri)
    except ImportError:
        log.warning("MLFLOW_TRACKING_URI is set but MLflow is not installed (pip install mlflow-skinny); "
                    "trials are not tracked")
        return Tracker()
    except Exception as exc:  # noqa: BLE001 - tracking must never keep the control plane from starting
        log.warning("MLflow tracking at %s is off: %s", uri, exc)
        return Tracker()
    log.info("trials are tracked in MLflow at %s", uri)
    return tracker


def _annotations(trial: dict) -> dict:
    return trial["metadata"].get("annotations") or {}


def _is_true(trial: dict, ctype: str) -> bool:
    conditions = (trial.get("status") or {}).get("conditions") or []
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)


def _experiment_label(trial: dict) -> str | None:
    return (trial["metadata"].get("labels") or {}).get(EXPERIMENT_LABEL)


def _millis(rfc3339: str | None) -> int | None:
    if not rfc3339:
        return None
    try:
        when = datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return int(when.timestamp() * 1000)


def _obs_millis(timestamp: float) -> int:
    return int(float(timestamp) * 1000)


def _is_permanent(exc: Exception) -> bool:
    status = getattr(exc, "get_http_status_code", None)
    if status is None:
        return False  # connection errors, timeouts, a local store's database errors: retry
    code = status()
    return 400 <= code < 500 and code != 429


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


__all__ = ["RUN_ID_ANNOTATION", "RUN_STATUS", "RUN_STATUS_ANNOTATION", "MlflowTracker", "Tracker",
           "tracker_from_env"]
