"""JobSet (``jobset.x-k8s.io/v1alpha2``): replicated batch Jobs run as one workload.

Defaults and checks are JobSet's admission webhook's (its wording, with a field path added), so
a manifest its webhook refuses is refused here at apply, and nothing is stored.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in batch.py.

import dataclasses
import json
import re
from typing import Any, Literal

from pydantic import Field

from trimaran.api.batch import Job, JobSpec
from trimaran.api.core import PersistentVolumeClaimSpec, Volume
from trimaran.api.errors import FieldError, join_path
from trimaran.api.labels import REPLICATED_JOB_NAME_KEY  # re-exported with the other keys
from trimaran.api.meta import (
    INT32_MAX,
    ApiModel,
    Condition,
    NonNegInt32,
    ObjectMeta,
    Resource,
    is_dns1035_label,
    is_dns1123_subdomain,
)

__all__ = [
    "API_VERSION",
    "CONTROLLER_NAME",
    "GLOBAL_REPLICAS_KEY",
    "JOBSET_NAME_KEY",
    "JOBSET_UID_KEY",
    "JOB_GLOBAL_INDEX_KEY",
    "JOB_INDEX_KEY",
    "JOB_KEY",
    "REPLICATED_JOB_NAME_KEY",
    "REPLICATED_JOB_REPLICAS_KEY",
    "RESTART_ATTEMPT_KEY",
    "JobSet",
    "job_name",
    "pod_hostname_of",
]

API_VERSION = "jobset.x-k8s.io/v1alpha2"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

# Labels and annotations on child Jobs and their pods, upstream's keys.
JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_REPLICAS_KEY = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_KEY = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_KEY = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"
COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"
GROUP_NAME_KEY = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_KEY = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_KEY = "jobset.sigs.k8s.io/job-group-index"

# The reasons a failed batch Job may give that a failure policy rule may name (the webhook's list).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy")
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_MANAGED_BY_MAX = 63
_LABEL_MAX = 63
# Per-job restarts would need per-job restart counters in status; the whole-set actions cover Trainer.
_UNSUPPORTED_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    """``<jobset>-<replicatedJob>-<index>``: the name of a child Job."""
    return f"{jobset}-{replicated_job}-{index}"


def pod_hostname_of(jobset: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>``: an Indexed child pod's hostname."""
    return f"{job_name(jobset, replicated_job, job_index)}-{pod_index}"


class JobTemplateSpec(ApiModel):
    """A batch Job to stamp out: labels/annotations plus a Job spec."""

    metadata: ObjectMeta | None = None
    spec: JobSpec


class DependsOn(ApiModel):
    """A replicatedJob created only once the named earlier one is Ready or Complete."""

    name: str
    status: Literal["Ready", "Complete"]


class ReplicatedJob(ApiModel):
    """``replicas`` copies of one Job template."""

    name: str
    group_name: str | None = None
    template: JobTemplateSpec
    replicas: NonNegInt32 | None = None
    depends_on: list[DependsOn] | None = None


class Network(ApiModel):
    """Pod hostnames ``<jobset>-<rjob>-<job>-<pod>.<subdomain>``."""

    enable_dns_hostnames: bool | None = Field(default=None, alias="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class SuccessPolicy(ApiModel):
    """When the JobSet has succeeded: All or Any of the target replicatedJobs' jobs succeeded."""

    operator: Literal["All", "Any"]
    target_replicated_jobs: list[str] | None = None


class FailurePolicyRule(ApiModel):
    """What to do when a matching child Job fails."""

    name: str | None = None
    action: Literal["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                    "RestartJobAndIgnoreMaxRestarts"]
    on_job_failure_reasons: list[str] | None = None
    on_job_failure_message_patterns: list[str] | None = None
    target_replicated_jobs: list[str] | None = None


class FailurePolicy(ApiModel):
    """How many whole-set restarts a failure may cause, and rules that override the default restart."""

    max_restarts: NonNegInt32 | None = None
    restart_strategy: Literal["Recreate", "BlockingRecreate", "InPlaceRestart"] | None = None
    rules: list[FailurePolicyRule] | None = None


class StartupPolicy(ApiModel):
    """InOrder: a replicatedJob is created only when every earlier one is ready."""

    startup_policy_order: Literal["AnyOrder", "InOrder"]


class Coordinator(ApiModel):
    """The pod whose stable hostname every pod gets in the coordinator annotation."""

    replicated_job: str
    job_index: NonNegInt32 | None = None
    pod_index: NonNegInt32 | None = None


class ClaimTemplate(ApiModel):
    """A PersistentVolumeClaim to make once per JobSet, ``<name>-<jobset>``."""

    metadata: ObjectMeta
    spec: PersistentVolumeClaimSpec | None = None


class VolumeRetentionPolicy(ApiModel):
    """Whether the claims go with the JobSet (Delete) or outlive it (Retain)."""

    when_deleted: Literal["Delete", "Retain"] | None = None


class VolumeClaimPolicy(ApiModel):
    """Claims shared by the replicatedJobs whose containers mount them by name."""

    templates: list[ClaimTemplate] | None = None
    retention_policy: VolumeRetentionPolicy | None = None


class JobSetSpec(ApiModel):
    """``spec`` of a JobSet."""

    replicated_jobs: list[ReplicatedJob] | None = None
    network: Network | None = None
    success_policy: SuccessPolicy | None = None
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    suspend: bool | None = None
    coordinator: Coordinator | None = None
    managed_by: str | None = None
    ttl_seconds_after_finished: NonNegInt32 | None = None
    volume_claim_policies: list[VolumeClaimPolicy] | None = None


class ReplicatedJobStatus(ApiModel):
    """Child Job counts of one replicatedJob."""

    name: str
    ready: NonNegInt32 = 0
    succeeded: NonNegInt32 = 0
    failed: NonNegInt32 = 0
    active: NonNegInt32 = 0
    suspended: NonNegInt32 = 0


class JobSetStatus(ApiModel):
    """Conditions (Completed, Failed, Suspended, StartupPolicy*), restarts and per-replicatedJob counts."""

    conditions: list[Condition] | None = None
    restarts: NonNegInt32 | None = None
    restarts_count_towards_max: NonNegInt32 | None = None
    terminal_state: str | None = None
    replicated_jobs_status: list[ReplicatedJobStatus] | None = None


class JobSet(Resource):
    """jobset.x-k8s.io/v1alpha2 JobSet."""

    spec: JobSetSpec
    status: JobSetStatus | None = None

    def set_defaults(self) -> None:
        """The webhook's ``Default``, and the CRD's defaults (replicas 1, groupName default)."""
        spec = self.spec
        if spec.success_policy is None:
            spec.success_policy = SuccessPolicy(operator="All")
        if spec.startup_policy is None:
            spec.startup_policy = StartupPolicy(startupPolicyOrder="AnyOrder")
        for rjob in spec.replicated_jobs or []:
            if rjob.replicas is None:
                rjob.replicas = 1
            if rjob.group_name is None:
                rjob.group_name = "default"
            if rjob.template.spec.completion_mode is None:
                rjob.template.spec.completion_mode = "Indexed"
            if rjob.template.spec.template.spec.restart_policy is None:
                rjob.template.spec.template.spec.restart_policy = "OnFailure"
        if spec.network is None:
            spec.network = Network()
        if spec.network.enable_dns_hostnames is None:
            spec.network.enable_dns_hostnames = True
        if spec.network.publish_not_ready_addresses is None:
            spec.network.publish_not_ready_addresses = True
        for policy in spec.volume_claim_policies or []:
            if policy.retention_policy is None:
                policy.retention_policy = VolumeRetentionPolicy()
            if policy.retention_policy.when_deleted is None:
                policy.retention_policy.when_deleted = "Delete"
        if spec.failure_policy is not None:
            if spec.failure_policy.restart_strategy is None:
                spec.failure_policy.restart_strategy = "Recreate"
            for i, rule in enumerate(spec.failure_policy.rules or []):
                if not rule.name:
                    rule.name = f"failurePolicyRule{i}"

    def check(self) -> list[FieldError]:
        """The webhook's ``ValidateCreate`` and the CRD's rules, each error at its field."""
        errs = super().check()
        spec = self.spec
        name = self.metadata.name or ""
        rjobs = spec.replicated_jobs or []
        names = [r.name for r in rjobs]
        in_order = spec.startup_policy is not None and spec.startup_policy.startup_policy_order == "InOrder"
        if in_order and any(r.depends_on for r in rjobs):
            errs.append(FieldError.invalid("spec.startupPolicy.startupPolicyOrder", "InOrder",
                                           "StartupPolicy and DependsOn APIs are mutually exclusive"))
        if spec.network is not None and spec.network.subdomain:
            path = "spec.network.subdomain"
            subdomain = spec.network.subdomain
            # Also a Service's name, so a DNS-1035 label as well.
            for message in is_dns1123_subdomain(subdomain) + is_dns1035_label(subdomain):
                if "no more than" in message:
                    message = ".spec.network.subdomain is too long, must be less than 63 characters"
                errs.append(FieldError.invalid(path, subdomain, message))
        if spec.managed_by is not None:
            errs.extend(_check_managed_by(spec.managed_by))
        claims = claim_names(spec)
        errs.extend(_check_claim_policies(spec.volume_claim_policies or [], rjobs))
        seen: set[str] = set()
        for i, rjob in enumerate(rjobs):
            errs.extend(self._check_replicated_job(i, rjob, name, seen, claims))
            seen.add(rjob.name)
        for i, target in enumerate((spec.success_policy.target_replicated_jobs or []) if spec.success_policy else []):
            if target not in names:
                errs.append(FieldError.invalid(
                    join_path("spec.successPolicy.targetReplicatedJobs", i), target,
                    f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs"))
        if spec.failure_policy is not None:
            errs.extend(_check_failure_policy(spec.failure_policy, names))
        if spec.coordinator is not None:
            errs.extend(_check_coordinator(spec.coordinator, rjobs))
        return errs

    def _check_replicated_job(self, i: int, rjob: ReplicatedJob, jobset: str, earlier: set[str],
                              claims: list[str]) -> list[FieldError]:
        errs: list[FieldError] = []
        path = join_path("spec.replicatedJobs", i)
        if rjob.name in earlier:
            errs.append(FieldError.duplicate(join_path(path, "name"), rjob.name))
        for message in is_dns1035_label(rjob.name):
            errs.append(FieldError.invalid(join_path(path, "name"), rjob.name, message))
        replicas = rjob.replicas if rjob.replicas is not None else 1
        job_spec = rjob.template.spec
        parallelism = job_spec.parallelism if job_spec.parallelism is not None else 1
        if parallelism * replicas > INT32_MAX:
            errs.append(FieldError.invalid(
                join_path(path, "replicas"), replicas,
                f"the product of replicas and parallelism must not exceed {INT32_MAX} for replicatedJob '{rjob.name}'"))
        if rjob.group_name is not None:
            for message in is_dns1035_label(rjob.group_name):
                if "no more than" in message:
                    message = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
                errs.append(FieldError.invalid(join_path(path, "groupName"), rjob.group_name, message))
        if jobset and not is_dns1035_label(rjob.name):
            longest_job = job_name(jobset, rjob.name, max(replicas - 1, 0))
            if len(longest_job) > _LABEL_MAX:
                errs.append(FieldError.invalid(
                    join_path(path, "name"), rjob.name,
                    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"))
            elif job_spec.completion_mode == "Indexed":
                # Unset completions become 1 on the child Job; the batch controller's random
                # five-character suffix is part of every pod's name.
                completions = job_spec.completions if job_spec.completions is not None else 1
                longest_pod = pod_hostname_of(jobset, rjob.name, max(replicas - 1, 0),
                                              max(completions - 1, 0)) + "-abcde"
                if len(longest_pod) > _LABEL_MAX:
                    errs.append(FieldError.invalid(
                        join_path(path, "name"), rjob.name,
                        "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"))
        for j, dependency in enumerate(rjob.depends_on or []):
            dep_path = join_path(path, "dependsOn", j, "name")
            if i == 0:
                errs.append(FieldError.invalid(join_path(path, "dependsOn"), dependency.name,
                                               "DependsOn can't be set for the first ReplicatedJob"))
            elif dependency.name not in earlier:
                # Only earlier replicatedJobs may be named, so neither an unknown name nor a cycle passes.
                errs.append(FieldError.invalid(
                    dep_path, dependency.name,
                    f"replicatedJob: {rjob.name} cannot depend on replicatedJob: {dependency.name}"))
        if len(rjob.depends_on or []) > 1:
            errs.append(FieldError.invalid(join_path(path, "dependsOn"), len(rjob.depends_on or []),
                                           "must have at most 1 items"))
        errs.extend(_check_job_template(join_path(path, "template"), rjob.template, claims))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """replicatedJobs and managedBy are immutable; a suspended JobSet's pod scheduling fields may change."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        errs = []
        suspended = bool(old_spec.get("suspend") or new_spec.get("suspend"))
        if _comparable(old_spec.get("replicatedJobs"), suspended) != _comparable(new_spec.get("replicatedJobs"),
                                                                                  suspended):
            errs.append(FieldError.invalid("spec.replicatedJobs", "...", "field is immutable"))
        for field in ("managedBy", "network", "successPolicy", "failurePolicy", "startupPolicy"):
            if old_spec.get(field) != new_spec.get(field):
                message = "field is immutable" if field == "managedBy" else "Value is immutable"
                errs.append(FieldError.invalid(join_path("spec", field), new_spec.get(field), message))
        return errs


def _comparable(rjobs: Any, suspended: bool) -> str:
    """replicatedJobs as compared for immutability: without what Kueue may change while suspended."""
    rjobs = json.loads(json.dumps(rjobs or []))
    if suspended:
        for rjob in rjobs:
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            for key in ("labels", "annotations"):
                (pod.get("metadata") or {}).pop(key, None)
            for key in ("nodeSelector", "tolerations", "schedulingGates"):
                (pod.get("spec") or {}).pop(key, None)
    return json.dumps(rjobs, sort_keys=True)


def claim_names(spec: JobSetSpec) -> list[str]:
    """The volume names of the JobSet's shared claims, which its pods may mount."""
    return [t.metadata.name or "" for p in spec.volume_claim_policies or [] for t in p.templates or []]


def _mounted(template: JobTemplateSpec) -> set[str]:
    pod = template.spec.template.spec
    return {m.name for c in [*(pod.init_containers or []), *pod.containers] for m in c.volume_mounts or []}


def _check_claim_policies(policies: list[VolumeClaimPolicy], rjobs: list[ReplicatedJob]) -> list[FieldError]:
    errs: list[FieldError] = []
    mounted = set().union(*(_mounted(r.template) for r in rjobs)) if rjobs else set()
    own_volumes = {v.name for r in rjobs for v in r.template.spec.template.spec.volumes or []}
    for i, policy in enumerate(policies):
        for j, template in enumerate(policy.templates or []):
            path = join_path("spec.volumeClaimPolicies", i, "templates", j, "metadata")
            claim = template.metadata.name
            if not claim:
                errs.append(FieldError.required(join_path(path, "name")))
                continue
            if template.metadata.namespace:
                errs.append(FieldError.invalid(join_path(path, "namespace"), template.metadata.namespace,
                                               "namespace cannot be set for VolumeClaimPolicies templates"))
            if claim not in mounted:
                errs.append(FieldError.invalid(
                    join_path(path, "name"), claim,
                    f"volume claim template '{claim}' must have a matching volumeMount in at least one container "
                    "or initContainer of a ReplicatedJob template"))
            if claim in own_volumes:
                errs.append(FieldError.invalid(
                    join_path(path, "name"), claim,
                    f"ReplicatedJob templates must not have a volume named '{claim}': the claim template makes it"))
    return errs


def _check_job_template(path: str, template: JobTemplateSpec, claims: list[str]) -> list[FieldError]:
    """The batch Job rules, on a defaulted copy (the child Job gets the same defaults when created),
    with the volumes the shared claims become."""
    job = Job(apiVersion="batch/v1", kind="Job", metadata=ObjectMeta(name="x"),
              spec=template.spec.model_copy(deep=True))
    pod = job.spec.template.spec
    mounted = _mounted(template)
    pod.volumes = [*(pod.volumes or []), *(Volume.model_validate({"name": c, "persistentVolumeClaim": {
        "claimName": c}}) for c in claims if c in mounted)]
    job.set_defaults()
    errs = []
    for err in job.check():
        if err.path.startswith("spec"):
            errs.append(dataclasses.replace(err, path=join_path(path, "spec") + err.path[len("spec"):]))
    if template.metadata is not None:
        errs.extend(template.metadata.check(join_path(path, "metadata"), name_rule=None))
    return errs


def _check_managed_by(value: str) -> list[FieldError]:
    path = "spec.managedBy"
    errs = []
    prefix, slash, rest = value.partition("/")
    if not slash:
        errs.append(FieldError.invalid(path, value, "must be a domain-prefixed path (such as \"acme.io/foo\")"))
    else:
        errs.extend(FieldError.invalid(path, prefix, m) for m in is_dns1123_subdomain(prefix))
        if not re.fullmatch(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+", rest):
            errs.append(FieldError.invalid(path, rest, "Invalid path"))
    if len(value) > _MANAGED_BY_MAX:
        errs.append(FieldError.invalid(path, value, f"may not be more than {_MANAGED_BY_MAX} bytes"))
    return errs


def _check_failure_policy(policy: FailurePolicy, rjob_names: list[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    if policy.restart_strategy == "InPlaceRestart":
        errs.append(FieldError.invalid("spec.failurePolicy.restartStrategy", "InPlaceRestart",
                                       "needs JobSet's in-place restart agent, which Trimaran does not run: "
                                       "use Recreate or BlockingRecreate"))
    by_name: dict[str, list[int]] = {}
    for i, rule in enumerate(policy.rules or []):
        path = join_path("spec.failurePolicy.rules", i)
        rule_name = rule.name or ""
        if not 1 <= len(rule_name) <= 128:
            errs.append(FieldError.invalid(
                join_path(path, "name"), rule_name,
                f"invalid failure policy rule name of length {len(rule_name)}, the rule name must be at least 1 "
                "characters long and at most 128 characters long"))
        by_name.setdefault(rule_name, []).append(i)
        if not _RULE_NAME.fullmatch(rule_name):
            errs.append(FieldError.invalid(
                join_path(path, "name"), rule_name,
                f"invalid failure policy rule name '{rule_name}', a failure policy rule name must start with an "
                "alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and "
                "must end with an alphanumeric character or '_'"))
        if rule.action in _UNSUPPORTED_ACTIONS:
            errs.append(FieldError.invalid(join_path(path, "action"), rule.action,
                                           "Trimaran restarts whole JobSets only: use RestartJobSet or "
                                           "RestartJobSetAndIgnoreMaxRestarts"))
        for j, target in enumerate(rule.target_replicated_jobs or []):
            if target not in rjob_names:
                errs.append(FieldError.invalid(
                    join_path(path, "targetReplicatedJobs", j), target,
                    f"invalid replicatedJob name '{target}' in failure policy does not appear in .spec.ReplicatedJobs"))
        for j, reason in enumerate(rule.on_job_failure_reasons or []):
            if reason not in JOB_FAILURE_REASONS:
                errs.append(FieldError.invalid(
                    join_path(path, "onJobFailureReasons", j), reason,
                    f"invalid job failure reason '{reason}' in failure policy is not a recognized job failure reason"))
        for j, pattern in enumerate(rule.on_job_failure_message_patterns or []):
            try:
                re.compile(pattern)
            except re.error as exc:
                errs.append(FieldError.invalid(join_path(path, "onJobFailureMessagePatterns", j), pattern, str(exc)))
    for rule_name, indexes in by_name.items():
        if len(indexes) > 1:
            errs.append(FieldError.invalid(
                "spec.failurePolicy.rules", rule_name,
                f"rule names are not unique, rules with indices {indexes} all have the same name '{rule_name}'"))
    return errs


def _check_coordinator(coordinator: Coordinator, rjobs: list[ReplicatedJob]) -> list[FieldError]:
    path = "spec.coordinator"
    rjob = next((r for r in rjobs if r.name == coordinator.replicated_job), None)
    if rjob is None:
        return [FieldError.invalid(join_path(path, "replicatedJob"), coordinator.replicated_job,
                                   f"coordinator replicatedJob {coordinator.replicated_job} does not exist")]
    job_index = coordinator.job_index or 0
    if job_index >= (rjob.replicas if rjob.replicas is not None else 1):
        return [FieldError.invalid(join_path(path, "jobIndex"), job_index,
                                   f"coordinator job index {job_index} is invalid for replicatedJob {rjob.name}")]
    completions = rjob.template.spec.completions if rjob.template.spec.completions is not None else 1
    pod_index = coordinator.pod_index or 0
    if pod_index >= completions:
        return [FieldError.invalid(join_path(path, "podIndex"), pod_index,
                                   f"coordinator pod index {pod_index} is invalid for replicatedJob {rjob.name} "
                                   f"job index {job_index}")]
    return []
