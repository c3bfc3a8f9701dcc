"""V2 gRPC to an InferenceService through ``status.components.predictor.grpcUrl``: tritonclient and our own
stubs get the REST answer, and a canary split shows over gRPC as over REST."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlparse

import grpc
import numpy as np

from tests.e2e.test_serving import Predictor, apply, constant_model, isvc, isvc_manifest, routed, wait_ready
from tests.helpers import poll
from trimaran.serving.proto import grpc_predict_v2_pb2 as pb
from trimaran.serving.proto import grpc_predict_v2_pb2_grpc as pb_grpc

REVISION_TRAILER = "x-trimaran-revision"


def _infer_request(name: str) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(model_name=name, inputs=[pb.ModelInferRequest.InferInputTensor(
        name="input-0", datatype="FP32", shape=[1, 2], contents=pb.InferTensorContents(fp32_contents=[0.5, 0.5]))])


def test_grpc_url_serves_v2_and_shows_the_canary_split(plane, tmp_path):
    import tritonclient.grpc as triton

    apply(plane, tmp_path, isvc_manifest("grpcdigits", str(constant_model(tmp_path / "models/old", 0))))
    status = wait_ready(plane, "grpcdigits")["status"]
    grpc_url = status["components"]["predictor"]["grpcUrl"]
    target = urlparse(grpc_url)
    assert target.scheme == "grpc" and target.hostname == "127.0.0.1"
    assert target.port != urlparse(status["url"]).port
    address = f"{target.hostname}:{target.port}"

    _, rest = Predictor(status["url"], "grpcdigits").request("/v2/models/grpcdigits/infer", {"inputs": [
        {"name": "input-0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.5]}]})
    expected = rest["outputs"][0]

    client = triton.InferenceServerClient(url=address)
    assert client.is_server_ready() and client.is_model_ready("grpcdigits")
    inputs = [triton.InferInput("input-0", [1, 2], "FP32")]
    inputs[0].set_data_from_numpy(np.array([[0.5, 0.5]], dtype=np.float32))
    result = client.infer("grpcdigits", inputs)
    answer = result.as_numpy(expected["name"])
    assert answer.shape == tuple(expected["shape"]) and answer.tolist() == expected["data"]
    assert result.get_output(expected["name"]).datatype == expected["datatype"]

    channel = grpc.insecure_channel(address)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    response = stub.ModelInfer(_infer_request("grpcdigits"), timeout=10)
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        (expected["name"], expected["datatype"], expected["shape"])]
    assert list(response.outputs[0].contents.int64_contents) == expected["data"]
    assert stub.ModelMetadata(pb.ModelMetadataRequest(name="grpcdigits"), timeout=10).name == "grpcdigits"

    described = plane.cli("describe", "isvc", "grpcdigits").stdout
    assert "gRPC URL:" in described and grpc_url in described

    apply(plane, tmp_path, isvc_manifest("grpcdigits", str(constant_model(tmp_path / "models/new", 1)),
                                         canaryTrafficPercent=20))
    poll(lambda: (lambda o: routed(o) and len(o["status"]["components"]["predictor"].get("traffic", [])) == 2)(
        isvc(plane, "grpcdigits")), timeout=60, interval=0.2, what="a 20% canary")
    served = Counter()
    for _ in range(300):
        response, call = stub.ModelInfer.with_call(_infer_request("grpcdigits"), timeout=10)
        served[(response.outputs[0].contents.int64_contents[0], dict(call.trailing_metadata())[REVISION_TRAILER])] += 1
    assert set(served) == {(0, "grpcdigits-predictor-00001"), (1, "grpcdigits-predictor-00002")}, served
    # Binomial(300, 0.2): mean 60, sd 6.9; 5 sd either side.
    assert 25 <= served[(1, "grpcdigits-predictor-00002")] <= 95, served
    channel.close()
    client.close()
