"""A pod talks to the control plane as a pod talks to its cluster: in-cluster configuration, its
namespace's token, nothing more."""

from __future__ import annotations

import json
import textwrap

from tests.helpers import poll

SCRIPT = textwrap.dedent("""
    import json
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    core = client.CoreV1Api()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
    mine = [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
    try:
        core.list_namespaced_pod("default")
        elsewhere = 200
    except ApiException as exc:
        elsewhere = exc.status
    client.CustomObjectsApi().create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs",
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "from-a-pod"},
         "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {"replicas": 1,
                  "template": {"spec": {"containers": [{"name": "pytorch", "image": "x",
                                                        "command": ["python", "-c", "pass"]}]}}}}}})
    print(json.dumps({"namespace": namespace, "mine": mine, "elsewhere": elsewhere}))
""")


def test_a_pod_uses_the_api_with_its_namespaces_token(plane, tmp_path):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "in-cluster", "namespace": "team-a"},
           "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "main", "image": "python", "command": ["python", "-c", SCRIPT]}]}}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "job/in-cluster", "-n", "team-a", "--for=condition=Complete", "--timeout=120s")
    pod = plane.client().list("Pod", "team-a", "batch.kubernetes.io/job-name=in-cluster")[0]["metadata"]["name"]
    out = json.loads(plane.cli("logs", pod, "-n", "team-a").stdout.strip().splitlines()[-1])
    assert out["namespace"] == "team-a" and pod in out["mine"]
    assert out["elsewhere"] == 403
    created = poll(lambda: plane.client().get("PyTorchJob", "team-a", "from-a-pod"), timeout=10,
                   what="the job the pod created")
    assert created["spec"]["runPolicy"]["suspend"] is True
