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
from typing import Any, NamedTuple

import numpy as np
from google.protobuf.message import DecodeError, Message

from trimaran.serving import codec, infer_wire
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


def _tensor(name: str, datatype: str, shape: list[int], expected: dict[str, str] | None) -> tuple[np.dtype, tuple]:
    dtype = codec.numpy_dtype(datatype, name)
    codec.check_datatype(name, datatype, expected)
    return dtype, codec.check_shape(shape, name)


def _sized(name: str, array: np.ndarray, shape: tuple) -> np.ndarray:
    if array.size != math.prod(shape):
        raise InvalidInput(f"input {name!r}: shape {list(shape)} needs {math.prod(shape)} elements, "
                           f"contents have {array.size}")
    return array.reshape(shape)


def _check_counts(inputs: int, raw: int) -> None:
    if raw and raw != inputs:
        raise InvalidInput(f"raw_input_contents has {raw} entries for {inputs} inputs")
    if not inputs:
        raise InvalidInput("the request has no inputs")


def decode_request(request: pb.ModelInferRequest, expected: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Named arrays from a ModelInferRequest (raw or typed contents); ``expected`` as for ``codec.decode_v2``."""
    raw = request.raw_input_contents
    _check_counts(len(request.inputs), len(raw))
    inputs: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(request.inputs):
        name = tensor.name
        dtype, shape = _tensor(name, tensor.datatype, list(tensor.shape), expected)
        if raw:
            inputs[name] = codec.raw_to_array(raw[index], dtype, shape, name)
            continue
        field = _CONTENTS_FIELD.get(tensor.datatype)
        if field is None:
            raise InvalidInput(f"input {name!r}: {tensor.datatype} needs raw_input_contents")
        array = None
        if field in ("fp32_contents", "fp64_contents"):
            array = infer_wire.packed_floats(tensor.contents.SerializeToString())
            if array is not None and array.dtype.itemsize != dtype.itemsize:
                array = None  # the other float field: read as protobuf does (this one's values are empty)
        if array is None:
            values = getattr(tensor.contents, field)
            array = np.array(values, dtype=object) if dtype.kind == "O" else np.asarray(values, dtype=dtype)
        inputs[name] = _sized(name, array, shape)
    return inputs


def _decode_read(request: infer_wire.InferRequest, expected: dict[str, str] | None) -> dict[str, np.ndarray] | None:
    """``decode_request`` for a request read by :mod:`.infer_wire`; None when its contents need protobuf's
    reading (typed contents other than the tensor's own packed float field)."""
    raw = request.raw
    _check_counts(len(request.inputs), len(raw))
    inputs: dict[str, np.ndarray] = {}
    for index, (name, datatype, shape, values) in enumerate(request.inputs):
        if not raw and (values is None or datatype not in ("FP32", "FP64")
                        or values.dtype.itemsize != (4 if datatype == "FP32" else 8)):
            return None
        dtype, checked = _tensor(name, datatype, shape, expected)
        if raw:
            inputs[name] = codec.raw_to_array(raw[index], dtype, checked, name)
        else:
            inputs[name] = _sized(name, values, checked)
    return inputs


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
        self.reader = infer_wire.RequestReader()

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
        a custom model) and owns the model handle from then on. The request is read by :mod:`.infer_wire`
        when it can be, else by protobuf."""
        request: Any = self.reader.read(data)
        if request is None:
            request = _parse(pb.ModelInferRequest, data)
            wanted = [o.name for o in request.outputs] or None
            call = _Call(request.model_name, request.model_version, request.id, bool(request.raw_input_contents))
        else:
            wanted = request.outputs or None
            call = _Call(request.model_name, request.model_version, request.id, bool(request.raw))
        name = call.model_name
        label = name if name in self.plane.models else ""
        self.metrics.request_started(label)
        started = time.perf_counter()
        version = call.model_version
        handle = None
        try:
            handle = self.plane.repository(name).get(call.model_version or None)
            version = handle.version
            model = handle.model
            expected = {spec.name: spec.datatype for spec in model.inputs}
            inputs = None
            if isinstance(request, infer_wire.InferRequest):
                if not model.payload_level:
                    inputs = _decode_read(request, expected)
                if inputs is None:  # protobuf's reading: for a custom model's parameters, or unusual contents
                    request = _parse(pb.ModelInferRequest, data)
            if inputs is None:
                inputs = decode_request(request, expected)
            if model.payload_level:
                outputs: Awaitable[dict[str, np.ndarray]] = self._payload(handle, request, inputs, wanted)
            else:
                result = self.plane.predict(handle, inputs, wanted, None)
                if not isinstance(result, asyncio.Future):
                    response = _response(handle, call, select_outputs(result, wanted))
                    self._finished(label, version, "OK", started)
                    return response
                outputs = _selected(result, wanted)
            later, handle = self._infer_later(handle, call, label, started, outputs), None
            return later
        except Exception as exc:
            error = as_serving_error(exc)
            self._finished(label, version, error.grpc_code, started)
            raise _status(error) from None
        finally:
            if handle is not None:
                handle.release()

    async def _infer_later(self, handle: Any, call: _Call, label: str, started: float,
                           outputs: Awaitable[dict[str, np.ndarray]]) -> bytes:
        code = "CANCELLED"  # what is counted when the call ends before an answer (deadline, client reset)
        try:
            response = _response(handle, call, await outputs)
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


class _Call(NamedTuple):
    """What answering a call needs from its request, however the request was read."""

    model_name: str
    model_version: str
    id: str
    raw: bool  # the request's tensors were raw, so the response's are too


def _response(handle: Any, call: _Call, outputs: dict[str, np.ndarray]) -> bytes:
    tensors = []
    for name, value in outputs.items():
        array = np.asarray(value)
        datatype = codec.datatype_of(array)
        raw = codec.array_to_raw(array) if call.raw or datatype not in _CONTENTS_FIELD else None
        tensors.append((name, datatype, array, raw))
    written = infer_wire.write_response(handle.model.name, handle.version, call.id, tensors)
    if written is not None:
        return written
    response = pb.ModelInferResponse(model_name=handle.model.name, model_version=handle.version, id=call.id)
    encode_response(response, outputs, raw=call.raw)
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
