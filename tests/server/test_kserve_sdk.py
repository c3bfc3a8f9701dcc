"""KServe's own ``KServeClient`` (the control-plane half of the ``kserve`` SDK) against a real control plane:
create an InferenceService from the SDK's typed models, wait for it by polling and by watching, get,
patch and delete it.

``kserve`` pins protobuf 6 and its own kubernetes client, so it runs from ``$TRIMARAN_KSERVE_PYTHON``
(``scripts/test.sh`` builds ``.venv-kserve``; tests/serving/test_kserve_client.py uses it for the data
plane). The model is a scikit-learn file under ``$TRIMARAN_HOME/models``, named by a relative storageUri.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.e2e.test_serving import constant_model
from tests.helpers import pod_network_on
from tests.server.sdk import run_client, venv_python
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

SCRIPT = r'''
import contextlib, io, json, time
from kubernetes import client
from kserve import (KServeClient, V1beta1InferenceService, V1beta1InferenceServiceSpec, V1beta1PredictorSpec,
                    V1beta1SKLearnSpec, constants)

kserve = KServeClient()  # KUBECONFIG
isvc = V1beta1InferenceService(
    api_version=constants.KSERVE_V1BETA1, kind=constants.KSERVE_KIND_INFERENCESERVICE,
    metadata=client.V1ObjectMeta(name="const", namespace="default"),
    spec=V1beta1InferenceServiceSpec(predictor=V1beta1PredictorSpec(
        min_replicas=1, max_replicas=2, sklearn=V1beta1SKLearnSpec(storage_uri="const/v1"))))
created = kserve.create(isvc)
start = time.monotonic()
kserve.wait_isvc_ready("const", polling_interval=0.5, timeout_seconds=120)
polled_ready_after = time.monotonic() - start
got = kserve.get("const")
listed = kserve.get()

# A new model makes generation 2 and a new revision; watch=True waits for status.observedGeneration 2
# and Ready (the SDK skips events of another generation).
isvc.spec.predictor.max_replicas = 3
isvc.spec.predictor.sklearn.storage_uri = "const/v2"
patched = kserve.patch("const", isvc)
shown = io.StringIO()
start = time.monotonic()
with contextlib.redirect_stdout(shown):
    kserve.wait_isvc_ready("const", watch=True, timeout_seconds=120, expected_generation=2)
watched_for = time.monotonic() - start
after_patch = kserve.get("const")
ready_at_2 = kserve.is_isvc_ready("const", expected_generation=2)
deleted = kserve.delete("const")
try:
    kserve.get("const")
    gone = None
except RuntimeError as exc:
    gone = str(exc)
predictor = got["status"]["components"]["predictor"]
print(json.dumps({
    "created": {"kind": created["kind"], "generation": created["metadata"]["generation"]},
    "polled_ready_after": polled_ready_after,
    "got": {"url": got["status"]["url"], "observed": got["status"].get("observedGeneration"),
            "conditions": {c["type"]: c["status"] for c in got["status"]["conditions"]},
            "traffic": predictor.get("traffic"), "latest": predictor.get("latestReadyRevision")},
    "listed": {"kind": listed["kind"], "names": [i["metadata"]["name"] for i in listed["items"]]},
    "patched_generation": patched["metadata"]["generation"],
    "watched": shown.getvalue().splitlines(), "watched_for": watched_for,
    "after_patch": {"observed": after_patch["status"].get("observedGeneration"),
                    "max_replicas": after_patch["spec"]["predictor"]["maxReplicas"],
                    "latest": after_patch["status"]["components"]["predictor"].get("latestReadyRevision")},
    "ready_at_2": ready_at_2, "deleted": deleted.get("status"), "gone": gone,
}))
'''


@pytest.fixture
def kserve_python() -> str:
    """Requested before ``plane``, so a skip does not start a control plane first."""
    return venv_python("TRIMARAN_KSERVE_PYTHON", "kserve", ".venv-kserve")


def test_kserve_client_creates_waits_patches_and_deletes(kserve_python: str, plane: ControlPlaneHandle,
                                                         tmp_path: Path) -> None:
    constant_model(plane.home / "models" / "const" / "v1", 1)
    constant_model(plane.home / "models" / "const" / "v2", 0)
    out = run_client(kserve_python, plane, SCRIPT, tmp_path, timeout=300)
    assert out["created"] == {"kind": "InferenceService", "generation": 1}
    assert out["polled_ready_after"] < 120
    got = out["got"]
    # The router's address: loopback, or the pod network's gateway, which the host and its pods both reach.
    gateway = json.loads((plane.home / "network.json").read_text())["gateway"] if pod_network_on(plane.home) else None
    assert got["url"].startswith(f"http://{gateway or '127.0.0.1'}:")
    assert got["observed"] == 1
    assert got["conditions"]["Ready"] == "True" and got["conditions"]["PredictorReady"] == "True"
    assert got["latest"] == "const-predictor-00001"
    assert got["traffic"] == [{"revisionName": "const-predictor-00001", "latestRevision": True, "percent": 100}]
    assert out["listed"] == {"kind": "InferenceServiceList", "names": ["const"]}
    assert out["patched_generation"] == 2
    # isvc_watch prints a row per event it takes into account, and stops at the first Ready one.
    rows = [line.split() for line in out["watched"] if line.startswith("const")]
    assert rows and rows[-1][:4] == ["const", "True", "0", "100"], out["watched"]
    assert out["watched_for"] < 110
    assert out["after_patch"] == {"observed": 2, "max_replicas": 3, "latest": "const-predictor-00002"}
    assert out["ready_at_2"] is True
    assert out["deleted"] == "Success"
    assert out["gone"] and "(404)" in out["gone"] and "NotFound" in out["gone"]
