"""batch/v1 Job: Kubernetes' defaults and validation, and the completedIndexes notation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.api.builders import batch_job, container
from trimaran.api import ManifestError, format_indexes, parse_index_ranges, parse_indexes, validate

POD = {"containers": [container("c")], "restartPolicy": "Never"}


def spec_of(**spec: Any) -> dict[str, Any]:
    return validate(batch_job(POD, **spec)).object["spec"]


def problems(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def test_defaults() -> None:
    spec = spec_of()
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed"
    assert spec["suspend"] is False
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"


def test_parallelism_alone_leaves_completions_unset() -> None:
    spec = spec_of(parallelism=3)
    assert "completions" not in spec and spec["parallelism"] == 3


def test_completions_alone_defaults_parallelism_to_one() -> None:
    spec = spec_of(completions=5)
    assert (spec["completions"], spec["parallelism"]) == (5, 1)


def test_backoff_limit_per_index_lifts_the_global_limit() -> None:
    spec = spec_of(completions=4, completionMode="Indexed", backoffLimitPerIndex=1)
    assert spec["backoffLimit"] == 2**31 - 1


def test_pod_failure_policy_selects_failed_replacement() -> None:
    spec = spec_of(
        podFailurePolicy={"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    )
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["podFailurePolicy"]["rules"][0]["action"] == "FailJob"


def test_job_labels_default_to_template_labels() -> None:
    obj = batch_job(POD)
    obj["spec"]["template"]["metadata"] = {"labels": {"app": "sweep"}}
    assert validate(obj).object["metadata"]["labels"] == {"app": "sweep"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            "Always",
            'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"',
        ),
        (None, 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'),
    ],
)
def test_restart_policy_must_be_never_or_on_failure(policy: str | None, expected: str) -> None:
    pod_spec = {"containers": [container("c")], **({"restartPolicy": policy} if policy else {})}
    assert problems(batch_job(pod_spec)) == [f'Job "sweep": {expected}']


def test_on_failure_accepted() -> None:
    assert validate(batch_job({"containers": [container("c")], "restartPolicy": "OnFailure"})).object


def test_template_image_not_required() -> None:
    # Kubernetes validates images of pods, not of templates.
    assert validate(batch_job({"containers": [{"name": "c"}], "restartPolicy": "Never"})).object


def test_indexed_requires_completions() -> None:
    assert problems(batch_job(POD, completionMode="Indexed", parallelism=2)) == [
        'Job "sweep": spec.completions: Required value: when completion mode is Indexed'
    ]


def test_indexed_limit() -> None:
    [p] = problems(batch_job(POD, completionMode="Indexed", completions=100_001))
    assert "spec.completions: Invalid value: 100001: must be less than or equal to 100000" in p


def test_per_index_backoff_requires_indexed() -> None:
    assert problems(batch_job(POD, backoffLimitPerIndex=1)) == [
        'Job "sweep": spec.backoffLimitPerIndex: Forbidden: requires indexed completion mode'
    ]


def test_max_failed_indexes_requires_per_index_backoff() -> None:
    [p] = problems(batch_job(POD, completionMode="Indexed", completions=3, maxFailedIndexes=1))
    assert p.endswith("spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified")


def test_pod_failure_policy_requires_never() -> None:
    [p] = problems(
        batch_job({"containers": [container("c")], "restartPolicy": "OnFailure"}, podFailurePolicy={"rules": []})
    )
    assert 'only "Never" is supported when podFailurePolicy is specified' in p


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("completions", -1),
        ("parallelism", -2),
        ("backoffLimit", -1),
        ("activeDeadlineSeconds", -5),
        ("ttlSecondsAfterFinished", -1),
    ],
)
def test_negative_counts(field: str, value: int) -> None:
    assert problems(batch_job(POD, **{field: value})) == [
        f'Job "sweep": spec.{field}: Invalid value: {value}: must be greater than or equal to 0'
    ]


def test_completion_mode_values() -> None:
    [p] = problems(batch_job(POD, completionMode="Sequential"))
    assert 'spec.completionMode: Unsupported value: "Sequential": supported values: "NonIndexed", "Indexed"' in p


def test_job_name_fits_a_label() -> None:
    [p] = problems(batch_job(POD, name="j" * 64))
    assert "metadata.name" in p and "must be no more than 63 characters" in p


def test_status_round_trips_and_indexes_checked() -> None:
    obj = batch_job(POD, completionMode="Indexed", completions=5)
    obj["status"] = {
        "active": 1,
        "succeeded": 3,
        "failed": 1,
        "ready": 1,
        "completedIndexes": "0-2",
        "conditions": [{"type": "Complete", "status": "False"}],
        "startTime": "2026-01-01T00:00:00Z",
    }
    assert validate(obj).object["status"] == obj["status"]
    obj["status"]["completedIndexes"] = "2-0"
    [p] = problems(obj)
    assert 'status.completedIndexes: Invalid value: "2-0"' in p


def test_index_notation() -> None:
    assert parse_indexes("0-2,4") == [0, 1, 2, 4]
    assert parse_indexes("") == []
    assert parse_index_ranges("1,3-5") == [(1, 1), (3, 5)]
    assert format_indexes([4, 0, 2, 1, 1]) == "0-2,4"
    assert format_indexes([]) == ""
    assert format_indexes([7, 8]) == "7-8"
    for bad in ["a", "1-", "3,1", "1,1", "0-2,2", "-1", "1,,2"]:
        with pytest.raises(ValueError):
            parse_index_ranges(bad)


@given(st.sets(st.integers(min_value=0, max_value=200)))
def test_index_notation_round_trip(indexes: set[int]) -> None:
    assert parse_indexes(format_indexes(indexes)) == sorted(indexes)
