"""SeldonDeployments on a real control plane: a ROUTER graph of a prepackaged SKLEARN_SERVER and a user class
from a ConfigMap, served at the ingress path with its per-child answers; bad graphs refused at apply."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import poll
from tests.serving.seldon.conftest import COMPONENTS


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "seldon") as handle:
        yield handle


def _apply(plane: ControlPlaneHandle, tmp: Path, *docs: dict, check: bool = True):  # noqa: ANN202
    path = tmp / "manifest.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    return plane.cli("apply", "-f", str(path), check=check)


def test_router_graph_with_a_configmap_class_and_a_prepackaged_model(plane: ControlPlaneHandle, tmp_path: Path,
                                                                     iris_model: Path) -> None:
    code = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "components"},
            "data": {"components.py": COMPONENTS}}
    sdep = {
        "apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "iris"},
        "spec": {"predictors": [{
            "name": "main",
            "componentSpecs": [{"spec": {
                "containers": [
                    {"name": "router", "env": [{"name": "MODEL_NAME", "value": "components.ByFirstValue"}],
                     "volumeMounts": [{"name": "code", "mountPath": "/microservice"}]},
                    {"name": "echo", "args": ["seldon-core-microservice", "components.Echo"],
                     "volumeMounts": [{"name": "code", "mountPath": "/microservice"}]}],
                "volumes": [{"name": "code", "configMap": {"name": "components"}}]}}],
            "graph": {"name": "router", "type": "ROUTER", "children": [
                {"name": "clf", "implementation": "SKLEARN_SERVER", "modelUri": str(iris_model)},
                {"name": "echo", "type": "MODEL", "parameters": [{"name": "suffix", "type": "STRING", "value": "!"}]},
            ]}}]},
    }
    _apply(plane, tmp_path, code, sdep)

    def available() -> dict | None:
        obj = plane.get("sdep", "iris")
        state = (obj.get("status") or {}).get("state")
        assert state != "Failed", obj["status"]
        return obj if state == "Available" else None

    obj = poll(available, timeout=120, interval=0.3, what="iris Available")
    url = obj["status"]["address"]["url"]
    assert url.endswith("/seldon/default/iris/api/v1.0/predictions")
    answer = httpx.post(url, json={"data": {"ndarray": [[0, 0.1, 0, 0.1], [0, 5, 5, 5]]}}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta"]["routing"] == {"router": 0}
    assert [max(range(3), key=row.__getitem__) for row in answer.json()["data"]["ndarray"]] == [0, 1]
    text = httpx.post(url, json={"strData": "hello"}, timeout=30).json()
    assert text["strData"] == "HELLO!" and text["meta"]["requestPath"] == {"router": "python", "echo": "python"}
    wrong = httpx.post(url, json={"data": {"ndarray": [[4, 0]]}}, timeout=30)
    assert wrong.status_code == 400 and "unit 'router' (ROUTER)" in wrong.json()["status"]["info"]
    assert obj["status"]["deploymentStatus"]["iris-main"]["availableReplicas"] == 1
    table = plane.cli("get", "sdep").stdout
    assert "iris" in table and "Available" in table
    pods = plane.cli("get", "pods", "-l", "seldon-deployment-id=iris", "-o", "json").stdout
    assert [p["metadata"]["labels"]["seldon.io/predictor"] for p in json.loads(pods)["items"]] == ["main"]
    plane.cli("delete", "sdep", "iris")
    poll(lambda: plane.cli("get", "isvc", "iris-main", check=False).returncode != 0, timeout=60, interval=0.2,
         what="the predictor's InferenceService deleted with its SeldonDeployment")


def test_bad_graph_is_refused_at_apply_and_nothing_is_stored(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    sdep = {"apiVersion": "machinelearning.seldon.io/v1alpha2", "kind": "SeldonDeployment",
            "metadata": {"name": "broken"},
            "spec": {"predictors": [{"name": "p", "graph": {
                "name": "r", "implementation": "SIMPLE_ROUTER",
                "children": [{"name": "ghost", "type": "MODEL"}, {"name": "x", "implementation": "NOPE_SERVER"}]}}]}}
    result = _apply(plane, tmp_path, sdep, check=False)
    assert result.returncode != 0
    assert 'spec.predictors[0].graph.children[0].name: Invalid value: "ghost": names no container' in result.stderr
    assert 'spec.predictors[0].graph.children[1].implementation: Unsupported value: "NOPE_SERVER"' in result.stderr
    assert plane.cli("get", "sdep", "broken", check=False).returncode != 0


def test_a_model_that_is_not_there_fails_the_deployment_saying_which_unit(plane: ControlPlaneHandle,
                                                                          tmp_path: Path) -> None:
    sdep = {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "lost"},
            "spec": {"predictors": [{"name": "p", "graph": {
                "name": "clf", "implementation": "SKLEARN_SERVER", "modelUri": str(tmp_path / "no-model")}}]}}
    _apply(plane, tmp_path, sdep)
    status = poll(lambda: (plane.get("sdep", "lost").get("status") or {}).get("state") == "Failed"
                  and plane.get("sdep", "lost")["status"], timeout=30, interval=0.2, what="lost Failed")
    assert "predictor 'p': unit 'clf': modelUri" in status["description"]
    assert "no-model does not exist" in status["description"]
