"""Every V2 datatype round-trips through an identity model: V2 JSON, Triton's binary extension, gRPC raw and typed.

The model directory holds one ONNX Identity graph per datatype as versions 1..13, served with the ``all``
version policy, so each request names its datatype's version.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.helpers import poll
from tests.serving.conftest import ModelServer

DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
             "FP64", "BYTES"]
VERSION = {datatype: str(i + 1) for i, datatype in enumerate(DATATYPES)}


def sample(datatype: str) -> np.ndarray:
    """Two rows of three values, with each type's extremes."""
    if datatype == "BYTES":
        return np.array([["a", "héllo", ""], ["x y", "z", "0"]], dtype=object)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    from trimaran.serving.runtimes import datatype_to_numpy

    dtype = datatype_to_numpy(datatype)
    if dtype.kind == "f":
        info = np.finfo(dtype)
        return np.array([[0.5, -1.25, float(info.max)], [float(info.tiny), 3.0, -0.0]], dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([[info.min, info.max, 0], [1, 2, 3]], dtype=dtype)


@pytest.fixture(scope="module")
def server(module_tmp) -> Iterator[ModelServer]:
    import onnx
    from onnx import TensorProto, helper

    onnx_types = {"BOOL": TensorProto.BOOL, "UINT8": TensorProto.UINT8, "UINT16": TensorProto.UINT16,
                  "UINT32": TensorProto.UINT32, "UINT64": TensorProto.UINT64, "INT8": TensorProto.INT8,
                  "INT16": TensorProto.INT16, "INT32": TensorProto.INT32, "INT64": TensorProto.INT64,
                  "FP16": TensorProto.FLOAT16, "FP32": TensorProto.FLOAT, "FP64": TensorProto.DOUBLE,
                  "BYTES": TensorProto.STRING}
    base = module_tmp / "identity"
    for datatype, onnx_type in onnx_types.items():
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                                  [helper.make_tensor_value_info("x", onnx_type, ["n", 3])],
                                  [helper.make_tensor_value_info("y", onnx_type, ["n", 3])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        (base / VERSION[datatype]).mkdir(parents=True)
        onnx.save(model, base / VERSION[datatype] / "model.onnx")
    server = ModelServer(base, module_tmp, name="identity", version_policy="all").wait_ready()
    poll(lambda: len(server.client.get("/v2/models/identity").json()["versions"]) == len(DATATYPES),
         what="every version loaded")
    yield server
    server.stop()


@pytest.mark.parametrize("datatype", DATATYPES)
def test_v2_json(server: ModelServer, datatype: str) -> None:
    value = sample(datatype)
    data = value.ravel().tolist()
    r = server.client.post(f"/v2/models/identity/versions/{VERSION[datatype]}/infer", json={
        "inputs": [{"name": "x", "shape": [2, 3], "datatype": datatype, "data": data}]})
    if datatype == "FP16":
        assert r.status_code == 400 and "binary" in r.json()["error"]
        return
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert {k: out[k] for k in ("name", "datatype", "shape")} == {"name": "y", "datatype": datatype, "shape": [2, 3]}
    if datatype in ("BYTES", "BOOL"):
        assert out["data"] == data
    else:  # FP32 comes back as its shortest float32 form: equal as float32, not as float64
        _same(np.asarray(out["data"], dtype=value.dtype).reshape(value.shape), value, datatype)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_tritonclient_http_binary(server: ModelServer, datatype: str) -> None:
    import tritonclient.http as triton

    value = sample(datatype)
    client = triton.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inp = triton.InferInput("x", list(value.shape), datatype)
    inp.set_data_from_numpy(value, binary_data=True)
    result = client.infer("identity", [inp], model_version=VERSION[datatype],
                          outputs=[triton.InferRequestedOutput("y", binary_data=True)])
    _same(result.as_numpy("y"), value, datatype)
    client.close()


@pytest.mark.parametrize("datatype", DATATYPES)
def test_tritonclient_grpc_raw(server: ModelServer, datatype: str) -> None:
    import tritonclient.grpc as triton

    value = sample(datatype)
    client = triton.InferenceServerClient(server.grpc_url)
    inp = triton.InferInput("x", list(value.shape), datatype)
    inp.set_data_from_numpy(value)
    result = client.infer("identity", [inp], model_version=VERSION[datatype])
    assert result.get_response().outputs[0].datatype == datatype
    _same(result.as_numpy("y"), value, datatype)
    client.close()


CONTENTS = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
            "UINT64": "uint64_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d != "FP16"])
def test_grpc_typed_contents(server: ModelServer, datatype: str) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    value = sample(datatype)
    flat = [v.encode() for v in value.ravel()] if datatype == "BYTES" else value.ravel().tolist()
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="identity", model_version=VERSION[datatype])
        tensor = request.inputs.add(name="x", datatype=datatype, shape=[2, 3])
        getattr(tensor.contents, CONTENTS[datatype]).extend(flat)
        response = stub.ModelInfer(request)
    (out,) = response.outputs
    assert out.datatype == datatype and list(out.shape) == [2, 3]
    assert list(getattr(out.contents, CONTENTS[datatype])) == flat


def _same(got: np.ndarray, want: np.ndarray, datatype: str) -> None:
    assert got.shape == want.shape
    if datatype == "BYTES":
        assert [x.decode() if isinstance(x, bytes) else x for x in got.ravel()] == want.ravel().tolist()
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_v1_b64_values(server: ModelServer) -> None:
    import base64

    rows = [["a", "héllo", "c"], ["d", "e", "f"]]
    instances = [[{"b64": base64.b64encode(v.encode()).decode()} for v in row] for row in rows]
    r = server.client.post(f"/v1/models/identity/versions/{VERSION['BYTES']}:predict", json={"instances": instances})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": rows}
    r = server.client.post(f"/v1/models/identity/versions/{VERSION['FP32']}:predict",
                           json={"inputs": [[1.5, 2, 3]]})
    assert r.json() == {"outputs": [[1.5, 2.0, 3.0]]}
