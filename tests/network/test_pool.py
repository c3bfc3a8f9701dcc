"""The pool of pod network namespaces made ahead and of shims started ahead (trimaran.runtime.network,
trimaran.runtime.local): real CNI plugins, crun, cgroups; what a pod takes from the pool works as
its own network, and nothing of the pool outlives its control plane, stopped or killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.runtime import LocalRuntime
from trimaran.runtime.cgroups import home_name
from trimaran.runtime.network import NETNS_DIR, POOL_PREFIX, PodNetwork, home_digest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/lib/cni/bridge").exists(),
    reason="the pod network needs root and the CNI plugins (containernetworking-plugins)")

SERVER = textwrap.dedent("""
    import http.server
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = self.connection.getsockname()[0].encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
    http.server.HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
""")


def _pod(name: str, script: str) -> dict:
    return {"metadata": {"uid": str(uuid.uuid4()), "namespace": "default", "name": name},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "python", "command": ["python", "-c", script]}]}}


def _netns(home: Path) -> list[str]:
    prefix = f"trm-{home_digest(home)}-"
    return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix)) if NETNS_DIR.exists() else []


def _standby_shims() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--standby" in argv and any(a.endswith(b"runtime/shim.py") for a in argv) \
                and _parent(int(pid)) == os.getpid():
            found.append(int(pid))
    return found


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _nothing_left(home: Path, plan_bridge: str) -> list[str]:
    left = [f"netns {n}" for n in _netns(home)]
    if subprocess.run(["ip", "link", "show", plan_bridge], capture_output=True).returncode == 0:
        left.append(f"bridge {plan_bridge}")
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    left += [f"nft {t}" for t in (f"trimaran-nat-{home_digest(home)}",) if t in tables]
    left += [f"record {p.name}" for p in (home / "network" / "pods").glob("*.json")]
    ipam = home / "network" / "ipam" / "trimaran"
    left += [f"IPAM {p.name}" for p in ipam.glob("*") if p.name[0].isdigit()] if ipam.exists() else []
    left += [f"standby shim {pid}" for pid in _standby_shims()]
    return left


class Node:
    """A runtime on a home of its own with a pod network whose pool holds 2 namespaces, and 1 shim
    started ahead."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir()
        self.runtime = LocalRuntime(home, shim_pool=1)
        self.network = PodNetwork.from_env(home, {"TRIMARAN_POD_NETWORK": "on", "TRIMARAN_POD_NETWORK_POOL": "2"})
        self.runtime.network = self.network

    def run(self, pod: dict, wait: bool = True) -> str:
        """Start the pod; its IP. With ``wait``, once its run has ended and its network is released."""
        ended = threading.Event()
        address = self.runtime.start_pod(pod, attempt=0, on_exit=ended.set)
        if wait:
            assert ended.wait(60), "the pod did not end"
            self.runtime.release_network(pod["metadata"]["uid"])
        return address.ip

    def close(self) -> None:
        for uid in self.runtime.known_pods():
            self.runtime.remove_pod(uid)
        self.runtime.close()
        self.network.close()
        self.runtime.release_cgroups()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path / "home")
    try:
        yield made
    finally:
        made.close()
        PodNetwork.remove_home(made.home)
    assert _nothing_left(made.home, made.network.plan.bridge) == []


def test_a_pod_from_the_pool_has_its_entrys_address_and_a_working_network(node):
    assert node.network.pooled() == [], "nothing is made ahead before the first pod"
    assert _standby_shims() == []
    first = node.run(_pod("first", "pass"))
    # A pod that sent nothing gives its namespace back (the pool's filler may come first: both count).
    poll(lambda: len(node.network.pooled()) >= 2 and first in node.network.pooled() or None, timeout=30,
         what="the pool filled, with the first pod's namespace given back")

    ready = node.network.pooled()
    server = _pod("server", SERVER)
    uid = server["metadata"]["uid"]
    ip = node.run(server, wait=False)
    assert ip == ready[0], "the oldest entry's address"
    assert ip not in node.network.pooled()
    assert (NETNS_DIR / f"trm-{home_digest(node.home)}-{uid}").exists(), "its netns carries its name"
    assert uid in node.network.known()
    answer = poll(lambda: _get(ip), timeout=30, what=f"the server at {ip}:8080")
    assert answer == ip
    hosts = next((node.home / "pods" / uid / "runs").glob("*/hosts")).read_text()
    assert f"{ip}\tserver" in hosts
    # Its shim was one started ahead: the runtime still knows its pod by its processes.
    shim = json.loads(next((node.home / "pods" / uid / "runs").glob("*/shim.pid")).read_text())["pid"]
    assert Path(f"/proc/{shim}/cmdline").read_bytes().split(b"\0")[6] == b"--standby"
    assert node.runtime.pod_of_process(shim) == uid

    node.runtime.stop_pod(uid, grace_seconds=0)
    node.runtime.release_network(uid)
    # It had traffic: its namespace is torn down (CNI DEL), not given to the next pod.
    assert ip not in node.network.pooled()
    assert not (NETNS_DIR / f"trm-{home_digest(node.home)}-{uid}").exists()
    assert uid not in node.network.known()


def _get(ip: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:8080/", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def test_a_hand_over_cut_short_leaves_the_address_to_the_pod(node):
    node.run(_pod("first", "pass"))
    poll(lambda: len(node.network.pooled()) >= 2 or None, timeout=30, what="the pool filled")
    records = {p: json.loads(p.read_text()) for p in (node.network.dir / "pods").glob(f"{POOL_PREFIX}*.json")}
    oldest = node.network.pooled()[0]
    record, saved = next((p, data) for p, data in records.items() if data["ip"] == oldest)
    pod = "00000000-0000-0000-0000-00000000cafe"
    address = node.network.setup(pod, "default", "taker")
    assert address.ip == oldest
    # As if the control plane died before removing the entry's record: a sweep at the next start
    # (the pod still in the store) removes the entry's name, not the address its pod holds.
    record.write_text(json.dumps(saved))
    node.network.sweep([pod])
    assert not record.exists()
    assert node.network.address(pod) is not None and Path(address.netns).exists()
    assert pod in node.network.known()
    allocation = node.network.dir / "ipam" / "trimaran" / address.ip
    assert allocation.read_text().split()[0] == saved["container_id"], "host-local still holds its address"
    node.network.teardown(pod)
    assert pod not in node.network.known() and not allocation.exists()


def test_a_pods_end_and_its_deletion_at_once_leave_the_pool_whole(node):
    # The kubelet gives a finished pod's netns back while the pod's deletion may tear it down.
    for i in range(4):
        pod = _pod(f"p{i}", "pass")
        node.run(pod, wait=False)
        uid = pod["metadata"]["uid"]
        poll(lambda uid=uid: not node.runtime.is_alive(uid) or None, timeout=30, what=f"pod {i} ended")
        both = [threading.Thread(target=node.runtime.release_network, args=(uid,)),
                threading.Thread(target=node.network.teardown, args=(uid,))]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join()
        assert uid not in node.network.known()
    records = {p.stem: json.loads(p.read_text()) for p in (node.network.dir / "pods").glob("*.json")}
    assert set(records) == {n for n in node.network.known() if n.startswith(POOL_PREFIX)}
    allocations = {p.name: p.read_text().split()[0] for p in (node.network.dir / "ipam" / "trimaran").glob("*")
                   if p.name[0].isdigit()}
    for name, data in records.items():
        assert Path(data["netns"]).exists(), name
        assert allocations.get(data["ip"]) == data["container_id"], f"{name} holds {data['ip']}"
    assert sorted(node.network.pooled()) == sorted(data["ip"] for data in records.values())


def test_a_killed_control_planes_pool_is_swept_at_its_next_start(plane_with, tmp_path):
    from trimaran.server.daemon import read_server_info, start_server, stop_pods, stop_server

    plane = plane_with(TRIMARAN_POD_NETWORK_POOL="2", TRIMARAN_SHIM_POOL="1")
    path = tmp_path / "pod.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "once"},
                                "spec": {"restartPolicy": "Never", "containers": [
                                    {"name": "main", "image": "python", "command": ["python", "-c", "pass"]}]}}))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "pod/once", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
    prefix = f"trm-{home_digest(plane.home)}-{POOL_PREFIX}"
    pooled = poll(lambda: [n for n in _netns(plane.home) if n.startswith(prefix)][1:] and
                  [n for n in _netns(plane.home) if n.startswith(prefix)], timeout=30, what="the pool filled")
    server = int(read_server_info(plane.home)["pid"])
    standby = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
               if _parent(pid) == server and b"--standby" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert standby, "a shim waits started ahead"
    os.kill(server, signal.SIGKILL)
    # Its shims started ahead see their pipe closed and end.
    poll(lambda: not any(Path(f"/proc/{pid}").exists() for pid in standby) or None, timeout=30,
         what="the standby shims gone with their control plane")
    start_server(home=plane.home)
    poll(lambda: not set(pooled) & set(_netns(plane.home)) or None, timeout=30, what="the dead pool swept")
    assert not [n for n in _netns(plane.home) if n.startswith(prefix)], "nothing made ahead before a pod starts"
    stop_server(plane.home)
    stop_pods(plane.home)
    bridge = json.loads((plane.home / "network.json").read_text())["bridge"]
    assert _nothing_left(plane.home, bridge) == []
    assert not (Path("/sys/fs/cgroup") / home_name(str(plane.home))).exists()
