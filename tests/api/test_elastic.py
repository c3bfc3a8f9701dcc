"""Elastic PyTorchJob bounds: minReplicas/maxReplicas in the HorizontalPodAutoscaler's words, and
the Worker count (what ``kubectl scale`` writes) kept within them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.builders import container, pytorchjob, replica
from trimaran.api import ManifestError, validate


def _elastic(workers: int, **policy: Any) -> dict[str, Any]:
    return pytorchjob({"Worker": replica([container("pytorch")], replicas=workers)}, elasticPolicy=policy)


def _problems(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def test_min_above_max_is_refused_at_max_replicas() -> None:
    assert _problems(_elastic(2, minReplicas=4, maxReplicas=2)) == [
        'PyTorchJob "ddp": spec.elasticPolicy.maxReplicas: Invalid value: 2: '
        "must be greater than or equal to `minReplicas`"]


@pytest.mark.parametrize(("workers", "policy", "problem"), [
    (1, {"minReplicas": 0, "maxReplicas": 3},
     "spec.elasticPolicy.minReplicas: Invalid value: 0: must be greater than or equal to 1"),
    (4, {"minReplicas": 2, "maxReplicas": 3},
     "spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: 4: must be between elasticPolicy.minReplicas (2) "
     "and elasticPolicy.maxReplicas (3)"),
    (1, {"minReplicas": 2, "maxReplicas": 3},
     "spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: 1: must be between elasticPolicy.minReplicas (2) "
     "and elasticPolicy.maxReplicas (3)"),
])
def test_bounds_name_the_field(workers: int, policy: dict[str, int], problem: str) -> None:
    assert any(p.endswith(problem) for p in _problems(_elastic(workers, **policy))), _problems(
        _elastic(workers, **policy))


def test_workers_within_bounds_and_defaulted_bounds_pass() -> None:
    assert validate(_elastic(3, minReplicas=2, maxReplicas=3)).object["spec"]["pytorchReplicaSpecs"]["Worker"][
        "replicas"] == 3
    policy = validate(_elastic(2, rdzvBackend="c10d")).object["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == (2, 2)
