"""``models:/`` and ``runs:/`` URIs without a tracking server: malformed ones refused at parse with the
form to use, a missing ``MLFLOW_TRACKING_URI`` or an unreachable server named, and a tracking server
named by a Service found at its clusterIP. (A real ``mlflow server`` resolving them, from a Deployment
of seed 002, is tests/e2e/test_seed002_mlflow.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from trimaran.api.serving import StorageUriError, parse_storage_uri
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
