"""JobSet: one child batch Job per replicatedJob replica, run by the batch Job controller.

Child Jobs are named ``<jobset>-<rjob>-<index>``, owned by the JobSet (so the garbage collector
removes them with it) and carry JobSet's labels and annotations down to their pods. The JobSet's
pods find each other by hostname (``spec.network.enableDNSHostnames``, on by default): as upstream,
the JobSet owns a headless Service named ``spec.network.subdomain`` (default: its name) selecting
its pods, and each pod has its Indexed hostname and that ``subdomain``, so on the pod network the
cluster DNS answers ``<host>.<subdomain>`` with the pod's IP. Where pods share the host's network
(no pod network, or a template with ``hostNetwork``) each child's pod template also carries the
``trimaran.io/hosts`` annotation naming every Indexed pod of the set at loopback (short,
``.<subdomain>`` and ``.<subdomain>.<ns>.svc[.cluster.local]``), which the batch controller passes
to its pods: there every pod answers on the host's loopback, and a hostNetwork pod's resolv.conf
is the host's, not the cluster DNS.

A restart (failure policy) bumps ``status.restarts``; Jobs labelled with an older restart attempt
are deleted in the foreground and recreated once gone, so an old pod never holds a port a new one
needs. Condition reasons and messages are upstream's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re

from trimaran.api import ManifestError, validate
from trimaran.api.jobset import (
    CONTROLLER_NAME,
    COORDINATOR_KEY,
    GLOBAL_REPLICAS_KEY,
    GROUP_NAME_KEY,
    GROUP_REPLICAS_KEY,
    JOB_GLOBAL_INDEX_KEY,
    JOB_GROUP_INDEX_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
    REPLICATED_JOB_REPLICAS_KEY,
    RESTART_ATTEMPT_KEY,
    job_name,
    pod_hostname_of,
)
from trimaran.api.meta import replica_count
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import get_condition, is_true, seconds_since, set_condition
from trimaran.controllers.gc import request_delete
from trimaran.controllers.pods import HOSTS_ANNOTATION, LOOPBACK, owner_reference
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

# Past this many Indexed pods the hosts annotation would outgrow the 256 KiB annotation limit.
MAX_NAMED_PODS = 500
_FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
_MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
_ACTIONS = {
    "FailJobSet": ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action"),
    "RestartJobSet": ("RestartJobSetFailurePolicyAction", "applying RestartJobSet failure policy action"),
    "RestartJobSetAndIgnoreMaxRestarts": ("RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
                                          "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"),
}


class JobSetReconciler(Reconciler):
    name = "jobset"
    kinds = ("JobSet",)
    watches = ("Job",)

    def __init__(self, store: Store, pod_network: bool = False) -> None:
        """``pod_network``: pods have network namespaces of their own (trimaran.runtime.network) and
        resolve each other through the cluster DNS."""
        super().__init__(store)
        self.pod_network = pod_network

    def reconcile(self, key: Key) -> float | None:
        try:
            jobset = self.store.get("JobSet", key.namespace, key.name)
        except NotFound:
            return None
        spec = jobset["spec"]
        if is_being_deleted(jobset) or spec.get("managedBy") not in (None, CONTROLLER_NAME):
            return None  # another controller (Kueue's MultiKueue, say) runs it
        status = copy.deepcopy(jobset.get("status") or {})
        before = copy.deepcopy(status)
        status.setdefault("restarts", 0)
        jobs = self.store.list("Job", key.namespace, owner_uid=jobset["metadata"]["uid"])
        attempt = int(status["restarts"])
        current = [j for j in jobs if _attempt(j) >= attempt]
        stale = [j for j in jobs if _attempt(j) < attempt]

        if _finished(status):
            for job in current:
                if not _job_finished(job):
                    self._delete(job)
            requeue = self._expire(jobset, status)
        else:
            for job in stale:
                self._delete(job)
            status["replicatedJobsStatus"] = _replicated_jobs_status(spec, current)
            self._startup_conditions(spec, status)
            requeue = self._step(jobset, status, current, {j["metadata"]["name"] for j in stale})

        return self.settle_status(jobset, status, before, requeue)

    def _step(self, jobset: dict, status: dict, jobs: list[dict], leaving: set[str]) -> float | None:
        spec = jobset["spec"]
        failed = [j for j in jobs if is_true(j.get("status") or {}, "Failed")]
        if failed:
            return self._on_failure(jobset, status, failed)
        if _succeeded(spec, status):
            self._finish(jobset, status, "Completed", "AllJobsCompleted", "jobset completed successfully")
            for job in jobs:
                if not _job_finished(job):
                    self._delete(job)
            return self._expire(jobset, status)

        suspend = bool(spec.get("suspend"))
        if suspend and not is_true(status, "Suspended"):
            set_condition(status, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
            self.store.record_event(jobset, "Normal", "SuspendedJobs", "jobset is suspended")
        elif not suspend and is_true(status, "Suspended"):
            set_condition(status, "Suspended", "False", "ResumeJobs", "jobset is resumed")
            self.store.record_event(jobset, "Normal", "ResumeJobs", "jobset is resumed")
        for job in jobs:
            if not _job_finished(job) and bool(job["spec"].get("suspend")) != suspend:
                self._set_suspend(job, suspend)

        self._ensure_claims(jobset)
        waiting = self._create_missing(jobset, status, jobs, leaving, suspend)
        return 0.5 if waiting else None

    def _create_missing(self, jobset: dict, status: dict, jobs: list[dict], leaving: set[str], suspend: bool) -> bool:
        """Create the Jobs startupPolicy and dependsOn allow; True when one waits for an old one to go."""
        spec = jobset["spec"]
        if leaving and (spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate":
            return True  # every Job of the previous attempt goes before any of the next is made
        name = jobset["metadata"]["name"]
        existing = {j["metadata"]["name"] for j in jobs}
        counts = {s["name"]: s for s in status["replicatedJobsStatus"]}
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        hosts: dict[str, str] | None = None
        hosts_known = False
        global_replicas = sum(replica_count(r) for r in spec.get("replicatedJobs") or [])
        global_index = 0
        group_replicas: dict[str, int] = {}
        for rjob in spec.get("replicatedJobs") or []:
            group = rjob.get("groupName", "default")
            group_replicas[group] = group_replicas.get(group, 0) + replica_count(rjob)
        group_next: dict[str, int] = {}
        waiting = False
        for rjob in spec.get("replicatedJobs") or []:
            replicas = replica_count(rjob)
            first_global = global_index
            global_index += replicas
            group = rjob.get("groupName", "default")
            first_in_group = group_next.get(group, 0)
            group_next[group] = first_in_group + replicas
            grouping = {GROUP_NAME_KEY: group, GROUP_REPLICAS_KEY: str(group_replicas[group])}
            if not all(_dependency_met(counts[d["name"]], d["status"], _replicas_of(spec, d["name"]))
                       for d in rjob.get("dependsOn") or []):
                continue
            for index in range(replicas):
                child = job_name(name, rjob["name"], index)
                if child in existing:
                    continue
                if child in leaving:
                    waiting = True
                    continue
                if not hosts_known:
                    # Once per pass that creates Jobs: a Service deleted meanwhile comes back with
                    # the next Jobs (a restart's), and a foreign one is said once per pass, not per event.
                    self._ensure_service(jobset)
                    hosts, hosts_known = self._hosts(jobset), True
                grouping[JOB_GROUP_INDEX_KEY] = str(first_in_group + index)
                job = self._build_job(jobset, rjob, index, first_global + index, global_replicas, grouping,
                                      int(status["restarts"]), suspend, hosts)
                if job is None:
                    return False
                try:
                    self.store.create(job)
                    self.store.record_event(jobset, "Normal", "SuccessfulCreate", f"Created job {child}")
                except AlreadyExists:
                    waiting = True  # the previous attempt's Job is still being deleted
            if in_order and not _ready(counts[rjob["name"]], replicas):
                break  # InOrder: the next replicatedJob waits until every Job of this one is ready
        return waiting

    def _ensure_claims(self, jobset: dict) -> None:
        """``volumeClaimPolicies``: one claim ``<name>-<jobset>`` per template, owned by the JobSet
        unless retained."""
        name, ns = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
        for policy in jobset["spec"].get("volumeClaimPolicies") or []:
            retain = (policy.get("retentionPolicy") or {}).get("whenDeleted") == "Retain"
            for template in policy.get("templates") or []:
                meta = template["metadata"]
                claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {**meta, "name": f"{meta['name']}-{name}", "namespace": ns,
                                      "labels": {**(meta.get("labels") or {}), JOBSET_NAME_KEY: name}},
                         "spec": template.get("spec") or {}}
                if not retain:
                    claim["metadata"]["ownerReferences"] = [owner_reference(jobset)]
                try:
                    self.store.create(validate(claim).object)
                except AlreadyExists:
                    pass  # made on an earlier pass, or kept from an earlier JobSet of this name
                except ManifestError as exc:
                    self.store.record_event(jobset, "Warning", "PVCCreationFailed", "; ".join(exc.problems))

    def _startup_conditions(self, spec: dict, status: dict) -> None:
        if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") != "InOrder":
            return
        if is_true(status, "StartupPolicyCompleted"):
            return
        rjobs = spec.get("replicatedJobs") or []
        counts = {s["name"]: s for s in status["replicatedJobsStatus"]}
        if all(_ready(counts[r["name"]], replica_count(r)) for r in rjobs):
            set_condition(status, "StartupPolicyInProgress", "False", "InOrderStartupPolicyCompleted",
                          "in order startup policy has completed")
            set_condition(status, "StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted",
                          "in order startup policy has completed")
        else:
            set_condition(status, "StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress",
                          "in order startup policy is in progress")

    def _on_failure(self, jobset: dict, status: dict, failed: list[dict]) -> float | None:
        """upstream's failure policy: the first matching rule's action on the first failed Job."""
        first = min(failed, key=lambda j: (get_condition(j["status"], "Failed") or {}).get("lastTransitionTime", ""))
        suffix = f" (first failed job: {first['metadata']['name']})"
        policy = jobset["spec"].get("failurePolicy")
        if policy is None:
            reason, message = _FAILED_JOBS
            self._finish(jobset, status, "Failed", reason, message + suffix)
            return self._expire(jobset, status)
        rule = next((r for r in policy.get("rules") or [] if _rule_matches(r, first)), None)
        action = rule["action"] if rule is not None else "RestartJobSet"
        reason, message = _ACTIONS[action]
        if action == "FailJobSet":
            self._finish(jobset, status, "Failed", reason, message + suffix)
            return self._expire(jobset, status)
        counted = action == "RestartJobSet"
        if counted and int(status.get("restartsCountTowardsMax", 0)) >= int(policy.get("maxRestarts", 0)):
            reason, message = _MAX_RESTARTS
            self._finish(jobset, status, "Failed", reason, message + suffix)
            return self._expire(jobset, status)
        status["restarts"] = int(status.get("restarts", 0)) + 1
        if counted:
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
        self.store.record_event(jobset, "Warning", reason, message + suffix)
        return 0.0  # the next pass deletes this attempt's Jobs and recreates them

    def _finish(self, jobset: dict, status: dict, ctype: str, reason: str, message: str) -> None:
        set_condition(status, ctype, "True", reason, message)
        status["terminalState"] = ctype
        self.store.record_event(jobset, "Normal" if ctype == "Completed" else "Warning", reason, message)

    def _expire(self, jobset: dict, status: dict) -> float | None:
        """``ttlSecondsAfterFinished``: seconds left, or delete the JobSet (the collector takes its Jobs)."""
        ttl = jobset["spec"].get("ttlSecondsAfterFinished")
        done = get_condition(status, status.get("terminalState") or "")
        if ttl is None or done is None:
            return None
        left = float(ttl) - seconds_since(done.get("lastTransitionTime"))
        if left > 0:
            return left
        try:
            request_delete(self.store, jobset)
        except (NotFound, Conflict):
            pass
        return None

    def _delete(self, job: dict) -> None:
        if is_being_deleted(job):
            return
        try:
            request_delete(self.store, job, propagation="Foreground")
        except (NotFound, Conflict):
            pass  # gone, or changed: the next pass sees it

    def _set_suspend(self, job: dict, suspend: bool) -> None:
        fresh = copy.deepcopy(job)
        fresh["spec"]["suspend"] = suspend
        try:
            self.store.update(fresh)
        except (NotFound, Conflict):
            pass

    def _ensure_service(self, jobset: dict) -> None:
        """Upstream's headless Service ``<subdomain>`` for DNS hostnames, owned by the JobSet (the
        collector removes it with it); a Service of that name that is not the JobSet's is left alone
        and an event says so."""
        network = jobset["spec"].get("network") or {}
        if not network.get("enableDNSHostnames", True):
            return
        name, ns = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
        subdomain = network.get("subdomain") or name
        try:
            existing = self.store.get("Service", ns, subdomain)
        except NotFound:
            existing = None
        if existing is not None:
            owners = {o.get("uid") for o in existing["metadata"].get("ownerReferences") or []}
            if jobset["metadata"]["uid"] not in owners:
                self.store.record_event(jobset, "Warning", "HeadlessServiceConflict",
                                        f"Service {subdomain} exists and is not owned by JobSet {name}: the pods' "
                                        f"names <host>.{subdomain} resolve only if that Service selects them")
            return
        svc = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": subdomain, "namespace": ns, "labels": {JOBSET_NAME_KEY: name},
                            "ownerReferences": [owner_reference(jobset)]},
               "spec": {"clusterIP": "None", "selector": {JOBSET_NAME_KEY: name}, "publishNotReadyAddresses": True}}
        try:
            svc = validate(svc).object
        except ManifestError as exc:  # a JobSet's name may have dots; a Service's may not
            self.store.record_event(jobset, "Warning", "HeadlessServiceCreationFailed",
                                    f'Service "{subdomain}" is invalid: ' + "; ".join(exc.problems))
            return
        try:
            self.store.create(svc)
        except AlreadyExists:
            pass  # made meanwhile: the next pass judges it

    def _hosts(self, jobset: dict) -> dict[str, str] | None:
        """Every Indexed pod's hostname in its forms → loopback, for pods that share the host's
        network; None without DNS hostnames, or on the pod network when no template asks for the
        host's network (the cluster DNS names them)."""
        spec = jobset["spec"]
        network = spec.get("network") or {}
        if not network.get("enableDNSHostnames", True):
            return None
        if self.pod_network and not any(_host_network(r) for r in spec.get("replicatedJobs") or []):
            return None
        name, ns = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
        subdomain = network.get("subdomain") or name
        names = [pod_hostname_of(name, rjob["name"], j, p)
                 for rjob in spec.get("replicatedJobs") or []
                 if (rjob["template"]["spec"].get("completionMode") or "NonIndexed") == "Indexed"
                 for j in range(replica_count(rjob))
                 for p in range(int(rjob["template"]["spec"].get("completions") or 1))]
        if len(names) > MAX_NAMED_PODS:
            self.store.record_event(jobset, "Warning", "TooManyHostnames",
                                    f"{len(names)} pods are more than the {MAX_NAMED_PODS} whose hostnames "
                                    "Trimaran writes into every pod's /etc/hosts; pods get only their own")
            return {}
        hosts: dict[str, str] = {}
        for host in names:
            for form in (host, f"{host}.{subdomain}", f"{host}.{subdomain}.{ns}", f"{host}.{subdomain}.{ns}.svc",
                         f"{host}.{subdomain}.{ns}.svc.cluster.local"):
                hosts[form] = LOOPBACK
        return hosts

    def _build_job(self, jobset: dict, rjob: dict, index: int, global_index: int, global_replicas: int,
                   grouping: dict[str, str], attempt: int, suspend: bool, hosts: dict[str, str] | None
                   ) -> dict | None:
        """A child Job, validated as if applied (batch defaults); None, with an event, when it is refused."""
        spec = jobset["spec"]
        name, ns = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
        child = job_name(name, rjob["name"], index)
        template = copy.deepcopy(rjob["template"])
        ours = {
            JOBSET_NAME_KEY: name,
            REPLICATED_JOB_NAME_KEY: rjob["name"],
            REPLICATED_JOB_REPLICAS_KEY: str(replica_count(rjob)),
            GLOBAL_REPLICAS_KEY: str(global_replicas),
            JOB_INDEX_KEY: str(index),
            JOB_GLOBAL_INDEX_KEY: str(global_index),
            JOB_KEY: hashlib.sha1(f"{ns}/{child}".encode()).hexdigest(),
            RESTART_ATTEMPT_KEY: str(attempt),
            **grouping,
        }
        annotations = dict(ours)
        coordinator = spec.get("coordinator")
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or name
        if coordinator:
            host = pod_hostname_of(name, coordinator["replicatedJob"], coordinator.get("jobIndex", 0),
                                   coordinator.get("podIndex", 0))
            annotations[COORDINATOR_KEY] = f"{host}.{subdomain}"
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **ours}
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        job_spec = template["spec"]
        job_spec["suspend"] = suspend
        pod = job_spec["template"]
        pod_meta = pod.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
        pod_annotations = {**(pod_meta.get("annotations") or {}), **annotations}
        mounted = {m["name"] for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
                   for m in c.get("volumeMounts") or []}
        for policy in spec.get("volumeClaimPolicies") or []:
            for claim in policy.get("templates") or []:
                volume = claim["metadata"]["name"]
                if volume in mounted:
                    pod["spec"].setdefault("volumes", []).append(
                        {"name": volume, "persistentVolumeClaim": {"claimName": f"{volume}-{name}"}})
        if network.get("enableDNSHostnames", True):
            pod["spec"]["subdomain"] = subdomain
            if hosts is not None and (not self.pod_network or _host_network(rjob)):
                pod_annotations[HOSTS_ANNOTATION] = json.dumps(hosts, separators=(",", ":"))
        pod_meta["annotations"] = pod_annotations
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": child, "namespace": ns, "labels": meta["labels"],
                            "annotations": meta["annotations"], "ownerReferences": [owner_reference(jobset)]},
               "spec": job_spec}
        try:
            return validate(job).object
        except ManifestError as exc:
            self.store.record_event(jobset, "Warning", "JobCreationFailed", "; ".join(exc.problems))
            return None


def _host_network(rjob: dict) -> bool:
    return bool(rjob["template"]["spec"]["template"].get("spec", {}).get("hostNetwork"))


def _attempt(job: dict) -> int:
    try:
        return int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT_KEY, "0"))
    except ValueError:
        return 0


def _job_finished(job: dict) -> bool:
    status = job.get("status") or {}
    return is_true(status, "Complete") or is_true(status, "Failed")


def _finished(status: dict) -> bool:
    return is_true(status, "Completed") or is_true(status, "Failed")


def _job_ready(job: dict) -> bool:
    """Ready as upstream counts it: ready plus succeeded pods reach min(parallelism, completions)."""
    spec, status = job["spec"], job.get("status") or {}
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    wanted = min(parallelism, int(completions)) if completions is not None else parallelism
    return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= wanted


def _replicated_jobs_status(spec: dict, jobs: list[dict]) -> list[dict]:
    by_rjob: dict[str, list[dict]] = {}
    for job in jobs:
        by_rjob.setdefault((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME_KEY, ""), []).append(job)
    out = []
    for rjob in spec.get("replicatedJobs") or []:
        mine = by_rjob.get(rjob["name"], [])
        running = [j for j in mine if not _job_finished(j)]
        out.append({
            "name": rjob["name"],
            "ready": sum(1 for j in running if _job_ready(j)),
            "succeeded": sum(1 for j in mine if is_true(j.get("status") or {}, "Complete")),
            "failed": sum(1 for j in mine if is_true(j.get("status") or {}, "Failed")),
            "active": sum(1 for j in running if int((j.get("status") or {}).get("active") or 0) > 0),
            "suspended": sum(1 for j in running if j["spec"].get("suspend")),
        })
    return out


def _replicas_of(spec: dict, rjob_name: str) -> int:
    return next(replica_count(r) for r in spec["replicatedJobs"] if r["name"] == rjob_name)


def _ready(counts: dict, replicas: int) -> bool:
    return counts["ready"] + counts["succeeded"] >= replicas


def _dependency_met(counts: dict, wanted: str, replicas: int) -> bool:
    if wanted == "Complete":
        return counts["succeeded"] >= replicas
    return counts["ready"] + counts["succeeded"] + counts["failed"] >= replicas


def _succeeded(spec: dict, status: dict) -> bool:
    policy = spec.get("successPolicy") or {"operator": "All"}
    targets = set(policy.get("targetReplicatedJobs") or [r["name"] for r in spec.get("replicatedJobs") or []])
    counts = {s["name"]: s for s in status["replicatedJobsStatus"]}
    rjobs = [r for r in spec.get("replicatedJobs") or [] if r["name"] in targets]
    if not rjobs:
        return False
    if policy["operator"] == "Any":
        return any(counts[r["name"]]["succeeded"] > 0 for r in rjobs)
    return all(counts[r["name"]]["succeeded"] >= replica_count(r) for r in rjobs)


def _rule_matches(rule: dict, job: dict) -> bool:
    labels = job["metadata"].get("labels") or {}
    targets = rule.get("targetReplicatedJobs")
    if targets and labels.get(REPLICATED_JOB_NAME_KEY) not in targets:
        return False
    failed = get_condition(job.get("status") or {}, "Failed") or {}
    reasons = rule.get("onJobFailureReasons")
    if reasons and failed.get("reason") not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns")
    return not patterns or any(re.search(p, failed.get("message") or "") for p in patterns)
