"""autoscaling/v2 HorizontalPodAutoscaler on a real control plane: a CPU-bound Deployment scaled up on
its pods' measured use, and back down once the load stops; the API's refusals; kubectl's columns.

The control plane syncs its HPAs every second (``TRIMARAN_HPA_SYNC_SECONDS``; upstream's 15 s would make
this test take minutes) and the scale-down window is two seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import poll
from trimaran.cli.client import APIError, Client

NS = "default"
# Busy a fifth of each 50 ms until BURN_UNTIL (seconds since the epoch), then idle: two cores' worth of a
# 100m request at most, light on a busy machine, and every replica stops at the same moment.
BURN = """
import os, time
until = float(os.environ["BURN_UNTIL"])
while time.time() < until:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.01:
        pass
    time.sleep(0.04)
time.sleep(3600)
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    os.environ["TRIMARAN_HPA_SYNC_SECONDS"] = "1"
    try:
        with module_plane(tmp_path_factory, "hpa") as handle:
            os.environ.pop("TRIMARAN_HPA_SYNC_SECONDS", None)  # only this module's control plane syncs fast
            yield handle
    finally:
        os.environ.pop("TRIMARAN_HPA_SYNC_SECONDS", None)


def burner(name: str, burn_until: float) -> dict:
    container = {"name": "burn", "image": "python", "command": ["python", "-c", BURN],
                 "env": [{"name": "BURN_UNTIL", "value": str(burn_until)}],
                 "resources": {"requests": {"cpu": "100m"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}}}


def hpa(name: str, target: dict, **spec: object) -> dict:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 2,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 50}}}], **spec}}


def test_scales_a_cpu_bound_deployment_up_then_down(api: Client) -> None:
    name = "burner"
    burn_seconds = 15.0
    api.apply([{"object": burner(name, time.time() + burn_seconds)}])
    api.apply([{"object": hpa(name, {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                              behavior={"scaleDown": {"stabilizationWindowSeconds": 2}})}])

    def replicas() -> int:
        return api.get("Deployment", NS, name)["spec"]["replicas"]

    def status() -> dict:
        return api.get("HorizontalPodAutoscaler", NS, name).get("status") or {}

    poll(lambda: replicas() == 2, timeout=burn_seconds, interval=0.2, what="the HPA scaling the burner to 2")
    scaled = poll(lambda: (s := status()).get("lastScaleTime") and s, timeout=5, what="the HPA's status")
    assert scaled["desiredReplicas"] == 2 and scaled["currentReplicas"] == 1
    conditions = {c["type"]: c for c in scaled["conditions"]}
    assert conditions["ScalingActive"]["reason"] == "ValidMetricFound"
    # One busy pod uses up to 200 % of its request: the ratio asks for 2 to 4, maxReplicas holds it at 2.
    assert conditions["ScalingLimited"]["reason"] in ("TooManyReplicas", "DesiredWithinRange")
    assert scaled["currentMetrics"][0]["resource"]["current"]["averageUtilization"] > 50
    rescales = [e["message"] for e in api.events("HorizontalPodAutoscaler", NS, name)
                if e["reason"] == "SuccessfulRescale"]
    assert "New size: 2; reason: cpu resource utilization (percentage of request) above target" in rescales

    poll(lambda: replicas() == 1, timeout=burn_seconds + 20, interval=0.5, what="the scale-down once the load stops")
    rescales = [e["message"] for e in api.events("HorizontalPodAutoscaler", NS, name)
                if e["reason"] == "SuccessfulRescale"]
    assert "New size: 1; reason: All metrics below target" in rescales
    poll(lambda: len([p for p in api.list("Pod", NS, selector=f"app={name}")
                      if not p["metadata"].get("deletionTimestamp")]) == 1, timeout=20, what="one pod left")


def test_refused_at_apply_without_a_scale_subresource(api: Client) -> None:
    with pytest.raises(APIError) as info:
        api.apply([{"object": hpa("svc", {"apiVersion": "v1", "kind": "Service", "name": "web"})}])
    assert 'spec.scaleTargetRef.kind: Invalid value: "Service": v1 Service has no scale subresource' in str(info.value)
    assert not [h for h in api.list("HorizontalPodAutoscaler", NS) if h["metadata"]["name"] == "svc"]


def test_missing_target_is_reported(api: Client) -> None:
    api.apply([{"object": hpa("ghost", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"})}])

    def able() -> dict | None:
        conditions = (api.get("HorizontalPodAutoscaler", NS, "ghost").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "AbleToScale"), None)

    condition = poll(able, timeout=15, what="AbleToScale")
    assert condition["status"] == "False" and condition["reason"] == "FailedGetScale"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")
def test_kubectl_get_hpa_columns(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    api.apply([{"object": hpa("cols", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cols"})}])
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    out = subprocess.run(["kubectl", "get", "hpa", "cols"], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    assert out[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert out[1].split()[:7] == ["cols", "Deployment/cols", "cpu:", "<unknown>/50%", "1", "2", "0"]
    # kubectl autoscale sends autoscaling/v1 in protobuf; the controller reads its CPU target.
    zero = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "zero", "namespace": NS},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "zero"}}, "template": {
                "metadata": {"labels": {"app": "zero"}}, "spec": {"containers": [{"name": "c", "image": "python"}]}}}}
    api.apply([{"object": zero}])
    subprocess.run(["kubectl", "autoscale", "deployment", "zero", "--max=2", "--cpu-percent=60"], env=env,
                   capture_output=True, text=True, timeout=60, check=True)
    made = api.get("HorizontalPodAutoscaler", NS, "zero")
    assert made["apiVersion"] == "autoscaling/v1"
    assert made["spec"] == {"scaleTargetRef": {"kind": "Deployment", "name": "zero", "apiVersion": "apps/v1"},
                            "minReplicas": 1, "maxReplicas": 2, "targetCPUUtilizationPercentage": 60}
    poll(lambda: (api.get("HorizontalPodAutoscaler", NS, "zero").get("status") or {}).get("desiredReplicas") == 0,
         timeout=15, what="the v1 HPA's status (scaling off at zero replicas)")
    row = subprocess.run(["kubectl", "get", "hpa", "zero", "--no-headers"], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert row[:7] == ["zero", "Deployment/zero", "cpu:", "<unknown>/60%", "1", "2", "0"]


def test_seldon_hpa_spec_makes_an_hpa_that_scales_the_seldondeployment(api: Client) -> None:
    sdep = {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment",
            "metadata": {"name": "sd", "namespace": NS},
            "spec": {"predictors": [{"name": "p", "graph": {"name": "m", "implementation": "SIMPLE_MODEL"},
                                     "componentSpecs": [{"spec": {"containers": [{"name": "side", "image": "x"}]},
                                                         "hpaSpec": {"minReplicas": 2, "maxReplicas": 3, "metrics": [
                                                             {"type": "Resource", "resource": {
                                                                 "name": "cpu", "targetAverageUtilization": 50}}]}}]}]}}
    api.apply([{"object": sdep}])
    made = poll(lambda: next((h for h in api.list("HorizontalPodAutoscaler", NS)
                              if h["metadata"]["name"] == "sd-p-0-side"), None), timeout=15, what="the Seldon HPA")
    assert made["spec"]["scaleTargetRef"] == {"apiVersion": "machinelearning.seldon.io/v1",
                                              "kind": "SeldonDeployment", "name": "sd"}
    assert made["metadata"]["ownerReferences"][0]["name"] == "sd"
    assert made["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 50}
    # One replica by Seldon's precedence is below minReplicas: the HPA writes 2 through the scale subresource,
    # and the predictor's InferenceService runs 2.
    poll(lambda: api.get("SeldonDeployment", NS, "sd")["spec"].get("replicas") == 2, timeout=20,
         what="the HPA's write to spec.replicas")
    poll(lambda: api.get("InferenceService", NS, "sd-p")["spec"]["predictor"]["minReplicas"] == 2, timeout=15,
         what="the predictor at 2 replicas")
    reasons = [e["message"] for e in api.events("HorizontalPodAutoscaler", NS, "sd-p-0-side")]
    assert "New size: 2; reason: Current number of replicas below Spec.MinReplicas" in reasons
    api.delete("SeldonDeployment", NS, "sd")
