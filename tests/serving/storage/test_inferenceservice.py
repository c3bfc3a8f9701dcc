"""InferenceServices whose storageUri is downloaded by each replica's storage-initializer init
container: a real control plane, real model server replicas, and the model in moto's S3 server or
behind a plain HTTP server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlparse

import yaml

from tests.e2e.test_serving import Predictor, condition, isvc, wait_ready
from tests.helpers import EXAMPLES, poll
from tests.serving.storage.conftest import FileServer, S3Server, iris_model


def apply_docs(plane, tmp_path: Path, *docs: dict) -> None:
    path = tmp_path / f"apply-{len(list(tmp_path.glob('apply-*')))}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    plane.cli("apply", "-f", str(path))


def inference_service(name: str, uri: str, **predictor: object) -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": {**predictor, "model": {"modelFormat": {"name": "sklearn"}, "storageUri": uri}}}}


def events(plane, name: str) -> list[tuple[str, str]]:
    listed = json.loads(plane.cli("get", "events", "-o", "json").stdout)["items"]
    return [(e["reason"], e["message"]) for e in listed if e["involvedObject"]["name"] == name]


def predict(obj: dict, name: str, rows: list[list[float]]) -> list[int]:
    """The V1 answer for ``rows``, checked equal to the V2 one."""
    client = Predictor(obj["status"]["url"], name)
    status, body = client.request(f"/v1/models/{name}:predict", {"instances": rows})
    assert status == 200, body
    status, v2 = client.request(f"/v2/models/{name}/infer", {"inputs": [
        {"name": "input-0", "shape": [len(rows), 4], "datatype": "FP64", "data": [v for row in rows for v in row]}]})
    assert status == 200 and v2["outputs"][0]["data"] == body["predictions"], v2
    return body["predictions"]


def iris_rows(model_file: Path) -> tuple[list[list[float]], list[int]]:
    """One flower of each species, and what the model in ``model_file`` answers for them."""
    import joblib
    from sklearn.datasets import load_iris

    x, _ = load_iris(return_X_y=True)
    rows = [x[0].tolist(), x[50].tolist(), x[100].tolist()]
    return rows, joblib.load(model_file).predict(rows).tolist()


def replicas(plane, name: str) -> list[dict]:
    listed = json.loads(plane.cli("get", "pods", "-l", f"serving.kserve.io/inferenceservice={name}",
                                  "-o", "json").stdout)["items"]
    return [p for p in listed if not p["metadata"].get("deletionTimestamp")]


def failed_with(plane, name: str, reason: str) -> dict:
    def found() -> dict | None:
        cond = condition(isvc(plane, name), "PredictorReady")
        return cond if cond.get("reason") == reason else None

    return poll(found, timeout=60, interval=0.3, what=f"{name} {reason}")


def test_s3_example_serves_with_credentials_from_the_service_accounts_secret_and_one_without_says_what_is_missing(
        plane, s3_server: S3Server, tmp_path: Path) -> None:
    # The example as its README runs it, with the S3 server on a free port instead of 5000.
    example = EXAMPLES / "serving" / "s3-model"
    subprocess.run([sys.executable, str(example / "upload.py"), "--endpoint", s3_server.endpoint],
                   check=True, capture_output=True, timeout=120)
    docs = list(yaml.safe_load_all((example / "iris-s3.yaml").read_text()))
    docs[0]["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"] = urlparse(s3_server.endpoint).netloc
    # KServe's other form: a key of the storage-config Secret and a path in its bucket.
    storage_config = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "storage-config"},
                      "stringData": {"localS3": json.dumps({
                          "type": "s3", "bucket": "models", "endpoint_url": s3_server.endpoint, "region": "us-east-1",
                          "access_key_id": "AKIAEXAMPLEKEY", "secret_access_key": "example-secret-key"})}}
    by_key = inference_service("iris-by-key", "")
    by_key["spec"]["predictor"]["model"] = {"modelFormat": {"name": "sklearn"},
                                            "storage": {"key": "localS3", "path": "sklearn/iris"}}
    apply_docs(plane, tmp_path, *docs, storage_config, by_key, inference_service("no-creds", "s3://models/sklearn/iris"))
    obj = wait_ready(plane, "sklearn-iris-s3", timeout=120)
    rows = json.loads((example / "input.json").read_text())["instances"]
    assert predict(obj, "sklearn-iris-s3", rows) == [0, 1, 2]
    assert predict(wait_ready(plane, "iris-by-key", timeout=60), "iris-by-key", rows) == [0, 1, 2]
    # The replica downloaded it itself, as KServe's: its init container, the keys as Secret references.
    init = replicas(plane, "sklearn-iris-s3")[0]["spec"]["initContainers"][0]
    assert (init["name"], init["args"]) == ("storage-initializer", ["s3://models/sklearn/iris", "/mnt/models"])
    keys = {e["name"]: e for e in init["env"]}
    assert keys["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "AWS_SECRET_ACCESS_KEY"
    assert "example-secret-key" not in json.dumps(replicas(plane, "iris-by-key")[0]["spec"])
    cond = failed_with(plane, "no-creds", "ModelDownloadFailed")
    assert "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY missing" in cond["message"]
    assert "there is no ServiceAccount default/default" in cond["message"]
    assert "(storage-initializer of no-creds-predictor-" in cond["message"]
    assert condition(isvc(plane, "no-creds"), "Ready")["status"] == "False"
    # Attaching the Secret to the default ServiceAccount is enough: the failing replica is replaced.
    apply_docs(plane, tmp_path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"},
                                 "secrets": [{"name": "s3creds"}]})
    assert predict(wait_ready(plane, "no-creds", timeout=120), "no-creds", rows) == [0, 1, 2]


def test_https_archive_downloads_in_the_replica_with_progress_and_a_missing_one_fails_at_once(
        plane, file_server: FileServer, tmp_path: Path) -> None:
    from trimaran.server.daemon import start_server, stop_server
    from trimaran.serving.storage import human_bytes

    model = iris_model(tmp_path / "iris") / "model.joblib"
    with tarfile.open(file_server.root / "iris.tar.gz", "w:gz") as tar:
        tar.add(model, arcname="model.joblib")
    size = (file_server.root / "iris.tar.gz").stat().st_size
    file_server.gated.add("/iris.tar.gz")
    url = f"{file_server.url}/iris.tar.gz"
    apply_docs(plane, tmp_path, inference_service("iris-http", url),
               inference_service("missing", f"{file_server.url}/absent.tar.gz"))
    # Held halfway by the server: the status says how far the replica's download got.
    half = f"downloading {url}: {human_bytes(size // 2)} of {human_bytes(size)}"
    poll(lambda: condition(isvc(plane, "iris-http"), "PredictorReady").get("message") == half, timeout=60,
         interval=0.3, what=half)
    assert condition(isvc(plane, "iris-http"), "Ready")["reason"] == "ModelDownloading"
    file_server.gate.set()
    obj = wait_ready(plane, "iris-http", timeout=120)
    rows, expected = iris_rows(model)
    assert predict(obj, "iris-http", rows) == expected == [0, 1, 2]
    # The first failure of the initializer is on the InferenceService, with its own words.
    cond = failed_with(plane, "missing", "ModelDownloadFailed")
    assert cond["message"].startswith(f"{file_server.url}/absent.tar.gz: not found (HTTP 404) (storage-initializer of ")
    assert file_server.gets("/iris.tar.gz") == 1
    # Nothing is shared between InferenceServices: another one downloads for itself.
    apply_docs(plane, tmp_path, inference_service("iris-http-again", url))
    assert predict(wait_ready(plane, "iris-http-again", timeout=120), "iris-http-again", rows) == expected
    assert file_server.gets("/iris.tar.gz") == 2, file_server.requests
    assert not (plane.home / "storage").exists()
    # A restarted control plane keeps the replicas, and their models: nothing is downloaded again.
    stop_server(plane.home)
    start_server(home=plane.home)
    assert predict(wait_ready(plane, "iris-http"), "iris-http", rows) == expected
    assert file_server.gets("/iris.tar.gz") == 2
