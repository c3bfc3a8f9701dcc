"""V1 and V2 REST against a real server process: answers, every error case, HTTP behaviour, real clients."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.serving.conftest import ModelServer


@pytest.fixture(scope="module")
def server(digits_dir, module_tmp) -> Iterator[ModelServer]:
    server = ModelServer(digits_dir, module_tmp, max_body_bytes=200_000).wait_ready()
    yield server
    server.stop()


def v2_body(rows: np.ndarray, **extra: object) -> dict:
    return {"inputs": [{"name": "input-0", "shape": list(rows.shape), "datatype": "FP32",
                        "data": rows.ravel().tolist()}], **extra}


def test_health_and_metadata(server: ModelServer) -> None:
    c = server.client
    assert c.get("/").json() == {"status": "alive"}
    assert c.get("/v2/health/live").json() == {"live": True}
    assert c.get("/v2/health/ready").json() == {"ready": True}
    assert c.get("/v2").json()["name"] == "trimaran"
    assert c.get("/v2/models").json() == {"models": ["digits"]}
    assert c.get("/v1/models").json() == {"models": ["digits"]}
    meta = c.get("/v2/models/digits").json()
    assert meta["name"] == "digits" and meta["versions"] == ["1"] and meta["platform"] == "sklearn"
    assert meta["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}]
    assert c.get("/v2/models/digits/versions/1").json()["name"] == "digits"
    assert c.get("/v2/models/digits/ready").json() == {"name": "digits", "ready": True}
    assert c.get("/v2/models/digits/versions/1/ready").status_code == 200


def test_v1_status_and_metadata(server: ModelServer) -> None:
    status = server.client.get("/v1/models/digits").json()
    assert status["model_version_status"] == [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]
    assert status["ready"] is True and status["name"] == "digits"
    assert server.client.get("/v1/models/digits/versions/1").status_code == 200
    meta = server.client.get("/v1/models/digits/metadata").json()
    assert meta["model_spec"] == {"name": "digits", "signature_name": "", "version": "1"}
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["input-0"]["dtype"] == "DT_FLOAT"
    assert sig["inputs"]["input-0"]["tensor_shape"] == {"dim": [{"size": "-1"}, {"size": "64"}]}


def test_v1_predict_rows_and_columns(server: ModelServer, digits) -> None:
    x, model = digits
    expected = model.predict(x[:5]).tolist()
    rows = server.client.post("/v1/models/digits:predict", json={"instances": x[:5].tolist()})
    assert rows.status_code == 200 and rows.json() == {"predictions": expected}
    cols = server.client.post("/v1/models/digits/versions/1:predict",
                              json={"inputs": x[:5].tolist(), "signature_name": "serving_default"})
    assert cols.json() == {"outputs": expected}
    named = server.client.post("/v1/models/digits:predict",
                               json={"instances": [{"input-0": r} for r in x[:2].tolist()]})
    assert named.json() == {"predictions": expected[:2]}


def test_v2_infer(server: ModelServer, digits) -> None:
    x, model = digits
    r = server.client.post("/v2/models/digits/infer", json=v2_body(
        x[:3], id="abc", parameters={"k": 1}, outputs=[{"name": "output-0"}, {"name": "probabilities"}]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_name"] == "digits" and body["model_version"] == "1" and body["id"] == "abc"
    outputs = {o["name"]: o for o in body["outputs"]}
    assert outputs["output-0"]["data"] == model.predict(x[:3]).tolist()
    assert outputs["output-0"]["shape"] == [3] and outputs["output-0"]["datatype"] == "INT64"
    probs = np.array(outputs["probabilities"]["data"]).reshape(outputs["probabilities"]["shape"])
    np.testing.assert_allclose(probs, model.predict_proba(x[:3].astype(np.float32)), rtol=1e-6)
    # Without requested outputs, the prediction only (probabilities cost as much again, and MLServer and
    # KServe answer so too); nested data is accepted as well as flat.
    only = server.client.post("/v2/models/digits/versions/1/infer", json={
        "inputs": [{"name": "input-0", "shape": [2, 64], "datatype": "FP32", "data": x[:2].tolist()}]}).json()
    assert [o["name"] for o in only["outputs"]] == ["output-0"] and "id" not in only


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/v2/models/digits/infer", b"{not json", 400, "malformed JSON"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP32",
                                              "data": [1.0] * 63}]}, 400, "needs 64 elements, data has 63"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FLOAT",
                                              "data": [1.0] * 64}]}, 400, "FLOAT"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "INT32",
                                              "data": ["a"] * 64}]}, 400, "INT32"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP16",
                                              "data": [1.0] * 64}]}, 400, "binary"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                              "data": [1.0] * 64}]}, 400, "'input-0'"),
    ("/v2/models/digits/infer", {"inputs": []}, 400, "inputs"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP32",
                                              "data": [1.0] * 64}], "outputs": [{"name": "nope"}]}, 400, "'nope'"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input-0", "shape": [1, 32], "datatype": "FP32",
                                              "data": [1.0] * 32}]}, 400, "shape"),
    ("/v2/models/other/infer", {"inputs": []}, 404, "'other'"),
    ("/v2/models/digits/versions/7/infer", {"inputs": []}, 404, "version '7'"),
    ("/v1/models/digits:predict", {"instances": 3}, 400, "list"),
    ("/v1/models/digits:predict", {"instances": [[1, 2], [3]]}, 400, "input-0"),
    ("/v1/models/digits:predict", {"rows": []}, 400, "instances"),
    ("/v1/models/other:predict", {"instances": []}, 404, "'other'"),
])
def test_errors(server: ModelServer, path: str, body: object, status: int, words: str) -> None:
    if isinstance(body, bytes):
        r = server.client.post(path, content=body)
    else:
        r = server.client.post(path, json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_routing_errors(server: ModelServer) -> None:
    c = server.client
    assert c.get("/v2/models/other").status_code == 404
    assert c.get("/v2/models/other/ready").status_code == 404
    assert c.get("/v1/models/other").status_code == 404
    assert c.get("/v2/models/digits/versions/9").status_code == 404
    assert c.get("/nowhere").status_code == 404
    assert c.get("/v2/models/digits/infer").status_code == 405
    assert c.post("/v1/models/digits:classify", json={}).status_code == 501


def _raw_exchange(server: ModelServer, payload: bytes, read_until: int = 1) -> bytes:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(payload)
        data = b""
        while data.count(b"HTTP/1.1 ") < read_until or not _complete(data, read_until):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def _complete(data: bytes, responses: int) -> bool:
    """Whether ``data`` holds ``responses`` whole responses (each with a content-length)."""
    rest = data
    for _ in range(responses):
        head, sep, tail = rest.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        if len(tail) < length:
            return False
        rest = tail[length:]
    return True


def test_oversized_body_refused_from_header(server: ModelServer) -> None:
    # Only the headers are sent: the 413 must come without the body.
    reply = _raw_exchange(server, b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
                                  b"Content-Length: 5000000\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413"), reply
    assert b"exceeds the limit" in reply
    # httpx sending a real oversized body gets the same answer.
    r = server.client.post("/v2/models/digits/infer", content=b"x" * 300_000)
    assert r.status_code == 413


def test_chunked_bodies(server: ModelServer, digits) -> None:
    x, model = digits
    body = httpx.Request("POST", "/", json=v2_body(x[:1])).read()
    half = len(body) // 2
    chunked = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n" % half + body[:half] + b"\r\n" + b"%x\r\n" % (len(body) - half) + body[half:]
               + b"\r\n0\r\n\r\n")
    reply = _raw_exchange(server, chunked)
    assert reply.startswith(b"HTTP/1.1 200"), reply
    big = b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + (
        b"%x\r\n" % 150_000 + b"y" * 150_000 + b"\r\n") * 2 + b"0\r\n\r\n"
    assert _raw_exchange(server, big).startswith(b"HTTP/1.1 413")


def test_keep_alive_and_pipelining(server: ModelServer, digits) -> None:
    x, model = digits
    requests = b""
    for i in range(3):
        body = httpx.Request("POST", "/", json=v2_body(x[i:i + 1], id=str(i))).read()
        requests += (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body)) + body
    requests += b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    reply = _raw_exchange(server, requests, read_until=4)
    assert reply.count(b"HTTP/1.1 200 OK") == 4
    ids = [reply.index(b'"id":"%d"' % i) for i in range(3)]
    assert ids == sorted(ids)  # answered in request order
    assert reply.rstrip().endswith(b'{"live":true}')


def test_expect_continue(server: ModelServer, digits) -> None:
    x, _ = digits
    body = httpx.Request("POST", "/", json=v2_body(x[:1])).read()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")


def test_tritonclient_http(server: ModelServer, digits) -> None:
    import tritonclient.http as triton

    x, model = digits
    client = triton.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("digits")
    assert client.get_model_metadata("digits")["platform"] == "sklearn"
    for binary in (True, False):
        inp = triton.InferInput("input-0", [4, 64], "FP32")
        inp.set_data_from_numpy(x[:4].astype(np.float32), binary_data=binary)
        out = triton.InferRequestedOutput("output-0", binary_data=binary)
        result = client.infer("digits", [inp], outputs=[out], request_id="r1")
        assert result.as_numpy("output-0").tolist() == model.predict(x[:4]).tolist()
        assert result.get_response()["id"] == "r1"
    client.close()


def test_compressed_request_bodies(server: ModelServer, digits) -> None:
    import gzip
    import zlib

    import tritonclient.http as triton

    x, model = digits
    client = triton.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    for algorithm in ("gzip", "deflate"):
        inp = triton.InferInput("input-0", [2, 64], "FP32")
        inp.set_data_from_numpy(x[:2].astype(np.float32))
        result = client.infer("digits", [inp], request_compression_algorithm=algorithm)
        assert result.as_numpy("output-0").tolist() == model.predict(x[:2]).tolist()
    client.close()
    headers = {"content-encoding": "gzip"}
    bomb = gzip.compress(b" " * 300_000)  # well under the limit compressed, over it inflated
    assert server.client.post("/v2/models/digits/infer", content=bomb, headers=headers).status_code == 413
    assert server.client.post("/v2/models/digits/infer", content=b"plain", headers=headers).status_code == 400
    r = server.client.post("/v1/models/digits:predict", content=zlib.compress(b"{}"),
                           headers={"content-encoding": "br"})
    assert r.status_code == 415 and "gzip" in r.json()["error"]


def test_tritonclient_grpc(server: ModelServer, digits) -> None:
    import tritonclient.grpc as triton
    from tritonclient.utils import InferenceServerException

    x, model = digits
    client = triton.InferenceServerClient(server.grpc_url)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("digits")
    assert client.is_model_ready("digits", "1")
    assert client.get_server_metadata().name == "trimaran"
    meta = client.get_model_metadata("digits")
    assert meta.platform == "sklearn" and list(meta.inputs[0].shape) == [-1, 64]
    inp = triton.InferInput("input-0", [6, 64], "FP32")
    inp.set_data_from_numpy(x[:6].astype(np.float32))
    result = client.infer("digits", [inp], request_id="g1", outputs=[
        triton.InferRequestedOutput("output-0"), triton.InferRequestedOutput("probabilities")])
    assert result.as_numpy("output-0").tolist() == model.predict(x[:6]).tolist()
    assert result.as_numpy("probabilities").shape == (6, 10)
    assert result.get_response().id == "g1"
    with pytest.raises(InferenceServerException, match="NOT_FOUND|not found"):
        client.infer("nope", [inp])
    with pytest.raises(InferenceServerException, match="version"):
        client.get_model_metadata("digits", "5")
    bad = triton.InferInput("pixels", [6, 64], "FP32")
    bad.set_data_from_numpy(x[:6].astype(np.float32))
    with pytest.raises(InferenceServerException, match="input-0") as info:
        client.infer("digits", [bad])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    client.close()


def test_grpc_tensors_larger_than_a_flow_control_window(server: ModelServer, digits) -> None:
    import tritonclient.grpc as triton

    x, model = digits
    rows = np.resize(x, (1200, 64)).astype(np.float32)  # 300 KiB in, 96 KiB of FP64 probabilities out
    client = triton.InferenceServerClient(server.grpc_url)
    inp = triton.InferInput("input-0", list(rows.shape), "FP32")
    inp.set_data_from_numpy(rows)
    result = client.infer("digits", [inp], outputs=[
        triton.InferRequestedOutput("output-0"), triton.InferRequestedOutput("probabilities")])
    assert result.as_numpy("output-0").tolist() == model.predict(rows).tolist()
    assert result.as_numpy("probabilities").shape == (1200, 10)
    client.close()


def test_grpc_typed_contents(server: ModelServer, digits) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    x, model = digits
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="digits", id="t")
        tensor = request.inputs.add(name="input-0", datatype="FP32", shape=[2, 64])
        tensor.contents.fp32_contents.extend(x[:2].ravel().tolist())
        request.outputs.add(name="output-0")
        response = stub.ModelInfer(request)
        assert not response.raw_output_contents
        assert list(response.outputs[0].contents.int64_contents) == model.predict(x[:2]).tolist()
        tensor.contents.fp32_contents.append(1.0)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelReady(service_pb2.ModelReadyRequest(name="nope"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_bodies_the_model_cannot_take_are_4xx_naming_what_is_wrong(server: ModelServer, digits_dir,
                                                                   tmp_path) -> None:
    """NaN and infinity (JSON literals TF Serving accepts) that the model refuses, nesting deeper than the
    decoder follows, a body that says it is not JSON, a BYTES tensor for an FP32 input: 4xx, never 500."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    zeros = ",0" * 63
    v2_nan = f'{{"inputs":[{{"name":"input-0","shape":[1,64],"datatype":"FP32","data":[NaN{zeros}]}}]}}'
    cases = [
        ("/v2/models/digits/infer", v2_nan, "application/json", 400, "input 'input-0' holds NaN or infinity"),
        ("/v1/models/digits:predict", f'{{"instances":[[NaN{zeros}]]}}', "application/json", 400,
         "input 'input-0' holds NaN or infinity"),
        ("/v1/models/digits:predict", f'{{"instances":[[-Infinity{zeros}]]}}', "application/json", 400,
         "NaN or infinity"),
        ("/v1/models/digits:predict", '{"instances":' + "[" * 1020 + '{"b64":"AA=="}' + "]" * 1020 + "}",
         "application/json", 400, "nested too deeply"),
        ("/v2/models/digits/infer", json_v2(), "text/plain", 415, "Content-Type 'text/plain'"),
        ("/v1/models/digits:predict", '{"instances":[[0' + zeros + "]]}", "text/plain", 415, "application/json"),
        ("/v2/models/digits/infer", '{"inputs":[{"name":"input-0","shape":[1,64],"datatype":"BYTES","data":["x"]}]}',
         "application/json", 400, "input 'input-0' has datatype BYTES, the model expects FP32"),
    ]
    for depth in (500, 90_000):  # (the module's server takes bodies up to 200 kB)
        cases += [("/v2/models/digits/infer", "[" * depth + "]" * depth, "application/json", 400, ""),
                  ("/v1/models/digits:predict", '{"instances":' + "[" * depth + "]" * depth + "}",
                   "application/json", 400, "")]
    for path, body, media, status, words in cases:
        r = server.client.post(path, content=body, headers={"content-type": media})
        assert r.status_code == status and words in r.json()["error"], (path, body[:80], r.text)
    # curl -d's default type and no type at all are still JSON.
    for media in ("application/x-www-form-urlencoded", None):
        r = server.client.post("/v2/models/digits/infer", content=json_v2(),
                               headers={"content-type": media} if media else {})
        assert r.status_code == 200, r.text
    with grpc.insecure_channel(server.grpc_url) as channel:
        request = service_pb2.ModelInferRequest(model_name="digits")
        request.inputs.add(name="input-0", datatype="BYTES", shape=[1, 64]).contents.bytes_contents.append(b"x")
        with pytest.raises(grpc.RpcError) as info:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "has datatype BYTES, the model expects FP32" in info.value.details()
    # Batched, the model runs on a thread and fails later: the same answer.
    batched = ModelServer(digits_dir, tmp_path, grpc=False, max_batch_size=8).wait_ready()
    try:
        r = batched.client.post("/v2/models/digits/infer", content=v2_nan, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "holds NaN or infinity" in r.json()["error"], r.text
    finally:
        batched.stop()


def json_v2() -> str:
    return '{"inputs":[{"name":"input-0","shape":[1,64],"datatype":"FP32","data":[0' + ",0" * 63 + "]}]}"
