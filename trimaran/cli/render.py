"""How each kind is shown by ``get`` and ``describe``: kubectl's columns, as rich tables."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from rich.table import Table


def _parse_time(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    then = _parse_time(timestamp)
    seconds = int((datetime.now(timezone.utc) - then).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def training_state(obj: dict) -> str:
    """kubectl's STATE column for training jobs: the last True condition (blank before any)."""
    return latest_true(obj, default="")


def _replicas(obj: dict) -> str:
    parts = []
    for rtype, rs in ((obj.get("status") or {}).get("replicaStatuses") or {}).items():
        parts.append(f"{rtype}:{rs.get('active', 0)}/{rs.get('succeeded', 0)}/{rs.get('failed', 0)}")
    return " ".join(parts)


def job_status(obj: dict) -> str:
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            return cond["type"]
    return "Running" if status.get("active") else "Pending"


def _duration(obj: dict) -> str:
    status = obj.get("status") or {}
    start, end = status.get("startTime"), status.get("completionTime")
    if not start:
        return ""
    t1 = _parse_time(end) if end else datetime.now(timezone.utc)
    t0 = _parse_time(start)
    return f"{int((t1 - t0).total_seconds())}s"


def pod_status(obj: dict) -> str:
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state:
            return state["waiting"].get("reason", "Waiting")
        if "terminated" in state and status.get("phase") not in ("Succeeded",):
            reason = state["terminated"].get("reason")
            if reason and reason != "Completed":
                return reason
    if status.get("phase") == "Succeeded":
        return "Completed"
    return status.get("phase", "Pending")


def _ready(obj: dict) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len(obj["spec"].get("containers") or [])
    return f"{sum(1 for cs in statuses if cs.get('ready'))}/{total}"


def _restarts(obj: dict) -> str:
    return str(sum(cs.get("restartCount", 0) for cs in (obj.get("status") or {}).get("containerStatuses") or []))


def latest_true(obj: dict, default: str = "Pending") -> str:
    """The condition a person reads as the object's state: the last one that is True."""
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return conditions[-1]["type"] if conditions else default


def objective_value(objective: dict, observation: dict | None) -> float | None:
    """A trial's objective per its metricStrategy, by Katib's rule (tuning.metrics)."""
    from trimaran.tuning.metrics import objective_value as katib_value

    name = objective.get("objectiveMetricName")
    strategy = next((s.get("value") for s in objective.get("metricStrategies") or [] if s.get("name") == name),
                    "min" if objective.get("type") == "minimize" else "max")
    summary = {m["name"]: m for m in (observation or {}).get("metrics") or [] if "name" in m}
    return katib_value(summary, name, strategy)


def _best(exp: dict) -> str:
    best = (exp.get("status") or {}).get("currentOptimalTrial") or {}
    value = objective_value(exp["spec"].get("objective") or {}, best.get("observation"))
    return "" if value is None else f"{value:.6g}"


def experiment_progress(exp: dict) -> str:
    """One line for a person waiting on an experiment: state, trials done of the maximum, running
    and early-stopped counts, and the best objective so far."""
    status = exp.get("status") or {}
    spec = exp.get("spec") or {}
    done = sum(status.get(k, 0) for k in ("trialsSucceeded", "trialsFailed", "trialsKilled",
                                          "trialsEarlyStopped", "trialMetricsUnavailable"))
    parts = [latest_true(exp), f"{done}/{spec.get('maxTrialCount', '?')} trials done",
             f"{status.get('trialsRunning', 0)} running"]
    if status.get("trialsEarlyStopped"):
        parts.append(f"{status['trialsEarlyStopped']} early-stopped")
    if status.get("trialsFailed"):
        parts.append(f"{status['trialsFailed']} failed")
    best = _best(exp)
    if best:
        parts.append(f"best {(spec.get('objective') or {}).get('objectiveMetricName', 'objective')} {best}")
    return ", ".join(parts)


def _trial_objective(trial: dict) -> str:
    value = objective_value(trial["spec"].get("objective") or {}, (trial.get("status") or {}).get("observation"))
    return "" if value is None else f"{value:.6g}"


def _assignments(trial: dict) -> str:
    return " ".join(f"{a['name']}={a['value']}" for a in trial["spec"].get("parameterAssignments") or [])


def _isvc_target(obj: dict, prev: bool, field: str) -> str:
    """KServe's printer columns: the predictor's ``prev``-tagged target, or its latestRevision target."""
    traffic = ((((obj.get("status") or {}).get("components") or {}).get("predictor") or {}).get("traffic")) or []
    for t in traffic:
        if (t.get("tag") == "prev") if prev else t.get("latestRevision"):
            return str(t.get(field, ""))
    return ""


def _isvc_ready(obj: dict) -> str:
    return next((c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"), "")


Column = tuple[str, Callable[[dict], str]]

_NAME: Column = ("NAME", lambda o: o["metadata"]["name"])
_AGE: Column = ("AGE", lambda o: age(o["metadata"].get("creationTimestamp")))

COLUMNS: dict[str, list[Column]] = {
    "training": [_NAME, ("STATE", training_state), _AGE],
    "Job": [_NAME, ("STATUS", job_status),
            ("COMPLETIONS", lambda o: f"{(o.get('status') or {}).get('succeeded', 0)}/"
                                      f"{o['spec'].get('completions', 1)}"),
            ("DURATION", _duration), _AGE],
    "Pod": [_NAME, ("READY", _ready), ("STATUS", pod_status), ("RESTARTS", _restarts), _AGE],
    "Experiment": [_NAME, ("STATUS", latest_true),
                   ("TRIALS", lambda o: f"{(o.get('status') or {}).get('trialsSucceeded', 0)}/"
                                        f"{(o.get('status') or {}).get('trials', 0)}"),
                   ("RUNNING", lambda o: str((o.get("status") or {}).get("trialsRunning", 0))),
                   ("BEST", _best), _AGE],
    "Trial": [_NAME, ("STATUS", latest_true), ("OBJECTIVE", _trial_objective), ("PARAMETERS", _assignments), _AGE],
    "ConfigMap": [_NAME, ("DATA", lambda o: str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))), _AGE],
    "Secret": [_NAME, ("TYPE", lambda o: o.get("type", "Opaque")),
               ("DATA", lambda o: str(len(o.get("data") or {}) + len(o.get("stringData") or {}))), _AGE],
    "Namespace": [_NAME, ("STATUS", lambda o: "Active"), _AGE],
    "InferenceService": [_NAME, ("URL", lambda o: (o.get("status") or {}).get("url", "")), ("READY", _isvc_ready),
                         ("PREV", lambda o: _isvc_target(o, True, "percent")),
                         ("LATEST", lambda o: _isvc_target(o, False, "percent")),
                         ("PREVROLLEDOUTREVISION", lambda o: _isvc_target(o, True, "revisionName")),
                         ("LATESTREADYREVISION", lambda o: _isvc_target(o, False, "revisionName")), _AGE],
    "PersistentVolumeClaim": [_NAME, ("STATUS", lambda o: (o.get("status") or {}).get("phase", "Pending")),
                              ("CAPACITY",
                               lambda o: ((o.get("status") or {}).get("capacity") or {}).get("storage", "")),
                              ("ACCESS MODES", lambda o: ",".join((o.get("status") or {}).get("accessModes") or [])),
                              _AGE],
}

WIDE: dict[str, list[Column]] = {
    "Experiment": [("ALGORITHM", lambda o: (o["spec"].get("algorithm") or {}).get("algorithmName", "")),
                   ("BEST TRIAL", lambda o: ((o.get("status") or {}).get("currentOptimalTrial") or {})
                    .get("bestTrialName", ""))],
    "training": [("REPLICAS (active/succeeded/failed)", _replicas)],
    "Pod": [("IP", lambda o: (o.get("status") or {}).get("podIP", "")),
            ("GPUS", lambda o: ",".join(((o.get("status") or {}).get("allocation") or {}).get("gpus") or []) or "-")],
    "Job": [("SELECTOR", lambda o: f"batch.kubernetes.io/controller-uid={o['metadata'].get('uid', '')}")],
}

TRAINING_KINDS = {"TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "JAXJob", "PaddleJob"}


def columns_for(kind: str, wide: bool, all_namespaces: bool) -> list[Column]:
    group = "training" if kind in TRAINING_KINDS else kind
    cols = list(COLUMNS.get(group, [_NAME, _AGE]))
    if wide:
        cols += WIDE.get(group, [])
    if all_namespaces:
        cols.insert(0, ("NAMESPACE", lambda o: o["metadata"].get("namespace", "")))
    return cols


RICH_ROWS = 200


def plain_table(kind: str, items: list[dict], wide: bool = False, all_namespaces: bool = False) -> str:
    """kubectl's plain columns. Used for long lists and piped output, where laying out a rich
    table would cost more than the request itself."""
    cols = columns_for(kind, wide, all_namespaces)
    rows = [[title for title, _ in cols]] + [[fn(obj) for _, fn in cols] for obj in items]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def table(kind: str, items: list[dict], wide: bool = False, all_namespaces: bool = False) -> Table:
    cols = columns_for(kind, wide, all_namespaces)
    t = Table(box=None, pad_edge=False, header_style="bold")
    for title, _ in cols:
        t.add_column(title, no_wrap=True)
    for obj in items:
        t.add_row(*(fn(obj) for _, fn in cols))
    return t
