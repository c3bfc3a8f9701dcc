"""Seed 002's MLflow path end to end on a real control plane, as examples/mlflow-server writes it: the
seed's tracking server Deployment and Service, a PyTorchJob whose training code logs and registers a
model at ``http://mlflow-server:5000`` unchanged, then that model served by name (``models:/digits/1``)
as a KServe ``modelFormat: mlflow`` InferenceService over V2 REST, and by run (``runs:/<id>/model``) by a
Seldon MLFLOW_SERVER; URIs the tracking server cannot resolve fail in the status, saying why."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from sklearn.datasets import load_digits

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import REPO, poll
from trimaran.serving.runtimes import load_model
from trimaran.serving.storage import StorageError, account_credentials, fetch

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("mlflow", "flask")),
                       reason="needs the full mlflow package (its tracking server)"),
]

NS = "kubeflow"
TRACKING = [{"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow-server:5000"}]


def _apply(plane: ControlPlaneHandle, tmp: Path, *docs: dict, check: bool = True):  # noqa: ANN202
    path = tmp / "manifest.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    return plane.cli("apply", "-f", str(path), check=check)


def _example(name: str) -> list[dict]:
    return list(yaml.safe_load_all((REPO / "examples/mlflow-server" / name).read_text()))


def _seed_server() -> list[dict]:
    """examples/mlflow-server/mlflow.yaml, but for the port the server binds: the Deployment's own
    ``$(PORT)`` instead of 5000, which another Trimaran on this machine may hold (the Service keeps 5000);
    and one server process instead of mlflow's default four, which each import mlflow (about 15 s of
    CPU on a 2-core machine running the rest of the suite beside it)."""
    docs = _example("mlflow.yaml")
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [a.replace("--port=5000", "--port=$(PORT)") for a in container["command"]]
    container["command"].append("--workers=1")
    return docs


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "seed002") as handle:
        yield handle


@pytest.fixture(scope="module")
def run_id(plane: ControlPlaneHandle, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The run of the model the PyTorchJob logged to the seed's server by its Service name."""
    tmp = tmp_path_factory.mktemp("seed002-apply")
    _apply(plane, tmp, *_seed_server())
    # As one would with kubectl rollout status: the training starts once the tracking server answers.
    poll(lambda: (plane.get("deployment", "mlflow-server", namespace=NS).get("status") or {}).get("availableReplicas"),
         timeout=300, interval=0.5, what="the MLflow Deployment available")
    _apply(plane, tmp, *_example("train-digits.yaml"))

    def finished() -> str | None:
        conditions = (plane.get("pytorchjob", "digits-mlflow", namespace=NS).get("status") or {}).get("conditions")
        done = [c["type"] for c in conditions or [] if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"]
        return done[0] if done else None

    outcome = poll(finished, timeout=300, interval=0.5, what="the PyTorchJob finished")
    logs = plane.cli("logs", "digits-mlflow-master-0", "-n", NS).stdout
    assert outcome == "Succeeded", logs
    found = re.search(r"logged run ([0-9a-f]{32})", logs)
    assert found, logs
    return found.group(1)


def _ready_isvc(plane: ControlPlaneHandle, name: str) -> dict:
    def ready() -> dict | None:
        obj = plane.get("isvc", name, namespace=NS)
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        return obj if conditions.get("Ready", {}).get("status") == "True" else None

    return poll(ready, timeout=180, interval=0.5, what=f"{name} Ready")


@pytest.fixture(scope="module")
def served(plane: ControlPlaneHandle, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The registered model as a KServe InferenceService, the logged run as a Seldon MLFLOW_SERVER: applied
    together, so that their model servers start side by side."""
    sdep = {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment",
            "metadata": {"name": "digits-run", "namespace": NS},
            "spec": {"predictors": [{
                "name": "default",
                "componentSpecs": [{"spec": {"containers": [{"name": "classifier", "env": TRACKING}]}}],
                "graph": {"name": "classifier", "implementation": "MLFLOW_SERVER",
                          "modelUri": f"runs:/{run_id}/model"}}]}}
    _apply(plane, tmp_path_factory.mktemp("seed002-serve"), *_example("serve-digits.yaml"), sdep)


def test_registered_model_served_as_kserve_mlflow_over_v2(plane: ControlPlaneHandle, served: None) -> None:
    url = _ready_isvc(plane, "digits")["status"]["url"]
    meta = httpx.get(f"{url}/v2/models/digits", timeout=30).json()
    assert meta["platform"] == "mlflow"
    assert meta["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 64]}]
    assert meta["outputs"] == [{"name": "output-0", "datatype": "INT64", "shape": [-1]}]
    x, y = load_digits(return_X_y=True)
    rows = x[1700:1710]
    body = {"inputs": [{"name": "input-0", "datatype": "FP64", "shape": list(rows.shape),
                        "data": rows.ravel().tolist()}]}
    answer = httpx.post(f"{url}/v2/models/digits/infer", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    predicted = answer.json()["outputs"][0]["data"]
    assert sum(p == t for p, t in zip(predicted, y[1700:1710], strict=True)) >= 8
    wrong = {"inputs": [{"name": "pixels", "datatype": "FP64", "shape": [1, 64], "data": [0.0] * 64}]}
    refused = httpx.post(f"{url}/v2/models/digits/infer", json=wrong, timeout=30)
    assert refused.status_code == 400 and "no input 'pixels'" in refused.json()["error"]
    v1 = httpx.post(f"{url}/v1/models/digits:predict", json={"instances": rows.tolist()}, timeout=30)
    assert v1.status_code == 200 and v1.json()["predictions"] == predicted, v1.text


def test_logged_run_served_by_seldon_mlflow_server(plane: ControlPlaneHandle, served: None) -> None:
    def available() -> dict | None:
        obj = plane.get("sdep", "digits-run", namespace=NS)
        state = (obj.get("status") or {}).get("state")
        assert state != "Failed", obj["status"]
        return obj if state == "Available" else None

    url = poll(available, timeout=180, interval=0.5, what="digits-run Available")["status"]["address"]["url"]
    x, y = load_digits(return_X_y=True)
    answer = httpx.post(url, json={"data": {"ndarray": x[1700:1710].tolist()}}, timeout=30)
    assert answer.status_code == 200, answer.text
    predicted = answer.json()["data"]["ndarray"]
    assert sum(int(p) == t for p, t in zip(predicted, y[1700:1710], strict=True)) >= 8
    narrow = httpx.post(url, json={"data": {"ndarray": [[0.0] * 63]}}, timeout=30)
    assert narrow.status_code == 400 and "input 'input-0' has shape [1, 63]" in narrow.text


def test_unresolvable_model_uri_fails_in_the_status(plane: ControlPlaneHandle, run_id: str, tmp_path: Path) -> None:
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "missing", "namespace": NS},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "mlflow"}, "storageUri": "models:/digits/9",
                                             "env": TRACKING}}}}
    _apply(plane, tmp_path, isvc)

    def failed() -> str | None:
        obj = plane.get("isvc", "missing", namespace=NS)
        text = json.dumps((obj.get("status") or {}).get("conditions") or [])
        return text if "RESOURCE_DOES_NOT_EXIST" in text else None

    assert "models:/digits/9" in poll(failed, timeout=60, interval=0.5, what="missing fails naming the version")
    bad = dict(isvc, metadata={"name": "bad-uri", "namespace": NS})
    bad["spec"] = {"predictor": {"model": {"modelFormat": {"name": "mlflow"}, "storageUri": "runs:/abc"}}}
    refused = _apply(plane, tmp_path, bad, check=False)
    assert refused.returncode != 0
    assert "spec.predictor.model.storageUri" in refused.stderr and "runs:/<run_id>/<path>" in refused.stderr


def test_other_uri_forms_resolve_through_the_service(plane: ControlPlaneHandle, run_id: str, tmp_path: Path) -> None:
    """What the controller does for a model's storageUri, from this process: ``http://mlflow-server:5000``
    is the Service's address (its clusterIP, read from the API), asked with the Host name the server allows."""

    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        found = plane.cli("get", kind.lower(), name, "-n", namespace, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    creds = account_credentials(lookup, NS, "default", container_env={e["name"]: e["value"] for e in TRACKING})
    service = plane.get("service", "mlflow-server", namespace=NS)
    assert creds.hosts == {"mlflow-server": service["spec"]["clusterIP"]}
    x, y = load_digits(return_X_y=True)
    for uri in ("models:/digits/latest", "models:/digits@champion", f"runs:/{run_id}/model"):
        model = load_model(fetch(uri, tmp_path / "cache", creds), name="digits")
        assert (model.predict({"input-0": x[1700:1710]})["output-0"] == y[1700:1710]).sum() >= 8, uri
    for uri, words in (("models:/digits/Production", "registered model 'digits' has no version in stage"),
                       (f"runs:/{run_id}/weights", f"run {run_id} has no artifacts under 'weights' and no logged")):
        with pytest.raises(StorageError, match=words):
            fetch(uri, tmp_path / "cache", creds)
