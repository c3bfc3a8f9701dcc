"""batch/v1 Job, defaulted and validated as the Kubernetes API server does.

Also the index-set notation of ``status.completedIndexes`` (``"0-2,4"``), which the batch
controller writes and readers parse.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import re
from collections.abc import Iterable
from typing import Any, Literal

from trimaran.api.apps import selector_matches
from trimaran.api.core import PodTemplateSpec
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import (
    INT32_MAX,
    LABEL_VALUE_MAX,
    ApiModel,
    Condition,
    LabelSelector,
    NonNegInt32,
    NonNegInt64,
    Resource,
    is_dns1123_subdomain,
)

__all__ = [
    "BatchJobStatus",
    "DEFAULT_BACKOFF_LIMIT",
    "Job",
    "JobSpec",
    "format_indexes",
    "parse_index_ranges",
    "parse_indexes",
]

DEFAULT_BACKOFF_LIMIT = 6
# The labels kube-apiserver puts on a Job's pod template, legacy and current, and the one its
# generated selector matches: the Job's uid, so a Job's selector matches its own pods only.
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
# Kubernetes caps Indexed jobs so that completedIndexes stays a reasonable size.
MAX_INDEXED_COMPLETIONS = 100_000
_JOB_RESTART_POLICIES = ("OnFailure", "Never")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_index_ranges(text: str) -> list[tuple[int, int]]:
    """``"0-2,4"`` → ``[(0, 2), (4, 4)]``. Ranges must be ascending and not overlap.

    Raises ValueError on anything else. Cheap even for huge ranges, unlike `parse_indexes`.
    """
    if not text:
        return []
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise ValueError(f"invalid index range {part!r}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first or (ranges and first <= ranges[-1][1]):
            raise ValueError(f"index range {part!r} is not ascending")
        ranges.append((first, last))
    return ranges


def parse_indexes(text: str) -> list[int]:
    """``"0-2,4"`` → ``[0, 1, 2, 4]``."""
    return [i for first, last in parse_index_ranges(text) for i in range(first, last + 1)]


def format_indexes(indexes: Iterable[int]) -> str:
    """``[4, 0, 1, 2]`` → ``"0-2,4"``: sorted, duplicates dropped, consecutive runs as ranges."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


class JobSpec(ApiModel):
    """How many pods must succeed (``completions``), how many run at once (``parallelism``),
    and how failures count (``backoffLimit``, per index with ``backoffLimitPerIndex``).
    """

    parallelism: NonNegInt32 | None = None
    completions: NonNegInt32 | None = None
    active_deadline_seconds: NonNegInt64 | None = None
    pod_failure_policy: dict[str, Any] | None = None
    success_policy: dict[str, Any] | None = None
    backoff_limit: NonNegInt32 | None = None
    backoff_limit_per_index: NonNegInt32 | None = None
    max_failed_indexes: NonNegInt32 | None = None
    selector: LabelSelector | None = None
    manual_selector: bool | None = None
    template: PodTemplateSpec
    ttl_seconds_after_finished: NonNegInt32 | None = None
    completion_mode: Literal["NonIndexed", "Indexed"] | None = None
    suspend: bool | None = None
    pod_replacement_policy: Literal["TerminatingOrFailed", "Failed"] | None = None
    managed_by: str | None = None


class BatchJobStatus(ApiModel):
    """Pod counts and conditions (Complete, Failed, Suspended, ...) of a batch/v1 Job."""

    active: NonNegInt32 | None = None
    succeeded: NonNegInt32 | None = None
    failed: NonNegInt32 | None = None
    ready: NonNegInt32 | None = None
    terminating: NonNegInt32 | None = None
    completed_indexes: str | None = None
    failed_indexes: str | None = None
    conditions: list[Condition] | None = None
    start_time: str | None = None
    completion_time: str | None = None
    uncounted_terminated_pods: dict[str, Any] | None = None


class Job(Resource):
    """batch/v1 Job."""

    spec: JobSpec
    status: BatchJobStatus | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """A subdomain that also fits a label value: the name becomes the pods' ``job-name`` label."""
        errs = is_dns1123_subdomain(name)
        if len(name) > LABEL_VALUE_MAX:
            errs.append(f"must be no more than {LABEL_VALUE_MAX} characters")
        return errs

    def set_defaults(self) -> None:
        """Kubernetes' ``SetDefaults_Job``."""
        spec = self.spec
        if spec.completions is None and spec.parallelism is None:
            spec.completions = 1
        if spec.parallelism is None:
            spec.parallelism = 1
        if spec.backoff_limit is None:
            # With per-index limits the global limit must not end the job first.
            spec.backoff_limit = INT32_MAX if spec.backoff_limit_per_index is not None else DEFAULT_BACKOFF_LIMIT
        template_labels = spec.template.metadata.labels if spec.template.metadata is not None else None
        if template_labels and not self.metadata.labels:
            self.metadata.labels = dict(template_labels)
        if spec.completion_mode is None:
            spec.completion_mode = "NonIndexed"
        if spec.suspend is None:
            spec.suspend = False
        if spec.pod_replacement_policy is None:
            spec.pod_replacement_policy = "Failed" if spec.pod_failure_policy is not None else "TerminatingOrFailed"
        if not spec.manual_selector and self.metadata.uid:
            self._generate_selector(self.metadata.uid)

    def _generate_selector(self, uid: str) -> None:
        """kube-apiserver's ``generateSelector`` (the API gives a new Job its uid before defaulting):
        the job-name and controller-uid labels on the template where not set (a conflicting one is
        refused by :meth:`check`), and a selector of the controller uid."""
        template = self.spec.template
        if template.metadata is None:
            template.metadata = type(self.metadata)()
        labels = dict(template.metadata.labels or {})
        for key in JOB_NAME_LABELS:
            labels.setdefault(key, self.metadata.name or "")
        for key in CONTROLLER_UID_LABELS:
            labels.setdefault(key, uid)
        template.metadata.labels = labels
        if self.spec.selector is None:
            self.spec.selector = LabelSelector()
        match = dict(self.spec.selector.match_labels or {})
        match.setdefault(CONTROLLER_UID_LABEL, uid)
        self.spec.selector.match_labels = match

    def check(self) -> list[FieldError]:
        """Kubernetes' ``ValidateJob`` rules that matter locally."""
        spec = self.spec
        errs = super().check()
        restart_path = "spec.template.spec.restartPolicy"
        restart = spec.template.spec.restart_policy
        if restart is None:
            errs.append(FieldError.required(restart_path, 'valid values: "OnFailure", "Never"'))
        elif restart not in _JOB_RESTART_POLICIES:
            errs.append(FieldError.not_supported(restart_path, restart, _JOB_RESTART_POLICIES))
        elif spec.pod_failure_policy is not None and restart != "Never":
            errs.append(FieldError.invalid(
                restart_path, restart, 'only "Never" is supported when podFailurePolicy is specified'))
        # Kubernetes does not require images in templates: pods get them later.
        errs.extend(spec.template.check("spec.template", require_image=False))
        if spec.completion_mode == "Indexed":
            if spec.completions is None:
                errs.append(FieldError.required("spec.completions", "when completion mode is Indexed"))
            for field, value in (("completions", spec.completions), ("parallelism", spec.parallelism)):
                if value is not None and value > MAX_INDEXED_COMPLETIONS:
                    errs.append(FieldError.invalid(
                        join_path("spec", field), value,
                        f"must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"))
        elif spec.backoff_limit_per_index is not None:
            errs.append(FieldError.forbidden("spec.backoffLimitPerIndex", "requires indexed completion mode"))
        if spec.max_failed_indexes is not None:
            if spec.backoff_limit_per_index is None:
                errs.append(FieldError.required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"))
            if spec.completions is not None and spec.max_failed_indexes > spec.completions:
                errs.append(FieldError.invalid("spec.maxFailedIndexes", spec.max_failed_indexes,
                                               "must be less than or equal to completions"))
        errs.extend(self._selector_errors())
        if self.status is not None:
            for field, indexes in (("completedIndexes", self.status.completed_indexes),
                                   ("failedIndexes", self.status.failed_indexes)):
                if indexes:
                    try:
                        parse_index_ranges(indexes)
                    except ValueError as exc:
                        errs.append(FieldError.invalid(join_path("status", field), indexes, str(exc)))
        return errs

    def _selector_errors(self) -> list[FieldError]:
        """kube-apiserver's ``validateGeneratedSelector`` and ``ValidateJobSpec``'s selector rules."""
        spec = self.spec
        errs: list[FieldError] = []
        template_labels = (spec.template.metadata.labels if spec.template.metadata is not None else None) or {}
        if spec.selector is None:
            if spec.manual_selector:
                errs.append(FieldError.required("spec.selector"))
            return errs  # not through the API (no uid yet): its controller owns the pods it makes
        errs.extend(spec.selector.check("spec.selector"))
        uid = self.metadata.uid
        if not spec.manual_selector and uid:
            path = "spec.template.metadata"
            for key, value in ((CONTROLLER_UID_LABELS[0], uid), (JOB_NAME_LABELS[0], self.metadata.name),
                               (CONTROLLER_UID_LABELS[1], uid), (JOB_NAME_LABELS[1], self.metadata.name)):
                if template_labels.get(key) != value:
                    errs.append(FieldError.invalid(join_path(path, "labels", key), template_labels,
                                                   f"must be '{value}'"))
            if not selector_matches(spec.selector.to_dict(), {CONTROLLER_UID_LABELS[1]: uid,
                                                               JOB_NAME_LABELS[1]: self.metadata.name or ""}):
                errs.append(FieldError.invalid("spec.selector", spec.selector.to_dict(),
                                               "`selector` not auto-generated"))
        if not selector_matches(spec.selector.to_dict(), template_labels):
            errs.append(FieldError.invalid("spec.template.metadata.labels", template_labels,
                                           "`selector` does not match template `labels`"))
        return errs

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """A Job's selector is immutable, as kube-apiserver's ``ValidateJobSpecUpdate`` says."""
        before, after = (old.get("spec") or {}).get("selector"), (new.get("spec") or {}).get("selector")
        if before is not None and before != after:
            return [FieldError.invalid("spec.selector", after, "field is immutable")]
        return []
