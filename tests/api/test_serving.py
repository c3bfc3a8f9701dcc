"""InferenceService: KServe's defaults and its webhook's rules, each error with its field path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.builders import schema_errors
from trimaran.api import ManifestError, lookup, validate
from trimaran.api.serving import InferenceService, StorageUriError, parse_storage_uri, resolve_storage_uri

SCHEMA = Path("/work/shared/schemas/kserve/serving.kserve.io_inferenceservices.yaml")


def isvc(predictor: dict[str, Any] | None = None, name: str = "sklearn-iris", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": predictor if predictor is not None else
                     {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://models/iris"}}, **spec}}


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def test_registered_with_short_name() -> None:
    info = lookup("isvc")
    assert (info.kind, info.api_version, info.plural) == ("InferenceService", "serving.kserve.io/v1beta1",
                                                           "inferenceservices")
    assert lookup("inferenceservices.serving.kserve.io") is info


def test_defaults_min_replicas_and_protocol() -> None:
    out = validate(isvc()).object
    assert out["spec"]["predictor"]["minReplicas"] == 1
    assert out["spec"]["predictor"]["model"]["protocolVersion"] == "v1"
    assert out["metadata"]["namespace"] == "default"


@pytest.mark.parametrize("shortcut", ["sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "onnx"])
def test_framework_shortcuts_are_served_as_model_formats(shortcut: str) -> None:
    obj = validate(isvc({shortcut: {"storageUri": "/tmp/m"}})).object
    view = InferenceService.model_validate(obj).spec.predictor.model_view()
    assert view is not None and view.model_format.name == shortcut and view.storage_uri == "/tmp/m"


@pytest.mark.parametrize(("predictor", "expected"), [
    ({}, "spec.predictor: Required value: exactly one of [model, sklearn"),
    ({"sklearn": {"storageUri": "a"}, "xgboost": {"storageUri": "b"}},
     "spec.predictor: Forbidden: exactly one of [model, sklearn"),
    ({"model": {"storageUri": "a"}}, "spec.predictor.model.modelFormat: Required value"),
    ({"sklearn": {}}, "spec.predictor.sklearn.storageUri: Required value"),
    ({"triton": {"storageUri": "a"}}, "spec.predictor.triton: Forbidden: the triton runtime is not available locally"),
    ({"sklearn": {"storageUri": "a"}, "minReplicas": -1}, "spec.predictor.minReplicas"),
    ({"sklearn": {"storageUri": "a"}, "minReplicas": 3, "maxReplicas": 2},
     "spec.predictor.maxReplicas: Invalid value: 2: MinReplicas (3) cannot be greater than MaxReplicas"),
    ({"sklearn": {"storageUri": "a"}, "canaryTrafficPercent": 101},
     "spec.predictor.canaryTrafficPercent: Invalid value: 101: must be between 0 and 100, inclusive"),
    ({"sklearn": {"storageUri": "a"}, "containerConcurrency": 1001},
     "spec.predictor.containerConcurrency: Invalid value: 1001"),
    ({"sklearn": {"storageUri": "a"}, "scaleMetric": "latency"}, "spec.predictor.scaleMetric"),
    ({"sklearn": {"storageUri": "a"}, "scaleMetric": "cpu", "minReplicas": 0},
     "spec.predictor.minReplicas: Invalid value: 0: scaleMetric cpu (HPA) cannot scale to zero"),
    ({"sklearn": {"storageUri": "hdfs://nn/model"}},
     "spec.predictor.sklearn.storageUri: Invalid value: \"hdfs://nn/model\": hdfs:// is not supported locally; "
     "use s3://, gs://, http://, https://, hf://"),
    ({"sklearn": {"storageUri": "s3://"}}, "spec.predictor.sklearn.storageUri: Invalid value: \"s3://\": "
     "s3:// needs a bucket"),
    ({"sklearn": {"storageUri": "pvc://claim/../../x"}}, "must stay inside its root"),
    ({"sklearn": {"storageUri": "../outside"}}, "must stay inside its root"),
    ({"sklearn": {"storageUri": "ftp://host/m"}}, "Cannot recognize storage type for ftp://host/m"),
    ({"sklearn": {"storage": {"key": "minio"}}}, "spec.predictor.sklearn.storage.path: Required value"),
    ({"sklearn": {"storageUri": "s3://b/m", "storage": {"path": "m"}}},
     "spec.predictor.sklearn.storageUri: Forbidden: cannot co-exist with storage"),
    ({"sklearn": {"storage": {"path": "m", "parameters": {"type": "hdfs"}}}},
     "spec.predictor.sklearn.storage.parameters.type: Unsupported value: \"hdfs\""),
])
def test_webhook_rules(predictor: dict[str, Any], expected: str) -> None:
    problems = errors(isvc(predictor))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(("name", "ok"), [("sklearn-iris", True), ("1iris", False), ("Iris", False),
                                          ("iris-", False), ("a" * 47, True), ("a" * 48, False)])
def test_name_rule(name: str, ok: bool) -> None:
    if ok:
        validate(isvc(name=name))
    else:
        assert any(p.startswith(f'InferenceService "{name}": metadata.name') for p in errors(isvc(name=name)))


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("autoscaling.knative.dev/class", "keda", "Unsupported value"),
    ("autoscaling.knative.dev/metric", "latency", "Unsupported value"),
    ("autoscaling.knative.dev/target", "zero", "must be a number"),
    ("autoscaling.knative.dev/window", "2s", "must be between 6s and 1h"),
    ("autoscaling.knative.dev/window", "soon", "invalid duration"),
    ("autoscaling.knative.dev/panic-window-percentage", "0", "must be in [1, 100]"),
    ("autoscaling.knative.dev/min-scale", "-1", "must be greater than or equal to 0"),
])
def test_autoscaling_annotations(key: str, value: str, expected: str) -> None:
    obj = isvc()
    obj["metadata"]["annotations"] = {key: value}
    problems = errors(obj)
    assert any(f"metadata.annotations[{key}]" in p and expected in p for p in problems), problems


def test_transformer_needs_containers_and_explainer_is_refused() -> None:
    obj = isvc(transformer={"minReplicas": 1})
    assert any("spec.transformer.containers: Required value" in p for p in errors(obj))
    obj = isvc(explainer={"art": {"type": "SquareAttack"}})
    assert any("spec.explainer: Forbidden" in p for p in errors(obj))


def test_custom_container_predictor() -> None:
    out = validate(isvc({"containers": [{"name": "kserve-container", "image": "custom",
                                         "command": ["python", "serve.py"], "args": ["--port", "$(PORT)"]}]})).object
    assert out["spec"]["predictor"]["containers"][0]["args"] == ["--port", "$(PORT)"]


def test_accepted_manifests_validate_against_the_crd_schema() -> None:
    if not SCHEMA.exists():
        pytest.skip("no CRD schema here")
    crd = yaml.load(SCHEMA.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    full = isvc({"model": {"modelFormat": {"name": "sklearn", "version": "1"}, "storageUri": "pvc://m/iris",
                           "protocolVersion": "v2", "args": ["--workers", "2"],
                           "env": [{"name": "A", "value": "b"}],
                           "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}},
                 "minReplicas": 0, "maxReplicas": 3, "scaleTarget": 5, "scaleMetric": "concurrency",
                 "containerConcurrency": 10, "timeout": 30, "canaryTrafficPercent": 10,
                 "batcher": {"maxBatchSize": 32, "maxLatency": 5}},
                transformer={"containers": [{"name": "kserve-container", "image": "t", "args": ["$(PORT)"]}]})
    full["metadata"]["annotations"] = {"autoscaling.knative.dev/window": "6s"}
    stored = validate(copy.deepcopy(full)).object
    assert schema_errors(stored, schema) == []
    assert schema_errors(validate(isvc()).object, schema) == []
    assert schema_errors({**full, "spec": {"predictor": {"minReplicas": "1"}}}, schema) != []  # the checker checks


@pytest.mark.parametrize(("uri", "kind", "path", "claim"), [
    ("pvc://models/iris/1", "pvc", "iris/1", "models"),
    ("pvc://models", "pvc", "", "models"),
    ("file:///srv/models/iris", "path", "/srv/models/iris", ""),
    ("/srv/models/iris/", "path", "/srv/models/iris", ""),
    ("iris/v1", "relative", "iris/v1", ""),
    ("s3://models/iris", "remote", "s3://models/iris", ""),
    ("gs://models/iris", "remote", "gs://models/iris", ""),
    ("https://host/iris.tar.gz", "remote", "https://host/iris.tar.gz", ""),
    ("hf://acme/iris:v1", "remote", "hf://acme/iris:v1", ""),
])
def test_parse_storage_uri(uri: str, kind: str, path: str, claim: str) -> None:
    loc = parse_storage_uri(uri)
    assert (loc.kind, loc.path, loc.claim) == (kind, path, claim)


def test_resolve_storage_uri_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "volumes/default/models/iris").mkdir(parents=True)
    assert resolve_storage_uri("pvc://models/iris", home, "default") == (home / "volumes/default/models/iris").resolve()
    assert resolve_storage_uri("iris", home, "default") == (home / "models/iris").resolve()
    # A symlink inside a claim may not lead out of it.
    (home / "volumes/default/models/escape").symlink_to("/etc")
    with pytest.raises(StorageUriError, match="outside the allowed model roots"):
        resolve_storage_uri("pvc://models/escape", home, "default")
    monkeypatch.setenv("TRIMARAN_MODEL_ROOTS", str(tmp_path / "allowed"))
    assert resolve_storage_uri(str(tmp_path / "allowed/m"), home, "default") == (tmp_path / "allowed/m").resolve()
    with pytest.raises(StorageUriError, match="TRIMARAN_MODEL_ROOTS"):
        resolve_storage_uri("/etc/passwd", home, "default")


def test_standard_mode_warns_of_what_it_ignores() -> None:
    obj = isvc()
    obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "RawDeployment"}
    assert validate(obj).warnings == []
    obj["spec"]["predictor"].update(canaryTrafficPercent=10, minReplicas=0)
    warnings = validate(obj).warnings
    assert any("canaryTrafficPercent: ignored in RawDeployment mode" in w for w in warnings)
    assert any("minReplicas: 0 is treated as 1" in w for w in warnings)
    obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "ModelMesh"}
    assert any("no ModelMesh here" in w for w in validate(obj).warnings)
    obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "Raw"}
    with pytest.raises(ManifestError, match=r"deploymentMode\]: Unsupported value: \"Raw\""):
        validate(obj)


def test_deployment_mode_cannot_change_on_update() -> None:
    old = validate(isvc()).object
    old["status"] = {"deploymentMode": "Knative"}
    new = validate(isvc()).object
    new["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "Standard"}
    [error] = InferenceService.update_errors(old, new)
    assert "update rejected: deploymentMode cannot be changed from 'Knative' to 'Standard'" in str(error)
    assert "metadata.annotations[serving.kserve.io/deploymentMode]" in str(error)
    old["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "RawDeployment"}
    assert InferenceService.update_errors(old, new) == []  # a legacy name for the same mode
    new["metadata"]["annotations"] = {}
    assert InferenceService.update_errors(old, new) == []  # no annotation: the mode stays as it was
