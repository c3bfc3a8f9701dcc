"""InferenceServices end to end: a real control plane, the router pod and model server replicas.

Models are scikit-learn DummyClassifiers that always answer one class, so each response says which
revision served it.
"""

from __future__ import annotations

import http.client
import json
import textwrap
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import shared_plane
from tests.helpers import poll

# One control plane for the file: each test names its own InferenceServices and deletes those
# whose replicas would otherwise run on.
plane = shared_plane("serving")


def constant_model(path: Path, answer: int) -> Path:
    """A model directory whose model always predicts ``answer``."""
    import joblib
    from sklearn.dummy import DummyClassifier

    path.mkdir(parents=True, exist_ok=True)
    model = DummyClassifier(strategy="constant", constant=answer).fit([[0.0, 0.0], [1.0, 1.0]], [answer, 1 - answer])
    joblib.dump(model, path / "model.joblib")
    return path


def isvc_manifest(name: str, storage_uri: str, annotations: dict[str, str] | None = None, **predictor: object) -> str:
    doc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
           "metadata": {"name": name, "annotations": annotations or {}},
           "spec": {"predictor": {**predictor, "model": {"modelFormat": {"name": "sklearn"},
                                                         "storageUri": storage_uri}}}}
    return json.dumps(doc)


def apply(plane, tmp_path: Path, manifest: str) -> None:
    path = tmp_path / "isvc.json"
    path.write_text(manifest)
    plane.cli("apply", "-f", str(path))


def isvc(plane, name: str) -> dict:
    return plane.get("isvc", name)


def condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def routed(obj: dict) -> bool:
    """The router has loaded the routes (traffic) the status reports."""
    return condition(obj, "IngressReady").get("status") == "True"


def wait_ready(plane, name: str, timeout: float = 60) -> dict:
    return poll(lambda: (lambda o: o if condition(o, "Ready").get("status") == "True" else None)(isvc(plane, name)),
                timeout=timeout, interval=0.2, what=f"{name} Ready")


class Predictor:
    """Keep-alive V1/V2 requests to a URL (one connection per thread of the caller's choosing)."""

    def __init__(self, url: str, name: str, host: str | None = None) -> None:
        parsed = urlparse(url)
        self.address = (parsed.hostname, parsed.port)
        self.name, self.host = name, host
        self.conn: http.client.HTTPConnection | None = None

    def request(self, path: str, body: dict) -> tuple[int, dict]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(*self.address, timeout=60)
        headers = {"content-type": "application/json"}
        if self.host:
            headers["host"] = self.host
        try:
            self.conn.request("POST", path, body=json.dumps(body), headers=headers)
            response = self.conn.getresponse()
            return response.status, json.loads(response.read())
        except Exception:
            self.conn.close()
            self.conn = None
            raise

    def v1(self) -> int:
        status, body = self.request(f"/v1/models/{self.name}:predict", {"instances": [[0.5, 0.5]]})
        assert status == 200, body
        return int(body["predictions"][0])

    def v2(self) -> int:
        status, body = self.request(f"/v2/models/{self.name}/infer", {"inputs": [
            {"name": "input-0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.5]}]})
        assert status == 200, body
        return int(body["outputs"][0]["data"][0])


def test_isvc_serves_v1_and_v2_at_its_url_and_by_host_header(plane, tmp_path):
    model = constant_model(tmp_path / "models/seven", 7)
    apply(plane, tmp_path, isvc_manifest("sevens", str(model)))
    obj = wait_ready(plane, "sevens")
    status = obj["status"]
    predictor = status["components"]["predictor"]
    assert predictor["latestReadyRevision"] == predictor["latestCreatedRevision"] == "sevens-predictor-00001"
    assert predictor["traffic"] == [{"revisionName": "sevens-predictor-00001", "latestRevision": True, "percent": 100}]
    assert status["modelStatus"]["states"]["activeModelState"] == "Loaded"
    client = Predictor(status["url"], "sevens")
    assert client.v1() == 7
    assert client.v2() == 7
    address = urlparse(status["address"]["url"])
    by_host = Predictor(f"http://127.0.0.1:{address.port}", "sevens", host=address.hostname)
    assert by_host.v1() == 7

    table = plane.cli("get", "isvc").stdout
    assert table.split()[:8] == ["NAME", "URL", "READY", "PREV", "LATEST", "PREVROLLEDOUTREVISION",
                                 "LATESTREADYREVISION", "AGE"]
    assert "sevens" in table and status["url"] in table and "True" in table
    described = plane.cli("describe", "isvc", "sevens").stdout
    assert "sevens-predictor-00001" in described and "100%" in described

    input_file = tmp_path / "input.json"
    input_file.write_text(json.dumps({"instances": [[0.5, 0.5], [1, 1]]}))
    out = plane.cli("predict", "sevens", "-f", str(input_file)).stdout
    assert json.loads(out) == {"predictions": [7, 7]}

    plane.cli("delete", "isvc", "sevens")
    poll(lambda: not plane.client().list("Pod", "default", selector="serving.kserve.io/inferenceservice=sevens"),
         timeout=30, what="replicas stopped")


def test_empty_model_dir_is_not_ready_and_says_why(plane, tmp_path):
    empty = tmp_path / "models/empty"
    empty.mkdir(parents=True)
    apply(plane, tmp_path, isvc_manifest("hollow", str(empty)))
    obj = poll(lambda: (lambda o: o if condition(o, "PredictorReady").get("reason") == "ModelLoadFailed" else None)(
        isvc(plane, "hollow")), timeout=60, interval=0.2, what="a load failure")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    assert "no loadable model version" in ready["message"] and str(empty) in ready["message"]
    assert obj["status"]["modelStatus"]["transitionStatus"] == "BlockedByFailedLoad"
    plane.cli("delete", "isvc", "hollow")


def test_unsupported_storage_scheme_is_rejected_with_the_supported_ones(plane, tmp_path):
    path = tmp_path / "hdfs.json"
    path.write_text(isvc_manifest("cloudy", "hdfs://namenode/models/sklearn/1.0/model"))
    proc = plane.cli("apply", "-f", str(path), check=False)
    assert proc.returncode != 0
    assert "spec.predictor.model.storageUri" in proc.stderr and "hdfs:// is not supported locally" in proc.stderr
    assert "s3://, gs://" in proc.stderr


def _share(client: Predictor, n: int) -> Counter:
    return Counter(client.v1() for _ in range(n))


def test_canary_split_promote_and_rollback(plane, tmp_path):
    old = constant_model(tmp_path / "models/old", 0)
    new = constant_model(tmp_path / "models/new", 1)
    apply(plane, tmp_path, isvc_manifest("canary", str(old)))
    client = Predictor(wait_ready(plane, "canary")["status"]["url"], "canary")

    apply(plane, tmp_path, isvc_manifest("canary", str(new), canaryTrafficPercent=10))
    obj = poll(lambda: (lambda o: o if len(o["status"]["components"]["predictor"].get("traffic", [])) == 2
                        and routed(o) else None)(isvc(plane, "canary")), timeout=60, interval=0.2, what="a 10% canary")
    traffic = obj["status"]["components"]["predictor"]["traffic"]
    assert {(t["revisionName"], t["percent"], t.get("tag")) for t in traffic} == {
        ("canary-predictor-00002", 10, "latest"), ("canary-predictor-00001", 90, "prev")}
    counts = _share(client, 600)
    # Binomial(600, 0.1): mean 60, sd 7.3; 5 sd either side.
    assert 23 <= counts[1] <= 97, counts
    table = plane.cli("get", "isvc", "canary").stdout.splitlines()[1].split()
    assert table[3:7] == ["90", "10", "canary-predictor-00001", "canary-predictor-00002"]

    apply(plane, tmp_path, isvc_manifest("canary", str(new), canaryTrafficPercent=0))  # rollback
    poll(lambda: (lambda o: routed(o) and [t for t in o["status"]["components"]["predictor"]["traffic"]
                                           if t["percent"] == 100 and t["revisionName"] == "canary-predictor-00001"])(
        isvc(plane, "canary")), timeout=30, interval=0.2, what="rollback")
    assert _share(client, 100) == Counter({0: 100})

    apply(plane, tmp_path, isvc_manifest("canary", str(new)))  # promote
    obj = poll(lambda: (lambda o: o if o["status"]["components"]["predictor"].get("latestRolledoutRevision")
                        == "canary-predictor-00002" and routed(o) else None)(isvc(plane, "canary")),
               timeout=30, interval=0.2, what="promotion")
    assert obj["status"]["components"]["predictor"]["previousRolledoutRevision"] == "canary-predictor-00001"
    assert _share(client, 100) == Counter({1: 100})
    plane.cli("delete", "isvc", "canary")


@pytest.mark.parametrize("bad", ["pvc://claim/../../etc", "s3://", "hf://org-only", "oci://registry/model:1"])
def test_storage_uris_that_leave_their_root_or_are_malformed_or_unsupported_are_rejected(plane, tmp_path, bad):
    path = tmp_path / "bad.json"
    path.write_text(isvc_manifest("bad", bad))
    proc = plane.cli("apply", "-f", str(path), "--dry-run", check=False)
    assert proc.returncode != 0 and "storageUri" in proc.stderr


def test_pvc_model_written_by_a_job_is_served(plane, tmp_path):
    script = ("import joblib, os; from sklearn.dummy import DummyClassifier; os.makedirs('/out/m', exist_ok=True); "
              "joblib.dump(DummyClassifier(strategy='constant', constant=3).fit([[0, 0], [1, 1]], [3, 4]), "
              "'/out/m/model.joblib')")
    job = textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: train}}
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: train
                  image: python:3.11
                  command: ["python", "-c", {json.dumps(script)}]
                  volumeMounts: [{{name: out, mountPath: /out}}]
              volumes:
                - name: out
                  persistentVolumeClaim: {{claimName: models}}
        """)
    (tmp_path / "job.yaml").write_text(job)
    plane.cli("apply", "-f", str(tmp_path / "job.yaml"))
    apply(plane, tmp_path, isvc_manifest("frompvc", "pvc://models/m"))
    obj = wait_ready(plane, "frompvc", timeout=90)
    assert Predictor(obj["status"]["url"], "frompvc").v1() == 3
    plane.cli("delete", "isvc", "frompvc")


def test_serving_example_job_to_canary_to_promotion(plane):
    from tests.helpers import EXAMPLES

    d = EXAMPLES / "serving"
    plane.cli("apply", "-f", str(d / "pvc.yaml"), "-f", str(d / "code-configmap.yaml"),
              "-f", str(d / "train-job.yaml"))
    plane.cli("wait", "job/digits-train", "--for=condition=Complete", "--timeout=120s")
    plane.cli("apply", "-f", str(d / "digits.yaml"))
    wait_ready(plane, "digits", timeout=90)
    v1 = json.loads(plane.cli("predict", "digits", "-f", str(d / "input.json")).stdout)
    assert v1 == {"predictions": [0, 1]}
    v2 = json.loads(plane.cli("predict", "digits", "-f", str(d / "input-v2.json")).stdout)
    assert v2["outputs"][0]["data"] == [0, 1]
    plane.cli("apply", "-f", str(d / "digits-canary.yaml"))
    poll(lambda: (lambda o: routed(o) and len(o["status"]["components"]["predictor"]["traffic"]) == 2)(
        isvc(plane, "digits")), timeout=90, interval=0.2, what="the canary")
    plane.cli("apply", "-f", str(d / "digits-promote.yaml"))
    obj = poll(lambda: (lambda o: o if routed(o) and o["status"]["components"]["predictor"].get(
        "latestRolledoutRevision") == "digits-predictor-00002" else None)(isvc(plane, "digits")),
        timeout=90, interval=0.2, what="the promotion")
    assert obj["status"]["components"]["predictor"]["traffic"][0]["percent"] == 100
    assert json.loads(plane.cli("predict", "digits", "-f", str(d / "input.json")).stdout) == {"predictions": [0, 1]}
    plane.cli("delete", "isvc", "digits")


# A transformer as a custom container: multiplies the predictor's answers by 10. It listens on
# $PORT and reaches the predictor at $PREDICTOR_HOST, as KServe wires a transformer.
TRANSFORMER = textwrap.dedent("""
    import http.client, json, os
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            host, port = os.environ["PREDICTOR_HOST"].split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("POST", self.path, body=body, headers={"content-type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            data = json.dumps({"predictions": [p * 10 for p in answer["predictions"]]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
""")


def test_transformer_calls_the_predictor_through_its_own_route(fresh_plane, tmp_path):
    plane = fresh_plane
    model = constant_model(tmp_path / "models/seven", 7)
    doc = json.loads(isvc_manifest("pipeline", str(model)))
    doc["spec"]["transformer"] = {"containers": [{"name": "kserve-container", "image": "python:3.11",
                                                  "command": ["python", "-c", TRANSFORMER]}]}
    apply(plane, tmp_path, json.dumps(doc))
    obj = wait_ready(plane, "pipeline", timeout=90)
    status = obj["status"]
    assert condition(obj, "TransformerReady")["status"] == "True"
    assert status["components"]["transformer"]["latestReadyRevision"] == "pipeline-transformer-00001"
    assert status["url"] == status["components"]["transformer"]["url"] != status["components"]["predictor"]["url"]
    assert Predictor(status["url"], "pipeline").v1() == 70
    assert Predictor(status["components"]["predictor"]["url"], "pipeline").v1() == 7
    plane.cli("delete", "isvc", "pipeline")
    poll(lambda: not plane.client().list("Pod", "trimaran-system"), timeout=30, what="the router stopped")
