"""The V2 gRPC front end: ``inference.GRPCInferenceService`` on our own HTTP/2 server (:mod:`.http2`, hyper-h2),
in each worker's event loop.

Every worker listens on the same port (SO_REUSEPORT), beside its HTTP server, so gRPC requests reach the same
in-process model copy without IPC; a call whose model predicts inline is answered in the read that completed it.
Tensors arrive as ``raw_input_contents`` (what tritonclient sends; required for FP16) or typed ``contents``; the
response uses the same form as the request. Errors: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError, Message

from trimaran.serving import codec
from trimaran.serving.dataplane import DataPlane, as_serving_error, select_outputs
from trimaran.serving.errors import InvalidInput, ServingError
from trimaran.serving.http2 import GrpcError, GrpcServer, Method
from trimaran.serving.metrics import ServerMetrics
from trimaran.serving.proto import grpc_predict_v2_pb2 as pb

PROTOCOL = "grpc-v2"
SERVICE = "inference.GRPCInferenceService"
MAX_MESSAGE = 64 * 1024 * 1024

# The typed-contents field of each datatype (FP16 has none: raw contents only).
_CONTENTS_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
                   "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                   "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
                   "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def decode_request(request: pb.ModelInferRequest, expected: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Named arrays from a ModelInferRequest (raw or typed contents); ``expected`` as for ``codec.decode_v2``."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidInput(f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs")
    if not request.inputs:
        raise InvalidInput("the request has no inputs")
    inputs: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(request.inputs):
        name = tensor.name
        dtype = codec.numpy_dtype(tensor.datatype, name)
        codec.check_datatype(name, tensor.datatype, expected)
        shape = codec.check_shape(list(tensor.shape), name)
        if raw:
            inputs[name] = codec.raw_to_array(raw[index], dtype, shape, name)
            continue
        field = _CONTENTS_FIELD.get(tensor.datatype)
        if field is None:
            raise InvalidInput(f"input {name!r}: {tensor.datatype} needs raw_input_contents")
        array = _packed_floats(tensor.contents, field, dtype) if field in _PACKED_TAGS else None
        if array is None:
            values = getattr(tensor.contents, field)
            array = np.array(values, dtype=object) if dtype.kind == "O" else np.asarray(values, dtype=dtype)
        if array.size != math.prod(shape):
            raise InvalidInput(f"input {name!r}: shape {list(shape)} needs {math.prod(shape)} elements, "
                               f"contents have {array.size}")
        inputs[name] = array.reshape(shape)
    return inputs


# The wire tag of a packed fp32/fp64 field of InferTensorContents (field number << 3 | length-delimited).
_PACKED_TAGS = {"fp32_contents": (6 << 3) | 2, "fp64_contents": (7 << 3) | 2}


def _packed_floats(contents: pb.InferTensorContents, field: str, dtype: np.dtype) -> np.ndarray | None:
    """The values of a packed float field read straight from its wire bytes (little-endian IEEE, as numpy
    lays them out): converting a repeated field element by element costs more than the rest of the request.
    None when the message is not that one field alone (the caller then reads it the usual way)."""
    data = contents.SerializeToString()
    if not data:
        return np.empty(0, dtype)
    if data[0] != _PACKED_TAGS[field]:
        return None
    length, shift, pos = 0, 0, 1
    while pos < len(data):
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if pos + length != len(data):
        return None
    return np.frombuffer(bytearray(data), dtype.newbyteorder("<"), offset=pos)  # writable: models may change it


def encode_response(response: pb.ModelInferResponse, outputs: dict[str, np.ndarray], raw: bool) -> None:
    for name, value in outputs.items():
        array = np.asarray(value)
        datatype = codec.datatype_of(array)
        tensor = response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if raw or datatype not in _CONTENTS_FIELD:
            response.raw_output_contents.append(codec.array_to_raw(array))
        elif datatype == "BYTES":
            tensor.contents.bytes_contents.extend(codec.as_bytes(x) for x in array.ravel().tolist())
        else:
            getattr(tensor.contents, _CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())


def _parameter(value: pb.InferParameter) -> Any:
    choice = value.WhichOneof("parameter_choice")
    return getattr(value, choice) if choice else None


class InferenceServicer:
    """The six OIP RPCs over a :class:`DataPlane`, as methods of the request's bytes (see :mod:`.http2`)."""

    def __init__(self, plane: DataPlane, metrics: ServerMetrics) -> None:
        self.plane = plane
        self.metrics = metrics

    def methods(self) -> dict[str, Method]:
        """The served methods by gRPC path."""
        calls = {"ServerLive": self.server_live, "ServerReady": self.server_ready, "ModelReady": self.model_ready,
                 "ServerMetadata": self.server_metadata, "ModelMetadata": self.model_metadata,
                 "ModelInfer": self.model_infer}
        return {f"/{SERVICE}/{name}": call for name, call in calls.items()}

    def server_live(self, data: bytes) -> bytes:
        _parse(pb.ServerLiveRequest, data)
        return _LIVE

    def server_ready(self, data: bytes) -> bytes:
        _parse(pb.ServerReadyRequest, data)
        return pb.ServerReadyResponse(ready=self.plane.ready()).SerializeToString()

    def model_ready(self, data: bytes) -> bytes:
        request = _parse(pb.ModelReadyRequest, data)
        try:
            ready = self.plane.model_ready(request.name, request.version or None)
        except ServingError as exc:
            raise _status(exc) from None
        return pb.ModelReadyResponse(ready=ready).SerializeToString()

    def server_metadata(self, data: bytes) -> bytes:
        _parse(pb.ServerMetadataRequest, data)
        return pb.ServerMetadataResponse(**self.plane.server_metadata()).SerializeToString()

    def model_metadata(self, data: bytes) -> bytes:
        request = _parse(pb.ModelMetadataRequest, data)
        try:
            md = self.plane.model_metadata(request.name, request.version or None)
        except ServingError as exc:
            raise _status(exc) from None
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=md["name"], versions=md["versions"], platform=md.get("platform", ""),
            inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in md.get("inputs", [])],
            outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in md.get("outputs", [])],
        ).SerializeToString()

    def model_infer(self, data: bytes) -> bytes | Awaitable[bytes]:
        """Answered at once when the model predicts inline; otherwise a coroutine that waits for its batch (or
        a custom model) and owns the model handle from then on."""
        request = _parse(pb.ModelInferRequest, data)
        name = request.model_name
        label = name if name in self.plane.models else ""
        self.metrics.request_started(label)
        started = time.perf_counter()
        version = request.model_version or ""
        handle = None
        try:
            handle = self.plane.repository(name).get(request.model_version or None)
            version = handle.version
            model = handle.model
            inputs = decode_request(request, {spec.name: spec.datatype for spec in model.inputs})
            wanted = [o.name for o in request.outputs] or None
            if model.payload_level:
                outputs: Awaitable[dict[str, np.ndarray]] = self._payload(handle, request, inputs, wanted)
            else:
                result = self.plane.predict(handle, inputs, wanted, None)
                if not isinstance(result, asyncio.Future):
                    response = _response(handle, request, select_outputs(result, wanted))
                    self._finished(label, version, "OK", started)
                    return response
                outputs = _selected(result, wanted)
            later, handle = self._infer_later(handle, request, label, started, outputs), None
            return later
        except Exception as exc:
            error = as_serving_error(exc)
            self._finished(label, version, error.grpc_code, started)
            raise _status(error) from None
        finally:
            if handle is not None:
                handle.release()

    async def _infer_later(self, handle: Any, request: pb.ModelInferRequest, label: str, started: float,
                           outputs: Awaitable[dict[str, np.ndarray]]) -> bytes:
        code = "CANCELLED"  # what is counted when the call ends before an answer (deadline, client reset)
        try:
            response = _response(handle, request, await outputs)
            code = "OK"
            return response
        except Exception as exc:
            error = as_serving_error(exc)
            code = error.grpc_code
            raise _status(error) from None
        finally:
            handle.release()
            self._finished(label, handle.version, code, started)

    def _finished(self, label: str, version: str, code: str, started: float) -> None:
        self.metrics.request_finished(label, version, PROTOCOL, code, started)
        self.metrics.request_done(label)

    async def _payload(self, handle: Any, request: pb.ModelInferRequest, inputs: dict[str, np.ndarray],
                       wanted: list[str] | None) -> dict[str, np.ndarray]:
        """A custom model sees the V2 JSON form of the request, as over REST."""
        payload: dict[str, Any] = {
            "id": request.id,
            "parameters": {k: _parameter(v) for k, v in request.parameters.items()},
            "inputs": [{"name": n, "datatype": codec.datatype_of(a), "shape": list(a.shape),
                        "data": [codec.as_text(x) for x in a.ravel().tolist()]} for n, a in inputs.items()]}
        if wanted:
            payload["outputs"] = [{"name": n} for n in wanted]
        result = await self.plane.infer_payload(handle, payload, {})
        if not isinstance(result, dict) or not isinstance(result.get("outputs"), list):
            raise ServingError("the custom model's answer is not a V2 response (no \"outputs\" list)")
        outputs = {}
        for tensor in result["outputs"]:
            name = tensor.get("name", "")
            dtype = codec.numpy_dtype(tensor.get("datatype"), name)
            outputs[name] = codec.json_to_array(tensor.get("data"), dtype, codec.check_shape(tensor.get("shape"), name),
                                                name, tensor.get("datatype"))
        return outputs


async def _selected(result: asyncio.Future, wanted: list[str] | None) -> dict[str, np.ndarray]:
    return select_outputs(await result, wanted)


def _response(handle: Any, request: pb.ModelInferRequest, outputs: dict[str, np.ndarray]) -> bytes:
    response = pb.ModelInferResponse(model_name=handle.model.name, model_version=handle.version, id=request.id)
    encode_response(response, outputs, raw=bool(request.raw_input_contents))
    return response.SerializeToString()


def _parse(message: type[Message], data: bytes) -> Any:
    try:
        return message.FromString(data)
    except DecodeError as exc:
        raise GrpcError("INVALID_ARGUMENT", f"the request is not a {message.DESCRIPTOR.name}: {exc}") from None


def _status(error: ServingError) -> GrpcError:
    return GrpcError(error.grpc_code, str(error))


_LIVE = pb.ServerLiveResponse(live=True).SerializeToString()


async def start_grpc_server(plane: DataPlane, metrics: ServerMetrics, host: str, port: int) -> GrpcServer:
    """A listening server on ``host:port`` (SO_REUSEPORT, so every worker binds the same port)."""
    server = GrpcServer(InferenceServicer(plane, metrics).methods(), MAX_MESSAGE)
    await server.start(host, port)
    return server
