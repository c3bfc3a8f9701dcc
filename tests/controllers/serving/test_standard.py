"""Standard mode's objects as KServe's raw reconcilers make them, built from the Knative replica's pod."""

from __future__ import annotations

from pathlib import Path

from trimaran.api import validate
from trimaran.controllers.serving import standard
from trimaran.controllers.serving.pods import replica_pod, standard_pod_template

ISVC = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": "models", "uid": "u-1"},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "/srv/iris"}}}}
MODEL = {"modelFormat": {"name": "sklearn"}, "storageUri": "/srv/iris"}


def test_the_pod_template_is_the_knative_replicas_pod_on_an_address_of_its_own() -> None:
    component = {"minReplicas": 1, "labels": {"team": "a"}}
    template, port = standard_pod_template(ISVC, "predictor", component, MODEL, Path("/srv/iris"), None)
    knative = replica_pod(ISVC, "predictor", {"name": "iris-predictor-00001", "spec": component, "model": MODEL},
                          0, [20001, 20002], Path("/srv/iris"), None)
    [container] = template["spec"]["containers"]
    [replica] = knative["spec"]["containers"]
    assert port == 8080
    assert container["args"] == [a.replace("127.0.0.1", "0.0.0.0").replace("20001", "8080").replace("20002", "8081")
                                 for a in replica["args"]]
    assert container["volumeMounts"] == replica["volumeMounts"] and template["spec"]["volumes"] == knative["spec"][
        "volumes"]
    assert "hostNetwork" not in template["spec"] and knative["spec"]["hostNetwork"] is True
    assert template["metadata"]["labels"] == {"team": "a", "serving.kserve.io/inferenceservice": "iris",
                                              "component": "predictor", "app": "isvc.iris-predictor"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert [p["containerPort"] for p in container["ports"]] == [8080, 8081]
    assert "K_REVISION" not in {e["name"] for e in container["env"]}
    deployment = validate(standard.deployment(ISVC, "predictor", component, template, 1)).object
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "isvc.iris-predictor"}}
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_a_custom_containers_first_declared_port_is_its_services_target() -> None:
    component = {"containers": [{"name": "kserve-container", "image": "python", "command": ["python", "t.py"],
                                 "ports": [{"containerPort": 5000}]}]}
    template, port = standard_pod_template(ISVC, "transformer", component, None, None, "iris-predictor.models:80")
    [container] = template["spec"]["containers"]
    assert port == 5000
    assert container["readinessProbe"]["tcpSocket"] == {"port": 5000}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PORT"] == "5000" and env["PREDICTOR_HOST"] == "iris-predictor.models:80"
    svc = standard.service(ISVC, "iris-transformer", "transformer", port, grpc=False)
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 5000, "protocol": "TCP"}]


def test_the_autoscaler_follows_kserves_annotations_and_bounds() -> None:
    hpa = standard.autoscaler(ISVC, "predictor", {"minReplicas": 0, "maxReplicas": 0}, {})
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)  # 0 counts as 1; max at least min
    assert hpa["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    hpa = standard.autoscaler(ISVC, "predictor", {"minReplicas": 2, "maxReplicas": 5},
                              {"serving.kserve.io/metrics": "memory",
                               "serving.kserve.io/targetUtilizationPercentage": "60"})
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    assert hpa["spec"]["metrics"][0]["resource"] == {"name": "memory",
                                                     "target": {"type": "Utilization", "averageUtilization": 60}}
    validate(hpa)
    for cls in ("none", "external", "keda"):
        assert standard.autoscaler(ISVC, "predictor", {}, {"serving.kserve.io/autoscalerClass": cls}) is None
