"""A pod cannot fill the disk and wedge the control plane (issue 23): container logs rotate, pods are
held to their ``ephemeral-storage`` limits and emptyDir ``sizeLimit``s, the node reports DiskPressure
and stops admitting pods, and a store on a full disk answers 507 while deletes still commit.

The tests that need a small filesystem mount a 64 MB tmpfs as the home (root only) and fill it from
outside the control plane, as another program on the machine would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, _stop_everything
from tests.helpers import REPO, poll, small_tmpfs

MiB = 1024 * 1024


def _apply(plane: ControlPlaneHandle, tmp_path: Path, doc: dict) -> None:
    path = tmp_path / f"{doc['metadata']['name']}.json"
    path.write_text(json.dumps(doc))
    plane.cli("apply", "-f", str(path))


def _pod(name: str, script: str, **spec: object) -> dict:
    container = {"name": "main", "image": "python", "command": ["python", "-c", script]}
    container.update(spec.pop("container", {}))  # type: ignore[arg-type]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def _job(name: str, command: list[str]) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "python", "command": command}]}}}}


def _log(plane: ControlPlaneHandle, pod: str, **params: object) -> bytes:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    api = plane.api()
    resp = api.request("GET", f"/api/v1/namespaces/default/pods/{pod}/log?{query}", stream=True, timeout=120)
    out = b""
    while chunk := resp.read1(65536):
        out += chunk
    return out


def _pod_of(plane: ControlPlaneHandle, job: str) -> str:
    def find() -> str | None:
        proc = plane.cli("get", "pods", "-l", f"batch.kubernetes.io/job-name={job}", "-o", "name", check=False)
        return proc.stdout.strip().removeprefix("pod/") or None

    return poll(find, timeout=60, what=f"the pod of job {job}")


def _evicted(plane: ControlPlaneHandle, name: str) -> dict:
    def status() -> dict | None:
        found = plane.get("pods", name).get("status") or {}
        return found if found.get("reason") == "Evicted" else None

    return poll(status, timeout=60, what=f"pod {name} to be evicted")


# -- logs rotate, and are read across rotations ----------------------------------------------------


@pytest.fixture
def rotating(plane_with: Callable[..., ControlPlaneHandle]) -> ControlPlaneHandle:
    return plane_with(TRIMARAN_CONTAINER_LOG_MAX_SIZE="256Ki", TRIMARAN_CONTAINER_LOG_MAX_FILES="3",
                      TRIMARAN_EVICTION_INTERVAL="0.5")


# Numbered lines (12 bytes each), in bursts with pauses: 2.4 MB, about ten rotations of 256Ki.
_CHATTY = ("import sys, time\n"
           "for i in range(200_000):\n"
           "    sys.stdout.write(f'line {i:06d}\\n')\n"
           "    if i % 10_000 == 9_999: sys.stdout.flush(); time.sleep(0.1)\n")


def _numbers(data: bytes) -> list[int]:
    return [int(line.split()[1]) for line in data.decode().splitlines()]


def test_logs_rotate_and_follow_reads_across_rotations(rotating: ControlPlaneHandle, tmp_path: Path) -> None:
    _apply(rotating, tmp_path, _pod("chatty", _CHATTY))
    poll(lambda: (rotating.get("pods", "chatty").get("status") or {}).get("phase") != "Pending", timeout=60,
         what="the pod to start")
    followed = _numbers(_log(rotating, "chatty", follow="true"))
    # The follow began before the first rotation and went on through every one: nothing lost or repeated.
    assert followed == list(range(len(followed))) and followed[-1] == 199_999
    poll(lambda: rotating.get("pods", "chatty")["status"].get("phase") == "Succeeded", timeout=60,
         what="the pod to succeed")

    directory = rotating.home / "logs" / "default" / "chatty" / "main"
    files = sorted(p.name for p in directory.iterdir())
    assert files[0] == "0.log" and len(files) == 3, files  # the live file and two rotated ones
    assert all(p.stat().st_size <= (256 + 16) * 1024 for p in directory.iterdir())  # a line may end past it
    # The whole log is what the kept files hold, in order, ending with the last line.
    kept = _numbers(_log(rotating, "chatty"))
    assert kept == list(range(kept[0], 200_000)) and kept[0] > 0
    assert _numbers(_log(rotating, "chatty", tailLines=3)) == [199_997, 199_998, 199_999]
    # A tail reaching back into a rotated file, and a byte limit crossing from one file to the next.
    assert _numbers(_log(rotating, "chatty", tailLines=30_000)) == list(range(170_000, 200_000))
    assert _log(rotating, "chatty", limitBytes=len(kept) * 12 - 6) == _log(rotating, "chatty")[:-6]


def test_previous_reads_the_rotated_log_of_the_last_attempt(rotating: ControlPlaneHandle, tmp_path: Path) -> None:
    script = ("import os, sys\n"
              "first = not os.path.exists('/data/ran')\n"
              "open('/data/ran', 'w').close()\n"
              "if first:\n"
              "    sys.stdout.write(''.join(f'line {i:06d}\\n' for i in range(100_000)))\n"
              "    sys.exit(3)\n"
              "print('line 999999')\n")
    pod = _pod("again", script, restartPolicy="OnFailure", volumes=[{"name": "data", "emptyDir": {}}],
               container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]})
    _apply(rotating, tmp_path, pod)
    poll(lambda: rotating.get("pods", "again")["status"].get("phase") == "Succeeded", timeout=90,
         what="the second attempt to succeed")
    assert _log(rotating, "again") == b"line 999999\n"
    previous = _numbers(_log(rotating, "again", previous="true"))
    assert previous[-1] == 99_999 and previous == list(range(previous[0], 100_000))
    assert _numbers(_log(rotating, "again", previous="true", tailLines=2)) == [99_998, 99_999]
    assert len(list((rotating.home / "logs" / "default" / "again" / "main").glob("0.log.*"))) == 2


# -- ephemeral-storage limits and emptyDir sizeLimit -------------------------------------------------


def test_a_pod_over_its_ephemeral_storage_limit_is_evicted(rotating: ControlPlaneHandle, tmp_path: Path) -> None:
    script = "import sys, time; sys.stdout.write('x' * 3_000_000 + '\\n'); sys.stdout.flush(); time.sleep(300)"
    # Its logs are held to three files of 256Ki: 512Ki is less than they keep.
    pod = _pod("greedy", script, container={"resources": {"limits": {"ephemeral-storage": "512Ki"}}})
    _apply(rotating, tmp_path, pod)
    status = _evicted(rotating, "greedy")
    message = "Pod ephemeral local storage usage exceeds the total limit of containers 512Ki. "
    assert status["phase"] == "Failed" and status["message"] == message
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    events = rotating.cli("get", "events", "-o", "json").stdout
    assert any(e["reason"] == "Evicted" and e["message"] == message for e in json.loads(events)["items"])
    assert not [p for p in rotating.pod_processes() if "TRIMARAN_POD_UID" in (p.environ() or {})
                and "greedy" in " ".join(p.cmdline())]


def test_an_empty_dir_over_its_size_limit_is_evicted(rotating: ControlPlaneHandle, tmp_path: Path) -> None:
    script = "import time; open('/scratch/f', 'wb').write(b'x' * 3_000_000); time.sleep(300)"
    pod = _pod("spill", script, volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
               container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]})
    _apply(rotating, tmp_path, pod)
    status = _evicted(rotating, "spill")
    assert status["phase"] == "Failed"
    assert status["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    condition = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert condition["reason"] == "TerminationByKubelet"


# -- a 64 MB home -----------------------------------------------------------------------------------


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB tmpfs as TRIMARAN_HOME, unmounted after the control plane on it stopped."""
    with small_tmpfs(tmp_path / "small", "64m", mode="0700") as mount:
        home = mount / "home"
        try:
            yield home
        finally:
            _stop_everything(home)


def _start(home: Path, **extra_env: str) -> ControlPlaneHandle:
    from trimaran.runtime.node import DEFAULT_EVICTION_HARD
    from trimaran.server.daemon import start_server

    # The node's own default on the small home, not the suite's fixed floor (tests/conftest.py).
    extra_env.setdefault("TRIMARAN_EVICTION_HARD", DEFAULT_EVICTION_HARD)
    saved = {k: os.environ.get(k) for k in [*extra_env, "TRIMARAN_HOME"]}
    os.environ.update(extra_env, TRIMARAN_HOME=str(home))
    try:
        start_server(home=home)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ControlPlaneHandle(home=home, env=dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO),
                                                  **extra_env))


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _fill(path: Path, leave: int) -> Path:
    """A file outside the home, on its filesystem, leaving ``leave`` bytes free (0: every last block)."""
    filler = path.parent / "filler"
    with open(filler, "ab") as handle:
        for step in (MiB, 4096):
            while _free(path) - leave >= step:
                try:
                    os.posix_fallocate(handle.fileno(), os.fstat(handle.fileno()).st_size, step)
                except OSError:
                    break
    return filler


def _condition(plane: ControlPlaneHandle, kind: str) -> dict:
    nodes = plane.api().request("GET", "/api/v1/nodes", timeout=30)
    items = json.loads(nodes.read())["items"]
    assert len(items) == 1
    return next(c for c in items[0]["status"]["conditions"] if c["type"] == kind) | {"taints": (
        items[0].get("spec") or {}).get("taints") or []}


def test_a_chatty_job_in_a_64mb_home_completes_and_the_api_keeps_working(small_home: Path, tmp_path: Path) -> None:
    # The reproduction: `yes | head -c 120000000` filled this home in 20 s and wedged the API.
    plane = _start(small_home, TRIMARAN_CONTAINER_LOG_MAX_SIZE="4Mi", TRIMARAN_CONTAINER_LOG_MAX_FILES="3",
                   TRIMARAN_EVICTION_INTERVAL="0.5")
    _apply(plane, tmp_path, _job("chatty", ["sh", "-c", "yes | head -c 120000000"]))
    plane.cli("wait", "job/chatty", "--for=condition=Complete", "--timeout=180s", timeout=200)
    pod = _pod_of(plane, "chatty")
    status = plane.get("pods", pod)["status"]
    assert status["phase"] == "Succeeded"
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    logs = plane.home / "logs" / "default" / pod / "main"
    assert sum(p.stat().st_size for p in logs.iterdir()) <= 3 * 4 * MiB + 4096
    assert _log(plane, pod, tailLines=2) == b"y\ny\n"
    assert _condition(plane, "DiskPressure")["status"] == "False"
    # Writes and deletes work, and the delete frees the logs.
    after = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}, "data": {"a": "b"}}
    _apply(plane, tmp_path, after)
    plane.cli("delete", "job", "chatty")
    poll(lambda: not logs.exists(), timeout=60, what="the job's logs to go with it")


def test_disk_pressure_holds_new_pods_and_evicts_the_largest(small_home: Path, tmp_path: Path) -> None:
    plane = _start(small_home, TRIMARAN_EVICTION_HARD="nodefs.available<16Mi",
                   TRIMARAN_EVICTION_PRESSURE_TRANSITION_PERIOD="0", TRIMARAN_EVICTION_INTERVAL="0.5")
    assert _condition(plane, "DiskPressure")["reason"] == "KubeletHasNoDiskPressure"
    # The largest user: 8 MB in an emptyDir; a small one beside it.
    hog = _pod("hog", "import time; open('/d/f', 'wb').write(b'x' * 8_000_000); print('written', flush=True); "
               "time.sleep(300)", volumes=[{"name": "d", "emptyDir": {}}],
               container={"volumeMounts": [{"name": "d", "mountPath": "/d"}]})
    _apply(plane, tmp_path, hog)
    _apply(plane, tmp_path, _pod("small", "import time; time.sleep(300)"))
    poll(lambda: b"written" in _log(plane, "hog"), timeout=60, what="the hog to write its file")
    filler = _fill(small_home, leave=12 * MiB)  # 12 MiB free: under the 16Mi threshold

    pressure = poll(lambda: (c := _condition(plane, "DiskPressure"))["status"] == "True" and c, timeout=30,
                    what="DiskPressure")
    assert pressure["reason"] == "KubeletHasDiskPressure"
    assert {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}.items() <= pressure["taints"][0].items()
    status = _evicted(plane, "hog")
    assert status["message"].startswith("The node was low on resource: ephemeral-storage. ")
    assert "Container main was using" in status["message"]
    assert (plane.get("pods", "small")["status"]).get("phase") == "Running"  # only the largest went

    # Evicting the hog freed its 8 MB, but the filler keeps the node under pressure: a new pod waits.
    filler.unlink()
    _fill(small_home, leave=10 * MiB)
    poll(lambda: _condition(plane, "DiskPressure")["status"] == "True", timeout=30, what="DiskPressure again")
    _apply(plane, tmp_path, _pod("later", "print('ran')"))

    def unschedulable() -> str | None:
        scheduled = next((c for c in plane.get("pods", "later").get("status", {}).get("conditions") or []
                          if c["type"] == "PodScheduled"), {})
        return scheduled.get("message") if scheduled.get("status") == "False" else None

    message = poll(unschedulable, timeout=30, what="the new pod to be held back")
    assert "untolerated taint {node.kubernetes.io/disk-pressure: }" in message
    assert plane.get("pods", "later")["status"].get("phase", "Pending") == "Pending"
    filler.unlink()
    poll(lambda: _condition(plane, "DiskPressure")["status"] == "False", timeout=30, what="the pressure to end")
    poll(lambda: plane.get("pods", "later")["status"].get("phase") == "Succeeded", timeout=60,
         what="the held pod to run once the pressure ended")


def test_a_full_store_answers_507_and_deletes_still_work(small_home: Path, tmp_path: Path) -> None:
    from trimaran.cli.client import APIError

    plane = _start(small_home, TRIMARAN_EVICTION_INTERVAL="0.5")
    _apply(plane, tmp_path, _job("victim", ["python", "-c", "import time; print('up', flush=True); time.sleep(300)"]))
    pod = _pod_of(plane, "victim")
    poll(lambda: b"up" in _log(plane, pod), timeout=60, what="the job's pod to run")
    filler = _fill(small_home, leave=0)
    api = plane.api()
    refused = None
    for i in range(40):  # the database's free pages and WAL take a few writes before it must grow
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i}"}, "data": {"a": "x" * 500_000}}
        try:
            api.request("POST", "/api/v1/namespaces/default/configmaps", body=body, timeout=60).read()
        except APIError as exc:
            refused = exc
            break
    assert refused is not None, "no write was refused on a full disk"
    assert refused.status == 507, refused
    assert "database or disk is full" in str(refused) and f"free space on {small_home.parent}" in str(refused)
    # Deleting is always possible, and deleting the job frees its pod.
    kubectl = subprocess.run([sys.executable, "-m", "trimaran.cli", "delete", "job", "victim"], env=plane.env,
                             capture_output=True, text=True, timeout=120, cwd=REPO)
    assert kubectl.returncode == 0, kubectl.stderr
    poll(lambda: not (plane.home / "logs" / "default" / pod).exists(), timeout=60, what="the pod to go")
    filler.unlink()
    api.request("POST", "/api/v1/namespaces/default/configmaps", timeout=60,
                body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fine"}, "data": {"a": "b"}}).read()
    poll(lambda: (plane.home / "trimaran.db.reserve").exists(), timeout=30, what="the store's reserve to come back")
