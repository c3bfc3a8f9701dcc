"""Admission against the node's capacity: gang (all replicas or none), FIFO, GPUs, constraints, OOM."""

from __future__ import annotations

import json
import textwrap

from tests.helpers import EXAMPLES, poll

HOLD = "import os, time\nwhile not os.path.exists('/state/go'):\n    time.sleep(0.05)\n"
DUMP = ("import json, os\nopen('/state/' + os.environ['POD'] + '.json', 'w').write("
        "json.dumps({k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES')}))\n")


def _pytorchjob(tmp_path, name: str, workers: int, resources: dict, script: str, claim: str,
                pod_spec_extra: str = "") -> str:
    container = {
        "name": "pytorch", "image": "x", "command": ["python", "-c", script], "resources": resources,
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
    }
    template = {"spec": {"containers": [container],
                         "volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": claim}}]}}
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}
    if workers:
        spec["pytorchReplicaSpecs"]["Worker"] = {"replicas": workers, "template": template}
    path = tmp_path / f"{name}.json"
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": spec}
    if pod_spec_extra:
        for r in spec["pytorchReplicaSpecs"].values():
            r["template"]["spec"].update(json.loads(pod_spec_extra))
    path.write_text(json.dumps(doc))
    return str(path)


def _phases(plane, prefix: str) -> list[str]:
    return [(p.get("status") or {}).get("phase", "Pending") for p in plane.client().list("Pod", "default")
            if p["metadata"]["name"].startswith(prefix + "-")]


def test_gang_admission_waits_for_room_then_starts_in_fifo_order(plane_with, tmp_path):
    plane = plane_with(TRIMARAN_NODE_CPU="2", TRIMARAN_NODE_MEMORY="8Gi")
    one_cpu = {"requests": {"cpu": "1"}}
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "first", 1, one_cpu, HOLD, "first-state"))
    plane.cli("wait", "pytorchjob/first", "--for=condition=Running", "--timeout=60s")
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "second", 1, one_cpu, HOLD, "second-state"))
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "third", 0, {"requests": {"cpu": "500m"}}, HOLD, "third-state"))

    described = poll(lambda: (lambda out: "FailedScheduling" in out and out)(
        plane.cli("describe", "pytorchjob", "second").stdout), timeout=30, what="a FailedScheduling event")
    assert "Insufficient cpu" in described
    assert _phases(plane, "second") == ["Pending", "Pending"], "no replica of a gang starts alone"
    # FIFO: the small third job would fit beside nothing, yet waits behind the second.
    assert _phases(plane, "third") == ["Pending"]

    (plane.home / "volumes/default/first-state/go").write_text("")
    plane.cli("wait", "pytorchjob/first", "--for=condition=Succeeded", "--timeout=60s")
    plane.cli("wait", "pytorchjob/second", "--for=condition=Running", "--timeout=60s")
    assert _phases(plane, "third") == ["Pending"], "1.5 cores asked with 2 in use by the second job"
    (plane.home / "volumes/default/second-state/go").write_text("")
    plane.cli("wait", "pytorchjob/third", "--for=condition=Running", "--timeout=60s")
    (plane.home / "volumes/default/third-state/go").write_text("")
    plane.cli("wait", "pytorchjob/third", "--for=condition=Succeeded", "--timeout=60s")


def test_a_job_larger_than_the_node_does_not_block_others(plane_with, tmp_path):
    plane = plane_with(TRIMARAN_NODE_CPU="2")
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "huge", 1, {"requests": {"cpu": "8"}}, HOLD, "huge-state"))
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "small", 0, {"requests": {"cpu": "1"}}, "pass", "small-state"))
    plane.cli("wait", "pytorchjob/small", "--for=condition=Succeeded", "--timeout=60s")
    assert "node capacity" in plane.cli("describe", "pytorchjob", "huge").stdout


def test_gpus_are_handed_out_one_per_replica(plane_with, tmp_path):
    plane = plane_with(TRIMARAN_GPUS="2")
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "gpus", 1, gpu, DUMP, "gpus-state"))
    plane.cli("wait", "pytorchjob/gpus", "--for=condition=Succeeded", "--timeout=60s")
    out = plane.home / "volumes/default/gpus-state"
    poll(lambda: len(list(out.glob("*.json"))) == 2, timeout=30, what="both replicas to write")
    seen = sorted(json.loads(p.read_text())["CUDA_VISIBLE_DEVICES"] for p in out.glob("*.json"))
    assert seen == ["0", "1"]
    pods = plane.cli("get", "pods", "-o", "wide").stdout
    assert "gpus-master-0" in pods

    # A third GPU is not there: the job stays Pending and says why.
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "toomany", 2, gpu, DUMP, "toomany-state"))
    described = poll(lambda: (lambda out: "FailedScheduling" in out and out)(
        plane.cli("describe", "pytorchjob", "toomany").stdout), timeout=30, what="a FailedScheduling event")
    assert "nvidia.com/gpu" in described


def test_unsatisfiable_node_selector_stays_pending_with_a_reason(plane, tmp_path):
    extra = json.dumps({"nodeSelector": {"accelerator": "nvidia-a100"}})
    plane.cli("apply", "-f", _pytorchjob(tmp_path, "picky", 0, {}, "pass", "picky-state", pod_spec_extra=extra))
    described = poll(lambda: (lambda out: "FailedScheduling" in out and out)(
        plane.cli("describe", "pytorchjob", "picky").stdout), timeout=30, what="a FailedScheduling event")
    assert "didn't match Pod's node affinity/selector" in described
    assert _phases(plane, "picky") == ["Pending"]


def test_memory_limit_kills_with_oomkilled(plane):
    d = EXAMPLES / "failing"
    plane.cli("apply", "-f", str(d / "code-configmap.yaml"), "-f", str(d / "job-oom.yaml"))
    plane.cli("wait", "job/flaky-oom", "--for=condition=Failed", "--timeout=60s")
    pods = plane.client().list("Pod", "default")
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137
    assert "OOMKilled" in plane.cli("get", "pods").stdout


def test_ttl_after_finished_deletes_the_job(plane, tmp_path):
    path = tmp_path / "ttl.yaml"
    path.write_text(textwrap.dedent("""
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata: {name: shortlived}
        spec:
          runPolicy: {ttlSecondsAfterFinished: 1, cleanPodPolicy: All}
          tfReplicaSpecs:
            Worker:
              replicas: 1
              template:
                spec:
                  containers: [{name: tensorflow, image: x, command: [python, -c, pass]}]
    """))
    plane.cli("apply", "-f", str(path))
    poll(lambda: plane.cli("get", "tfjob", "shortlived", check=False).returncode != 0, timeout=30,
         what="the finished job to be deleted after its TTL")
    poll(lambda: not plane.client().list("Pod", "default"), timeout=30, what="its pods to go")
