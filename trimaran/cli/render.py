"""What ``describe``, ``wait`` and ``trials`` say of an object: its state, age and progress in words.

``get``'s columns are not here: the server renders them (the kind registry's printer columns).
"""

from __future__ import annotations

from datetime import datetime, timezone


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


def job_status(obj: dict) -> str:
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            return cond["type"]
    return "Running" if status.get("active") else "Pending"


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


