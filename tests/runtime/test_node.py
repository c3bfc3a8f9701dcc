"""Node capacity, gang admission, GPU assignment and scheduling constraints."""

from __future__ import annotations

import pytest

from trimaran.runtime.node import Admission, Node, Resources, no_execute_wait, parse_taints, pod_requests

from .helpers import make_pod

GiB = 2**30


def pod(name: str, cpu: str = "1", memory: str = "1Gi", gpus: dict | None = None, **spec: object) -> dict:
    resources = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        resources["limits"] = dict(gpus)
    return make_pod(name, [{"name": "main", "command": ["true"], "resources": resources}], **spec)


def node(**env: str) -> Node:
    return Node.from_env({"TRIMARAN_NODE_NAME": "box", "TRIMARAN_NODE_CPU": "4",
                          "TRIMARAN_NODE_MEMORY": "16Gi", "TRIMARAN_GPUS": "", **env})


def test_capacity_from_env_and_host() -> None:
    configured = node()
    assert configured.capacity == Resources(4.0, 16 * GiB, {})
    host = Node.from_env({"TRIMARAN_GPUS": "0"})
    assert host.capacity.cpu >= 1 and host.capacity.memory > 0
    assert host.labels["kubernetes.io/os"] == "linux"
    assert host.labels["kubernetes.io/hostname"] == host.name


def test_labels_and_taints_from_env() -> None:
    configured = node(TRIMARAN_NODE_LABELS="zone=a, team=ml",
                      TRIMARAN_NODE_TAINTS="dedicated=ml:NoSchedule,spot:NoExecute")
    assert configured.labels["zone"] == "a" and configured.labels["team"] == "ml"
    assert configured.labels["kubernetes.io/hostname"] == "box"
    assert configured.taints == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                 {"key": "spot", "effect": "NoExecute"}]
    with pytest.raises(ValueError):
        parse_taints("key=value:Sometimes")


def test_pod_requests_sum_containers_and_max_init() -> None:
    spec_pod = make_pod("p", [
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        # Limits stand in for absent requests, resource by resource.
        {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                                    "requests": {"memory": "512Mi"}}},
    ], initContainers=[{"name": "init", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}])
    assert pod_requests(spec_pod) == Resources(3.0, GiB + 512 * 2**20, {"nvidia.com/gpu": 1})


def test_gang_fits_all_or_none() -> None:
    n = node()
    first = n.admit("job-a", [pod("a-0", cpu="1"), pod("a-1", cpu="1")])
    assert isinstance(first, Admission) and len(first.allocations) == 2
    assert n.free().cpu == 2.0
    second = [pod("b-0", cpu="1"), pod("b-1", cpu="1"), pod("b-2", cpu="1")]
    reason = n.admit("job-b", second)
    assert reason == "0/1 nodes are available: Insufficient cpu (requested 3, free 2)"
    assert n.free().cpu == 2.0  # nothing of job-b was allocated
    for uid in first.allocations:
        n.release(uid)
    assert n.free() == n.capacity
    assert isinstance(n.admit("job-b", second), Admission)


def test_readmitting_an_admitted_pod_does_not_double_count() -> None:
    n = node()
    gang = [pod("a-0", cpu="2"), pod("a-1", cpu="2")]
    assert isinstance(n.admit("job", gang), Admission)
    again = n.admit("job", gang)
    assert isinstance(again, Admission) and set(again.allocations) == {p["metadata"]["uid"] for p in gang}
    assert n.free().cpu == 0


def test_reasons_name_every_shortfall_and_impossible_requests() -> None:
    n = node()
    reason = n.admit("big", [pod("x", cpu="8", memory="64Gi")])
    assert reason == ("0/1 nodes are available: "
                      "Insufficient cpu (requested 8, free 4, node capacity 4), "
                      "Insufficient memory (requested 64Gi, free 16Gi, node capacity 16Gi)")
    assert "Insufficient example.com/fpga" in str(n.admit("f", [pod("f", gpus={"example.com/fpga": 1})]))


def test_cpu_accounting_in_millicores() -> None:
    n = node(TRIMARAN_NODE_CPU="300m")
    assert isinstance(n.admit("a", [pod("a", cpu="100m"), pod("b", cpu="200m")]), Admission)
    assert n.free().cpu == 0


def test_gpu_assignment_with_fake_inventory() -> None:
    n = node(TRIMARAN_GPUS="NVIDIA A100-SXM4-80GB:2")
    assert n.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert n.labels["nvidia.com/gpu.count"] == "2"
    cpu_pod, gpu_pod = pod("cpu"), pod("gpu", gpus={"nvidia.com/gpu": 1})
    admitted = n.admit("job", [cpu_pod, gpu_pod])
    assert isinstance(admitted, Admission)
    assert admitted.env(cpu_pod["metadata"]["uid"])["CUDA_VISIBLE_DEVICES"] == ""
    gpu_env = admitted.env(gpu_pod["metadata"]["uid"])
    assert gpu_env["CUDA_VISIBLE_DEVICES"] == "0" and gpu_env["NVIDIA_VISIBLE_DEVICES"] == "0"
    other = pod("other", gpus={"nvidia.com/gpu": 1})
    second = n.admit("job2", [other])
    assert isinstance(second, Admission) and second.env(other["metadata"]["uid"])["CUDA_VISIBLE_DEVICES"] == "1"
    assert n.admit("job3", [pod("third", gpus={"nvidia.com/gpu": 1})]) == (
        "0/1 nodes are available: Insufficient nvidia.com/gpu (requested 1, free 0)")
    n.release(gpu_pod["metadata"]["uid"])
    third = pod("third", gpus={"nvidia.com/gpu": 1})
    reused = n.admit("job3", [third])
    assert isinstance(reused, Admission) and reused.env(third["metadata"]["uid"])["CUDA_VISIBLE_DEVICES"] == "0"


def test_two_gpus_in_one_pod_and_mig() -> None:
    n = node(TRIMARAN_GPUS="2,mig-3g.20gb:2")
    assert n.capacity.gpus == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 2}
    both = pod("both", gpus={"nvidia.com/gpu": 2})
    mig = pod("mig", gpus={"nvidia.com/mig-3g.20gb": 1})
    admitted = n.admit("job", [both, mig])
    assert isinstance(admitted, Admission)
    assert admitted.env(both["metadata"]["uid"])["CUDA_VISIBLE_DEVICES"] == "0,1"
    mig_env = admitted.env(mig["metadata"]["uid"])
    assert mig_env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert mig_env["NVIDIA_VISIBLE_DEVICES"] == mig_env["CUDA_VISIBLE_DEVICES"]
    assert n.free().gpus == {"nvidia.com/gpu": 0, "nvidia.com/mig-3g.20gb": 1}


def test_restore_rebuilds_allocations() -> None:
    n = node(TRIMARAN_GPUS="2")
    running = pod("running", cpu="3", gpus={"nvidia.com/gpu": 1})
    allocation = n.restore(running["metadata"]["uid"], pod_requests(running), ["1"], "job")
    assert allocation.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert n.free().cpu == 1 and n.free().gpus == {"nvidia.com/gpu": 1}
    newcomer = pod("new", cpu="1", gpus={"nvidia.com/gpu": 1})
    admitted = n.admit("job2", [newcomer])
    assert isinstance(admitted, Admission)
    assert admitted.env(newcomer["metadata"]["uid"])["CUDA_VISIBLE_DEVICES"] == "0"


def affinity(*terms: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}}}


MISMATCH = "1 node(s) didn't match Pod's node affinity/selector."


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"nodeSelector": {"zone": "a"}}, None),
        ({"nodeSelector": {"zone": "b"}}, MISMATCH),
        ({"nodeSelector": {"kubernetes.io/os": "linux", "zone": "a"}}, None),
        ({"affinity": affinity([{"key": "zone", "operator": "In", "values": ["a", "b"]}])}, None),
        ({"affinity": affinity([{"key": "zone", "operator": "NotIn", "values": ["a"]}])}, MISMATCH),
        ({"affinity": affinity([{"key": "missing", "operator": "NotIn", "values": ["a"]}])}, None),
        ({"affinity": affinity([{"key": "zone", "operator": "Exists"}])}, None),
        ({"affinity": affinity([{"key": "zone", "operator": "DoesNotExist"}])}, MISMATCH),
        ({"affinity": affinity([{"key": "gen", "operator": "Gt", "values": ["3"]}])}, None),
        ({"affinity": affinity([{"key": "gen", "operator": "Lt", "values": ["3"]}])}, MISMATCH),
        ({"affinity": affinity([{"key": "zone", "operator": "Gt", "values": ["3"]}])}, MISMATCH),
        # Terms are ORed, expressions within a term ANDed.
        ({"affinity": affinity([{"key": "zone", "operator": "In", "values": ["b"]}],
                               [{"key": "gen", "operator": "In", "values": ["5"]}])}, None),
        ({"affinity": affinity([{"key": "zone", "operator": "In", "values": ["a"]},
                                {"key": "gen", "operator": "In", "values": ["4"]}])}, MISMATCH),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["box"]}]}]}}}}, None),
        ({"nodeName": "elsewhere"}, "1 node(s) didn't match the requested node name."),
    ],
)
def test_selector_and_affinity(spec: dict, reason: str | None) -> None:
    assert node(TRIMARAN_NODE_LABELS="zone=a,gen=5").check_constraints(spec) == reason


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ([], False),
        ([{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}], True),
        ([{"key": "dedicated", "value": "ml"}], True),
        ([{"key": "dedicated", "value": "web"}], False),
        ([{"key": "dedicated", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),
        ([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_taints_and_tolerations(tolerations: list[dict], tolerated: bool) -> None:
    n = node(TRIMARAN_NODE_TAINTS="dedicated=ml:NoSchedule,soft=x:PreferNoSchedule")
    result = n.check_constraints({"tolerations": tolerations})
    assert result == (None if tolerated else "1 node(s) had untolerated taint {dedicated: ml}.")


def test_admission_reports_constraint_failures() -> None:
    n = node()
    reason = n.admit("job", [pod("a"), pod("b", nodeSelector={"gpu": "yes"})])
    assert reason == "0/1 nodes are available: " + MISMATCH
    assert n.free() == n.capacity


def test_to_k8s() -> None:
    obj = node(TRIMARAN_GPUS="1", TRIMARAN_NODE_TAINTS="a=b:NoSchedule").to_k8s()
    assert obj["kind"] == "Node" and obj["metadata"]["name"] == "box"
    assert obj["status"]["capacity"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "pods": "110"}
    assert obj["spec"]["taints"] == [{"key": "a", "value": "b", "effect": "NoSchedule"}]


def test_pods_beyond_max_pods_wait_whatever_they_request() -> None:
    n = node(TRIMARAN_NODE_MAX_PODS="3")
    assert n.max_pods == 3 and Node.from_env({"TRIMARAN_GPUS": ""}).max_pods == 110
    first = n.admit("a", [pod("a-0", cpu="0"), pod("a-1", cpu="0")])
    assert isinstance(first, Admission)
    assert n.admit("b", [pod("b-0", cpu="0"), pod("b-1", cpu="0")]) == "0/1 nodes are available: 1 Too many pods"
    assert n.admit("huge", [pod(f"h-{i}", cpu="0") for i in range(4)]) == \
        "0/1 nodes are available: 1 Too many pods (the gang has 4 pods, the node runs at most 3)"
    assert isinstance(n.admit("c", [pod("c-0", cpu="0")]), Admission)


def test_no_execute_wait_counts_toleration_seconds_from_the_taint() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    added = 1767225600.0  # 2026-01-01T00:00:00Z
    assert no_execute_wait([], [taint], added) == 0.0
    assert no_execute_wait([], [{"key": "k", "effect": "NoSchedule"}], added) is None
    forever = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
    assert no_execute_wait([forever], [taint], added + 1e6) is None
    bounded = {**forever, "tolerationSeconds": 30}
    assert no_execute_wait([bounded], [taint], added + 10) == 20.0
    assert no_execute_wait([bounded, forever], [taint], added + 40) == 0.0


def test_a_cordon_holds_pods_but_those_bound_here_or_tolerating_it() -> None:
    n = node()
    n.apply_spec(n.labels, [{"key": "team", "value": "a", "effect": "NoSchedule"}], unschedulable=True)
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in n.taints
    assert n.check_constraints({}) == "1 node(s) were unschedulable."
    cordon = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert n.check_constraints({"tolerations": [cordon]}) == "1 node(s) had untolerated taint {team: a}."
    # Bound by its creator: no scheduler, so neither the cordon nor NoSchedule taints hold it.
    assert n.check_constraints({"nodeName": "box"}) is None
    n.apply_spec(n.labels, [{"key": "team", "value": "a", "effect": "NoExecute"}], unschedulable=False)
    assert n.check_constraints({"nodeName": "box"}) == "1 node(s) had untolerated taint {team: a}."
    n.apply_spec(n.labels, [], unschedulable=False)
    assert n.observe_memory(available=50 * 1024 * 1024) and n.memory_pressure
    assert n.check_constraints({"nodeName": "box"}) == \
        "1 node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }."
    assert n.to_k8s()["status"]["conditions"][0]["reason"] == "KubeletHasInsufficientMemory"
    assert n.observe_memory(available=1 << 30) and n.taints == [] and n.check_constraints({}) is None


def _web(name: str, port: int, protocol: str = "TCP", host_ip: str | None = None) -> dict:
    spec = {"name": "main", "command": ["true"],
            "ports": [{"containerPort": 8080, "hostPort": port, "protocol": protocol,
                       **({"hostIP": host_ip} if host_ip else {})}]}
    return make_pod(name, [spec])


NO_PORTS = "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."


def test_a_host_port_is_one_pods_at_a_time_as_kube_schedulers_node_ports_filter() -> None:
    n = node()
    first = n.admit("a", [_web("a", 30080)])
    assert isinstance(first, Admission)
    assert n.admit("b", [_web("b", 30080)]) == NO_PORTS
    assert n.admit("c", [_web("c", 30080, host_ip="127.0.0.1")]) == NO_PORTS  # 0.0.0.0 overlaps any address
    assert isinstance(n.admit("d", [_web("d", 30080, protocol="UDP")]), Admission)  # another protocol
    assert isinstance(n.admit("e", [_web("e", 30081)]), Admission)
    assert n.admit("gang", [_web("g-0", 30090), _web("g-1", 30090)]) == NO_PORTS  # within one gang too
    for uid in first.allocations:
        n.release(uid)
    assert isinstance(n.admit("b", [_web("b", 30080)]), Admission)


def test_no_host_port_takes_an_address_the_control_plane_serves() -> None:
    n = node()
    n.reserve_host_ports({("TCP", "127.0.0.1", 6443)})
    assert n.admit("a", [_web("a", 6443)]) == NO_PORTS
    assert n.admit("b", [_web("b", 6443, host_ip="127.0.0.1")]) == NO_PORTS
    assert isinstance(n.admit("c", [_web("c", 6443, host_ip="10.1.2.3")]), Admission)  # another address


def test_a_restored_pod_keeps_its_host_ports() -> None:
    from trimaran.runtime.node import pod_host_ports

    n = node()
    running = _web("a", 30080)
    n.restore(running["metadata"]["uid"], pod_requests(running), [], host_ports=pod_host_ports(running["spec"]))
    assert n.admit("b", [_web("b", 30080)]) == NO_PORTS
