"""InferenceServices in KServe's Standard deployment mode on a real control plane with the pod network:
a Deployment, a ClusterIP Service and an HPA per component, owned by the InferenceService, and a
LoadBalancer Service whose address is status.url, answered by the pods through the kernel's
forwarding (no router). Skipped where the control plane has no pod network (not root, no CNI
plugins): there Standard falls back to Knative mode, which the last test checks on a plane of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from urllib.parse import urlparse

import pytest

from tests.conftest import shared_plane
from tests.e2e.test_serving import TRANSFORMER, Predictor, apply, condition, constant_model, wait_ready
from tests.helpers import poll
from trimaran.runtime.network import table_name

plane = shared_plane("isvc-standard")

STANDARD = {"serving.kserve.io/deploymentMode": "Standard"}


@pytest.fixture(scope="module")
def network_plane(plane):
    if not (plane.home / "network.json").exists():
        pytest.skip("this control plane runs without a pod network (needs root and the CNI plugins)")
    return plane


def manifest(name: str, storage_uri: str, annotations: dict[str, str], **predictor: object) -> str:
    return json.dumps({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                       "metadata": {"name": name, "annotations": annotations},
                       "spec": {"predictor": {**predictor, "model": {"modelFormat": {"name": "sklearn"},
                                                                     "storageUri": storage_uri}}}})


def served_by(pod_ip: str) -> float:
    """Predict requests the model server of the pod at ``pod_ip`` has answered (its own /metrics)."""
    with urllib.request.urlopen(f"http://{pod_ip}:8080/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r'^trimaran_requests_total\{[^}]*\} (\S+)$', text, re.M))


def test_standard_mode_serves_through_a_load_balancer_and_scales_by_its_deployment(network_plane, tmp_path):
    plane = network_plane
    api = plane.api()
    model = constant_model(tmp_path / "models/three", 3)
    apply(plane, tmp_path, manifest("threes", str(model), STANDARD, maxReplicas=2))
    obj = wait_ready(plane, "threes", timeout=120)
    status, uid = obj["status"], obj["metadata"]["uid"]
    assert status["deploymentMode"] == "Standard"
    assert status["address"]["url"] == "http://threes-predictor.default.svc.cluster.local"
    assert "revisions" not in status and "traffic" not in status["components"]["predictor"]
    assert status["modelStatus"]["transitionStatus"] == "UpToDate"
    assert [c["type"] for c in status["conditions"]] == ["PredictorReady", "IngressReady", "Ready"]

    deploy = api.get("Deployment", "default", "threes-predictor")
    svc = api.get("Service", "default", "threes-predictor")
    lb = api.get("Service", "default", "threes")
    hpa = api.get("HorizontalPodAutoscaler", "default", "threes-predictor")
    for child in (deploy, svc, lb, hpa):
        assert [(r["kind"], r["uid"]) for r in child["metadata"]["ownerReferences"]] == [("InferenceService", uid)]
    assert svc["spec"]["type"] == "ClusterIP" and lb["spec"]["type"] == "LoadBalancer"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "threes-predictor"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 2)
    assert hpa["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 80}
    lb_ip = lb["status"]["loadBalancer"]["ingress"][0]["ip"]
    assert status["url"] == f"http://{lb_ip}:80"
    assert status["components"]["predictor"]["url"] == f"http://{svc['spec']['clusterIP']}:80"

    client = Predictor(status["url"], "threes")
    assert client.v1() == 3 and client.v2() == 3
    # Nothing but the kernel between the caller and the model server: no router pod was made.
    assert not [p for p in api.list("Pod", "trimaran-system") if p["metadata"]["name"] == "trimaran-router"]

    api.scale("Deployment", "default", "threes-predictor", 2)
    poll(lambda: api.get("Deployment", "default", "threes-predictor").get("status", {}).get("readyReplicas") == 2,
         timeout=90, interval=0.2, what="2 ready replicas")
    pods = api.list("Pod", "default", selector="app=isvc.threes-predictor")
    ips = [p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(ips) == 2
    before = {ip: served_by(ip) for ip in ips}
    for _ in range(40):  # a new connection each time: the Service picks an endpoint per connection
        assert Predictor(status["url"], "threes").v1() == 3
    after = {ip: served_by(ip) for ip in ips}
    assert all(after[ip] > before[ip] for ip in ips), (before, after)
    assert sum(after.values()) - sum(before.values()) == 40
    # The InferenceService keeps the replicas its HPA (here: the scale) chose, and reports them.
    assert api.get("Deployment", "default", "threes-predictor")["spec"]["replicas"] == 2
    poll(lambda: plane.get("isvc", "threes")["status"]["components"]["predictor"]["replicas"] == {
        "threes-predictor": {"ready": 2, "total": 2}}, timeout=30, what="2 of 2 replicas in the status")
    described = plane.cli("describe", "isvc", "threes").stdout
    assert status["url"] in described and "threes-predictor" in described and "2/2" in described

    changed = tmp_path / "knative.json"
    changed.write_text(manifest("threes", str(model), {"serving.kserve.io/deploymentMode": "Knative"},
                                maxReplicas=2))
    refused = plane.cli("apply", "-f", str(changed), check=False)
    assert refused.returncode != 0
    assert "update rejected: deploymentMode cannot be changed from 'Standard' to 'Knative'" in refused.stderr

    plane.cli("delete", "isvc", "threes")
    for kind, name in (("Deployment", "threes-predictor"), ("Service", "threes-predictor"), ("Service", "threes"),
                       ("HorizontalPodAutoscaler", "threes-predictor")):
        poll(lambda kind=kind, name=name: not any(o["metadata"]["name"] == name for o in api.list(kind, "default")),
             timeout=30, what=f"{kind} {name} gone")
    poll(lambda: not api.list("Pod", "default", selector="app=isvc.threes-predictor"), timeout=60,
         what="replicas gone")
    table = subprocess.run(["nft", "list", "table", "inet", table_name(str(plane.home))], capture_output=True,
                           text=True).stdout
    assert lb_ip not in table and svc["spec"]["clusterIP"] not in table


def test_standard_mode_says_why_a_model_is_missing_and_makes_no_deployment(network_plane, tmp_path):
    plane = network_plane
    missing = tmp_path / "models/nothing-yet"
    apply(plane, tmp_path, manifest("absent", str(missing), STANDARD))
    obj = poll(lambda: (lambda o: o if condition(o, "PredictorReady").get("reason") else None)(
        plane.get("isvc", "absent")), timeout=30, what="PredictorReady's reason")
    assert condition(obj, "PredictorReady")["reason"] == "ModelNotFound"
    assert condition(obj, "Ready")["status"] == "False"
    assert not [d for d in plane.api().list("Deployment", "default") if d["metadata"]["name"] == "absent-predictor"]
    constant_model(missing, 1)  # the model arrives: the next pass makes the Deployment
    obj = wait_ready(plane, "absent", timeout=120)
    url = obj["status"]["url"]
    assert Predictor(url, "absent").v1() == 1
    # A new spec naming a model that is not there: said, and the running Deployment keeps serving.
    apply(plane, tmp_path, manifest("absent", str(tmp_path / "models/elsewhere"), STANDARD))
    poll(lambda: condition(plane.get("isvc", "absent"), "PredictorReady").get("reason") == "ModelNotFound",
         timeout=30, what="ModelNotFound for the new spec")
    assert plane.api().get("Deployment", "default", "absent-predictor")
    assert Predictor(url, "absent").v1() == 1
    plane.cli("delete", "isvc", "absent")


def test_a_transformer_is_the_load_balancers_and_calls_the_predictors_service(network_plane, tmp_path):
    plane = network_plane
    model = constant_model(tmp_path / "models/two", 2)
    doc = json.loads(manifest("pipe", str(model), STANDARD))
    # On its pod's own address: the Service forwards to it there, not to its loopback.
    code = TRANSFORMER.replace('ThreadingHTTPServer(("127.0.0.1"', 'ThreadingHTTPServer(("0.0.0.0"')
    doc["spec"]["transformer"] = {"containers": [{"name": "kserve-container", "image": "python:3.11",
                                                  "command": ["python", "-c", code]}]}
    apply(plane, tmp_path, json.dumps(doc))
    obj = wait_ready(plane, "pipe", timeout=120)
    status = obj["status"]
    assert condition(obj, "TransformerReady")["status"] == "True"
    assert status["address"]["url"] == "http://pipe-transformer.default.svc.cluster.local"
    api = plane.api()
    lb = api.get("Service", "default", "pipe")
    assert lb["spec"]["selector"] == {"app": "isvc.pipe-transformer"}
    assert status["url"] == f"http://{lb['status']['loadBalancer']['ingress'][0]['ip']}:80"
    assert Predictor(status["url"], "pipe").v1() == 20
    assert Predictor(status["components"]["predictor"]["url"], "pipe").v1() == 2
    [pod] = api.list("Pod", "default", selector="app=isvc.pipe-transformer")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PREDICTOR_HOST"] == "pipe-predictor.default:80"
    plane.cli("delete", "isvc", "pipe")


def test_without_a_pod_network_standard_falls_back_to_knative_and_says_why(plane_with, tmp_path):
    off = plane_with(TRIMARAN_POD_NETWORK="off")
    model = constant_model(tmp_path / "models/five", 5)
    apply(off, tmp_path, manifest("fives", str(model), {"serving.kserve.io/deploymentMode": "RawDeployment"}))
    obj = wait_ready(off, "fives", timeout=90)
    assert obj["status"]["deploymentMode"] == "Knative"
    assert urlparse(obj["status"]["url"]).hostname == "127.0.0.1"
    assert Predictor(obj["status"]["url"], "fives").v1() == 5
    [event] = [e for e in off.api().events("InferenceService", "default", "fives")
               if e["reason"] == "StandardModeUnavailable"]
    assert "TRIMARAN_POD_NETWORK=off" in event["message"] and "Knative mode" in event["message"]
    # The annotation stays as written: an update that keeps it is no mode change.
    apply(off, tmp_path, manifest("fives", str(model), {"serving.kserve.io/deploymentMode": "RawDeployment"},
                                  minReplicas=1))
