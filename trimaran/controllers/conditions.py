"""Condition bookkeeping with the Kubeflow operator's update rules (training-operator.md §2)."""

from __future__ import annotations

from datetime import datetime, timezone


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def seconds_since(value: str | None) -> float:
    if not value:
        return 0.0
    return (datetime.now(timezone.utc) - parse_rfc3339(value)).total_seconds()


def get_condition(status: dict, ctype: str) -> dict | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_true(status: dict, ctype: str) -> bool:
    cond = get_condition(status, ctype)
    return bool(cond and cond.get("status") == "True")


def set_condition(status: dict, ctype: str, cstatus: str, reason: str, message: str) -> bool:
    """Set a condition in place; returns whether anything changed.

    A condition whose status is unchanged keeps its lastTransitionTime, as Kubernetes does.
    """
    conditions = status.setdefault("conditions", [])
    now = now_rfc3339()
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") == cstatus and cond.get("reason") == reason and cond.get("message") == message:
                return False
            if cond.get("status") != cstatus:
                cond["lastTransitionTime"] = now
            cond.update(status=cstatus, reason=reason, message=message, lastUpdateTime=now)
            return True
    conditions.append(
        {"type": ctype, "status": cstatus, "reason": reason, "message": message,
         "lastUpdateTime": now, "lastTransitionTime": now}
    )
    return True


def set_training_condition(status: dict, ctype: str, reason: str, message: str) -> bool:
    """Record a Kubeflow job condition as the operator's ``UpdateJobConditions`` does.

    Running and Restarting alternate (setting one drops the other); Succeeded or Failed flips an
    existing Running to False; nothing changes once the job has Failed.
    """
    if is_true(status, "Failed"):
        return False
    changed = set_condition(status, ctype, "True", reason, message)
    conditions = status.get("conditions") or []
    if ctype in ("Running", "Restarting"):
        other = "Restarting" if ctype == "Running" else "Running"
        kept = [c for c in conditions if c.get("type") != other]
        changed |= len(kept) != len(conditions)
        status["conditions"] = kept
    if ctype in ("Succeeded", "Failed"):
        for cond in status["conditions"]:
            if cond.get("type") in ("Running", "Restarting") and cond.get("status") == "True":
                cond["status"] = "False"
                cond["lastTransitionTime"] = now_rfc3339()
                changed = True
    # The condition set last is the job's state (kubectl's STATE column reads conditions[-1]).
    status["conditions"].sort(key=lambda c: c.get("type") == ctype)
    return changed


def is_finished(status: dict) -> bool:
    return is_true(status, "Succeeded") or is_true(status, "Failed")
