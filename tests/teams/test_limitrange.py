"""LimitRange on a real control plane: defaults written into new pods (theirs and the controllers'),
with LimitRanger's annotation, and bounds refused in kube-apiserver's words.

One control plane serves the module; each test works in a namespace of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from tests.teams.conftest import kubectl_for, needs_kubectl
from tests.teams.test_quota import namespace, pod, refusal
from trimaran.cli.client import APIError, Client

plane = shared_plane("limitrange")


def limit_range(name: str, *limits: dict) -> dict:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name}, "spec": {"limits": list(limits)}}


def test_defaults_fill_what_a_container_leaves_out(api: Client) -> None:
    ns = namespace(api, "lr-defaults")
    api.create("limitranges", ns, limit_range("defaults", {
        "type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "250m"}}))
    stored = api.get("limitranges", ns, "defaults")["spec"]["limits"][0]
    # SetDefaults_LimitRangeItem: the default request of memory is its default limit.
    assert stored["defaultRequest"] == {"cpu": "250m", "memory": "256Mi"}
    created = api.create("pods", ns, pod("bare"))
    assert created["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c")
    # What a container states stays; only the rest is filled in.
    created = api.create("pods", ns, pod("half", limits={"cpu": "1"}))
    assert created["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "256Mi"}, "requests": {"cpu": "1", "memory": "256Mi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: memory request for container c; memory limit for container c")


def test_bounds_refuse_in_limitrangers_words(api: Client) -> None:
    ns = namespace(api, "lr-bounds")
    api.create("limitranges", ns, limit_range("bounds", {
        "type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi", "cpu": "2"},
        "maxLimitRequestRatio": {"cpu": "2"}}))
    error = refusal(api, "pods", ns, pod("small", {"cpu": "50m"}, {"cpu": "50m"}))
    assert error.body["message"] == 'pods "small" is forbidden: minimum cpu usage per Container is 100m, but request ' \
                                    'is 50m'
    error = refusal(api, "pods", ns, pod("big", {"memory": "1Gi"}, {"memory": "2Gi"}))
    assert error.body["message"] == 'pods "big" is forbidden: maximum memory usage per Container is 1Gi, but limit ' \
                                    'is 2Gi'
    error = refusal(api, "pods", ns, pod("both", {"cpu": "200m"}, {"cpu": "3", "memory": "2Gi"}))
    assert error.body["message"] == (
        'pods "both" is forbidden: [maximum cpu usage per Container is 2, but limit is 3, maximum memory usage per '
        'Container is 1Gi, but limit is 2Gi, cpu max limit to request ratio per Container is 2, but provided ratio '
        'is 15.000000]')
    for name in ("small", "big", "both"):
        with pytest.raises(APIError):
            api.get("pods", ns, name)


def test_pod_and_claim_limits(api: Client) -> None:
    ns = namespace(api, "lr-pod")
    api.create("limitranges", ns, limit_range("pods", {"type": "Pod", "max": {"cpu": "1"}},
                                              {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}))
    two = pod("two", {"cpu": "600m"}, {"cpu": "600m"})
    two["spec"]["containers"].append({**two["spec"]["containers"][0], "name": "d"})
    error = refusal(api, "pods", ns, two)
    assert error.body["message"] == 'pods "two" is forbidden: maximum cpu usage per Pod is 1, but limit is 1200m'
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}
    error = refusal(api, "persistentvolumeclaims", ns, claim)
    assert error.body["message"] == ('persistentvolumeclaims "data" is forbidden: maximum storage usage per '
                                     'PersistentVolumeClaim is 1Gi, but request is 2Gi')


def test_an_invalid_limitrange_is_refused_with_its_field(api: Client) -> None:
    ns = namespace(api, "lr-invalid")
    with pytest.raises(APIError) as caught:
        api.create("limitranges", ns, limit_range("bad", {"type": "Container", "min": {"cpu": "2"},
                                                          "max": {"cpu": "1"}}))
    assert caught.value.status == 422
    causes = {(c["field"], c["message"]) for c in caught.value.body["details"]["causes"]}
    assert ("spec.limits[0].min[cpu]", 'Invalid value: "2": min value 2 is greater than max value 1') in causes


@needs_kubectl
def test_a_jobs_pods_get_the_defaults_and_kubectl_lists_them(plane: ControlPlaneHandle, api: Client,
                                                              tmp_path: Path) -> None:
    ns = namespace(api, "lr-job")
    kubectl = kubectl_for(plane, tmp_path, ns)
    kubectl("apply", "-f", "-", input=json.dumps(limit_range("mem", {"type": "Container",
                                                                      "default": {"memory": "128Mi"}})))
    header, row = kubectl("get", "limits").stdout.splitlines()
    assert header.split() == ["NAME", "CREATED", "AT"]
    assert row.split()[0] == "mem" and row.split()[1].endswith("Z")
    described = kubectl("describe", "limits", "mem").stdout.splitlines()
    assert described[-1].split() == ["Container", "memory", "-", "-", "128Mi", "128Mi", "-"]
    kubectl("create", "job", "work", "--image=python", "--", "python", "-c", "pass")
    pods = poll(lambda: api.list("pods", ns), what="the job's pod")
    resources = pods[0]["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"memory": "128Mi"}, "requests": {"memory": "128Mi"}}
    assert pods[0]["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: memory request for container work; memory limit for container work")
