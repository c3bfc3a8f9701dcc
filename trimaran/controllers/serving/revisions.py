"""Revisions and traffic: which revision exists for which spec, and who gets how much traffic.

A revision is an immutable snapshot of a component's spec (``{isvc}-{component}-0000N``), created
whenever the component's spec changes in anything but its live knobs (replica bounds, scaling
target and metric, canaryTrafficPercent), as Knative creates one per change of a Configuration.
Revisions are kept in the InferenceService's status (``status.revisions``: name, component, spec
hash, the spec, whether it was ever ready), so a restarted controller, or a revision scaled to
zero, still knows what each one runs.

`plan_traffic` is KServe's canary rule (serving.md §1.6) as a pure function of that history.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

__all__ = ["LIVE_FIELDS", "Rollout", "plan_traffic", "revision_name", "spec_hash"]

#: Component fields applied to running revisions instead of creating a new one.
LIVE_FIELDS = frozenset({"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType",
                         "autoScaling", "canaryTrafficPercent"})


def spec_hash(component: dict) -> str:
    """A stable digest of what a revision runs (the component without its live fields)."""
    frozen = {k: v for k, v in component.items() if k not in LIVE_FIELDS}
    return hashlib.sha256(json.dumps(frozen, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def revision_name(isvc: str, component: str, number: int) -> str:
    """Knative's revision naming as KServe shows it: ``sklearn-iris-predictor-00002``."""
    return f"{isvc}-{component}-{number:05d}"


@dataclass
class Rollout:
    """A component's revisions as KServe reports them, and its traffic targets (Knative TrafficTarget dicts)."""

    latest_created: str | None = None
    latest_ready: str | None = None
    latest_rolledout: str | None = None
    previous_rolledout: str | None = None
    traffic: list[dict] = field(default_factory=list)

    def percent(self, revision: str) -> int:
        """The share of traffic ``revision`` gets (0 when it is not a target)."""
        return sum(int(t["percent"]) for t in self.traffic if t["revisionName"] == revision)


def plan_traffic(revisions: list[str], ever_ready: set[str], canary_percent: int | None,
                 latest_rolledout: str | None, previous_rolledout: str | None) -> Rollout:
    """KServe's canary rule.

    ``revisions`` oldest first; ``ever_ready`` those that have served (a revision that never became
    ready never gets traffic); ``latest_rolledout`` the last revision that had 100 %, as recorded.

    - no rolled-out revision yet, or the latest ready one is it: 100 % to the latest ready revision;
    - ``canary_percent`` unset or 100 (promotion): the latest ready revision gets 100 % and becomes
      the rolled-out one (the old one becomes ``previous_rolledout``);
    - otherwise the latest ready revision gets ``canary_percent`` (tag ``latest``) and the rolled-out
      one the rest (tag ``prev``); 0 is a rollback: everything to ``prev``.
    """
    latest_created = revisions[-1] if revisions else None
    latest_ready = next((r for r in reversed(revisions) if r in ever_ready), None)
    out = Rollout(latest_created, latest_ready, latest_rolledout, previous_rolledout)
    if latest_ready is None:
        return out
    if latest_rolledout not in revisions or latest_rolledout not in ever_ready:
        out.latest_rolledout = latest_ready
        out.traffic = [_target(latest_ready, 100, True)]
        return out
    if latest_ready == latest_rolledout:
        out.traffic = [_target(latest_ready, 100, True)]
        return out
    if canary_percent is None or canary_percent >= 100:
        out.previous_rolledout, out.latest_rolledout = latest_rolledout, latest_ready
        out.traffic = [_target(latest_ready, 100, True)]
        return out
    out.traffic = [_target(latest_ready, canary_percent, True, "latest"),
                   _target(latest_rolledout, 100 - canary_percent, False, "prev")]
    return out


def _target(revision: str, percent: int, latest: bool, tag: str | None = None) -> dict:
    target = {"revisionName": revision, "latestRevision": latest, "percent": int(percent)}
    if tag:
        target["tag"] = tag
    return target
