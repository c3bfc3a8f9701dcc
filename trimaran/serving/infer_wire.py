"""ModelInferRequest and ModelInferResponse read and written straight from and to protobuf's wire format.

These two messages are all a gRPC inference call carries. Going through protobuf's message objects costs more
than the rest of a small call's framing together: every field read builds a Python object, a response is built
field by field and serialized again. So the common shape of a call is handled here, in plain byte operations:

- a request with model name, version, id, inputs whose contents are raw (``raw_input_contents``) or one packed
  float field (what tritonclient and the other V2 clients send), and requested outputs by name;
- a response whose tensors go out as raw contents, packed floats, or a few integers.

Anything else (parameters, other typed contents, unknown fields, a malformed message) makes :func:`read_request`
answer None and :func:`write_response` not apply, and the caller uses the protobuf classes, which define the
behaviour: this module must give the same answer as protobuf for every message it accepts (the tests compare).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from trimaran._varint import read_varint

__all__ = ["InferRequest", "InputTensor", "RequestReader", "packed_floats", "read_request", "write_response"]

# Wire types (the low three bits of a field's key).
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# InferTensorContents' packed float fields: fp32_contents = 6, fp64_contents = 7.
_PACKED_FLOATS = {(6 << 3) | _LEN: np.dtype("<f4"), (7 << 3) | _LEN: np.dtype("<f8")}
# The typed-contents field numbers a response writes itself: floats as fixed-width little-endian, integers as
# varints (signed ones sign-extended to 64 bits, as protobuf writes int32 and int64).
_FLOAT_FIELDS = {"FP32": (6, np.dtype("<f4")), "FP64": (7, np.dtype("<f8"))}
_INT_FIELDS = {"INT8": 2, "INT16": 2, "INT32": 2, "INT64": 3, "UINT8": 4, "UINT16": 4, "UINT32": 4, "UINT64": 5,
               "BOOL": 1}
# Integer outputs longer than this go through protobuf, whose varint packing is in C.
_MAX_VARINT_VALUES = 64


class InputTensor(NamedTuple):
    name: str
    datatype: str
    shape: list[int]
    # The packed float contents as an array, or None when the tensor's values are in raw_input_contents (or
    # it has no contents).
    values: np.ndarray | None


class InferRequest(NamedTuple):
    model_name: str
    model_version: str
    id: str
    inputs: list[InputTensor]
    outputs: list[str]  # requested output names, in order
    raw: list[bytes]  # raw_input_contents


class _Unsupported(Exception):
    """The message is outside what this module reads: protobuf must parse it."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos)
    except (IndexError, ValueError):
        raise _Unsupported from None


def _length_delimited(data: bytes, pos: int) -> tuple[int, int]:
    """(start, end) of the field that starts at ``pos`` with its length."""
    byte = data[pos] if pos < len(data) else 0x80
    if byte < 0x80:
        start, end = pos + 1, pos + 1 + byte
    else:
        length, start = _varint(data, pos)
        end = start + length
    if end > len(data):
        raise _Unsupported
    return start, end


def _text(data: bytes, start: int, end: int) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError:
        raise _Unsupported from None  # protobuf refuses invalid UTF-8 in a string field, with its own message


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shape(data: bytes, start: int, end: int) -> list[int]:
    """A packed repeated int64."""
    if all(b < 0x80 for b in data[start:end]):
        return list(data[start:end])  # every dimension under 128: one byte each, the usual case
    shape = []
    pos = start
    while pos < end:
        value, pos = _varint(data, pos)
        shape.append(_int64(value))
    if pos != end:
        raise _Unsupported
    return shape


class _Span(NamedTuple):
    """Where a tensor's values lie in the message: the bytes of one input's packed floats, or of one
    raw_input_contents entry."""

    start: int
    end: int
    index: int  # the input's (or the raw entry's) position
    dtype: np.dtype | None  # packed floats' dtype; None for raw bytes


def _input(data: bytes, pos: int, end: int, index: int, spans: list[_Span]) -> InputTensor:
    name = datatype = ""
    shape: list[int] = []
    values = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A or key == 0x12 or key == 0x1A or key == 0x2A:  # name, datatype, packed shape, contents
            start, pos = _length_delimited(data, pos)
            if key == 0x0A:
                name = _text(data, start, pos)
            elif key == 0x12:
                datatype = _text(data, start, pos)
            elif key == 0x1A:
                shape += _shape(data, start, pos)
            elif values is None:
                span = _packed_span(data, start, pos, index)
                if span is None:
                    raise _Unsupported
                spans.append(span)
                values = np.frombuffer(bytearray(data[span.start:span.end]), span.dtype)
            else:
                raise _Unsupported  # a second contents field: protobuf merges the two
        elif key == 0x18:  # one unpacked shape dimension (proto3 parsers accept both forms)
            value, pos = _varint(data, pos)
            shape.append(_int64(value))
        else:
            raise _Unsupported
    if pos != end:
        raise _Unsupported
    return InputTensor(name, datatype, shape, values)


def _packed_span(data: bytes, start: int, end: int, index: int) -> _Span | None:
    """The values of the InferTensorContents in ``data[start:end]`` when it is one packed fp32 or fp64 field
    alone."""
    if start == end:
        return None
    dtype = _PACKED_FLOATS.get(data[start])
    if dtype is None:
        return None
    try:
        first, last = _length_delimited(data, start + 1)
    except _Unsupported:
        return None
    if last != end or (last - first) % dtype.itemsize:
        return None
    return _Span(first, last, index, dtype)


def packed_floats(contents: bytes) -> np.ndarray | None:
    """The values of a serialized InferTensorContents that is one packed fp32 or fp64 field alone, as a writable
    array (models may change their inputs); None for any other contents."""
    span = _packed_span(contents, 0, len(contents), 0)
    return None if span is None else np.frombuffer(bytearray(contents[span.start:span.end]), span.dtype)


def _requested(data: bytes, pos: int, end: int) -> str:
    if pos == end:
        return ""
    if data[pos] != 0x0A:
        raise _Unsupported
    start, stop = _length_delimited(data, pos + 1)
    if stop != end:
        raise _Unsupported
    return _text(data, start, stop)


def _read(data: bytes) -> tuple[InferRequest, list[_Span]] | None:
    model_name = model_version = request_id = ""
    inputs: list[InputTensor] = []
    outputs: list[str] = []
    raw: list[bytes] = []
    spans: list[_Span] = []
    pos, size = 0, len(data)
    try:
        while pos < size:
            key = data[pos]
            pos += 1
            if key & 7 != _LEN or not 0x0A <= key <= 0x3A or key == 0x22:  # not fields 1-7, or parameters (4)
                return None
            start, pos = _length_delimited(data, pos)
            if key == 0x2A:
                inputs.append(_input(data, start, pos, len(inputs), spans))
            elif key == 0x3A:
                spans.append(_Span(start, pos, len(raw), None))
                raw.append(data[start:pos])
            elif key == 0x0A:
                model_name = _text(data, start, pos)
            elif key == 0x12:
                model_version = _text(data, start, pos)
            elif key == 0x1A:
                request_id = _text(data, start, pos)
            else:
                outputs.append(_requested(data, start, pos))
    except _Unsupported:
        return None
    return InferRequest(model_name, model_version, request_id, inputs, outputs, raw), spans


def read_request(data: bytes) -> InferRequest | None:
    """The request in ``data``, or None when it uses something beyond this module's subset (see the module's
    docstring) or is malformed: then protobuf parses it, and refuses it with its own message."""
    read = _read(data)
    return None if read is None else read[0]


class _Layout(NamedTuple):
    length: int
    prefix: bytes
    suffix: bytes
    span: _Span
    request: InferRequest


class RequestReader:
    """:func:`read_request` that remembers the layouts of the last few requests it read.

    A client sends the same request call after call, with other values: every byte of the message but those of
    the tensor's values is the same. So a message as long as a remembered one, equal to it before and after its
    values, is that request with these values, and is not parsed again. Only layouts with one span of values
    (one input) are remembered; a request with a fresh ``id`` each call never repeats, and is parsed each time.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._layouts: list[_Layout] = []

    def read(self, data: bytes) -> InferRequest | None:
        length = len(data)
        for layout in self._layouts:
            if length == layout.length and data.startswith(layout.prefix) and data.endswith(layout.suffix):
                return _filled(layout, data)
        read = _read(data)
        if read is None:
            return None
        request, spans = read
        if len(spans) == 1:
            span = spans[0]
            if len(self._layouts) >= self.size:
                del self._layouts[0]
            self._layouts.append(_Layout(length, data[:span.start], data[span.end:], span, request))
        return request


def _filled(layout: _Layout, data: bytes) -> InferRequest:
    # Built field by field: NamedTuple._replace costs more than the rest of a remembered read.
    span, (model_name, model_version, request_id, inputs, outputs, raw) = layout.span, layout.request
    payload = data[span.start:span.end]
    if span.dtype is None:
        raw = list(raw)
        raw[span.index] = payload
    else:
        inputs = list(inputs)
        name, datatype, shape, _ = inputs[span.index]
        inputs[span.index] = InputTensor(name, datatype, shape, np.frombuffer(bytearray(payload), span.dtype))
    return InferRequest(model_name, model_version, request_id, inputs, outputs, raw)


# Keys of length-delimited fields 0-7, and the one-byte lengths: built once, as the response is written per call.
_KEYS = [bytes([(number << 3) | _LEN]) for number in range(8)]
_SHORT_LENGTHS = [bytes([size]) for size in range(0x80)]


def _field(number: int, payload: bytes) -> bytes:
    size = len(payload)
    if size < 0x80:
        return _KEYS[number] + _SHORT_LENGTHS[size] + payload
    length = bytearray()
    while size >= 0x80:
        length.append((size & 0x7F) | 0x80)
        size >>= 7
    length.append(size)
    return _KEYS[number] + length + payload


def _varints(values: list[int]) -> bytes:
    out = bytearray()
    for value in values:
        value &= (1 << 64) - 1  # negative numbers: their 64-bit two's complement, as protobuf writes them
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def _typed_contents(datatype: str, array: np.ndarray) -> bytes | None:
    """An InferTensorContents holding ``array`` in the typed field of ``datatype``; None when protobuf should
    write it (BYTES, FP16 and the like, many integers, or no values at all)."""
    if not array.size:
        return None
    floats = _FLOAT_FIELDS.get(datatype)
    if floats is not None:
        number, dtype = floats
        return _field(number, np.ascontiguousarray(array, dtype).tobytes())
    number = _INT_FIELDS.get(datatype)
    if number is None or array.size > _MAX_VARINT_VALUES:
        return None
    return _field(number, _varints(array.ravel().tolist()))


@lru_cache(maxsize=256)
def _model_fields(model_name: str, model_version: str) -> bytes:
    """The fields that repeat call after call, encoded once."""
    return (_field(1, model_name.encode()) if model_name else b"") + (
        _field(2, model_version.encode()) if model_version else b"")


@lru_cache(maxsize=256)
def _tensor_fields(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    return (_field(1, name.encode()) if name else b"") + (_field(2, datatype.encode()) if datatype else b"") + (
        _field(3, _varints(list(shape))) if shape else b"")


def write_response(model_name: str, model_version: str, request_id: str,
                   outputs: list[tuple[str, str, np.ndarray, bytes | None]]) -> bytes | None:
    """A serialized ModelInferResponse of ``(name, datatype, array, raw)`` outputs: each tensor's bytes in
    raw_output_contents when ``raw`` is given (the caller encodes them), else its typed contents. None when a
    tensor's typed contents need protobuf to write them."""
    parts = [_model_fields(model_name, model_version)]
    if request_id:
        parts.append(_field(3, request_id.encode()))
    raws = []
    for name, datatype, array, raw in outputs:
        tensor = _tensor_fields(name, datatype, array.shape)
        if raw is not None:
            raws.append(_field(6, raw))
        else:
            contents = _typed_contents(datatype, array)
            if contents is None:
                return None
            tensor += _field(5, contents)
        parts.append(_field(5, tensor))
    return b"".join(parts + raws)
