"""``models:/`` and ``runs:/`` URIs without a tracking server: malformed ones refused at parse with the
form to use, a missing ``MLFLOW_TRACKING_URI`` or an unreachable server named, a tracking server named
by a Service found at its clusterIP, a Seldon MLFLOW_SERVER's container env passed on. (A real
``mlflow server`` resolving them, from seed 002's Deployment, is tests/e2e/test_seed002_mlflow.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from trimaran.api.serving import StorageUriError, parse_storage_uri
from trimaran.controllers.serving.seldon import predictor_service
from trimaran.serving.storage import Credentials, StorageError, account_credentials, fetch, uri_scheme


def test_uri_forms() -> None:
    for uri in ("models:/digits/1", "models:/digits/latest", "models:/digits@champion", "models:/m-0123abcd",
                "runs:/0123abcd/model", "runs:/0123abcd/model/data"):
        assert parse_storage_uri(uri).kind == "remote", uri
    assert uri_scheme("models:/digits/1") == "models" and uri_scheme("runs:/r/model") == "runs"
    assert uri_scheme("model/1") is None and uri_scheme("other:/x") is None
    for bad, words in (("runs:/only-a-run", "needs a run id and the model's path"),
                       ("models:/digits", "models:/<name>/<version|stage|latest>"),
                       ("runs:/abc/../etc", "'.' and '..' are not path parts")):
        with pytest.raises(StorageUriError, match=words):
            parse_storage_uri(bad)


def test_what_cannot_be_asked_says_why(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="set MLFLOW_TRACKING_URI in the predictor's env"):
        fetch("models:/digits/1", tmp_path, Credentials.from_env({}))
    with pytest.raises(StorageError, match="MLFLOW_TRACKING_URI=file:///x is not an http"):
        fetch("models:/digits/1", tmp_path, Credentials.from_env({"MLFLOW_TRACKING_URI": "file:///x"}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(StorageError, match="cannot reach the MLflow tracking server"):
            fetch("models:/digits/1", tmp_path, Credentials.from_env({"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{closed}"}))
    assert not any(tmp_path.iterdir()), "a failed fetch leaves nothing in the cache"


def test_tracking_server_named_by_a_service_is_its_cluster_ip() -> None:
    services = {("Service", "kubeflow", "mlflow-server"): {"spec": {"clusterIP": "127.9.8.7"}}}

    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        return services.get((kind, namespace, name))

    def hosts(namespace: str, url: str) -> dict[str, str]:
        creds = account_credentials(lookup, namespace, "default", container_env={"MLFLOW_TRACKING_URI": url,
                                                                                "PATH": "/ignored"})
        assert creds.mlflow_tracking_uri == url
        return dict(creds.hosts)

    assert hosts("kubeflow", "http://mlflow-server:5000") == {"mlflow-server": "127.9.8.7"}
    assert hosts("default", "http://mlflow-server.kubeflow:5000") == {"mlflow-server.kubeflow": "127.9.8.7"}
    assert hosts("default", "http://mlflow-server.kubeflow.svc.cluster.local:5000") == {
        "mlflow-server.kubeflow.svc.cluster.local": "127.9.8.7"}
    # The short name is the Service of the pod's own namespace; other hosts are left to DNS.
    assert hosts("default", "http://mlflow-server:5000") == {}
    assert hosts("kubeflow", "http://mlflow.example.com:5000") == {}


def test_seldon_mlflow_server_gets_its_containers_tracking_server(tmp_path: Path) -> None:
    """MLFLOW_SERVER's ``modelUri`` is resolved with the env of the componentSpecs container named after
    the unit: the executor's (seldon protocol, it fetches in the pod) or the model server's (v2)."""
    tracking = [{"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow-server:5000"}]
    predictor = {"name": "p", "traffic": 100,
                 "componentSpecs": [{"spec": {"containers": [{"name": "clf", "env": tracking}]}}],
                 "graph": {"name": "clf", "implementation": "MLFLOW_SERVER", "modelUri": "models:/digits/1"}}

    def sdep(**spec: object) -> dict:
        return {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment",
                "metadata": {"name": "s", "namespace": "ns", "uid": "u-1"}, "spec": {"predictors": [predictor], **spec}}

    executor = predictor_service(sdep(), predictor, tmp_path)["spec"]["predictor"]["containers"][0]
    # After the graph's sources: the unit's tracking server, then this checkout for the executor's imports.
    assert [e for e in executor["env"][1:] if e["name"] != "PYTHONPATH"] == tracking
    assert json.loads(executor["env"][0]["value"])["sources"] == {"clf": {"modelUri": "models:/digits/1"}}
    model = predictor_service(sdep(protocol="v2"), predictor, tmp_path)["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "mlflow"} and model["env"] == tracking
