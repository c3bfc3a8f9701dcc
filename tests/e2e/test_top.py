"""Resources through the API on a real control plane: a memory limit that ends a pod OOMKilled (137),
``metrics.k8s.io`` read by the real ``kubectl top``, and no cgroup left once pods are deleted."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from tests.conftest import shared_plane
from tests.helpers import poll
from trimaran.runtime import cgroups as cg

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)"),
    pytest.mark.skipif(cg.detect("/nonexistent-home") is None, reason="no writable cgroup hierarchy"),
]

plane = shared_plane("top")

SPIN = "print('spinning', flush=True)\nwhile True:\n    pass\n"
IDLE = "import time\nblob = bytearray(24 * 2**20)\nprint('idle', flush=True)\ntime.sleep(3600)\n"


def pod(name: str, containers: list[dict], **spec: object) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
                       "spec": {"containers": containers, **spec}})


def container(name: str, code: str, **resources: dict) -> dict:
    return {"name": name, "image": "python", "command": ["python", "-c", code], "resources": resources}


@pytest.fixture
def kubectl_for(tmp_path):  # noqa: ANN001, ANN201
    """kubectl against a given control plane, through its kubeconfig."""

    def bind(handle):  # noqa: ANN001, ANN202
        env = dict(handle.env, KUBECONFIG=str(handle.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
                   HOME=str(tmp_path))

        def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
            proc = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True,
                                  timeout=120)
            if check and proc.returncode != 0:
                raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
            return proc

        return run

    return bind


@pytest.fixture
def kubectl(plane, kubectl_for):  # noqa: ANN001, ANN201
    return kubectl_for(plane)


def pod_cgroups(plane) -> list[str]:  # noqa: ANN001
    hierarchy = cg.detect(str(plane.home))
    assert hierarchy is not None
    return cg.pod_uids(hierarchy)


def running(plane, namespace: str, name: str) -> dict:  # noqa: ANN001
    return poll(lambda: p if (p := plane.get("Pod", name, namespace)).get("status", {}).get("phase") == "Running"
                else None, timeout=60, what=f"pod {name} to run")


def millicores(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


def test_memory_over_its_limit_is_oomkilled_with_137(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "oom")
    hog = "data = bytearray(200 * 2**20)\nprint('survived')\n"
    kubectl("-n", "oom", "apply", "-f", "-", input=pod("hog", [container("main", hog, limits={"memory": "32Mi"})],
                                                          restartPolicy="Never"))
    failed = poll(lambda: p if (p := plane.get("Pod", "hog", "oom")).get("status", {}).get("phase") == "Failed"
                  else None, timeout=60, what="the hog to fail")
    terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    assert failed["status"].get("reason") == "OOMKilled"
    assert "OOMKilled" in kubectl("-n", "oom", "get", "pod", "hog").stdout
    # Restarted in place, the container's last state says why it ended.
    kubectl("-n", "oom", "apply", "-f", "-", input=pod("again", [container("main", hog, limits={"memory": "32Mi"})]))
    again = poll(lambda: s if (s := (plane.get("Pod", "again", "oom").get("status") or {}).get("containerStatuses"))
                 and s[0].get("restartCount", 0) >= 1 else None, timeout=60, what="the hog's restart")
    assert {k: again[0]["lastState"]["terminated"][k] for k in ("reason", "exitCode")} == \
        {"reason": "OOMKilled", "exitCode": 137}
    uids = {plane.get("Pod", name, "oom")["metadata"]["uid"] for name in ("hog", "again")}
    kubectl("-n", "oom", "delete", "pod", "hog", "again", "--wait=true")
    poll(lambda: not uids & set(pod_cgroups(plane)), timeout=30, what="the pods' cgroups to go")


def test_kubectl_top_pods_reads_the_cgroups(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "top")
    spin = pod("spin", [container("busy", SPIN, requests={"cpu": "100m"}, limits={"cpu": "200m", "memory": "256Mi"}),
                        container("idle", IDLE)])
    kubectl("-n", "top", "apply", "-f", "-", input=spin)
    kubectl("-n", "top", "apply", "-f", "-", input=pod("calm", [container("main", IDLE)]))
    started = [running(plane, "top", name) for name in ("spin", "calm")]
    assert [p["status"]["qosClass"] for p in started] == ["Burstable", "BestEffort"]
    uids = [p["metadata"]["uid"] for p in started]
    poll(lambda: set(uids) <= set(pod_cgroups(plane)), timeout=30, what="the pods' cgroups")

    def rows(*args: str) -> list[list[str]] | None:
        out = kubectl("top", "pods", *args, check=False)
        if out.returncode != 0:
            assert "metrics not available yet" in out.stderr, out.stderr  # until each pod has two readings
            return None
        return [line.split() for line in out.stdout.splitlines()[1:]]

    table = poll(lambda: r if (r := rows("-n", "top")) and len(r) == 2 else None, timeout=60,
                 what="kubectl top pods to list both pods")
    usage = {row[0]: (millicores(row[1]), row[2]) for row in table}
    assert 20 <= usage["spin"][0] <= 300, usage  # a busy loop held to 200m, loosely
    assert re.fullmatch(r"\d+Mi", usage["calm"][1]) and int(usage["calm"][1][:-2]) >= 20, usage  # its 24 MiB
    every = poll(lambda: rows("-A"), timeout=30, what="kubectl top pods -A")
    assert {("top", "spin"), ("top", "calm")} <= {(row[0], row[1]) for row in every}
    containers = poll(lambda: rows("-n", "top", "--containers"), timeout=30, what="kubectl top pods --containers")
    assert {("spin", "busy"), ("spin", "idle"), ("calm", "main")} <= {(row[0], row[1]) for row in containers}
    one = kubectl("-n", "top", "top", "pod", "spin", "--containers").stdout
    assert "busy" in one and "idle" in one
    raw = json.loads(kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/top/pods/spin").stdout)
    assert raw["kind"] == "PodMetrics" and raw["metadata"]["labels"] == {"app": "spin"}
    assert all(re.fullmatch(r"\d+n", c["usage"]["cpu"]) and re.fullmatch(r"\d+Ki", c["usage"]["memory"])
               for c in raw["containers"])
    assert kubectl("-n", "top", "top", "pods", "-l", "app=calm").stdout.split()[3] == "calm"
    missing = kubectl("-n", "top", "top", "pod", "nosuch", check=False)
    assert missing.returncode != 0 and "not found" in missing.stderr

    kubectl("-n", "top", "delete", "pod", "spin", "calm", "--wait=true", "--grace-period=1")
    poll(lambda: not set(uids) & set(pod_cgroups(plane)), timeout=30, what="the pods' cgroups to go")


def test_node_metrics(plane, kubectl) -> None:  # noqa: ANN001
    listed = json.loads(kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes").stdout)
    (node,) = listed["items"]
    assert node["kind"] == "NodeMetrics" and node["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert int(node["usage"]["cpu"][:-1]) > 0 and int(node["usage"]["memory"][:-2]) > 0
    name = node["metadata"]["name"]
    single = json.loads(kubectl("get", "--raw", f"/apis/metrics.k8s.io/v1beta1/nodes/{name}").stdout)
    assert single["metadata"]["name"] == name
    groups = json.loads(kubectl("get", "--raw", "/apis").stdout)["groups"]
    assert any(g["name"] == "metrics.k8s.io" for g in groups)
    core = json.loads(kubectl("get", "--raw", "/api/v1").stdout)["resources"]
    if not any(r["name"] == "nodes" for r in core):
        pytest.skip("kubectl top nodes lists the Node objects too, which this server does not serve")
    out = kubectl("top", "nodes").stdout.splitlines()
    assert out[0].split()[:3] == ["NAME", "CPU(cores)", "CPU(%)"] or out[0].split()[:2] == ["NAME", "CPU(cores)"]
    row = out[1].split()
    assert row[0] == name and row[1].endswith("m") and row[3].endswith("Mi"), out


def test_metrics_are_read_only_and_authorised(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "secretive")
    token = plane.cli("token", "create", "--namespace", "secretive", "--role", "view").stdout.strip().split()[-1]
    server, _, context = plane.endpoint()
    import httpx

    with httpx.Client(base_url=server, verify=context, headers={"Authorization": f"Bearer {token}"}) as viewer:
        assert viewer.get("/apis/metrics.k8s.io/v1beta1/namespaces/secretive/pods").status_code == 200
        assert viewer.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods").status_code == 403
        assert viewer.get("/apis/metrics.k8s.io/v1beta1/pods").status_code == 403
        assert viewer.get("/apis/metrics.k8s.io/v1beta1/nodes").status_code == 403
        assert viewer.post("/apis/metrics.k8s.io/v1beta1/namespaces/secretive/pods", json={}).status_code == 405


def test_no_cgroup_outlives_a_control_plane_restart_or_its_pods(plane_with, kubectl_for) -> None:  # noqa: ANN001
    from trimaran.server.daemon import read_server_info, start_server, stop_pods, stop_server

    fresh = plane_with()
    kubectl = kubectl_for(fresh)
    for name in ("keep", "lost"):
        kubectl("apply", "-f", "-", input=pod(name, [container("main", IDLE)]))
    uids = {name: running(fresh, "default", name)["metadata"]["uid"] for name in ("keep", "lost")}
    hierarchy = cg.detect(str(fresh.home))
    # Running once the shim is spawned; the container itself has started once it prints.
    poll(lambda: all("idle" in fresh.log(name) for name in uids), timeout=60, what="the containers to start")
    assert set(uids.values()) <= set(cg.pod_uids(hierarchy))
    os.kill(int(read_server_info(fresh.home)["pid"]), signal.SIGKILL)
    # While the control plane is down, "lost" loses its shim (and so its container): its cgroup stays.
    shim = json.loads(next((fresh.home / "pods" / uids["lost"] / "runs").glob("*/shim.pid")).read_text())["pid"]
    left = hierarchy.dirs(f"kubepods/besteffort/pod{uids['lost']}/main-0")
    os.kill(shim, signal.SIGKILL)
    poll(lambda: all(os.path.isdir(d) and not cg.procs(d) for d in left), timeout=30, what="the container to die")
    start_server(home=fresh.home)
    # The restarted kubelet reports the lost container and starts it again (restartPolicy Always):
    # the dead run's cgroup goes, the new one's comes.
    poll(lambda: not any(os.path.exists(d) for d in left), timeout=60, what="the dead run's cgroup to go")
    restarted = poll(lambda: p if (p := fresh.get("Pod", "lost")).get("status", {}).get("phase") == "Running"
                     and p["status"]["containerStatuses"][0].get("restartCount") == 1 else None,
                     timeout=60, what="the lost pod to run again")
    assert restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "ShimLost"
    kubectl("delete", "pod", "keep", "--wait=true", "--grace-period=1")
    poll(lambda: uids["keep"] not in cg.pod_uids(hierarchy), timeout=30, what="keep's cgroup to go")
    assert uids["lost"] in cg.pod_uids(hierarchy)
    stop_server(fresh.home)
    stop_pods(fresh.home, grace_seconds=1.0)
    assert not [base for base in hierarchy.bases.values() if os.path.exists(base)]


def test_the_pods_pids_limit_comes_from_the_environment(plane_with, kubectl_for) -> None:  # noqa: ANN001
    limited = plane_with(TRIMARAN_POD_PIDS_LIMIT="64")
    kubectl = kubectl_for(limited)
    forks = ("import subprocess\nchildren = []\ntry:\n    for _ in range(200):\n"
             "        children.append(subprocess.Popen(['sleep', '60']))\n"
             "except OSError as exc:\n    print(f'fork failed after {len(children)}: {exc}', flush=True)\n"
             "for child in children:\n    child.kill()\n")
    kubectl("apply", "-f", "-", input=pod("forks", [container("main", forks)], restartPolicy="Never"))
    poll(lambda: (limited.get("Pod", "forks").get("status") or {}).get("phase") in ("Succeeded", "Failed"),
         timeout=60, what="the pod to end")
    log = kubectl("logs", "forks").stdout
    assert "fork failed after" in log and int(log.split("fork failed after ")[1].split(":")[0]) < 64, log
