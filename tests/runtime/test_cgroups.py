"""Pods' cgroups on this machine's hierarchy (v2, or v1 where the controllers are mounted so):
limits written and enforced, usage read, nothing left once a pod is gone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime, sandbox_available
from trimaran.runtime import cgroups as cg
from trimaran.runtime.qos import container_resources, pod_cgroup, pod_pids_limit_from_env, qos_class

from .helpers import make_pod, wait_for

live = pytest.mark.skipif(not sandbox_available() or cg.detect("/nonexistent-home") is None,
                          reason="needs bubblewrap and a writable cgroup hierarchy with cpu, memory and pids")


def python(code: str, **container: object) -> dict:
    return {"name": "main", "command": [sys.executable, "-c", textwrap.dedent(code)], **container}


def uid_of(pod: dict) -> str:
    return pod["metadata"]["uid"]


def record(runtime: LocalRuntime, pod: dict, name: str = "main", attempt: int = 0) -> dict:
    path = runtime.home / "pods" / uid_of(pod) / "runs" / str(attempt) / f"{name}.pid"
    return wait_for(lambda: json.loads(path.read_text()) if path.exists() else None, 20, f"{name} to start")


def logged(runtime: LocalRuntime, pod: dict, text: str) -> bool:
    path = runtime.log_path("default", pod["metadata"]["name"])
    return path.exists() and text in path.read_text()


def cgroup_file(runtime: LocalRuntime, rel: str, controller: str, filename: str) -> str:
    assert runtime.cgroups is not None
    return Path(runtime.cgroups.dir(controller, rel), filename).read_text().strip()


def home_cgroups(runtime: LocalRuntime) -> list[str]:
    """Every directory left of the home's cgroups, in every hierarchy."""
    assert runtime.cgroups is not None
    return [p for p in runtime.cgroups.bases.values() if os.path.exists(p)]


def test_kubelet_values() -> None:
    assert (cg.cpu_shares(None), cg.cpu_shares(100), cg.cpu_shares(1000)) == (2, 102, 1024)
    assert (cg.cpu_quota(200), cg.cpu_quota(1), cg.cpu_quota(2500)) == (20000, 1000, 250000)
    assert (cg.cpu_weight(2), cg.cpu_weight(1024), cg.cpu_weight(262144)) == (1, 39, 10000)
    assert cg.home_name("/a") != cg.home_name("/b") and cg.home_name("/a").startswith("trimaran-")
    assert pod_pids_limit_from_env({}) == 4096 and pod_pids_limit_from_env({"TRIMARAN_POD_PIDS_LIMIT": "-1"}) is None
    with pytest.raises(ValueError):
        pod_pids_limit_from_env({"TRIMARAN_POD_PIDS_LIMIT": "0"})
    both = {"cpu": "500m", "memory": "64Mi"}
    assert qos_class(make_pod("g", [{"name": "a", "resources": {"limits": both}}])) == "Guaranteed"
    assert qos_class(make_pod("b", [{"name": "a", "resources": {"requests": {"cpu": "1"}}}])) == "Burstable"
    assert qos_class(make_pod("e", [{"name": "a"}])) == "BestEffort"


def test_what_each_driver_writes() -> None:
    """The files and values per driver (the v2 ones are checked for real only where the unified
    hierarchy has the controllers, which this development machine's has not)."""
    limits = {"cpu_shares": 102, "cpu_quota": 20000, "memory": 32 * 2**20, "pids": 64}
    v2 = cg.Hierarchy(2, {"": "/sys/fs/cgroup/trimaran-x"})
    assert cg._settings(v2, limits) == [
        ("cpu", "cpu.weight", "4"), ("cpu", "cpu.max", "20000 100000"), ("memory", "memory.max", "33554432"),
        ("memory", "memory.swap.max", "0"), ("pids", "pids.max", "64")]
    assert cg._settings(v2, {"cpu_shares": 2}) == [
        ("cpu", "cpu.weight", "1"), ("cpu", "cpu.max", "max 100000"), ("pids", "pids.max", "max")]
    v1 = cg.Hierarchy(1, {c: f"/sys/fs/cgroup/{c}/trimaran-x" for c in cg.V1_CONTROLLERS})
    written = cg._settings(v1, limits)
    assert ("cpu", "cpu.cfs_quota_us", "20000") in written and ("cpu", "cpu.shares", "102") in written
    assert written[-2:] == [("memory", "memory.limit_in_bytes", "33554432"), ("pids", "pids.max", "64")]
    assert v1.dirs("kubepods/podx") == [f"/sys/fs/cgroup/{c}/trimaran-x/kubepods/podx" for c in cg.V1_CONTROLLERS]
    assert v2.dirs("kubepods/podx") == ["/sys/fs/cgroup/trimaran-x/kubepods/podx"]


def test_a_pods_values_are_its_containers_sums() -> None:
    hierarchy = cg.Hierarchy(1, {c: f"/sys/fs/cgroup/{c}/trimaran-x" for c in cg.V1_CONTROLLERS})
    limited = {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}
    pod = make_pod("sums", [{"name": "a", "resources": limited}, {"name": "b", "resources": limited}],
                   initContainers=[{"name": "init", "resources": {"limits": {"cpu": "2", "memory": "32Mi"}}}])
    spec = pod_cgroup(pod, hierarchy, 64)
    assert spec["pod"] == f"kubepods/burstable/pod{uid_of(pod)}"
    # cpu: the init container's 2 cores are more than the two containers' 1; memory: their 128Mi.
    assert spec["limits"] == {"cpu_shares": cg.cpu_shares(2000), "cpu_quota": 200000, "memory": 128 * 2**20,
                              "pids": 64}
    assert container_resources(pod["spec"]["containers"][0]) == {"cpu_shares": 256, "cpu_quota": 50000,
                                                                 "memory": 64 * 2**20}
    # One container without a memory limit: the pod has none; without requests, shares are the minimum.
    pod["spec"]["containers"][1]["resources"] = {"limits": {"cpu": "1"}}
    assert pod_cgroup(pod, hierarchy, None)["limits"]["memory"] is None
    assert container_resources({"name": "x"}) == {"cpu_shares": 2, "cpu_quota": None, "memory": None}


@live
def test_memory_limit_is_oomkilled_with_137_and_nothing_is_left(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    pod = make_pod("hog", [python("""
        print('allocating', flush=True)
        data = bytearray(200 * 2**20)
        print('survived', len(data))
        """, resources={"limits": {"memory": "32Mi"}})])
    runtime.start_pod(pod, attempt=0)
    started = record(runtime, pod)
    assert started["memoryEnforcement"] == f"cgroup-v{runtime.cgroups.version}"
    status = wait_for(lambda: s if (s := runtime.pod_status(uid_of(pod)).containers["main"]).state == "terminated"
                      else None, 30, "the hog to end")
    assert (status.reason, status.exit_code) == ("OOMKilled", 137)
    assert not logged(runtime, pod, "survived")
    # The container's cgroup went with it, and so did its pod's and the home's (no other pod runs).
    assert started["cgroupDirs"] and not any(os.path.exists(p) for p in started["cgroupDirs"])
    wait_for(lambda: not runtime.is_alive(uid_of(pod)), 10, "the shim to end")
    assert home_cgroups(runtime) == []
    runtime.remove_pod(uid_of(pod))


@live
def test_cpu_limit_is_a_quota_and_requests_a_weight(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    pod = make_pod("spin", [python("""
        print('spinning', flush=True)
        while True:
            pass
        """, resources={"requests": {"cpu": "100m"}, "limits": {"cpu": "200m", "memory": "256Mi"}})])
    try:
        runtime.start_pod(pod, attempt=0)
        rel = record(runtime, pod)["cgroup"]
        assert rel == f"kubepods/burstable/pod{uid_of(pod)}/main-0"
        pod_rel = rel.rpartition("/")[0]
        if runtime.cgroups.version == 2:
            assert cgroup_file(runtime, rel, "cpu", "cpu.max") == "20000 100000"
            assert cgroup_file(runtime, rel, "cpu", "cpu.weight") == str(cg.cpu_weight(102))
            assert cgroup_file(runtime, rel, "memory", "memory.max") == str(256 * 2**20)
            assert cgroup_file(runtime, rel, "memory", "memory.swap.max") == "0"
            assert cgroup_file(runtime, pod_rel, "pids", "pids.max") == "4096"
        else:
            assert cgroup_file(runtime, rel, "cpu", "cpu.cfs_quota_us") == "20000"
            assert cgroup_file(runtime, rel, "cpu", "cpu.cfs_period_us") == "100000"
            assert cgroup_file(runtime, rel, "cpu", "cpu.shares") == "102"
            assert cgroup_file(runtime, rel, "memory", "memory.limit_in_bytes") == str(256 * 2**20)
            assert cgroup_file(runtime, pod_rel, "pids", "pids.max") == "4096"
        wait_for(lambda: logged(runtime, pod, "spinning"), 20, "the loop to start")
        # Its CPU time over a window, from the counters `kubectl top` reads: held near 0.2 of a core.
        first = runtime.stats()
        deadline = time.monotonic() + 30
        while (later := runtime.stats()).timestamp - first.timestamp < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        used = later.pods[uid_of(pod)].containers["main"].cpu_ns - first.pods[uid_of(pod)].containers["main"].cpu_ns
        cores = used / 1e9 / (later.timestamp - first.timestamp)
        assert 0.01 < cores <= 0.3, cores
        assert later.pods[uid_of(pod)].containers["main"].memory_working_set > 1 << 20
        assert later.cpu_ns > first.cpu_ns and later.memory_working_set > 0
    finally:
        runtime.remove_pod(uid_of(pod))
    assert home_cgroups(runtime) == []


@live
def test_pids_limit_stops_a_fork_bomb(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home", pids_limit=64)
    pod = make_pod("forks", [python("""
        import subprocess
        children = []
        try:
            for _ in range(200):
                children.append(subprocess.Popen(['sleep', '60']))
        except OSError as exc:
            print(f'fork failed after {len(children)}: {exc}', flush=True)
        else:
            print('started all 200', flush=True)
        for child in children:
            child.kill()
        """)], restartPolicy="Never")
    try:
        runtime.start_pod(pod, attempt=0)
        rel = record(runtime, pod)["cgroup"]
        assert rel.startswith(f"kubepods/besteffort/pod{uid_of(pod)}/")
        wait_for(lambda: logged(runtime, pod, "fork failed") or logged(runtime, pod, "started all"), 60,
                 "the forks to end")
        text = runtime.log_path("default", "forks").read_text()
        assert "fork failed after" in text and "Resource temporarily unavailable" in text, text
        assert int(text.split("fork failed after ")[1].split(":")[0]) < 64
    finally:
        runtime.remove_pod(uid_of(pod))
    assert home_cgroups(runtime) == []


def _orphaned(runtime: LocalRuntime, name: str) -> tuple[dict, list[str]]:
    """A pod whose shim was SIGKILLed: its container dies with it (bubblewrap's
    ``--die-with-parent`` ends its pid namespace), and its cgroup stays behind, which the
    shim would have removed."""
    pod = make_pod(name, [python("""
        import subprocess, time
        subprocess.Popen(['sleep', '600'], start_new_session=True)
        print('ready', flush=True)
        time.sleep(600)
        """)])
    runtime.start_pod(pod, attempt=0)
    dirs = record(runtime, pod)["cgroupDirs"]
    wait_for(lambda: logged(runtime, pod, "ready"), 20, "the pod to start")
    assert len(cg.procs(dirs[0])) >= 3  # bubblewrap's, python, sleep
    run = runtime.home / "pods" / uid_of(pod) / "runs" / "0"
    os.kill(json.loads((run / "shim.pid").read_text())["pid"], signal.SIGKILL)
    wait_for(lambda: not runtime.is_alive(uid_of(pod)), 10, "the pod's processes to end")
    wait_for(lambda: not cg.procs(dirs[0]), 10, "the container's cgroup to empty")
    assert all(os.path.isdir(p) for p in dirs)
    return pod, dirs


@live
def test_a_killed_shims_cgroups_go_with_its_pod(tmp_path: Path) -> None:
    pod, dirs = _orphaned(LocalRuntime(tmp_path / "home"), "orphan")
    restarted = LocalRuntime(tmp_path / "home")  # the control plane, restarted
    restarted.remove_pod(uid_of(pod))
    assert not any(os.path.exists(p) for p in dirs) and home_cgroups(restarted) == []


@live
def test_a_restart_removes_the_killed_runs_cgroup(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    pod, dirs = _orphaned(runtime, "again")
    try:
        runtime.start_pod(pod, attempt=1)
        assert not any(os.path.exists(p) for p in dirs)
        assert record(runtime, pod, attempt=1)["cgroup"].endswith("/main-1")
    finally:
        runtime.remove_pod(uid_of(pod))
    assert home_cgroups(runtime) == []


@live
def test_a_restart_kills_what_a_shim_left_starting(tmp_path: Path) -> None:
    """A shim killed while it started a container leaves no record of it, and what it had started
    waits for it forever (bubblewrap, for its user namespace's maps): in the run's cgroup, found
    by its name, which a new run kills and removes."""
    runtime = LocalRuntime(tmp_path / "home")
    pod, dirs = _orphaned(runtime, "starting")
    run = runtime.home / "pods" / uid_of(pod) / "runs" / "0"
    (run / "main.pid").unlink()
    stuck = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: cg.join(runtime.cgroups, record_rel(dirs, runtime)))
    try:
        runtime.start_pod(pod, attempt=1)
        assert stuck.wait(timeout=10) == -signal.SIGKILL
        assert not any(os.path.exists(p) for p in dirs)
    finally:
        stuck.kill()
        runtime.remove_pod(uid_of(pod))
    assert home_cgroups(runtime) == []


def record_rel(dirs: list[str], runtime: LocalRuntime) -> str:
    """A container's cgroup relative to the home's parent, from its directory in one hierarchy."""
    return next(os.path.relpath(d, base) for d in dirs for base in runtime.cgroups.bases.values()
                if d.startswith(base + "/"))


@live
def test_cgroups_of_pods_without_state_are_swept(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    pod, dirs = _orphaned(runtime, "stateless")
    shutil.rmtree(runtime.home / "pods" / uid_of(pod))  # as a crash in the middle of remove_pod leaves it
    restarted = LocalRuntime(tmp_path / "home")
    assert restarted.sweep_cgroups() == [uid_of(pod)]
    assert not any(os.path.exists(p) for p in dirs) and home_cgroups(restarted) == []


@live
def test_two_homes_never_share_a_cgroup(tmp_path: Path) -> None:
    one, two = LocalRuntime(tmp_path / "one"), LocalRuntime(tmp_path / "two")
    assert set(one.cgroups.bases.values()).isdisjoint(two.cgroups.bases.values())
    pods = [make_pod(f"p{i}", [python("import time; print('up', flush=True); time.sleep(600)")]) for i in range(2)]
    try:
        for runtime, pod in zip((one, two), pods, strict=True):
            runtime.start_pod(pod, attempt=0)
        for runtime, pod in zip((one, two), pods, strict=True):
            wait_for(lambda r=runtime, p=pod: logged(r, p, "up"), 20, "the pods to start")
        assert cg.pod_uids(one.cgroups) == [uid_of(pods[0])] and cg.pod_uids(two.cgroups) == [uid_of(pods[1])]
        one.release_cgroups()  # as the control plane's stop does, once its pods are stopped
        assert home_cgroups(one) == [] and cg.pod_uids(two.cgroups) == [uid_of(pods[1])]
    finally:
        for runtime, pod in zip((one, two), pods, strict=True):
            runtime.remove_pod(uid_of(pod))
    assert home_cgroups(two) == []


@live
def test_a_refused_limit_leaves_no_cgroup(tmp_path: Path) -> None:
    hierarchy = cg.detect(str(tmp_path / "home"))
    with pytest.raises(OSError, match="pids.max refused"):
        cg.create(hierarchy, "kubepods/podx", {"pids": 64}, "main-0", {"pids": -5})
    assert not [base for base in hierarchy.bases.values() if os.path.exists(base)]
