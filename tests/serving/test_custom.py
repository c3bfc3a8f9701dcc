"""Custom (payload-level) models over V1, V2 and gRPC, their timeout, and a transformer in front of a predictor."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.serving.conftest import ModelServer

CUSTOM = '''
import asyncio


class Echo:
    def __init__(self, name):
        self.name = name
        self.ready = True

    async def predict(self, payload, headers=None):
        if payload.get("sleep"):
            await asyncio.sleep(payload["sleep"])
        if "instances" in payload:
            return {"predictions": [[v * 10 for v in row] for row in payload["instances"]]}
        tensor = payload["inputs"][0]
        return {"outputs": [{"name": "tenfold", "datatype": tensor["datatype"], "shape": tensor["shape"],
                             "data": [v * 10 for v in tensor["data"]]}]}
'''

TRANSFORMER = '''
from trimaran.serving.runtimes import TransformerModel


class Scale(TransformerModel):
    def preprocess(self, payload, headers=None):
        return {"instances": [[v / 16 for v in row] for row in payload["instances"]]}

    def postprocess(self, result, headers=None):
        return {"predictions": result["predictions"], "transformed": True}
'''


def test_custom_model_over_every_protocol(start_server, tmp_path: Path) -> None:
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "model.py").write_text(CUSTOM)
    server: ModelServer = start_server(tmp_path / "custom", name="echo", request_timeout=0.5).wait_ready()
    c = server.client
    assert c.post("/v1/models/echo:predict", json={"instances": [[1, 2]]}).json() == {"predictions": [[10, 20]]}
    body = c.post("/v2/models/echo/infer", json={"id": "q", "inputs": [
        {"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2]}]}).json()
    assert body["model_name"] == "echo" and body["model_version"] == "1" and body["id"] == "q"
    assert body["outputs"][0]["data"] == [10, 20]
    slow = c.post("/v1/models/echo:predict", json={"instances": [[1]], "sleep": 2})
    assert slow.status_code == 504 and "timeout" in slow.json()["error"]
    assert c.get("/v2/models/echo").json()["platform"] == "custom"

    import tritonclient.grpc as triton

    client = triton.InferenceServerClient(server.grpc_url)
    inp = triton.InferInput("x", [3], "FP32")
    inp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    assert client.infer("echo", [inp]).as_numpy("tenfold").tolist() == [10, 20, 30]
    client.close()


def test_transformer_forwards_to_its_predictor(start_server, tmp_path: Path, digits_dir: Path, digits) -> None:
    x, model = digits
    predictor = start_server(digits_dir, grpc=False).wait_ready()
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "model.py").write_text(TRANSFORMER)
    transformer = start_server(tmp_path / "transformer", grpc=False,
                               predictor_host=f"127.0.0.1:{predictor.http_port}").wait_ready()
    # Clients send raw pixels (0..16); the transformer scales them as the model was trained.
    r = transformer.client.post("/v1/models/digits:predict", json={"instances": (x[:4] * 16).tolist()})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": model.predict(x[:4]).tolist(), "transformed": True}
    predictor.stop()
    r = transformer.client.post("/v1/models/digits:predict", json={"instances": (x[:1] * 16).tolist()})
    assert r.status_code == 502 and "predictor" in r.json()["error"]
