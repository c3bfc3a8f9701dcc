"""Real pods: processes in bubblewrap sandboxes under a shim, on a tmp_path home."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from trimaran.runtime import (
    Admission,
    ConfigError,
    LocalRuntime,
    Node,
    PodNotFound,
    VolumeError,
    sandbox_available,
)
from trimaran.runtime.local import ContainerStatus

from .helpers import make_pod, wait_for

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def python(code: str, **container: object) -> dict:
    return {"name": "main", "command": [PY, "-c", textwrap.dedent(code)], **container}


def uid_of(pod: dict) -> str:
    return pod["metadata"]["uid"]


def finished(runtime: LocalRuntime, pod: dict, name: str = "main", timeout: float = 20) -> ContainerStatus:
    def done() -> ContainerStatus | None:
        status = runtime.pod_status(uid_of(pod)).containers[name]
        return status if status.state == "terminated" else None

    return wait_for(done, timeout, f"container {name} of {pod['metadata']['name']} to finish")


def running(runtime: LocalRuntime, pod: dict, name: str = "main") -> ContainerStatus:
    def up() -> ContainerStatus | None:
        status = runtime.pod_status(uid_of(pod)).containers.get(name)
        return status if status and status.state == "running" else None

    return wait_for(up, 10, f"container {name} to run")


def log_of(runtime: LocalRuntime, pod: dict, container: str | None = None) -> str:
    return runtime.log_path("default", pod["metadata"]["name"], container).read_text()


def logged(runtime: LocalRuntime, pod: dict, text: str) -> bool:
    """Whether the pod's log has ``text`` yet (the file appears when the container starts)."""
    path = runtime.log_path("default", pod["metadata"]["name"])
    return path.exists() and text in path.read_text()


def test_configmap_script_writes_into_pvc(runtime: LocalRuntime) -> None:
    assert not Path("/output").exists() and not Path("/app").exists()
    train = "import sys\nopen('/output/x', 'w').write('trained')\nprint('epoch 1'); print('warn', file=sys.stderr)\n"
    configs = {("ConfigMap", "default", "code"): {"data": {"train.py": train}}}
    pod = make_pod("trainer", [{
        "name": "main", "command": ["python", "/app/train.py"],
        "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "out", "mountPath": "/output"}],
    }], volumes=[{"name": "code", "configMap": {"name": "code"}},
                 {"name": "out", "persistentVolumeClaim": {"claimName": "results"}}])
    runtime.start_pod(pod, attempt=0, lookup=lambda k, ns, n: configs.get((k, ns, n)))
    status = finished(runtime, pod)
    assert (status.exit_code, status.reason) == (0, "Completed")
    assert (runtime.home / "volumes" / "default" / "results" / "x").read_text() == "trained"
    assert not Path("/output").exists() and not Path("/app").exists()
    log = log_of(runtime, pod)
    assert "epoch 1" in log and "warn" in log


def test_a_mount_path_with_a_trailing_slash_mounts_as_written(runtime: LocalRuntime) -> None:
    # Katib's pbt example mounts its checkpoints at "/var/log/katib/checkpoints/".
    pod = make_pod("slash", [{
        "name": "main", "command": ["python", "-c", "open('/var/log/katib/ckpt/x', 'w').write('saved')"],
        "volumeMounts": [{"name": "out", "mountPath": "/var/log/katib//ckpt/", "subPath": "a/b"}],
    }], volumes=[{"name": "out", "persistentVolumeClaim": {"claimName": "ckpt"}}])
    runtime.start_pod(pod, attempt=0, lookup=lambda k, ns, n: None)
    status = finished(runtime, pod)
    assert (status.exit_code, status.reason) == (0, "Completed"), log_of(runtime, pod)
    assert (runtime.home / "volumes" / "default" / "ckpt" / "a" / "b" / "x").read_text() == "saved"


def test_configmap_is_read_only_and_items_pick_paths(runtime: LocalRuntime) -> None:
    configs = {("Secret", "default", "s"): {"stringData": {"token": "abc"}}}
    pod = make_pod("ro", [python("""
        import os
        print(open('/etc/creds/auth/token').read())
        print(oct(os.stat('/etc/creds/auth/token').st_mode & 0o777))
        try:
            open('/etc/creds/new', 'w')
        except OSError as e:
            print('refused', e.errno)
        """, volumeMounts=[{"name": "s", "mountPath": "/etc/creds"}])],
        volumes=[{"name": "s", "secret": {"secretName": "s", "defaultMode": 0o400,
                                          "items": [{"key": "token", "path": "auth/token"}]}}])
    runtime.start_pod(pod, attempt=0, lookup=lambda k, ns, n: configs.get((k, ns, n)))
    assert finished(runtime, pod).exit_code == 0
    assert log_of(runtime, pod).split() == ["abc", "0o400", "refused", "30"]


def test_dev_shm_size(runtime: LocalRuntime) -> None:
    code = """
        import os
        st = os.statvfs('/dev/shm')
        print(st.f_blocks * st.f_frsize)
        try:
            with open('/dev/shm/big', 'wb') as f:
                f.write(b'x' * (48 * 2**20))
            print('wrote')
        except OSError as e:
            print('full', e.errno)
        """
    sized = make_pod("sized", [python(code, volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])],
                     volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Mi"}}])
    default = make_pod("default-shm", [python(code)])
    runtime.start_pod(sized, attempt=0)
    runtime.start_pod(default, attempt=0)
    finished(runtime, sized)
    finished(runtime, default)
    assert log_of(runtime, sized).split() == [str(32 * 2**20), "full", "28"]  # ENOSPC
    assert log_of(runtime, default).split() == [str(64 * 2**20), "wrote"]


def test_hostname_and_hosts(runtime: LocalRuntime) -> None:
    pod = make_pod("mnist-worker-0", [python("""
        import socket
        print(socket.gethostname())
        for name in ['mnist-worker-0', 'mnist-worker-0.default.svc', 'mnist-worker-1', 'localhost', 'alias']:
            print(name, socket.gethostbyname(name))
        """)], hostAliases=[{"ip": "127.0.0.9", "hostnames": ["alias"]}])
    hosts = {"mnist-worker-0": "127.0.0.1", "mnist-worker-0.default.svc": "127.0.0.1",
             "mnist-worker-1": "127.0.0.2"}
    runtime.start_pod(pod, attempt=0, hosts=hosts)
    assert finished(runtime, pod).exit_code == 0
    assert log_of(runtime, pod).splitlines() == [
        "mnist-worker-0",
        "mnist-worker-0 127.0.0.1",
        "mnist-worker-0.default.svc 127.0.0.1",
        "mnist-worker-1 127.0.0.2",
        "localhost 127.0.0.1",
        "alias 127.0.0.9",
    ]


def test_environment_reaches_the_process(runtime: LocalRuntime) -> None:
    configs = {("ConfigMap", "default", "cfg"): {"data": {"LR": "0.5"}}}
    pod = make_pod("envy", [{
        "name": "main",
        "command": ["sh", "-c", 'echo "$POD/$LR/$CUDA_VISIBLE_DEVICES/$HOSTNAME/$PYTHONUNBUFFERED" "$@"', "sh"],
        "args": ["$(LR)", "$$(LR)"],
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "LR"}}},
                {"name": "CUDA_VISIBLE_DEVICES", "value": "7"}],
    }])
    runtime.start_pod(pod, attempt=0, env_extra={"CUDA_VISIBLE_DEVICES": ""},
                      lookup=lambda k, ns, n: configs.get((k, ns, n)))
    assert finished(runtime, pod).exit_code == 0
    # env_extra (the device assignment) wins over the pod's own CUDA_VISIBLE_DEVICES.
    assert log_of(runtime, pod).strip() == "envy/0.5//envy/1 0.5 $(LR)"


def test_gpu_assignment_reaches_the_process(runtime: LocalRuntime) -> None:
    node = Node.from_env({"TRIMARAN_GPUS": "2", "TRIMARAN_NODE_CPU": "4", "TRIMARAN_NODE_MEMORY": "8Gi"})
    show = python("import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))")
    gpu_pod = make_pod("gpu", [{**show, "resources": {"limits": {"nvidia.com/gpu": "1"}}}])
    cpu_pod = make_pod("cpu", [show])
    admission = node.admit("job", [cpu_pod, gpu_pod])
    assert isinstance(admission, Admission)
    for pod in (cpu_pod, gpu_pod):
        runtime.start_pod(pod, attempt=0, env_extra=admission.env(uid_of(pod)))
        finished(runtime, pod)
    assert log_of(runtime, cpu_pod).strip() == "''"
    assert log_of(runtime, gpu_pod).strip() == "'0'"


def test_exit_code_reason_and_termination_message(runtime: LocalRuntime) -> None:
    ok = make_pod("ok", [python("print('fine')")])
    bad = make_pod("bad", [python("""
        open('/dev/termination-log', 'w').write('loss diverged')
        raise SystemExit(3)
        """)])
    fallback = make_pod("fallback", [python("import sys; print('last words'); sys.exit(2)",
                                            terminationMessagePolicy="FallbackToLogsOnError")])
    killed = make_pod("killed", [python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")])
    for pod in (ok, bad, fallback, killed):
        runtime.start_pod(pod, attempt=0)
    status = finished(runtime, ok)
    assert (status.exit_code, status.reason, status.signal) == (0, "Completed", None)
    assert status.started_at and status.finished_at and status.to_k8s()["terminated"]["exitCode"] == 0
    status = finished(runtime, bad)
    assert (status.exit_code, status.reason, status.message) == (3, "Error", "loss diverged")
    assert finished(runtime, fallback).message == "last words"
    status = finished(runtime, killed)
    assert (status.exit_code, status.reason, status.signal) == (137, "Error", 9)


def test_start_error(runtime: LocalRuntime) -> None:
    pod = make_pod("typo", [{"name": "main", "command": ["pythn", "train.py"]}])
    runtime.start_pod(pod, attempt=0)
    status = finished(runtime, pod)
    assert (status.exit_code, status.reason) == (128, "StartError")
    assert "pythn" in (status.message or "")


def test_config_errors_start_nothing(runtime: LocalRuntime) -> None:
    missing_env = make_pod("cfg", [python("", env=[
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}])])
    with pytest.raises(ConfigError, match='configmap "absent" not found'):
        runtime.start_pod(missing_env, attempt=0)
    missing_volume = make_pod("vol", [python("")], volumes=[{"name": "v", "configMap": {"name": "absent"}}])
    with pytest.raises(VolumeError, match='configmap "absent" not found'):
        runtime.start_pod(missing_volume, attempt=0)
    for pod in (missing_env, missing_volume):
        with pytest.raises(PodNotFound):
            runtime.pod_status(uid_of(pod))


@pytest.mark.parametrize("use_cgroups", [True, False], ids=["cgroup", "rlimit"])
def test_memory_limit_is_reported_oomkilled(tmp_path: Path, use_cgroups: bool) -> None:
    runtime = LocalRuntime(tmp_path / "home", use_cgroups=use_cgroups)
    hog = make_pod("hog", [python("""
        print('allocating', flush=True)
        data = b'x' * (1024 * 2**20)
        print('survived', len(data))
        """, resources={"limits": {"memory": "128Mi"}})])
    modest = make_pod("modest", [python("data = b'x' * (16 * 2**20); print('ok')",
                                        resources={"limits": {"memory": "128Mi"}})])
    runtime.start_pod(hog, attempt=0)
    runtime.start_pod(modest, attempt=0)
    status = finished(runtime, hog)
    assert status.reason == "OOMKilled" and status.exit_code != 0
    assert "survived" not in log_of(runtime, hog)
    assert finished(runtime, modest).reason == "Completed"
    enforcement = json.loads((runtime.home / "pods" / uid_of(hog) / "runs" / "0" / "main.pid").read_text())
    if use_cgroups:
        assert enforcement["memoryEnforcement"] in ("cgroup-v1", "cgroup-v2", "rlimit")
        if enforcement["memoryEnforcement"] != "rlimit":
            assert status.exit_code == 137
            assert enforcement["cgroupDirs"]
            assert not any(os.path.exists(p) for p in enforcement["cgroupDirs"])  # removed with the container
    else:
        assert enforcement["memoryEnforcement"] == "rlimit"


def pod_processes(runtime: LocalRuntime, pod: dict) -> list[psutil.Process]:
    shim_pid = json.loads((runtime.home / "pods" / uid_of(pod) / "runs" / "0" / "shim.pid").read_text())["pid"]
    shim = psutil.Process(shim_pid)
    return [shim, *shim.children(recursive=True)]


def test_stop_pod_kills_everything_after_grace(runtime: LocalRuntime) -> None:
    pod = make_pod("stubborn", [python("""
        import signal, subprocess, time
        subprocess.Popen(['sleep', '1000'])
        subprocess.Popen(['sleep', '1000'], start_new_session=True)
        subprocess.Popen(['sh', '-c', 'trap "" TERM; sleep 1000 & wait'])
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(1000)
        """)])
    runtime.start_pod(pod, attempt=0)
    wait_for(lambda: logged(runtime, pod, "ready"), 10, "the pod to be ready")
    # shim, bwrap, bwrap's init in the pid namespace, python, sleep, sleep, sh, sleep
    processes = wait_for(lambda: p if len(p := pod_processes(runtime, pod)) >= 8 else None, 10,
                         "all processes to start")
    began = time.monotonic()
    runtime.stop_pod(uid_of(pod), grace_seconds=0.5)
    assert time.monotonic() - began >= 0.5
    assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not runtime.is_alive(uid_of(pod))
    status = runtime.pod_status(uid_of(pod)).containers["main"]
    assert (status.state, status.exit_code) == ("terminated", 137)
    runtime.stop_pod(uid_of(pod))  # idempotent
    runtime.stop_pod("no-such-uid")


def test_stop_pod_lets_the_process_exit_gracefully(runtime: LocalRuntime) -> None:
    pod = make_pod("polite", [python("""
        import signal, sys, time
        def bye(signum, frame):
            print('got TERM', flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print('ready', flush=True)
        time.sleep(1000)
        """)])
    runtime.start_pod(pod, attempt=0)
    wait_for(lambda: logged(runtime, pod, "ready"), 10, "the pod to be ready")
    began = time.monotonic()
    runtime.stop_pod(uid_of(pod), grace_seconds=30)
    assert time.monotonic() - began < 5
    status = runtime.pod_status(uid_of(pod)).containers["main"]
    assert (status.exit_code, status.reason) == (0, "Completed")
    assert "got TERM" in log_of(runtime, pod)


STARTER = """
import sys, time
from pathlib import Path
from trimaran.runtime import LocalRuntime
pod = {"metadata": {"name": "survivor", "namespace": "default", "uid": "survivor-uid"},
       "spec": {"containers": [{"name": "main", "command": [sys.executable, "-c",
           "import os, sys, time\\nwhile not os.path.exists('/gate/go'): time.sleep(0.02)\\nsys.exit(3)"],
           "volumeMounts": [{"name": "gate", "mountPath": "/gate"}]}],
           "volumes": [{"name": "gate", "persistentVolumeClaim": {"claimName": "gate"}}]}}
LocalRuntime(Path(sys.argv[1])).start_pod(pod, attempt=0)
print("started", flush=True)
time.sleep(1000)
"""


def test_pod_survives_control_plane_kill_and_is_readopted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    starter = subprocess.Popen([PY, "-c", STARTER, str(home)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert starter.stdout is not None and starter.stdout.readline().strip() == "started"
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        runtime = LocalRuntime(home)
        assert runtime.known_pods() == ["survivor-uid"]
        status = wait_for(lambda: (s := runtime.pod_status("survivor-uid").containers["main"]).state == "running" and s,
                          10, "the pod to run")
        assert psutil.pid_exists(status.pid)
        assert runtime.running_pods() == ["survivor-uid"]
        (home / "volumes" / "default" / "gate" / "go").touch()
        pod = {"metadata": {"uid": "survivor-uid", "name": "survivor"}}
        status = finished(runtime, pod)
        assert (status.exit_code, status.reason) == (3, "Error")
        wait_for(lambda: not runtime.is_alive("survivor-uid"), 10, "the shim to exit")
    finally:
        starter.kill()
        starter.wait()
        LocalRuntime(home).stop_pod("survivor-uid", grace_seconds=0)


def test_lost_shim_is_reported_and_takes_the_pod_down(runtime: LocalRuntime) -> None:
    pod = make_pod("orphan", [python("import time; print('ready', flush=True); time.sleep(1000)")])
    runtime.start_pod(pod, attempt=0)
    wait_for(lambda: logged(runtime, pod, "ready"), 10, "the pod to be ready")
    processes = pod_processes(runtime, pod)
    processes[0].kill()
    status = finished(runtime, pod)
    assert (status.exit_code, status.reason) == (137, "ShimLost")
    assert runtime.pod_status(uid_of(pod)).containers["main"] == status  # recorded once
    psutil.wait_procs(processes, timeout=10)
    assert not runtime.is_alive(uid_of(pod))


def test_pid_reuse_does_not_look_alive(runtime: LocalRuntime) -> None:
    pod = make_pod("brief", [python("pass")])
    runtime.start_pod(pod, attempt=0)
    finished(runtime, pod)
    wait_for(lambda: not runtime.is_alive(uid_of(pod)), 10, "the shim to exit")
    shim_file = runtime.home / "pods" / uid_of(pod) / "runs" / "0" / "shim.pid"
    ticks = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    # A live process now holds the recorded pid, but it started at another time.
    shim_file.write_text(json.dumps({"pid": os.getpid(), "startTicks": ticks + 1}))
    assert not runtime.is_alive(uid_of(pod))
    shim_file.write_text(json.dumps({"pid": os.getpid(), "startTicks": ticks}))
    assert runtime.is_alive(uid_of(pod))
    shim_file.unlink()


def test_init_containers_run_first_and_can_block(runtime: LocalRuntime) -> None:
    work = {"volumeMounts": [{"name": "work", "mountPath": "/work-dir"}]}
    pod = make_pod("staged", [python("print(open('/work-dir/data').read())", **work)],
                   initContainers=[
                       {**python("open('/work-dir/data', 'w').write('prepared')", **work), "name": "fetch"},
                       {**python("import os; print(sorted(os.listdir('/work-dir')))", **work), "name": "check"},
                   ],
                   volumes=[{"name": "work", "emptyDir": {}}])
    runtime.start_pod(pod, attempt=0)
    assert finished(runtime, pod).exit_code == 0
    status = runtime.pod_status(uid_of(pod))
    assert list(status.init_containers) == ["fetch", "check"]
    assert all(s.reason == "Completed" for s in status.init_containers.values())
    assert log_of(runtime, pod).strip() == "prepared"

    blocked = make_pod("blocked", [python("print('never')")],
                       initContainers=[{**python("raise SystemExit(1)"), "name": "fail"}])
    runtime.start_pod(blocked, attempt=0)
    wait_for(lambda: not runtime.is_alive(uid_of(blocked)), 10, "the shim to exit")
    status = runtime.pod_status(uid_of(blocked))
    assert status.init_containers["fail"].exit_code == 1
    assert status.containers["main"].state == "waiting"
    assert status.containers["main"].reason == "PodInitializing"


def test_restart_in_place_keeps_empty_dir_and_logs_per_attempt(runtime: LocalRuntime) -> None:
    counter = python("""
        import os
        path = '/scratch/count'
        n = int(open(path).read()) + 1 if os.path.exists(path) else 1
        open(path, 'w').write(str(n))
        print('run', n)
        raise SystemExit(0 if n == 2 else 1)
        """, volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
    pod = make_pod("flaky", [counter], volumes=[{"name": "scratch", "emptyDir": {}}])
    runtime.start_pod(pod, attempt=0)
    assert finished(runtime, pod).exit_code == 1
    wait_for(lambda: not runtime.is_alive(uid_of(pod)), 10, "the first run to end")
    runtime.start_pod(pod, attempt=1)
    status = wait_for(lambda: (s := runtime.pod_status(uid_of(pod)).containers["main"]).attempt == 1
                      and s.state == "terminated" and s, 20, "the second run")
    assert status.exit_code == 0
    assert runtime.log_attempts("default", "flaky", "main") == [0, 1]
    assert log_of(runtime, pod).strip() == "run 2"
    assert runtime.log_path("default", "flaky", "main", attempt=0).read_text().strip() == "run 1"
    assert runtime.pod_identity(uid_of(pod)) == ("default", "flaky")

    runtime.remove_pod(uid_of(pod))
    assert uid_of(pod) not in runtime.known_pods()
    assert log_of(runtime, pod).strip() == "run 2"  # logs outlive the pod's state
    runtime.delete_logs("default", "flaky")
    assert not runtime.log_attempts("default", "flaky", "main")


def test_four_replicas_start_fast(runtime: LocalRuntime) -> None:
    pods = [make_pod(f"replica-{i}", [python("import time; time.sleep(1000)")]) for i in range(4)]
    began = time.perf_counter()
    for pod in pods:
        runtime.start_pod(pod, attempt=0)
    started = time.perf_counter() - began
    for pod in pods:
        running(runtime, pod)
    all_running = time.perf_counter() - began
    print(f"4 x start_pod: {started * 1000:.1f} ms; all running after {all_running * 1000:.1f} ms")
    assert started < 0.5
    assert all_running < 2.0


def test_restarting_one_container_while_another_runs(runtime: LocalRuntime) -> None:
    sidecar = {**python("import time; print('up', flush=True); time.sleep(1000)"), "name": "sidecar"}
    worker = {**python("import os; print('attempt', os.environ['ATTEMPT'])"), "name": "worker",
              "env": [{"name": "ATTEMPT", "value": "x"}]}
    pod = make_pod("pair", [sidecar, worker])
    runtime.start_pod(pod, attempt=0)
    finished(runtime, pod, "worker")
    with pytest.raises(RuntimeError, match="sidecar still running"):
        runtime.start_pod(pod, attempt=1)
    runtime.start_pod(pod, attempt=1, containers=["worker"])
    status = wait_for(lambda: (s := runtime.pod_status(uid_of(pod)).containers["worker"]).attempt == 1
                      and s.state == "terminated" and s, 20, "the worker's second run")
    assert status.exit_code == 0
    both = runtime.pod_status(uid_of(pod))
    assert list(both.containers) == ["sidecar", "worker"]
    assert (both.containers["sidecar"].state, both.containers["sidecar"].attempt) == ("running", 0)
    assert runtime.log_attempts("default", "pair", "worker") == [0, 1]
    assert log_of(runtime, pod).strip() == "up"  # the first container's log by default
    runtime.stop_pod(uid_of(pod), grace_seconds=0)
    assert runtime.pod_status(uid_of(pod)).containers["sidecar"].state == "terminated"


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06])
def test_stop_right_after_start_is_orderly(runtime: LocalRuntime, delay: float) -> None:
    pod = make_pod("hasty", [python("import time; time.sleep(1000)")])
    runtime.start_pod(pod, attempt=0)
    time.sleep(delay)  # lands the stop in different phases of the shim's start, not a wait
    began = time.monotonic()
    runtime.stop_pod(uid_of(pod), grace_seconds=5)
    assert time.monotonic() - began < 2  # the process got its SIGTERM, whatever the phase
    assert not runtime.is_alive(uid_of(pod))
    status = runtime.pod_status(uid_of(pod)).containers["main"]
    assert status.reason in ("ContainerCreating", "Error"), status
