"""What the SeldonDeployment controller asks of an InferenceService per predictor: replicas by Seldon's
precedence, hpaSpec as an HPA of the SeldonDeployment, V2 on the model server, the ingress annotations, the class a
componentSpecs container names, and a model directory that does not exist refused with the unit's name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trimaran.controllers.serving.seldon import (
    SpecProblem,
    UnitsPending,
    autoscaler_for,
    image_units,
    predictor_service,
    unit_deployment,
)


def _sdep(*predictors: dict, **spec: object) -> dict:
    return {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u-1"},
            "spec": {"predictors": list(predictors), **spec}}


SIMPLE = {"name": "m", "implementation": "SIMPLE_MODEL", "type": "MODEL"}


def test_replicas_follow_seldons_precedence_and_hpa_spec(tmp_path: Path) -> None:
    only_spec = {"name": "p", "graph": SIMPLE, "traffic": 100}
    assert predictor_service(_sdep(only_spec, replicas=3), only_spec, tmp_path)["spec"]["predictor"]["minReplicas"] == 3
    predictor = {**only_spec, "replicas": 2, "componentSpecs": [{"replicas": 4, "spec": {"containers": []}}]}
    assert predictor_service(_sdep(predictor, replicas=3), predictor, tmp_path)["spec"]["predictor"]["minReplicas"] == 4
    hpa = {**only_spec, "componentSpecs": [{"spec": {"containers": []}, "hpaSpec": {
        "minReplicas": 1, "maxReplicas": 3,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 10}}]}}]}
    component = predictor_service(_sdep(hpa), hpa, tmp_path)["spec"]["predictor"]
    assert (component["minReplicas"], component["maxReplicas"]) == (1, 1) and "scaleMetric" not in component
    # The HPA writes spec.replicas (the scale subresource): a predictor with an hpaSpec runs that many.
    component = predictor_service(_sdep(hpa, replicas=3), {**hpa, "replicas": 2}, tmp_path)["spec"]["predictor"]
    assert (component["minReplicas"], component["maxReplicas"]) == (3, 3)


def test_hpa_spec_becomes_an_hpa_named_as_seldons_operator_names_it() -> None:
    cpu = {"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 10}}
    hpa = {"name": "p", "graph": SIMPLE, "componentSpecs": [{"spec": {"containers": [{"name": "m"}]}, "hpaSpec": {
        "maxReplicas": 3, "metrics": [cpu]}}]}
    made = autoscaler_for(_sdep(hpa))
    assert made is not None and made["metadata"]["name"] == "s-p-0-m"
    assert made["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert made["spec"] == {"scaleTargetRef": {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment",
                                               "name": "s"}, "maxReplicas": 3,
                            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                                "type": "Utilization", "averageUtilization": 10}}}]}
    assert autoscaler_for(_sdep({"name": "p", "graph": SIMPLE})) is None


def test_shadow_traffic_v2_and_user_class(tmp_path: Path) -> None:
    shadow = {"name": "mirror", "graph": SIMPLE, "shadow": True}
    isvc = predictor_service(_sdep(shadow), shadow, tmp_path)
    assert isvc["metadata"]["name"] == "s-mirror"
    assert isvc["metadata"]["annotations"] == {"serving.trimaran.io/ingress-path": "/seldon/ns/s/",
                                               "serving.trimaran.io/ingress-weight": "0",
                                               "serving.trimaran.io/shadow": "true"}
    assert isvc["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    v2 = {"name": "p", "traffic": 100, "graph": {"name": "iris", "implementation": "SKLEARN_SERVER",
                                                  "modelUri": "pvc://models/iris"}}
    model = predictor_service(_sdep(v2, protocol="v2"), v2, tmp_path)["spec"]["predictor"]["model"]
    assert model == {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://models/iris", "protocolVersion": "v2",
                     "args": ["--model-name", "iris"]}
    remote = {"name": "p", "traffic": 100, "graph": {"name": "clf", "type": "MODEL",
                                                      "endpoint": {"service_host": "clf.models", "service_port": 9000}}}
    config = json.loads(predictor_service(_sdep(remote), remote, tmp_path)["spec"]["predictor"]["containers"][0]
                        ["env"][0]["value"])
    assert config["sources"] == {"clf": {"url": "http://clf.models:9000"}}
    triton = {"name": "p", "traffic": 100, "graph": {"name": "net", "implementation": "TRITON_SERVER",
                                                      "modelUri": "pvc://models/net"}}
    server = predictor_service(_sdep(triton, protocol="v2"), triton, tmp_path)["spec"]["predictor"]["containers"][0]
    assert server["command"] == ["python", "-m", "trimaran.serving"]
    assert server["args"][:4] == ["--model-name", "net", "--model-dir", "/mnt/seldon/net/net"]
    custom = {"name": "p", "traffic": 100, "graph": {"name": "clf", "type": "MODEL"}, "componentSpecs": [{"spec": {
        "containers": [{"name": "clf", "command": ["seldon-core-microservice"], "args": ["pkg.Model", "--http-port"],
                        "workingDir": "/code", "volumeMounts": [{"name": "src", "mountPath": "/src"}],
                        "env": [{"name": "LEVEL", "value": "3"}], "resources": {"requests": {"cpu": "500m"}}}],
        "volumes": [{"name": "src", "configMap": {"name": "code"}}]}}]}
    pod = predictor_service(_sdep(custom), custom, tmp_path)["spec"]["predictor"]
    container = pod["containers"][0]
    config = json.loads(container["env"][0]["value"])
    assert config["sources"] == {"clf": {"class": "pkg.Model", "paths": ["/code", "/src"]}}
    assert container["env"][1] == {"name": "LEVEL", "value": "3"}
    assert container["resources"] == {"requests": {"cpu": "500m"}}
    assert container["volumeMounts"] == [{"name": "c0-src", "mountPath": "/src"}]
    assert pod["volumes"] == [{"name": "c0-src", "configMap": {"name": "code"}}]


def test_missing_local_model_or_class_is_a_problem_naming_the_unit(tmp_path: Path) -> None:
    missing = {"name": "p", "traffic": 100, "graph": {"name": "clf", "implementation": "SKLEARN_SERVER",
                                                       "modelUri": str(tmp_path / "nowhere")}}
    with pytest.raises(SpecProblem, match="unit 'clf': modelUri .*nowhere does not exist"):
        predictor_service(_sdep(missing), missing, tmp_path)
    nameless = {"name": "p", "traffic": 100, "graph": {"name": "clf", "type": "MODEL"},
                "componentSpecs": [{"spec": {"containers": [{"name": "clf"}]}}]}
    with pytest.raises(SpecProblem, match=r"container 'clf' names no class and no image"):
        predictor_service(_sdep(nameless), nameless, tmp_path)


def test_an_image_unit_is_a_deployment_of_its_own_called_at_its_pods(tmp_path: Path) -> None:
    """Seed 000's unit: an image serving Seldon's microservice API, in pods of its own."""
    predictor = {"name": "example", "traffic": 100,
                 "graph": {"name": "classifier", "type": "MODEL", "children": [],
                           "parameters": [{"name": "intValue", "type": "INT", "value": "1"}]},
                 "componentSpecs": [{"hpaSpec": {"maxReplicas": 3, "minReplicas": 1}, "spec": {
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "classifier", "image": "seldonio/mock_classifier_rest:1.3",
                                     "imagePullPolicy": "IfNotPresent",
                                     "resources": {"requests": {"cpu": "0.5"}}}]}}]}
    sdep = _sdep(predictor)
    assert set(image_units(predictor)) == {"classifier"}
    with pytest.raises(UnitsPending, match="image unit.s. classifier"):
        predictor_service(sdep, predictor, tmp_path)
    deployment = unit_deployment(sdep, predictor, "classifier")
    assert deployment["metadata"]["name"] == f"{sdep['metadata']['name']}-example-classifier"
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == sdep["metadata"]["uid"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 1 and len(pod["containers"]) == 1
    container = pod["containers"][0]
    assert container["image"] == "seldonio/mock_classifier_rest:1.3"
    assert container["ports"][0] == {"name": "http", "containerPort": 9000, "protocol": "TCP"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PREDICTIVE_UNIT_HTTP_SERVICE_PORT"] == "$(PORT)" and env["PREDICTIVE_UNIT_ID"] == "classifier"
    assert json.loads(env["PREDICTIVE_UNIT_PARAMETERS"]) == predictor["graph"]["parameters"]
    assert deployment["spec"]["selector"]["matchLabels"]["seldon.io/unit"] == "classifier"
    urls = {"classifier": ["http://10.224.0.5:9000", "http://10.224.0.6:9000"]}
    service = predictor_service(sdep, predictor, tmp_path, urls)
    main = service["spec"]["predictor"]["containers"][0]
    config = json.loads(next(e["value"] for e in main["env"] if e["name"] == "SELDON_GRAPH_CONFIG"))
    assert config["sources"] == {"classifier": {"urls": urls["classifier"]}}
