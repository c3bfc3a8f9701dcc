"""A control plane killed with SIGKILL loses no job state and leaves no process orphaned."""

from __future__ import annotations

import json
import os
import signal
import textwrap

from tests.helpers import poll

# Waits for a go-ahead file, so the test decides when the replicas may finish.
WAITER = textwrap.dedent("""
    import os, time
    while not os.path.exists("/state/go"):
        time.sleep(0.05)
    print("finished", flush=True)
""")


def test_kill_minus_nine_then_restart_readopts_running_pods(plane, tmp_path):
    from trimaran.server.daemon import read_server_info, start_server

    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(f"""
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata: {{name: survivor}}
        spec:
          tfReplicaSpecs:
            Worker:
              replicas: 2
              restartPolicy: OnFailure
              template:
                spec:
                  containers:
                    - name: tensorflow
                      image: tensorflow/tensorflow
                      command: ["python", "-c", {json.dumps(WAITER)}]
                      volumeMounts: [{{name: state, mountPath: /state}}]
                  volumes:
                    - {{name: state, persistentVolumeClaim: {{claimName: survivor-state}}}}
    """))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "pod/survivor-worker-0", "pod/survivor-worker-1", "--for=condition=Ready", "--timeout=60s")
    before = {p.pid for p in plane.pod_processes()}
    assert before

    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    # The pods live on under their shims while the control plane is down. A sandbox may still be
    # starting its last process just after Ready, so new processes may appear; none may go.
    assert before <= {p.pid for p in plane.pod_processes()}
    start_server(home=plane.home)

    job = plane.get("tfjob", "survivor")
    assert job["status"]["replicaStatuses"]["Worker"]["active"] == 2
    (plane.home / "volumes/default/survivor-state/go").write_text("")
    plane.cli("wait", "tfjob/survivor", "--for=condition=Succeeded", "--timeout=60s")
    # Worker 0's success is the job's (TF's rule without a chief): worker 1 may still be finishing.
    plane.cli("wait", "pod/survivor-worker-0", "pod/survivor-worker-1", "--for=jsonpath={.status.phase}=Succeeded",
              "--timeout=60s")
    pods = {p["metadata"]["name"]: p for p in plane.client().list("Pod", "default")}
    for name in ("survivor-worker-0", "survivor-worker-1"):
        assert pods[name]["status"]["phase"] == "Succeeded"
        assert pods[name]["status"]["containerStatuses"][0]["restartCount"] == 0, "re-adopted, not restarted"
    assert "finished" in plane.cli("logs", "survivor", "--replica-type", "worker", "--replica-index", "1").stdout
    poll(lambda: not plane.pod_processes(), timeout=30, what="pod processes to exit")


def test_pods_that_ended_while_down_are_seen_after_restart(plane, tmp_path):
    from trimaran.server.daemon import read_server_info, start_server, stop_server

    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: ended}}
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: main
                  image: python
                  command: ["python", "-c", {json.dumps(WAITER)}]
                  volumeMounts: [{{name: state, mountPath: /state}}]
              volumes:
                - {{name: state, persistentVolumeClaim: {{claimName: ended-state}}}}
    """))
    plane.cli("apply", "-f", str(path))
    poll(lambda: plane.pod_processes(), timeout=60, what="the pod to start")
    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    (plane.home / "volumes/default/ended-state/go").write_text("")
    poll(lambda: not plane.pod_processes(), timeout=30, what="the pod to finish while the control plane is down")
    start_server(home=plane.home)
    plane.cli("wait", "job/ended", "--for=condition=Complete", "--timeout=60s")
    stop_server(plane.home)
