"""Pod Security Admission on the API's write path: the namespace's labels (or the server's default)
say which Pod Security Standard each mode applies; `enforce` refuses, `warn` answers with a
``Warning`` header, `audit` writes a line to the control plane's log.

Upstream enforces on Pods and only warns on workload resources (Deployments, Jobs), whose pods
it refuses later, one by one, when a controller creates them. Here controllers create pods
inside the control plane, past admission, so a workload kind's pod templates (a Job's template,
every replica type of a PyTorchJob, a Katib trial template, an InferenceService's components)
are enforced when the workload is applied: the user learns at once rather than from a job that
never starts.
"""

from __future__ import annotations

import logging
from typing import Any

from trimaran.api import podsecurity
from trimaran.api.kinds import KindInfo
from trimaran.api.podsecurity import Policy
from trimaran.server.kube.errors import StatusError
from trimaran.store import NotFound, Store

__all__ = ["PodSecurityAdmission"]

log = logging.getLogger(__name__)


class PodSecurityAdmission:
    """Judges the pods an object stands for against its namespace's Pod Security policy."""

    def __init__(self, store: Store, default: Policy) -> None:
        self.store = store
        self.default = default

    def policy(self, namespace: str) -> Policy:
        try:
            labels = self.store.get("Namespace", "", namespace)["metadata"].get("labels")
        except NotFound:
            labels = None  # created with the object, unlabelled
        return podsecurity.policy_for(labels, self.default)

    def admit(self, info: KindInfo, obj: dict[str, Any], current: dict[str, Any] | None) -> list[str]:
        """Refuse ``obj`` (a 403, as kube-apiserver) if its pods violate the enforced level; else
        return the warnings to send. An update that leaves every pod template as it was is let
        through, as upstream lets through updates that change no pod spec."""
        if info.kind == "Namespace":
            return self._namespace_warnings(obj, current)
        if info.pod_templates is None:
            return []
        templates = list(info.pod_templates(obj))
        if not templates or current is not None and templates == list(info.pod_templates(current)):
            return []
        meta = obj["metadata"]
        policy = self.policy(meta.get("namespace") or "default")
        if policy.privileged:
            return []
        name = meta.get("name") or meta.get("generateName") or ""
        audited = podsecurity.judge(policy.audit.level, templates)
        if audited:  # refused or not, as upstream's audit annotation
            log.warning('audit: %s "%s" in namespace "%s" would violate PodSecurity "%s": %s', info.plural, name,
                        meta.get("namespace"), policy.audit, audited)
        enforced = podsecurity.judge(policy.enforce.level, templates)
        if enforced:
            resource = f"{info.plural}.{info.group}" if info.group else info.plural
            raise StatusError(403, "Forbidden", f'{resource} "{name}" is forbidden: violates PodSecurity '
                              f'"{policy.enforce}": {enforced}',
                              {"name": name, "group": info.group, "kind": info.plural})
        warned = podsecurity.judge(policy.warn.level, templates)
        return [f'would violate PodSecurity "{policy.warn}": {warned}'] if warned else []

    def _namespace_warnings(self, namespace: dict[str, Any], current: dict[str, Any] | None) -> list[str]:
        """A stricter enforce level on a namespace leaves its running pods alone, and says which
        of them it would refuse now (upstream's warnings)."""
        if current is None:
            return []
        new = podsecurity.policy_for(namespace["metadata"].get("labels"), self.default).enforce
        old = podsecurity.policy_for(current["metadata"].get("labels"), self.default).enforce
        if new == old or new.level == podsecurity.PRIVILEGED or \
                podsecurity.LEVELS.index(new.level) <= podsecurity.LEVELS.index(old.level):
            return []
        ns = namespace["metadata"]["name"]
        by_reason: dict[str, list[str]] = {}
        for pod in self.store.list("Pod", ns):
            violations = podsecurity.evaluate(new.level, pod["metadata"], pod.get("spec"))
            if violations:
                reasons = ", ".join(reason for reason, _ in violations)
                by_reason.setdefault(reasons, []).append(pod["metadata"]["name"])
        if not by_reason:
            return []
        warnings = [f'existing pods in namespace "{ns}" violate the new PodSecurity enforce level "{new}"']
        for reasons, pods in sorted(by_reason.items()):
            first, others = min(pods), len(pods) - 1
            more = "" if not others else f" (and {others} other pod{'s' if others > 1 else ''})"
            warnings.append(f"{first}{more}: {reasons}")
        return warnings
