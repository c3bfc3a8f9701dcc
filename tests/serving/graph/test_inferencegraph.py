"""InferenceGraphs on a real control plane over real sklearn InferenceServices: a 3-step Sequence chaining
``$response``, a Switch into Soft and Hard failures, an Ensemble, a Splitter's split; bad graphs refused at
apply with their field path, and a graph naming a missing service not Ready, saying which."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import poll
from tests.serving.conftest import free_port

IG = "serving.kserve.io/v1alpha1"


def _linear_model(directory: Path, scale: float, shift: float) -> Path:
    """A LinearRegression answering ``scale * x + shift`` per column: its predictions feed the next step."""
    import joblib
    import numpy as np
    from sklearn.linear_model import LinearRegression

    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 3.0]])
    directory.mkdir(parents=True)
    joblib.dump(LinearRegression().fit(x, scale * x + shift), directory / "model.joblib")
    return directory


def _isvc(name: str, model: Path) -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": str(model)}}}}


def _graph(name: str, nodes: dict) -> dict:
    return {"apiVersion": IG, "kind": "InferenceGraph", "metadata": {"name": name}, "spec": {"nodes": nodes}}


def _apply(plane: ControlPlaneHandle, tmp: Path, *docs: dict, check: bool = True):  # noqa: ANN202
    path = tmp / f"manifest-{len(list(tmp.glob('manifest-*')))}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    return plane.cli("apply", "-f", str(path), check=check)


def _ready(plane: ControlPlaneHandle, name: str) -> dict | None:
    obj = plane.get("ig", name)
    cond = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
    return obj if cond.get("status") == "True" else None


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "graph") as handle:
        yield handle


@pytest.fixture(scope="module")
def graphs(plane: ControlPlaneHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two models (``double``: 2x, ``plusone``: x+1) and two graphs over them; the graphs' URLs by name."""
    tmp = tmp_path_factory.mktemp("graph-docs")
    unreachable = f"http://127.0.0.1:{free_port()}/v1/models/gone:predict"
    chain = _graph("chain", {"root": {"routerType": "Sequence", "steps": [
        {"serviceName": "double"},
        {"serviceName": "plusone", "data": "$response", "mapPredictionsToInstances": True},
        {"serviceName": "double", "data": "$response", "mapPredictionsToInstances": True}]}})
    pick = _graph("pick", {
        "root": {"routerType": "Switch", "steps": [
            {"condition": "soft", "nodeName": "soft"},
            {"condition": "hard", "nodeName": "hard"},
            {"condition": "ensemble", "nodeName": "both"},
            {"condition": "split", "nodeName": "split"},
            {"condition": "[@this].#(instances.0.0>5)", "serviceName": "double"}]},
        "soft": {"routerType": "Sequence", "steps": [
            {"serviceUrl": unreachable, "dependency": "Soft"}, {"serviceName": "plusone", "data": "$request"}]},
        "hard": {"routerType": "Sequence", "steps": [
            {"serviceName": "plusone"}, {"serviceName": "double", "data": "$response", "dependency": "Hard"},
            {"serviceName": "plusone", "data": "$request"}]},
        "both": {"routerType": "Ensemble", "steps": [{"name": "d", "serviceName": "double"},
                                                     {"name": "p", "serviceName": "plusone"}]},
        "split": {"routerType": "Splitter", "steps": [{"serviceName": "double", "weight": 80},
                                                      {"serviceName": "plusone", "weight": 20}]}})
    _apply(plane, tmp, _isvc("double", _linear_model(tmp / "double", 2, 0)),
           _isvc("plusone", _linear_model(tmp / "plusone", 1, 1)), chain, pick)
    ready = {name: poll(lambda n=name: _ready(plane, n), timeout=120, interval=0.3, what=f"{name} Ready")
             for name in ("chain", "pick")}
    return {name: obj["status"]["url"] for name, obj in ready.items()}


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=30)


def _rows(response: httpx.Response) -> list[list[float]]:
    assert response.status_code == 200, response.text
    return [[round(v, 6) for v in row] for row in response.json()["predictions"]]


def test_three_step_sequence_chains_responses_in_order(graphs: dict[str, str], plane: ControlPlaneHandle) -> None:
    # ((2x) + 1) * 2: the order of the steps shows in the answer.
    assert _rows(_post(graphs["chain"], {"instances": [[1.0, 2.0], [0.5, 0.0]]})) == [[6.0, 10.0], [4.0, 2.0]]
    assert plane.get("ig", "chain")["status"]["url"] == graphs["chain"]  # one stable URL
    table = plane.cli("get", "ig").stdout
    assert "chain" in table and "pick" in table and "True" in table


def test_switch_takes_the_first_matching_condition(graphs: dict[str, str]) -> None:
    assert _rows(_post(graphs["pick"], {"instances": [[6.0, 1.0]]})) == [[12.0, 2.0]]
    unmatched = _post(graphs["pick"], {"instances": [[1.0, 1.0]]})
    assert unmatched.status_code == 404 and "no step's condition matched" in unmatched.json()["error"]


def test_soft_failure_continues_and_hard_failure_stops_with_its_status(graphs: dict[str, str]) -> None:
    assert _rows(_post(graphs["pick"], {"soft": True, "instances": [[1.0, 2.0]]})) == [[2.0, 3.0]]
    # double, sent plusone's answer as is, finds no "instances": its 400 ends the graph before the third step.
    hard = _post(graphs["pick"], {"hard": True, "instances": [[1.0, 2.0]]})
    assert hard.status_code == 400 and "instances" in hard.json()["error"], hard.text


def test_ensemble_merges_answers_by_step_name(graphs: dict[str, str]) -> None:
    answer = _post(graphs["pick"], {"ensemble": True, "instances": [[1.0, 2.0]]})
    assert answer.status_code == 200, answer.text
    merged = answer.json()
    assert set(merged) == {"d", "p"}
    assert merged["d"]["predictions"][0] == pytest.approx([2.0, 4.0])
    assert merged["p"]["predictions"][0] == pytest.approx([2.0, 3.0])


def test_splitter_splits_by_weight(graphs: dict[str, str]) -> None:
    shares: Counter[str] = Counter()
    with httpx.Client(timeout=30) as client:
        for _ in range(200):
            rows = _rows(client.post(graphs["pick"], json={"split": True, "instances": [[1.0, 3.0]]}))
            shares["double" if rows == [[2.0, 6.0]] else "plusone"] += 1
    assert 140 <= shares["double"] <= 180, shares  # 80% of 200, within 3.5 standard deviations


def test_bad_graphs_are_refused_with_their_field_path_and_a_missing_service_is_named(
        plane: ControlPlaneHandle, tmp_path: Path) -> None:
    bad = _graph("bad", {
        "start": {"routerType": "Splitter", "steps": [{"serviceName": "double", "weight": 70},
                                                      {"nodeName": "loop", "weight": 20}]},
        "loop": {"routerType": "Sequence", "steps": [{"name": "nothing"}, {"nodeName": "ghost"}]}})
    refused = _apply(plane, tmp_path, bad, check=False)
    assert refused.returncode != 0
    for message in ("spec.nodes.root: Required value",
                    "spec.nodes.start.steps: Invalid value: 90: a Splitter's weights must sum to 100",
                    "spec.nodes.loop.steps[0]: Required value: a step calls one of nodeName, serviceName or serviceUrl",
                    'spec.nodes.loop.steps[1].nodeName: Invalid value: "ghost": no such node'):
        assert message in refused.stderr, refused.stderr
    cycle = _graph("cycle", {"root": {"routerType": "Sequence", "steps": [{"nodeName": "next"}]},
                             "next": {"routerType": "Ensemble", "steps": [{"nodeName": "root"}]}})
    refused = _apply(plane, tmp_path, cycle, check=False)
    assert 'spec.nodes.next.steps[0].nodeName: Invalid value: "root": makes a cycle: root -> next -> root' \
        in refused.stderr, refused.stderr
    assert "bad" not in plane.cli("get", "ig").stdout

    _apply(plane, tmp_path, _graph("orphan", {"root": {"routerType": "Sequence", "steps": [{"serviceName": "nope"}]}}))

    def not_found() -> dict | None:
        status = plane.get("ig", "orphan").get("status") or {}
        cond = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return cond if cond.get("reason") == "InferenceServiceNotFound" else None

    cond = poll(not_found, timeout=30, interval=0.2, what="orphan not Ready")
    assert cond["status"] == "False" and "nope" in cond["message"]
