"""Run policy as Kubeflow defines it, with scripts that fail on purpose (training-operator.md §2)."""

from __future__ import annotations

import json
import textwrap

from tests.conftest import shared_plane
from tests.helpers import pod_processes_of, poll

plane = shared_plane("runpolicy")


# Fails on the first `fails` attempts (counted in a file on a volume), then exits 0.
FLAKY = textwrap.dedent("""
    import os, sys
    path = "/state/attempts"
    n = int(open(path).read()) if os.path.exists(path) else 0
    open(path, "w").write(str(n + 1))
    print(f"attempt {n}", flush=True)
    sys.exit(int(os.environ["FAIL_CODE"]) if n < int(os.environ["FAILS"]) else 0)
""")


def _job(tmp_path, name: str, restart_policy: str, fails: int, code: int, run_policy: str = "",
         command: str | None = None) -> str:
    script = command or FLAKY
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(textwrap.dedent(f"""
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata:
          name: {name}
        spec:
          runPolicy: {{{run_policy}}}
          pytorchReplicaSpecs:
            Master:
              replicas: 1
              restartPolicy: {restart_policy}
              template:
                spec:
                  containers:
                    - name: pytorch
                      image: python:3.11
                      command: ["python", "-c", {json.dumps(script)}]
                      env:
                        - {{name: FAILS, value: "{fails}"}}
                        - {{name: FAIL_CODE, value: "{code}"}}
                      volumeMounts: [{{name: state, mountPath: /state}}]
                  volumes:
                    - name: state
                      persistentVolumeClaim: {{claimName: {name}-state}}
    """))
    return str(manifest)


def _conditions(job: dict) -> dict[str, dict]:
    return {c["type"]: c for c in job["status"].get("conditions", [])}


def test_never_fails_the_job(plane, tmp_path):
    plane.cli("apply", "-f", _job(tmp_path, "never", "Never", fails=1, code=3))
    plane.cli("wait", "pytorchjob/never", "--for=condition=Failed", "--timeout=60s")
    job = plane.get("pytorchjob", "never")
    assert job["status"]["replicaStatuses"]["Master"]["failed"] == 1
    assert "1 Master replica(s) failed" in _conditions(job)["Failed"]["message"]


def test_on_failure_restarts_in_place_until_success(plane, tmp_path):
    plane.cli("apply", "-f", _job(tmp_path, "onfail", "OnFailure", fails=2, code=1))
    plane.cli("wait", "pytorchjob/onfail", "--for=condition=Succeeded", "--timeout=60s")
    pod = plane.get("pod", "onfail-master-0")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 2
    assert (plane.home / "volumes/default/onfail-state/attempts").read_text() == "3"
    previous = plane.cli("logs", "onfail", "--replica-type", "MASTER", "--previous").stdout
    assert "attempt 1" in previous
    assert "attempt 2" in plane.cli("logs", "onfail-master-0").stdout


def test_backoff_limit_stops_restarts(plane, tmp_path):
    # cleanPodPolicy Running: the failed job's crash-looping pod is deleted (with the default, None,
    # it is left to the kubelet, which goes on restarting it, as upstream).
    plane.cli("apply", "-f", _job(tmp_path, "backoff", "OnFailure", fails=100, code=1,
                                  run_policy="backoffLimit: 2, cleanPodPolicy: Running"))
    plane.cli("wait", "pytorchjob/backoff", "--for=condition=Failed", "--timeout=60s")
    job = plane.get("pytorchjob", "backoff")
    assert "backoff limit" in _conditions(job)["Failed"]["message"]
    # On a loaded machine the kubelet may have begun a restart or two more before the operator saw
    # the limit reached, so the attempts are counted once the pod is gone and cannot grow.
    poll(lambda: not plane.client().list("Pod", "default", selector="training.kubeflow.org/job-name=backoff")
         and not pod_processes_of(plane, "default", "backoff-"), timeout=30, what="the failed job's pod to go")
    attempts = int((plane.home / "volumes/default/backoff-state/attempts").read_text())
    assert attempts >= 2  # it failed on reaching backoffLimit 2, not before


def test_exit_code_retries_retryable_codes(plane, tmp_path):
    plane.cli("apply", "-f", _job(tmp_path, "retry", "ExitCode", fails=1, code=137))
    plane.cli("wait", "pytorchjob/retry", "--for=condition=Succeeded", "--timeout=60s")
    job = plane.get("pytorchjob", "retry")
    assert _conditions(job)["Succeeded"]["status"] == "True"
    events = plane.cli("describe", "pytorchjob", "retry").stdout
    assert "PyTorchJobRestarting" in events


def test_exit_code_fails_on_permanent_codes(plane, tmp_path):
    plane.cli("apply", "-f", _job(tmp_path, "perm", "ExitCode", fails=1, code=1))
    plane.cli("wait", "pytorchjob/perm", "--for=condition=Failed", "--timeout=60s")
    assert (plane.home / "volumes/default/perm-state/attempts").read_text() == "1"


def test_active_deadline_fails_and_stops_processes(plane, tmp_path):
    sleeper = "import time\nopen('/state/pid','w').write(str(__import__('os').getpid()))\ntime.sleep(600)"
    plane.cli("apply", "-f", _job(tmp_path, "deadline", "OnFailure", 0, 0, run_policy="activeDeadlineSeconds: 2",
                                  command=sleeper))
    plane.cli("wait", "pytorchjob/deadline", "--for=condition=Failed", "--timeout=60s")
    job = plane.get("pytorchjob", "deadline")
    assert "deadline" in _conditions(job)["Failed"]["message"]
    poll(lambda: not plane.client().list("Pod", "default", selector="training.kubeflow.org/job-name=deadline"),
         timeout=30, what="pods to be removed")
    _assert_no_pod_processes(plane, "deadline")


def test_delete_leaves_no_process(plane, tmp_path):
    sleeper = "import time\ntime.sleep(600)"
    plane.cli("apply", "-f", _job(tmp_path, "gone", "OnFailure", 0, 0, command=sleeper))
    plane.cli("wait", "pytorchjob/gone", "--for=condition=Running", "--timeout=60s")
    assert pod_processes_of(plane, "default", "gone-"), "the replica should be running"
    plane.cli("delete", "pytorchjob", "gone")
    _assert_no_pod_processes(plane, "gone")
    assert plane.cli("get", "pytorchjob", "gone", check=False).returncode != 0


def test_suspend_and_resume(plane, tmp_path):
    sleeper = "import time\ntime.sleep(600)"
    path = _job(tmp_path, "susp", "OnFailure", 0, 0, command=sleeper)
    plane.cli("apply", "-f", path)
    plane.cli("wait", "pytorchjob/susp", "--for=condition=Running", "--timeout=60s")
    text = open(path).read().replace("runPolicy: {}", "runPolicy: {suspend: true}")
    open(path, "w").write(text)
    plane.cli("apply", "-f", path)
    plane.cli("wait", "pytorchjob/susp", "--for=condition=Suspended", "--timeout=60s")
    poll(lambda: not pod_processes_of(plane, "default", "susp-"), timeout=30,
         what="suspended job's processes to stop")
    open(path, "w").write(text.replace("suspend: true", "suspend: false"))
    plane.cli("apply", "-f", path)
    plane.cli("wait", "pytorchjob/susp", "--for=condition=Running", "--timeout=60s")
    assert _conditions(plane.get("pytorchjob", "susp"))["Suspended"]["status"] == "False"
    plane.cli("delete", "pytorchjob", "susp")  # its replica sleeps 600 s, beside the module's next tests


def _assert_no_pod_processes(plane, job: str) -> None:
    poll(lambda: not pod_processes_of(plane, "default", f"{job}-"), timeout=30,
         what=f"every process of {job}'s pods to exit")
