"""The hand-written wire reading and writing of ModelInfer messages agrees with protobuf on every message it takes.

Messages are generated (hypothesis) across what clients send and what they could: raw and typed contents of every
kind, request and tensor parameters, large and negative dimensions, non-ASCII names, and corrupted bytes. Where
`infer_wire` answers, its answer must be protobuf's; where it declines (None), protobuf decides.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trimaran.serving import infer_wire
from trimaran.serving.grpc_service import _CONTENTS_FIELD, encode_response
from trimaran.serving.proto import grpc_predict_v2_pb2 as pb

names = st.text(max_size=12)
dims = st.lists(st.integers(min_value=-3, max_value=300), max_size=3)
float_values = st.lists(st.floats(width=32, allow_nan=False), max_size=40)
int_values = st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=20)


@st.composite
def requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=draw(names), model_version=draw(names), id=draw(names))
    if draw(st.booleans()) and draw(st.booleans()):
        request.parameters["priority"].int64_param = draw(st.integers(0, 10))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        datatype = draw(st.sampled_from(["FP32", "FP64", "INT64", "BYTES"]))
        tensor = request.inputs.add(name=draw(names), datatype=datatype, shape=draw(dims))
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=64)))
            continue
        kind = draw(st.sampled_from(["fp32_contents", "fp64_contents", "int64_contents", "bytes_contents", "none"]))
        if kind in ("fp32_contents", "fp64_contents"):
            getattr(tensor.contents, kind).extend(draw(float_values))
        elif kind == "int64_contents":
            tensor.contents.int64_contents.extend(draw(int_values))
        elif kind == "bytes_contents":
            tensor.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=8), max_size=4)))
        if draw(st.integers(0, 9)) == 0:
            tensor.parameters["binary"].bool_param = True
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(names))
        if draw(st.integers(0, 9)) == 0:
            output.parameters["classification"].int64_param = 3
    return request


def _as_read(request: pb.ModelInferRequest) -> tuple:
    """A protobuf-parsed request in infer_wire's terms (typed contents as the array of its packed float field)."""
    tensors = []
    for tensor in request.inputs:
        values = infer_wire.packed_floats(tensor.contents.SerializeToString())
        tensors.append((tensor.name, tensor.datatype, list(tensor.shape),
                        _bits(values)))
    return (request.model_name, request.model_version, request.id, tensors, [o.name for o in request.outputs],
            list(request.raw_input_contents))


def _bits(values: np.ndarray | None) -> tuple | None:
    """Values compared bit for bit: a NaN (corrupted bytes make them) equals itself."""
    return None if values is None else (values.dtype.str, values.tobytes())


def _read(data: bytes) -> tuple | None:
    read = infer_wire.read_request(data)
    return None if read is None else _read_of(read)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_a_request_reads_as_protobuf_reads_it(request: pb.ModelInferRequest) -> None:
    data = request.SerializeToString()
    read = _read(data)
    parsed = pb.ModelInferRequest.FromString(data)
    has_parameters = bool(parsed.parameters) or any(t.parameters for t in parsed.inputs) or any(
        o.parameters for o in parsed.outputs)
    if has_parameters:
        assert read is None, "parameters are protobuf's to read"
        return
    typed_other = any(t.HasField("contents") and infer_wire.packed_floats(t.contents.SerializeToString()) is None
                      for t in parsed.inputs)
    if typed_other:
        assert read is None
        return
    assert read == _as_read(parsed)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.data())
def test_corrupted_bytes_are_read_as_protobuf_reads_them_or_left_to_it(request: pb.ModelInferRequest,
                                                                        data: st.DataObject) -> None:
    wire = bytearray(request.SerializeToString())
    for _ in range(data.draw(st.integers(1, 3))):
        if not wire:
            break
        at = data.draw(st.integers(0, len(wire) - 1))
        if data.draw(st.booleans()):
            wire[at] = data.draw(st.integers(0, 255))
        else:
            del wire[at:]
    read = _read(bytes(wire))
    try:
        parsed = pb.ModelInferRequest.FromString(bytes(wire))
    except DecodeError:
        assert read is None, "a message protobuf refuses must be left to protobuf"
        return
    if read is not None:
        assert read == _as_read(parsed)


outputs = st.lists(st.tuples(names, st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.int8,
                                                     np.uint8, np.uint64, np.bool_, np.float16, np.object_]),
                             st.lists(st.integers(0, 70), min_size=0, max_size=2)), max_size=3,
                   unique_by=lambda o: o[0])


@settings(max_examples=300, deadline=None)
@given(outputs, names, st.booleans(), st.integers(0, 2**32))
def test_a_response_written_by_hand_parses_as_protobuf_writes_it(tensors: list, request_id: str, raw: bool,
                                                                   seed: int) -> None:
    from trimaran.serving import codec

    rng = np.random.default_rng(seed)
    arrays = {}
    for name, dtype, shape in tensors:
        size = int(np.prod(shape))
        if dtype is np.object_:
            array = np.array([b"ab" * i for i in range(size)], dtype=object).reshape(shape)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            array = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        elif dtype is np.bool_:
            array = rng.integers(0, 2, size=shape).astype(bool)
        else:
            array = rng.standard_normal(shape).astype(dtype)
        arrays[name] = array
    expected = pb.ModelInferResponse(model_name="digits", model_version="3", id=request_id)
    encode_response(expected, arrays, raw)
    written = infer_wire.write_response("digits", "3", request_id, [
        (name, codec.datatype_of(a), a,
         codec.array_to_raw(a) if raw or codec.datatype_of(a) not in _CONTENTS_FIELD else None)
        for name, a in arrays.items()])
    if written is None:
        return  # protobuf writes this one
    assert pb.ModelInferResponse.FromString(written) == expected


def test_the_common_calls_are_read_and_written_by_hand() -> None:
    """What tritonclient sends (raw or typed floats) and answers of a few integers take the fast path."""
    request = pb.ModelInferRequest(model_name="digits", id="7")
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 64]).contents.fp32_contents.extend([0.5] * 64)
    request.outputs.add(name="output-0")
    read = infer_wire.read_request(request.SerializeToString())
    assert read is not None and read.inputs[0].values.shape == (64,) and read.outputs == ["output-0"]
    raw = pb.ModelInferRequest(model_name="digits")
    raw.inputs.add(name="input-0", datatype="FP32", shape=[300, 64])
    raw.raw_input_contents.append(np.zeros((300, 64), np.float32).tobytes())
    assert infer_wire.read_request(raw.SerializeToString()).inputs[0].shape == [300, 64]
    labels = np.arange(32, dtype=np.int64)
    assert infer_wire.write_response("digits", "1", "", [("output-0", "INT64", labels, None)]) is not None


def test_a_tensor_sent_in_two_parts_is_merged_as_protobuf_merges_it() -> None:
    """Protobuf merges a repeated sub-message field seen twice (its packed floats concatenate)."""
    first = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[4])
    first.contents.fp32_contents.extend([1.0, 2.0])
    second = pb.ModelInferRequest.InferInputTensor(shape=[])
    second.contents.fp32_contents.extend([3.0, 4.0])
    tensor = first.SerializeToString() + second.SerializeToString()
    data = bytes([0x2A, len(tensor)]) + tensor
    parsed = pb.ModelInferRequest.FromString(data)
    assert list(parsed.inputs[0].contents.fp32_contents) == [1.0, 2.0, 3.0, 4.0]
    read = _read(data)
    assert read is None or read == _as_read(parsed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(requests(), st.integers(0, 2**32)), min_size=1, max_size=6), st.data())
def test_a_reader_that_remembers_layouts_reads_each_message_as_read_request_does(
        sequence: list, data: st.DataObject) -> None:
    """Each request is sent twice more with other values (as a client does), and the reader reads every one
    of them as a fresh parse would."""
    reader = infer_wire.RequestReader(size=3)
    for request, seed in sequence:
        rng = np.random.default_rng(seed)
        for _ in range(3):
            for index, tensor in enumerate(request.inputs):
                for field in ("fp32_contents", "fp64_contents"):
                    values = getattr(tensor.contents, field)
                    if len(values):
                        values[:] = rng.standard_normal(len(values)).tolist()
                if index < len(request.raw_input_contents):
                    old = request.raw_input_contents[index]
                    request.raw_input_contents[index] = rng.bytes(len(old))
            wire = request.SerializeToString()
            if data.draw(st.booleans()):
                wire = bytes(data.draw(st.lists(st.integers(0, 255), max_size=8))) + wire  # another layout
            fresh, remembered = _read(wire), reader.read(wire)
            assert (None if remembered is None else _read_of(remembered)) == fresh


def _read_of(read: infer_wire.InferRequest) -> tuple:
    tensors = [(t.name, t.datatype, t.shape, _bits(t.values)) for t in read.inputs]
    return (read.model_name, read.model_version, read.id, tensors, read.outputs, read.raw)


def test_nan_and_infinite_values_are_read_bit_for_bit() -> None:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    tensor.contents.fp32_contents.extend([float("nan"), float("inf"), -0.0])
    data = request.SerializeToString()
    assert _read(data) == _as_read(pb.ModelInferRequest.FromString(data))
    assert np.signbit(infer_wire.read_request(data).inputs[0].values[2])
