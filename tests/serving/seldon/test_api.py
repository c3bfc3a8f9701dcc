"""SeldonDeployment at apply: the seed's manifest is accepted as written, bad graphs are refused by field path."""

from __future__ import annotations

import pytest

from trimaran.api import kinds
from trimaran.api.errors import ManifestError
from trimaran.api.loader import validate

SEED_000 = {
    "apiVersion": "machinelearning.seldon.io/v1alpha2", "kind": "SeldonDeployment",
    "metadata": {"name": "tfserving"},
    "spec": {"name": "mnist", "predictors": [{
        "name": "default", "replicas": 1,
        "graph": {"children": [], "implementation": "TENSORFLOW_SERVER",
                  "modelUri": "gs://seldon-models/tfserving/mnist-model", "name": "mnist-model",
                  "parameters": [{"name": "signature_name", "type": "STRING", "value": "predict_images"},
                                 {"name": "model_name", "type": "STRING", "value": "mnist-model"}]}}]},
}


def _sdep(graph: dict, containers: tuple[str, ...] = (), **spec: object) -> dict:
    predictor = {"name": "p", "graph": graph}
    if containers:
        predictor["componentSpecs"] = [{"spec": {"containers": [{"name": c} for c in containers]}}]
    return {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "s"},
            "spec": {"predictors": [predictor], **spec}}


def _errors(obj: dict) -> str:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return str(info.value)


def test_seed_000_is_accepted_with_seldon_defaults() -> None:
    stored = validate(SEED_000).object
    assert stored["spec"]["protocol"] == "seldon" and stored["spec"]["transport"] == "rest"
    assert stored["spec"]["predictors"][0]["traffic"] == 100
    assert kinds.lookup("sdep").kind == "SeldonDeployment"
    assert {k.api_version for k in kinds.all_kinds() if k.kind == "SeldonDeployment"} == {
        "machinelearning.seldon.io/v1", "machinelearning.seldon.io/v1alpha2", "machinelearning.seldon.io/v1alpha3"}


def test_unit_without_container_or_implementation_is_refused_by_path() -> None:
    graph = {"name": "router", "implementation": "SIMPLE_ROUTER",
             "children": [{"name": "clf", "type": "MODEL"}, {"name": "ghost", "type": "MODEL"}]}
    message = _errors(_sdep(graph, ("clf",)))
    assert 'spec.predictors[0].graph.children[1].name: Invalid value: "ghost": names no container' in message
    assert "children[0]" not in message
    remote = {"name": "ghost", "type": "MODEL", "endpoint": {"service_host": "classifier.models", "service_port": 9000}}
    validate(_sdep({**graph, "children": [graph["children"][0], remote]}, ("clf",)))  # called at its endpoint


def test_unsupported_implementation_duplicate_name_and_bad_parameter() -> None:
    graph = {"name": "comb", "implementation": "AVERAGE_COMBINER", "children": [
        {"name": "a", "implementation": "HUGGINGFACE_SERVER", "modelUri": "pvc://models/a"},
        {"name": "comb", "implementation": "SIMPLE_MODEL",
         "parameters": [{"name": "n", "type": "INT", "value": "two"}]}]}
    message = _errors(_sdep(graph))
    assert 'graph.children[0].implementation: Unsupported value: "HUGGINGFACE_SERVER"' in message
    assert 'graph.children[1].name: Duplicate value: "comb"' in message
    assert 'graph.children[1].parameters[0].value: Invalid value: "two"' in message


def test_traffic_protocol_and_router_rules() -> None:
    two = _sdep({"name": "m", "implementation": "SIMPLE_MODEL"})
    second = {"name": "q", "traffic": 30, "graph": {"name": "m", "implementation": "SIMPLE_MODEL"}}
    two["spec"]["predictors"].append(second)
    two["spec"]["predictors"][0]["traffic"] = 60
    assert "spec.predictors: Invalid value: 90: traffic must sum to 100" in _errors(two)
    tf_router = _sdep({"name": "r", "implementation": "RANDOM_ABTEST",
                       "children": [{"name": "a", "implementation": "SIMPLE_MODEL"}]}, protocol="tensorflow")
    message = _errors(tf_router)
    assert "graph.type: Forbidden: protocol tensorflow runs single models" in message
    assert "graph.children: Invalid value: 1: RANDOM_ABTEST routes between exactly 2 children" in message
    v2_graph = _sdep({"name": "m", "implementation": "SIMPLE_MODEL"}, protocol="v2")
    assert "spec.predictors[0].graph: Forbidden: protocol v2 serves one prepackaged model" in _errors(v2_graph)
    assert "modelUri: Required value" in _errors(_sdep({"name": "m", "implementation": "SKLEARN_SERVER"}))
    no_sink = _sdep({"name": "m", "implementation": "SIMPLE_MODEL", "logger": {"mode": "all"}})
    assert "spec.predictors[0].graph.logger.url: Required value" in _errors(no_sink)
    https = _sdep({"name": "m", "implementation": "SIMPLE_MODEL", "logger": {"url": "https://sink"}})
    assert "spec.predictors[0].graph.logger.url: Invalid value" in _errors(https)


def test_fields_without_local_effect_are_warned_about() -> None:
    obj = _sdep({"name": "m", "implementation": "SIMPLE_MODEL", "logger": {"mode": "all", "url": "http://sink"}})
    obj["spec"]["predictors"][0]["componentSpecs"] = [{"pdbSpec": {"minAvailable": 1}}]
    warnings = validate(obj).warnings
    assert not any("logger" in w for w in warnings)  # served: trimaran/serving/logger.py
    assert "spec.predictors[0].componentSpecs[0].pdbSpec: ignored locally (one node)" in warnings
