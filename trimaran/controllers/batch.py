"""batch/v1 Job: completions, parallelism, Indexed completion mode, backoffLimit, deadlines.

Conditions are the ones ``kubectl wait --for=condition=Complete`` and the Job controller use:
Complete, Failed (reasons BackoffLimitExceeded, DeadlineExceeded), Suspended.
"""

from __future__ import annotations

import copy
import itertools
import json
import secrets
import string

from trimaran.api.batch import CONTROLLER_UID_LABELS, JOB_NAME_LABELS
from trimaran.api.meta import pod_hostname
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import is_true, now_rfc3339, seconds_since, set_condition
from trimaran.controllers.pods import (
    HOSTS_ANNOTATION,
    LOOPBACK,
    expire_finished,
    is_terminating,
    new_pod,
    owned_pods,
    phase,
    request_deletion,
    restart_count,
    set_gang,
)
from trimaran.store import NotFound, Store

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# As the job controller's MaxPodCreateDeletePerSync: a Job asking for a million pods gets them in
# batches, each pass's status written between, never in one pass that holds the controller.
MAX_POD_CREATES_PER_SYNC = 500


class BatchJobReconciler(Reconciler):
    name = "batch"
    kinds = ("Job",)
    watches = ("Pod",)

    def __init__(self, store: Store) -> None:
        super().__init__(store)

    def reconcile(self, key: Key) -> float | None:
        try:
            job = self.store.get("Job", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(job):
            return None
        spec = job["spec"]
        status = copy.deepcopy(job.get("status") or {})
        before = copy.deepcopy(status)
        pods = owned_pods(self.store, job)
        requeue = None

        if _finished(status):
            requeue = self._after_finish(job, status, pods)
        elif spec.get("suspend"):
            for pod in pods:
                request_deletion(self.store, pod)
            status["active"] = 0
            if not is_true(status, "Suspended"):
                set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
                self.store.record_event(job, "Normal", "Suspended", "Job suspended")
        else:
            if is_true(status, "Suspended"):
                set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                status["startTime"] = now_rfc3339()
            status.setdefault("startTime", now_rfc3339())
            requeue = self._run(job, status, pods)

        return self.settle_status(job, status, before, requeue)

    def _run(self, job: dict, status: dict, pods: list[dict]) -> float | None:
        spec = job["spec"]
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        backoff = int(spec.get("backoffLimit", 6))
        live = [p for p in pods if not is_terminating(p)]
        active = [p for p in live if phase(p) in ("Pending", "Running")]
        succeeded = [p for p in live if phase(p) == "Succeeded"]
        failed = [p for p in live if phase(p) == "Failed"]
        failures = len(failed) + sum(restart_count(p) for p in live)
        status.update(active=len(active), succeeded=len(succeeded), failed=len(failed),
                      ready=sum(1 for p in active if phase(p) == "Running"))
        done_indexes = sorted({_index(p) for p in succeeded}) if indexed else []
        if indexed:
            status["completedIndexes"] = _ranges(done_indexes)
            status["succeeded"] = len(done_indexes)

        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and seconds_since(status.get("startTime")) >= float(deadline):
            return self._fail(job, status, pods, "DeadlineExceeded", "Job was active longer than specified deadline")
        if failures > backoff:
            return self._fail(job, status, pods, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

        target = int(completions) if completions is not None else None
        if target is not None and status["succeeded"] >= target or target is None and succeeded and not active:
            set_condition(status, "Complete", "True", "", "")
            status["completionTime"] = now_rfc3339()
            self.store.record_event(job, "Normal", "Completed", "Job completed")
            return self._after_finish(job, status, pods)

        if target is None:
            want = 0 if succeeded else parallelism - len(active)
        else:
            want = min(parallelism, target - status["succeeded"]) - len(active)
        more = want > MAX_POD_CREATES_PER_SYNC
        want = min(want, MAX_POD_CREATES_PER_SYNC)
        if want > 0:
            if indexed:
                taken = set(done_indexes) | {_index(p) for p in active}
                todo = list(itertools.islice((i for i in range(target or 0) if i not in taken), want))
            else:
                todo = [None] * want
            for index in todo:
                self.store.create(self._build_pod(job, index))
                self.store.record_event(job, "Normal", "SuccessfulCreate",
                                        "Created pod" + (f" for index {index}" if index is not None else ""))
            # As the job controller's manageJob: the pods this pass made are active in the status it
            # writes, so their creation events find the count already right (no second status write).
            status["active"] += len(todo)
        if more:
            return 0.0  # the next batch of pods after this pass's status is written
        if deadline is not None:
            return max(0.05, float(deadline) - seconds_since(status.get("startTime")))
        return None

    def _fail(self, job: dict, status: dict, pods: list[dict], reason: str, message: str) -> float | None:
        set_condition(status, "Failed", "True", reason, message)
        status["completionTime"] = now_rfc3339()
        self.store.record_event(job, "Warning", reason, message)
        return self._after_finish(job, status, pods)

    def _after_finish(self, job: dict, status: dict, pods: list[dict]) -> float | None:
        for pod in pods:
            if phase(pod) in ("Pending", "Running"):
                request_deletion(self.store, pod)
        status["active"] = 0
        return expire_finished(self.store, job, status, pods)

    def _build_pod(self, job: dict, index: int | None) -> dict:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        template = copy.deepcopy(job["spec"].get("template") or {})
        tmeta = template.get("metadata") or {}
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        labels = dict(tmeta.get("labels") or {})
        # As the template of a Job made through the API already says: also Jobs other controllers make.
        labels.update(dict.fromkeys(JOB_NAME_LABELS, name))
        labels.update(dict.fromkeys(CONTROLLER_UID_LABELS, job["metadata"]["uid"]))
        annotations = dict(tmeta.get("annotations") or {})
        spec = template.get("spec") or {}
        pod_name = f"{name}-{suffix}"
        if index is not None:
            pod_name = f"{name}-{index}-{suffix}"
            labels[INDEX_ANNOTATION] = str(index)
            annotations[INDEX_ANNOTATION] = str(index)
            spec.setdefault("hostname", pod_hostname(f"{name}-{index}"))
            for container in spec.get("containers") or []:
                container["env"] = list(container.get("env") or []) + [
                    {"name": "JOB_COMPLETION_INDEX", "value": str(index)}]
        pod = new_pod(pod_name, ns, spec, owner=job, labels=labels, annotations=annotations)
        host = spec.get("hostname") or pod_name
        # A JobSet's child Job names every pod of the set in its template, so they resolve each other.
        hosts = json.loads(annotations.get(HOSTS_ANNOTATION) or "{}")
        hosts[host] = LOOPBACK
        set_gang(pod, pod_name, 1, hosts)
        return pod


def _index(pod: dict) -> int:
    return int(pod["metadata"]["annotations"][INDEX_ANNOTATION])


def _finished(status: dict) -> bool:
    return is_true(status, "Complete") or is_true(status, "Failed")


def _ranges(indexes: list[int]) -> str:
    """Kubernetes' compressed form of completed indexes: "0-2,4"."""
    out: list[str] = []
    start = prev = None
    for i in indexes:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(out)
