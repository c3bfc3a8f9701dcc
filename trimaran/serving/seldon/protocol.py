"""The Seldon protocol's ``SeldonMessage``, decoded into what a component sees and encoded back.

A request carries one payload: ``data`` (``ndarray``, or ``tensor {shape, values}``, with optional
``names``), ``strData``, ``binData`` (base64) or ``jsonData``, plus ``meta`` (``puid``, ``tags``,
``routing``, ``requestPath``, ``metrics``). A component gets the payload as a numpy array, a str,
bytes or the JSON value, and its answer is sent back in the request's form where it can be
(a tensor request gets a tensor back). Errors are Seldon's ``{"status": {"code", "info", "reason",
"status": "FAILURE"}}``.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Message", "SeldonError", "decode", "encode", "new_meta", "reply"]

_PAYLOADS = ("data", "strData", "binData", "jsonData")


class SeldonError(Exception):
    """A request the graph cannot answer: ``info`` says why (naming the unit when one failed)."""

    def __init__(self, info: str, http_status: int = 400, reason: str = "MICROSERVICE_BAD_DATA") -> None:
        super().__init__(info)
        self.info = info
        self.http_status = http_status
        self.reason = reason

    def body(self) -> dict[str, Any]:
        return {"status": {"code": self.http_status, "info": self.info, "reason": self.reason, "status": "FAILURE"}}


@dataclass
class Message:
    """One payload and its metadata. ``form`` is how it travels: ndarray, tensor, strData, binData or jsonData."""

    form: str
    payload: Any
    names: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def new_meta(meta: Any) -> dict[str, Any]:
    """The response's meta: the request's puid (or a new one) and tags; routing and path filled by the graph."""
    meta = meta if isinstance(meta, dict) else {}
    tags = meta.get("tags")
    return {"puid": str(meta.get("puid") or secrets.token_hex(13)),
            "tags": dict(tags) if isinstance(tags, dict) else {}, "routing": {}, "requestPath": {}, "metrics": []}


def decode(body: Any) -> Message:
    """A request body as a Message; a malformed one raises SeldonError naming the field."""
    if not isinstance(body, dict):
        raise SeldonError("the request must be a JSON object (a SeldonMessage)")
    present = [k for k in _PAYLOADS if k in body]
    if len(present) != 1:
        raise SeldonError(f"a SeldonMessage carries exactly one of {', '.join(_PAYLOADS)}; "
                          f"got {', '.join(present) or 'none'}")
    key = present[0]
    meta = body.get("meta") or {}
    if key == "strData":
        if not isinstance(body[key], str):
            raise SeldonError("strData must be a string")
        return Message("strData", body[key], meta=meta)
    if key == "binData":
        try:
            return Message("binData", base64.b64decode(body[key], validate=True), meta=meta)
        except (TypeError, ValueError):
            raise SeldonError("binData must be base64") from None
    if key == "jsonData":
        return Message("jsonData", body[key], meta=meta)
    data = body[key]
    if not isinstance(data, dict):
        raise SeldonError("data must be an object with ndarray or tensor")
    names = data.get("names") or []
    if not isinstance(names, list):
        raise SeldonError("data.names must be a list of strings")
    if "tensor" in data:
        return Message("tensor", _tensor(data["tensor"]), [str(n) for n in names], meta)
    if "ndarray" in data:
        try:
            array = np.asarray(data["ndarray"])
        except ValueError as exc:
            raise SeldonError(f"data.ndarray is not a regular array: {exc}") from None
        return Message("ndarray", array, [str(n) for n in names], meta)
    if "tftensor" in data:
        raise SeldonError("data.tftensor is a gRPC payload; send data.tensor or data.ndarray over REST")
    raise SeldonError("data must carry ndarray or tensor")


def _tensor(tensor: Any) -> np.ndarray:
    if not isinstance(tensor, dict) or not isinstance(tensor.get("values"), list):
        raise SeldonError("data.tensor needs values (a list of numbers) and shape")
    shape = tensor.get("shape") or [len(tensor["values"])]
    try:
        values = np.asarray(tensor["values"], dtype=np.float64)
        return values.reshape([int(d) for d in shape])
    except (TypeError, ValueError) as exc:
        raise SeldonError(f"data.tensor: {exc}") from None


def encode(message: Message) -> dict[str, Any]:
    """A Message as a SeldonMessage response body."""
    out: dict[str, Any] = {"meta": message.meta}
    payload = message.payload
    if message.form == "strData":
        out["strData"] = payload
    elif message.form == "binData":
        out["binData"] = base64.b64encode(payload).decode()
    elif message.form == "jsonData":
        out["jsonData"] = payload.tolist() if isinstance(payload, np.ndarray) else payload
    elif message.form == "tensor":
        array = np.asarray(payload)
        out["data"] = {"names": message.names, "tensor": {"shape": list(array.shape), "values": array.ravel().tolist()}}
    else:
        out["data"] = {"names": message.names, "ndarray": np.asarray(payload).tolist()}
    return out


def reply(request: Message, result: Any, names: list[str]) -> Message:
    """A component's answer to ``request`` in the form Seldon's wrapper would send it."""
    if isinstance(result, Message):
        return result
    if isinstance(result, str):
        return Message("strData", result, meta=request.meta)
    if isinstance(result, (bytes, bytearray)):
        return Message("binData", bytes(result), meta=request.meta)
    if isinstance(result, dict) or (request.form == "jsonData" and not isinstance(result, np.ndarray)):
        return Message("jsonData", result, meta=request.meta)
    form = request.form if request.form in ("ndarray", "tensor") else "ndarray"
    array = np.asarray(result)
    if form == "tensor" and array.dtype.kind not in "biuf":
        form = "ndarray"  # a tensor holds numbers only
    return Message(form, array, names, request.meta)
