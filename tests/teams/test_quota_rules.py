"""The pure rules of quota and LimitRange admission (`trimaran.api.quota`), case by case."""

from __future__ import annotations

from decimal import Decimal

import pytest

from trimaran.api.quota import apply_limit_ranges, canonical, check_quota, object_usage, quota_matches


@pytest.mark.parametrize(("value", "binary", "shown"), [
    ("0.5", False, "500m"), ("2", False, "2"), ("1500000000", False, "1500M"), ("1073741824", True, "1Gi"),
    ("1610612736", True, "1536Mi"), ("0", False, "0"), ("0.0000000001", False, "1n"), ("1536", True, "1536")])
def test_quantities_print_as_resource_quantity_does(value: str, binary: bool, shown: str) -> None:
    assert canonical(Decimal(value), binary) == shown


def pod(*containers: dict, init: tuple[dict, ...] = (), **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": list(containers), "initContainers": list(init), **spec}}


def container(name: str = "c", **resources: dict) -> dict:
    return {"name": name, "resources": resources}


def test_a_pods_usage_is_its_containers_sum_at_least_its_largest_init_container() -> None:
    usage = object_usage(pod(container(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "200m"}),
                             container("d", requests={"cpu": "100m"}),
                             init=(container("i", requests={"cpu": "1"}),)), "pods", "")
    assert {k: usage.text(k) for k in usage.amounts} == {
        "pods": "1", "count/pods": "1", "cpu": "1", "requests.cpu": "1", "memory": "64Mi",
        "requests.memory": "64Mi", "limits.cpu": "200m"}
    finished = pod(container(requests={"cpu": "1"}))
    finished["status"] = {"phase": "Failed"}
    assert object_usage(finished, "pods", "").amounts == {}


def test_scopes() -> None:
    terminating = pod(container(), activeDeadlineSeconds=60)
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}, "scopes": ["Terminating", "BestEffort"]}}
    assert quota_matches(quota, terminating)
    assert not quota_matches(quota, pod(container()))  # no deadline
    assert not quota_matches(quota, pod(container(requests={"memory": "1Mi"}), activeDeadlineSeconds=60))
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {}}
    assert not quota_matches(quota, claim)  # a scoped quota counts pods only
    not_in = {"metadata": {"name": "q"}, "spec": {"scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}]}}}
    assert quota_matches(not_in, pod(container())) and not quota_matches(not_in, pod(container(),
                                                                                     priorityClassName="high"))


def test_a_quota_on_memory_names_each_container_missing_it() -> None:
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"memory": "1Gi", "limits.memory": "2Gi"}}}
    new = pod(container("a", requests={"memory": "1Mi"}), container("b"), init=(container("i"),))
    refusal = check_quota(quota, new, object_usage(new, "pods", ""), object_usage(pod(), "pods", ""))
    assert refusal == "failed quota: q: must specify limits.memory for: a,b,i; memory for: b,i"


def test_limit_ranges_apply_in_turn_and_the_first_refusal_says_why() -> None:
    first = {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m"}}]}}
    second = {"spec": {"limits": [{"type": "Container", "min": {"cpu": "200m"}, "defaultRequest": {"cpu": "300m"}}]}}
    new = pod(container())
    refusal = apply_limit_ranges(new, [first, second])
    assert refusal == "minimum cpu usage per Container is 200m, but request is 100m"
    assert new["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    ratio = {"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"memory": "2"}}]}}
    assert apply_limit_ranges(pod(container(limits={"memory": "1Gi"})), [ratio]) == (
        "memory max limit to request ratio per Container is 2, but no request is specified or request is 0")


def test_a_controllers_pod_with_numbers_and_no_resources_is_judged_too() -> None:
    """Pods the controllers build from templates reach admission unvalidated: a number for a
    quantity, ``resources: None``."""
    new = pod({"name": "c", "resources": None}, {"name": "d", "resources": {"requests": {"cpu": 0.05}, "limits": None}})
    ranges = [{"spec": {"limits": [{"type": "Container", "min": {"cpu": "100m"}, "defaultRequest": {"cpu": "200m"}},
                                   {"type": "Pod", "min": {"cpu": "250m"}}]}}]
    assert apply_limit_ranges(new, ranges) == "minimum cpu usage per Container is 100m, but request is 50m"
    assert new["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "200m"}}
    usage = object_usage(new, "pods", "")
    assert usage.text("requests.cpu") == "250m"
