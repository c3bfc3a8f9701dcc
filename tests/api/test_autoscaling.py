"""autoscaling/v2 HorizontalPodAutoscaler: defaults, kube-apiserver's validation, the scale-subresource rule,
and kubectl's columns."""

from __future__ import annotations

from typing import Any

import pytest

from trimaran.api import ManifestError, lookup, validate
from trimaran.api.autoscaling import metrics_of, targets_text


def hpa(**spec: Any) -> dict[str, Any]:
    body = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3,
            **spec}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
            "spec": {k: v for k, v in body.items() if v is not None}}


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def cpu(target: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "Resource", "resource": {"name": "cpu", "target": target}}]


def test_short_name_and_defaults() -> None:
    assert lookup("hpa").kind == "HorizontalPodAutoscaler"
    spec = validate(hpa(behavior={"scaleDown": {"stabilizationWindowSeconds": 5}})).object["spec"]
    assert spec["minReplicas"] == 1
    assert spec["metrics"] == cpu({"type": "Utilization", "averageUtilization": 80})
    assert spec["behavior"]["scaleDown"] == {"stabilizationWindowSeconds": 5, "selectPolicy": "Max",
                                             "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
    assert spec["behavior"]["scaleUp"]["policies"][0] == {"type": "Pods", "value": 4, "periodSeconds": 15}
    assert "behavior" not in validate(hpa()).object["spec"]  # upstream fills rules only in a given behavior


@pytest.mark.parametrize(("spec", "expected"), [
    ({"scaleTargetRef": None}, "spec.scaleTargetRef: Required value"),
    ({"scaleTargetRef": {"kind": "Deployment"}}, "spec.scaleTargetRef.name: Required value"),
    ({"minReplicas": 0}, "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"),
    ({"maxReplicas": 0}, "spec.maxReplicas: Invalid value: 0: must be greater than 0"),
    ({"minReplicas": 4}, "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"),
    ({"metrics": [{"type": "Custom"}]}, 'spec.metrics[0].type: Unsupported value: "Custom": supported values: '
                                        '"ContainerResource", "External", "Object", "Pods", "Resource"'),
    ({"metrics": [{"type": "Resource"}]}, "spec.metrics[0].resource: Required value: must populate information"),
    ({"metrics": cpu({"type": "Utilization"})},
     "spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target raw value"),
    ({"metrics": cpu({"type": "Utilization", "averageUtilization": 0})},
     "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"),
    ({"metrics": cpu({"type": "AverageValue", "averageValue": "50m", "averageUtilization": 50})},
     "spec.metrics[0].resource.target.averageValue: Forbidden: may not set both"),
    ({"metrics": cpu({"type": "AverageValue", "averageValue": "lots"})},
     'spec.metrics[0].resource.target.averageValue: Invalid value: "lots": quantities must match'),
    ({"metrics": [{"type": "Pods", "resource": {"name": "cpu"}, "pods": {"metric": {"name": "qps"},
                                                                        "target": {"type": "AverageValue",
                                                                                   "averageValue": 10}}}]},
     "spec.metrics[0].resource: Forbidden: must populate the given metric source only"),
    ({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 3601}}},
     "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: 3601: must be less than or equal to 3600"),
    ({"behavior": {"scaleUp": {"selectPolicy": "Most"}}},
     'spec.behavior.scaleUp.selectPolicy: Unsupported value: "Most"'),
    ({"behavior": {"scaleUp": {"policies": []}}},
     "spec.behavior.scaleUp.policies: Required value: must specify at least one Policy"),
    ({"behavior": {"scaleDown": {"policies": [{"type": "Replicas", "value": 1, "periodSeconds": 15}]}}},
     'spec.behavior.scaleDown.policies[0].type: Unsupported value: "Replicas"'),
    ({"behavior": {"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}}},
     "spec.behavior.scaleDown.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800"),
    ({"behavior": {"scaleDown": {"policies": [{"type": "Percent", "value": 0, "periodSeconds": 15}]}}},
     "spec.behavior.scaleDown.policies[0].value: Invalid value: 0: must be greater than zero"),
])
def test_api_server_rules(spec: dict[str, Any], expected: str) -> None:
    assert any(expected in problem for problem in errors(hpa(**spec))), errors(hpa(**spec))


def test_target_without_scale_subresource_is_refused_with_the_reason() -> None:
    problems = errors(hpa(scaleTargetRef={"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist"}))
    assert len(problems) == 1
    assert 'spec.scaleTargetRef.kind: Invalid value: "TFJob": kubeflow.org/v1 TFJob has no scale subresource' \
        in problems[0]
    assert "Deployment" in problems[0] and "SeldonDeployment" in problems[0]
    unknown = errors(hpa(scaleTargetRef={"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "name": "p"}))
    assert 'spec.scaleTargetRef.kind: Invalid value: "PodSecurityPolicy": no matches for kind "PodSecurityPolicy" in ' \
        'version "policy/v1beta1"' in unknown[0]


@pytest.mark.parametrize("ref", [
    {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "name": "sd"},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "elastic"},
    {"kind": "Deployment", "name": "web"},
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
    {"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"},
])
def test_scalable_targets_are_accepted(ref: dict[str, str]) -> None:
    assert validate(hpa(scaleTargetRef=ref)).object["spec"]["scaleTargetRef"] == ref


def test_other_metric_types_are_accepted() -> None:
    metric = {"type": "External", "external": {"metric": {"name": "queue_depth"},
                                               "target": {"type": "Value", "value": "30"}}}
    assert validate(hpa(metrics=[metric])).object["spec"]["metrics"] == [metric]


def test_targets_column() -> None:
    obj = validate(hpa(metrics=[*cpu({"type": "Utilization", "averageUtilization": 50}),
                                {"type": "Resource", "resource": {"name": "memory", "target": {
                                    "type": "AverageValue", "averageValue": "200Mi"}}}])).object
    assert targets_text(obj) == "cpu: <unknown>/50%, memory: <unknown>/200Mi"
    obj["status"] = {"currentMetrics": [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 45}}},
        {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "100Mi"}}}]}
    assert targets_text(obj) == "cpu: 45%/50%, memory: 100Mi/200Mi"


def test_v1_as_kubectl_autoscale_sends_it() -> None:
    v1 = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                   "maxReplicas": 3, "targetCPUUtilizationPercentage": 60}}
    stored = validate(v1).object
    assert stored["spec"]["minReplicas"] == 1
    assert metrics_of(stored) == cpu({"type": "Utilization", "averageUtilization": 60})
    assert targets_text(stored) == "cpu: <unknown>/60%"
    bad = {**v1, "spec": {**v1["spec"], "targetCPUUtilizationPercentage": 0,
                          "scaleTargetRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}}}
    problems = errors(bad)
    assert any("spec.targetCPUUtilizationPercentage: Invalid value: 0: must be greater than 0" in p for p in problems)
    assert any('spec.scaleTargetRef.kind: Invalid value: "Job": batch/v1 Job has no scale subresource' in p
               for p in problems)
