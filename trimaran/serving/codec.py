"""Tensors in and out of the wire formats: V2 JSON (with Triton's binary-data extension), V1 JSON, V2 gRPC.

Decoding is vectorised: ``np.asarray(data, dtype)`` on the parsed JSON list and a reshape, or
``np.frombuffer`` on binary contents; only BYTES tensors are walked element by element.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import numpy as np
import orjson

from trimaran import jsonbody
from trimaran.serving.errors import InvalidInput, ServingError
from trimaran.serving.runtimes import datatype_to_numpy, numpy_to_datatype

JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def datatype_of(array: np.ndarray) -> str:
    """The V2 datatype of an array the model returned (strings and objects are BYTES)."""
    try:
        return numpy_to_datatype(array.dtype)
    except ValueError as exc:
        raise ServingError(f"the model returned a tensor with no V2 datatype: {exc}") from None


def numpy_dtype(datatype: Any, name: str) -> np.dtype:
    """The numpy dtype of a V2 datatype, or InvalidInput naming the tensor and the datatypes there are."""
    try:
        return datatype_to_numpy(datatype)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"input {name!r}: {exc}") from None


def check_shape(shape: Any, name: str) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InvalidInput(f"input {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    return tuple(shape)


def loads(body: bytes) -> Any:
    """Parse a JSON body; TF Serving's NaN and Infinity are accepted (orjson refuses them), nesting
    too deep for the decoder is a 400 like any other malformed body."""
    try:
        return jsonbody.loads(body, "the JSON body", allow_nan=True)
    except jsonbody.BodyError as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from None


def dumps(obj: Any) -> bytes:
    """JSON with numpy arrays serialised natively (no ``tolist``)."""
    return orjson.dumps(obj, option=JSON_OPTIONS)


# -- BYTES tensors ------------------------------------------------------------------------------------------------
def bytes_from_raw(raw: bytes | memoryview, count: int, name: str) -> np.ndarray:
    """Decode Triton's raw BYTES encoding: each element a 4-byte little-endian length, then its bytes."""
    out = np.empty(count, dtype=object)
    view = memoryview(raw)
    pos = 0
    try:
        for i in range(count):
            (size,) = struct.unpack_from("<I", view, pos)
            pos += 4
            if pos + size > len(view):
                raise struct.error
            out[i] = bytes(view[pos:pos + size])
            pos += size
    except struct.error:
        raise InvalidInput(f"input {name!r}: raw BYTES contents end before element {i + 1} of {count}") from None
    if pos != len(view):
        raise InvalidInput(f"input {name!r}: raw BYTES contents hold more than {count} elements")
    return out


def bytes_to_raw(array: np.ndarray) -> bytes:
    parts = []
    for item in array.ravel():
        data = as_bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def as_bytes(item: Any) -> bytes:
    """A BYTES element as bytes (str is UTF-8 encoded)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    return str(item).encode()


def as_text(item: Any) -> Any:
    """A BYTES element as JSON can carry it: bytes decoded as UTF-8 (undecodable bytes replaced)."""
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else item


def raw_to_array(raw: bytes | memoryview, dtype: np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A tensor from flat row-major little-endian bytes (gRPC raw contents, the binary extension)."""
    count = math.prod(shape)
    if dtype.kind == "O":
        return bytes_from_raw(raw, count, name).reshape(shape)
    if len(raw) != count * dtype.itemsize:
        raise InvalidInput(f"input {name!r}: shape {list(shape)} of {numpy_to_datatype(dtype)} needs "
                           f"{count * dtype.itemsize} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)


def array_to_raw(array: np.ndarray) -> bytes:
    if array.dtype.kind in "OSU":
        return bytes_to_raw(array)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def json_to_array(data: Any, dtype: np.dtype, shape: tuple[int, ...], name: str, datatype: str) -> np.ndarray:
    """A tensor from a V2 JSON ``data`` list, flat or nested."""
    if dtype.kind == "f" and dtype.itemsize == 2:
        raise InvalidInput(f"input {name!r}: FP16 has no JSON form; send it as binary data (Triton's binary "
                           f"extension, parameters.binary_data_size) or over gRPC raw_input_contents")
    try:
        if dtype.kind == "O":
            array = np.array(data, dtype=object)
            if array.dtype != object or any(not isinstance(x, str | bytes) for x in array.flat):
                raise ValueError("BYTES elements must be strings")
        elif dtype.kind == "b":
            array = np.asarray(data)
            if array.dtype != np.bool_ and array.size:
                raise ValueError("BOOL elements must be true or false")
            array = array.astype(np.bool_, copy=False)
        else:
            array = np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(f"input {name!r}: data does not hold {datatype} values: {exc}") from None
    count = math.prod(shape)
    if array.size != count:
        raise InvalidInput(f"input {name!r}: shape {list(shape)} needs {count} elements, data has {array.size}")
    return array.reshape(shape)


# -- V2 REST ------------------------------------------------------------------------------------------------------
class V2Request:
    """A decoded V2 inference request."""

    __slots__ = ("inputs", "outputs", "binary_outputs", "id", "parameters", "raw")

    def __init__(self, inputs: dict[str, np.ndarray], outputs: list[str] | None, binary_outputs: set[str] | bool,
                 request_id: Any, parameters: Any, raw: dict[str, Any]) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.binary_outputs = binary_outputs
        self.id = request_id
        self.parameters = parameters
        self.raw = raw


def parse_v2_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview | None]:
    """The JSON part of a V2 request body and the binary part (Triton's binary extension) if any."""
    if header_length is None:
        payload = loads(body)
        binary = None
    else:
        try:
            size = int(header_length)
        except ValueError:
            raise InvalidInput(f"Inference-Header-Content-Length {header_length!r} is not an integer") from None
        if not 0 <= size <= len(body):
            raise InvalidInput(f"Inference-Header-Content-Length {size} exceeds the body ({len(body)} bytes)")
        payload = loads(body[:size])
        binary = memoryview(body)[size:]
    if not isinstance(payload, dict):
        raise InvalidInput("the request body must be a JSON object")
    return payload, binary


def check_datatype(name: str, datatype: Any, expected: dict[str, str] | None) -> None:
    """Refuse a BYTES tensor for a numeric input, or the reverse (what the model declares, by name, or its
    only input's): its data would fail later with a message about shapes or a 500 from the model."""
    if not expected:
        return
    want = expected.get(name) or (next(iter(expected.values())) if len(expected) == 1 else None)
    if want and datatype != want and "BYTES" in (want, datatype):
        raise InvalidInput(f"input {name!r} has datatype {datatype}, the model expects {want}")


def decode_v2(payload: dict[str, Any], binary: memoryview | None, expected: dict[str, str] | None = None
              ) -> V2Request:
    """Decode a V2 request object (already parsed); binary holds the extension's bytes after the JSON.
    ``expected``: the model's input datatypes by name (see :func:`check_datatype`)."""
    inputs_json = payload.get("inputs")
    if not isinstance(inputs_json, list) or not inputs_json:
        raise InvalidInput('the request needs "inputs": a non-empty list of tensors')
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for item in inputs_json:
        if not isinstance(item, dict):
            raise InvalidInput("each input must be an object with name, shape, datatype and data")
        name = item.get("name")
        if not isinstance(name, str):
            raise InvalidInput("an input has no name")
        if name in inputs:
            raise InvalidInput(f"input {name!r} appears twice")
        datatype = item.get("datatype")
        dtype = numpy_dtype(datatype, name)
        check_datatype(name, datatype, expected)
        shape = check_shape(item.get("shape"), name)
        params = item.get("parameters")
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if binary is None or not isinstance(size, int) or offset + size > len(binary):
                raise InvalidInput(f"input {name!r}: binary_data_size {size!r} does not fit the binary body")
            inputs[name] = raw_to_array(binary[offset:offset + size], dtype, shape, name)
            offset += size
        elif "data" in item:
            inputs[name] = json_to_array(item["data"], dtype, shape, name, datatype)
        else:
            raise InvalidInput(f"input {name!r} has no data")
    outputs = None
    binary_outputs: set[str] | bool = False
    params = payload.get("parameters")
    if isinstance(params, dict) and params.get("binary_data_output"):
        binary_outputs = True
    wanted = payload.get("outputs")
    if wanted is not None:
        if not isinstance(wanted, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                                   for o in wanted):
            raise InvalidInput('"outputs" must be a list of objects with a name')
        outputs = [o["name"] for o in wanted]
        if binary_outputs is False:
            binary_outputs = {o["name"] for o in wanted
                              if isinstance(o.get("parameters"), dict) and o["parameters"].get("binary_data")}
    return V2Request(inputs, outputs, binary_outputs, payload.get("id"), params, payload)


def encode_v2(model_name: str, model_version: str, request: V2Request,
              outputs: dict[str, np.ndarray]) -> tuple[bytes, int | None]:
    """The V2 response body; the second value is the JSON header length when binary outputs follow it."""
    tensors = []
    blobs = []
    binary = request.binary_outputs
    for name, array in outputs.items():
        array = np.asarray(array)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype_of(array), "shape": list(array.shape)}
        if binary is True or (binary and name in binary):
            blob = array_to_raw(array)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif array.dtype.kind in "OSU":
            tensor["data"] = [as_text(x) for x in array.ravel().tolist()]
        else:
            tensor["data"] = np.ascontiguousarray(array).ravel()
        tensors.append(tensor)
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": tensors}
    if request.id is not None:
        response["id"] = request.id
    head = dumps(response)
    if not blobs:
        return head, None
    return b"".join([head, *blobs]), len(head)


# -- V1 REST (TF Serving / KServe) --------------------------------------------------------------------------------
def _b64(value: Any) -> Any:
    """TF Serving's ``{"b64": "..."}`` binary values, decoded; anything else unchanged."""
    if isinstance(value, dict) and len(value) == 1 and "b64" in value:
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError):
            raise InvalidInput("a b64 value is not valid base64") from None
    if isinstance(value, list) and value and isinstance(value[0], dict | list):
        return [_b64(v) for v in value]
    return value


def _column(values: Any, dtype: np.dtype | None, name: str, b64: bool) -> np.ndarray:
    if b64:
        values = _b64(values)
    try:
        if dtype is not None and dtype.kind == "f":
            return np.asarray(values, dtype=dtype)
        array = np.asarray(values)
        if array.dtype.kind in "SU":
            array = array.astype(object)
        return array
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"input {name!r}: values do not form a tensor: {exc}") from None


def decode_v1(payload: Any, input_names: list[str], input_dtypes: dict[str, np.dtype], *,
              b64: bool = True) -> tuple[dict[str, np.ndarray], bool]:
    """Decode a V1 predict body into named arrays; the flag is True for the row (``instances``) format.

    ``input_names`` are the model's declared inputs (maybe none). Rows of objects are stacked per key;
    plain rows go to the single input. ``b64`` False skips looking for ``{"b64": ...}`` values (the caller
    knows the body has none: the walk costs a Python call per nested list).
    """
    if not isinstance(payload, dict):
        raise InvalidInput("the request body must be a JSON object with \"instances\" or \"inputs\"")
    if "instances" in payload and "inputs" in payload:
        raise InvalidInput('send either "instances" (row format) or "inputs" (columnar format), not both')
    default = input_names[0] if len(input_names) == 1 else ("input-0" if not input_names else None)
    if "instances" in payload:
        instances = payload["instances"]
        if not isinstance(instances, list):
            raise InvalidInput('Expected "instances" to be a list')
        if instances and isinstance(instances[0], dict) and not (len(instances[0]) == 1 and "b64" in instances[0]):
            if not all(isinstance(row, dict) and row.keys() == instances[0].keys() for row in instances):
                raise InvalidInput("every instance must be an object with the same keys")
            return {key: _column([row[key] for row in instances], input_dtypes.get(key), key, b64)
                    for key in instances[0]}, True
        if default is None:
            raise InvalidInput(f"the model has inputs {', '.join(map(repr, input_names))}: send each instance "
                               f"as an object keyed by input name")
        return {default: _column(instances, input_dtypes.get(default), default, b64)}, True
    if "inputs" in payload:
        columns = payload["inputs"]
        if isinstance(columns, dict):
            return {key: _column(value, input_dtypes.get(key), key, b64) for key, value in columns.items()}, False
        if default is None:
            raise InvalidInput(f"the model has inputs {', '.join(map(repr, input_names))}: send \"inputs\" as an "
                               f"object keyed by input name")
        return {default: _column(columns, input_dtypes.get(default), default, b64)}, False
    raise InvalidInput('the request needs "instances" (row format) or "inputs" (columnar format)')


def _jsonable(array: np.ndarray) -> Any:
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        return _b64_out(array.tolist())
    return np.ascontiguousarray(array)


def _b64_out(value: Any) -> Any:
    if isinstance(value, list):
        return [_b64_out(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode()}
    return value


def encode_v1(outputs: dict[str, np.ndarray], row_format: bool) -> bytes:
    """``{"predictions": ...}`` for row requests, ``{"outputs": ...}`` for columnar ones (TF Serving's rule):
    the tensor itself when there is one output, else objects keyed by output name (one per row in row
    format, when every output has the same first dimension)."""
    if len(outputs) == 1:
        value: Any = _jsonable(next(iter(outputs.values())))
    elif row_format and len({np.shape(a)[:1] for a in outputs.values()}) == 1 and all(
            np.ndim(a) for a in outputs.values()):
        columns = {name: _jsonable(array) for name, array in outputs.items()}
        rows = len(next(iter(outputs.values())))
        value = [{name: column[i] for name, column in columns.items()} for i in range(rows)]
    else:
        value = {name: _jsonable(array) for name, array in outputs.items()}
    return dumps({"predictions" if row_format else "outputs": value})
