"""PriorityClass on a real control plane: the built-in classes and kubectl's columns, the Priority
admission plugin (spec.priority from the class, globalDefault, refusals in its words), the node
admitting waiting pods in priority order, and a higher priority preempting a lower one as the
scheduler does (``DisruptionTarget`` with ``PreemptionByScheduler``, then a graceful delete), unless
its class says ``preemptionPolicy: Never``.

Admission tests share one control plane; the node tests each start one with a single core.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from tests.teams.conftest import kubectl_for, needs_kubectl
from tests.teams.test_quota import namespace, pod, refusal
from trimaran.cli.client import APIError, Client

plane = shared_plane("priority")


def priority_class(name: str, value: int, **fields: object) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **fields}


def with_class(body: dict, name: str) -> dict:
    body["spec"]["priorityClassName"] = name
    return body


def condition(pod: dict, kind: str) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


@needs_kubectl
def test_the_builtin_classes_and_kubectls_columns(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    kubectl = kubectl_for(plane, tmp_path)
    lines = kubectl("get", "priorityclasses").stdout.splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["system-cluster-critical"][1:3] == ["2000000000", "false"]
    assert rows["system-node-critical"][1:3] == ["2000001000", "false"]
    assert rows["system-node-critical"][-1] == "PreemptLowerPriority"
    refused = kubectl("create", "priorityclass", "system-mine", "--value=5", check=False)
    assert "priority class names with 'system-' prefix are reserved for system use only" in refused.stderr
    refused = kubectl("create", "priorityclass", "huge", "--value=2000000000", check=False)
    assert "maximum allowed value of a user defined priority is 1000000000" in refused.stderr


def test_admission_sets_the_pods_priority_from_its_class(api: Client, plane: ControlPlaneHandle) -> None:
    ns = namespace(api, "prio-admission")
    api.create("priorityclasses", None, priority_class("team-high", 1000, preemptionPolicy="Never"))
    created = api.create("pods", ns, with_class(pod("p"), "team-high"))
    assert created["spec"]["priority"] == 1000
    assert created["spec"]["preemptionPolicy"] == "Never"
    kubernetes = pytest.importorskip("kubernetes")
    config = kubernetes.config.new_client_from_config(str(plane.home / "kubeconfig"))
    core = kubernetes.client.CoreV1Api(config)
    written = core.read_namespaced_pod("p", ns)
    written.spec.priority, written.spec.preemption_policy = None, None  # a PUT that leaves them out keeps them
    replaced = core.replace_namespaced_pod("p", ns, written)
    assert (replaced.spec.priority, replaced.spec.preemption_policy) == (1000, "Never")
    config.close()
    plain = api.create("pods", ns, pod("plain"))
    assert plain["spec"]["priority"] == 0 and plain["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    error = refusal(api, "pods", ns, with_class(pod("q"), "nope"))
    assert error.body["message"] == 'pods "q" is forbidden: no PriorityClass with name nope was found'
    given = with_class(pod("r"), "team-high")
    given["spec"]["priority"] = 7
    error = refusal(api, "pods", ns, given)
    assert error.body["message"] == ('pods "r" is forbidden: the integer value of priority (7) must not be provided '
                                     'in pod spec; priority admission controller computed 1000 from the given '
                                     'PriorityClass name')


def test_one_global_default_applies_to_pods_that_name_none(api: Client, plane: ControlPlaneHandle) -> None:
    ns = namespace(api, "prio-default")
    api.create("priorityclasses", None, priority_class("everyone", 10, globalDefault=True))
    try:
        created = api.create("pods", ns, pod("p"))
        assert created["spec"]["priorityClassName"] == "everyone" and created["spec"]["priority"] == 10
        with pytest.raises(APIError) as caught:
            api.create("priorityclasses", None, priority_class("another", 20, globalDefault=True))
        assert caught.value.status == 403
        assert caught.value.body["message"] == ('priorityclasses.scheduling.k8s.io "another" is forbidden: '
                                                'PriorityClass everyone is already marked as default. Only one '
                                                'default can exist')
        kubernetes = pytest.importorskip("kubernetes")
        config = kubernetes.config.new_client_from_config(str(plane.home / "kubeconfig"))
        api.create("priorityclasses", None, priority_class("later", 20))
        with pytest.raises(kubernetes.client.ApiException) as refused:  # made the default by an update
            kubernetes.client.SchedulingV1Api(config).patch_priority_class("later", {"globalDefault": True})
        assert refused.value.status == 403 and "PriorityClass everyone is already marked as default" in \
            refused.value.body
        config.close()
    finally:
        api.delete("priorityclasses", None, "everyone")  # the other tests' pods name no class


def one_core(plane_with: Callable[..., ControlPlaneHandle]) -> tuple[ControlPlaneHandle, Client]:
    handle = plane_with(TRIMARAN_NODE_CPU="1")
    return handle, handle.api()


def running(api: Client, ns: str, name: str) -> bool:
    return (api.get("pods", ns, name).get("status") or {}).get("phase") == "Running"


def test_a_higher_priority_preempts_a_lower_one(plane_with: Callable[..., ControlPlaneHandle]) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    handle, api = one_core(plane_with)
    ns = "default"
    api.create("priorityclasses", None, priority_class("high", 1000))
    api.create("pods", ns, pod("low", {"cpu": "1"}))
    poll(lambda: running(api, ns, "low"), timeout=60, what="the low-priority pod running")
    config = kubernetes.config.new_client_from_config(str(handle.home / "kubeconfig"))
    core = kubernetes.client.CoreV1Api(config)
    version = core.list_namespaced_pod(ns).metadata.resource_version
    api.create("pods", ns, with_class(pod("high", {"cpu": "1"}), "high"))
    seen = []
    for event in kubernetes.watch.Watch().stream(core.list_namespaced_pod, ns, field_selector="metadata.name=low",
                                                 resource_version=version, timeout_seconds=60):
        seen.append(event)
        if event["type"] == "DELETED":
            break
    assert seen[-1]["type"] == "DELETED", "the victim was deleted"
    disrupted = [c for e in seen for c in e["object"].status.conditions or [] if c.type == "DisruptionTarget"]
    assert disrupted and disrupted[0].status == "True" and disrupted[0].reason == "PreemptionByScheduler"
    assert disrupted[0].message == "default-scheduler: preempting to accommodate a higher priority pod"
    assert any(e["object"].metadata.deletion_timestamp for e in seen), "a graceful delete"
    poll(lambda: running(api, ns, "high"), timeout=60, what="the preemptor running")
    assert api.get("pods", ns, "high")["status"]["nominatedNodeName"]
    config.close()


def test_never_preempts_nobody_but_is_admitted_first(plane_with: Callable[..., ControlPlaneHandle]) -> None:
    _, api = one_core(plane_with)
    ns = "default"
    api.create("priorityclasses", None, priority_class("urgent", 1000, preemptionPolicy="Never"))
    api.create("pods", ns, pod("blocker", {"cpu": "1"}))
    poll(lambda: running(api, ns, "blocker"), timeout=60, what="the blocker running")
    api.create("pods", ns, pod("early", {"cpu": "1"}))
    api.create("pods", ns, with_class(pod("urgent", {"cpu": "1"}), "urgent"))

    def judged() -> int:
        return sum(e.get("count", 1) for e in api.events("Pod", ns, "urgent") if e["reason"] == "FailedScheduling")

    poll(judged, timeout=30, what="urgent judged unschedulable")
    # The node's passes run one at a time, each judging "urgent" first (and preempting for it, if
    # it would, before the pass ends): once a later pass has judged it, the first one is over.
    api.create("pods", ns, pod("probe", {"cpu": "1"}))  # a change that makes the node look again
    poll(lambda: judged() >= 2, timeout=30, what="urgent judged again")
    blocker = api.get("pods", ns, "blocker")
    assert not blocker["metadata"].get("deletionTimestamp") and condition(blocker, "DisruptionTarget") is None
    assert "nominatedNodeName" not in api.get("pods", ns, "urgent")["status"]
    api.delete("pods", ns, "probe")
    api.delete("pods", ns, "blocker")
    poll(lambda: running(api, ns, "urgent"), timeout=60, what="the higher priority admitted first")
    assert api.get("pods", ns, "early")["status"]["phase"] == "Pending"


def test_preemption_takes_the_lowest_priority_that_makes_room(plane_with: Callable[..., ControlPlaneHandle]) -> None:
    handle = plane_with(TRIMARAN_GPUS="2")
    api = handle.api()
    ns = "default"
    for name, value in (("gpu-low", 10), ("gpu-mid", 20), ("gpu-top", 1000)):
        api.create("priorityclasses", None, priority_class(name, value))
    gpu = {"nvidia.com/gpu": "1"}
    for name in ("low", "mid"):
        api.create("pods", ns, with_class(pod(name, gpu, gpu), f"gpu-{name}"))
    for name in ("low", "mid"):
        poll(lambda name=name: running(api, ns, name), timeout=60, what=f"{name} running")
    api.create("pods", ns, with_class(pod("top", gpu, gpu), "gpu-top"))
    poll(lambda: running(api, ns, "top"), timeout=60, what="the preemptor running on the GPU it freed")
    with pytest.raises(APIError):
        api.get("pods", ns, "low")  # the victim: the lowest priority whose GPU is enough
    mid = api.get("pods", ns, "mid")
    assert running(api, ns, "mid") and not mid["metadata"].get("deletionTimestamp")  # reprieved
    assert condition(mid, "DisruptionTarget") is None
