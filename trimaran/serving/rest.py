"""The REST front end: KServe V1 / TF Serving and V2 (Open Inference Protocol) on one port.

V1 (``/v1/models/NAME[/versions/N]``): model status is TF Serving's ``model_version_status`` list, with
KServe's ``name`` and ``ready`` beside it so that both kinds of client read it; 503 while no version is
available. Metadata is TF Serving's ``signature_def`` shape. ``:predict`` takes ``instances`` (rows) or
``inputs`` (columns) and answers ``predictions`` or ``outputs``. KServe's V1 runtimes answer one prediction
tensor, so V1 returns the model's first declared output (TensorFlow models: every output, as TF Serving).

V2: health, server and model metadata, readiness and ``/infer`` with every datatype; JSON ``data`` or
Triton's binary-data extension (``Inference-Header-Content-Length``; tritonclient sends binary by default).
Errors are ``{"error": message}`` with 400, 404, 413, 415 (a body that is not JSON, an unknown Content-Encoding),
501, 503 (with ``Retry-After`` when the queue is full) or 504.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import zlib
from typing import Any
from urllib.parse import unquote

import numpy as np

from trimaran.serving import codec
from trimaran.serving.dataplane import DataPlane, as_serving_error, select_outputs
from trimaran.serving.errors import (
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    ServingError,
    Unsupported,
    UnsupportedMediaType,
)
from trimaran.serving.http import Request, Response
from trimaran.serving.metrics import CONTENT_TYPE, ServerMetrics
from trimaran.serving.repository import ModelVersion
from trimaran.serving.runtimes import datatype_to_numpy

log = logging.getLogger("trimaran.serving")

_V2_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(?:/(ready|infer))?$")
_V1_MODEL = re.compile(r"^/v1/models/([^/:]+)(?:/versions/([^/:]+))?(?:(/metadata)|:([a-z]+))?$")
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}  # zlib's header flags for each encoding
# What an inference body may be sent as: JSON; none at all; curl -d's default (KServe's examples send
# JSON so); Triton's binary extension (JSON then tensors).
_BODY_TYPES = frozenset({"", "application/json", "application/x-www-form-urlencoded", "application/octet-stream"})

# TF Serving's DataType names for V2 datatypes, for V1 metadata.
_TF_DTYPES = {"BOOL": "DT_BOOL", "UINT8": "DT_UINT8", "UINT16": "DT_UINT16", "UINT32": "DT_UINT32",
              "UINT64": "DT_UINT64", "INT8": "DT_INT8", "INT16": "DT_INT16", "INT32": "DT_INT32",
              "INT64": "DT_INT64", "FP16": "DT_HALF", "FP32": "DT_FLOAT", "FP64": "DT_DOUBLE", "BYTES": "DT_STRING"}


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, codec.dumps(obj))


def error_response(exc: ServingError) -> Response:
    return Response(exc.http_status, codec.dumps({"error": str(exc)}), headers=exc.headers)


class RestApp:
    """Routes a parsed request to the data plane; a callable for :class:`trimaran.serving.http.HttpServer`."""

    def __init__(self, plane: DataPlane, metrics: ServerMetrics, max_body: int) -> None:
        self.plane = plane
        self.metrics = metrics
        self.max_body = max_body

    def __call__(self, req: Request) -> Response | Any:
        try:
            return self._route(req)
        except ServingError as exc:
            return error_response(exc)

    def crashed(self, req: Request, exc: BaseException) -> Response:
        """What a bug in a handler answers (the HTTP server calls this)."""
        log.error("%s %s failed", req.method, req.path, exc_info=exc)
        return error_response(as_serving_error(exc))

    def _route(self, req: Request) -> Response | Any:
        path = req.path
        method = req.method
        if path.startswith("/v2/models/"):
            match = _V2_MODEL.match(path)
            if match is None:
                raise NotFound(f"no route for {method} {path}")
            name, version, action = match.groups()
            if "%" in path:
                name, version = unquote(name), version and unquote(version)
            if action == "infer":
                _method(req, "POST")
                return self._v2_infer(req, name, version)
            _method(req, "GET")
            if action == "ready":
                ready = self.plane.model_ready(name, version)
                if ready:
                    return json_response({"name": name, "ready": True})
                return json_response({"name": name, "ready": False,
                                      "error": self.plane.repository(name).reason or "version not loaded"}, 503)
            return json_response(self.plane.model_metadata(name, version))
        if path.startswith("/v1/models/"):
            match = _V1_MODEL.match(path)
            if match is None:
                raise NotFound(f"no route for {method} {path}")
            name, version, metadata, verb = match.groups()
            if "%" in path:
                name, version = unquote(name), version and unquote(version)
            if verb == "predict":
                _method(req, "POST")
                return self._v1_predict(req, name, version)
            if verb is not None:
                raise Unsupported(f":{verb} is not supported; use :predict")
            _method(req, "GET")
            if metadata:
                return json_response(self._v1_metadata(name, version))
            return self._v1_status(name, version)
        return self._simple(req, path)

    def _simple(self, req: Request, path: str) -> Response:
        _method(req, "GET")
        plane = self.plane
        if path == "/v2/health/live":
            return json_response({"live": True})
        if path == "/v2/health/ready":
            if plane.ready():
                return json_response({"ready": True})
            return json_response({"ready": False, "error": plane.not_ready_reason()}, 503)
        if path == "/":
            return json_response({"status": "alive"})
        if path == "/metrics":
            return Response(200, self.metrics.exposition(), CONTENT_TYPE)
        if path == "/v2":
            return json_response(plane.server_metadata())
        if path in ("/v2/models", "/v1/models"):
            return json_response({"models": list(plane.models)})
        raise NotFound(f"no route for {req.method} {path}")

    # -- V1 ----------------------------------------------------------------------------------------------------
    def _v1_status(self, name: str, version: str | None) -> Response:
        repo = self.plane.repository(name)
        statuses = repo.version_status(version)
        ready = any(s["state"] == "AVAILABLE" for s in statuses)
        body: dict[str, Any] = {"name": name, "ready": ready, "model_version_status": statuses}
        if not ready:
            body["error"] = repo.reason or f"version {version} is not available"
        return json_response(body, 200 if ready else 503)

    def _v1_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        handle = self.plane.repository(name).get(version)
        try:
            model = handle.model
            signatures = {}
            for signature in model.signature_names():
                inputs, outputs = model.signature_specs(signature)
                signatures[signature] = {"inputs": {t.name: _tf_tensor(t) for t in inputs},
                                         "outputs": {t.name: _tf_tensor(t) for t in outputs},
                                         "method_name": "tensorflow/serving/predict"}
            return {"model_spec": {"name": name, "signature_name": "", "version": handle.version},
                    "metadata": {"signature_def": {"signature_def": signatures}}}
        finally:
            handle.release()

    def _v1_predict(self, req: Request, name: str, version: str | None) -> Response | Any:
        return self._infer(req, name, version, "v1", self._v1_run)

    def _v1_run(self, req: Request, handle: ModelVersion) -> Response | Any:
        body = self._body(req)
        payload = codec.loads(body)
        model = handle.model
        if model.payload_level:
            return self._payload(req, handle, payload)
        signature = payload.get("signature_name") if isinstance(payload, dict) else None
        if signature is not None and not isinstance(signature, str):
            raise InvalidInput("signature_name must be a string")
        specs, output_specs = model.signature_specs(signature)
        dtypes = {}
        for spec in specs:
            with contextlib.suppress(ValueError):  # BF16 has no numpy dtype: let numpy infer one
                dtypes[spec.name] = datatype_to_numpy(spec.datatype)
        inputs, rows = codec.decode_v1(payload, [s.name for s in specs], dtypes, b64=b'"b64"' in body)
        wanted = None
        if output_specs and not model.platform.startswith("tensorflow"):
            wanted = [output_specs[0].name]
        result = self.plane.predict(handle, inputs, wanted, signature)
        if isinstance(result, asyncio.Future):
            return _then(result, lambda out: Response(200, codec.encode_v1(select_outputs(out, wanted), rows)))
        return Response(200, codec.encode_v1(select_outputs(result, wanted), rows))

    # -- V2 ----------------------------------------------------------------------------------------------------
    def _v2_infer(self, req: Request, name: str, version: str | None) -> Response | Any:
        return self._infer(req, name, version, "v2", self._v2_run)

    def _v2_run(self, req: Request, handle: ModelVersion) -> Response | Any:
        payload, binary = codec.parse_v2_body(self._body(req), req.headers.get("inference-header-content-length"))
        if handle.model.payload_level:
            return self._payload(req, handle, payload, v2=True)
        request = codec.decode_v2(payload, binary, {spec.name: spec.datatype for spec in handle.model.inputs})
        result = self.plane.predict(handle, request.inputs, request.outputs, None)
        if isinstance(result, asyncio.Future):
            return _then(result, lambda out: self._v2_response(handle, request, out))
        return self._v2_response(handle, request, result)

    @staticmethod
    def _v2_response(handle: ModelVersion, request: codec.V2Request, outputs: dict[str, np.ndarray]) -> Response:
        body, header_length = codec.encode_v2(handle.model.name, handle.version, request,
                                              select_outputs(outputs, request.outputs))
        if header_length is None:
            return Response(200, body)
        return Response(200, body, "application/octet-stream",
                        (("inference-header-content-length", str(header_length)),))

    # -- shared ------------------------------------------------------------------------------------------------
    def _body(self, req: Request) -> bytes:
        """The request body, decompressed when it has a Content-Encoding (tritonclient's request compression),
        and no larger than ``max_body`` once decompressed."""
        media = req.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media not in _BODY_TYPES and not media.endswith("+json"):
            raise UnsupportedMediaType(f"Content-Type {media!r} is not supported: the body is JSON (application/json)")
        encoding = req.headers.get("content-encoding")
        if not encoding or encoding == "identity":
            return req.body
        if encoding not in _WBITS:
            raise UnsupportedMediaType(f"Content-Encoding {encoding!r} is not supported; use gzip or deflate")
        inflater = zlib.decompressobj(wbits=_WBITS[encoding])
        try:
            body = inflater.decompress(req.body, self.max_body + 1)
        except zlib.error as exc:
            raise InvalidInput(f"the {encoding} body cannot be decompressed: {exc}") from None
        if len(body) > self.max_body:
            raise PayloadTooLarge(f"the decompressed body exceeds the limit of {self.max_body} bytes")
        return body

    def _payload(self, req: Request, handle: ModelVersion, payload: Any, v2: bool = False) -> Any:
        async def run() -> Response:
            result = await self.plane.infer_payload(handle, payload, req.headers)
            if v2 and isinstance(result, dict):
                result.setdefault("model_name", handle.model.name)
                result.setdefault("model_version", handle.version)
                if isinstance(payload, dict) and "id" in payload:
                    result.setdefault("id", payload["id"])
            return Response(200, codec.dumps(result))

        return run()

    def _infer(self, req: Request, name: str, version: str | None, protocol: str, run: Any) -> Response | Any:
        """Run an inference handler with the version held, errors mapped and the request counted."""
        metrics = self.metrics
        label = name if name in self.plane.models else ""
        metrics.request_started(label)
        handle = None
        try:
            handle = self.plane.repository(name).get(version)
            result = run(req, handle)
        except Exception as exc:
            response = self._failure(req, exc)
        else:
            if not isinstance(result, Response):
                pending, handle = handle, None  # the coroutine releases it
                return self._finish_later(req, pending, result, label, protocol)
            response = result
        finally:
            if handle is not None:
                handle.release()
        metrics.request_finished(label, handle.version if handle else (version or ""), protocol,
                                 str(response.status), req.started)
        metrics.request_done(label)
        return response

    async def _finish_later(self, req: Request, handle: ModelVersion, pending: Any, label: str,
                            protocol: str) -> Response:
        try:
            response = await pending
        except Exception as exc:
            response = self._failure(req, exc)
        finally:
            handle.release()
        self.metrics.request_finished(label, handle.version, protocol, str(response.status), req.started)
        self.metrics.request_done(label)
        return response

    def _failure(self, req: Request, exc: BaseException) -> Response:
        error = as_serving_error(exc)
        if type(error) is ServingError:
            log.error("%s %s failed: %s", req.method, req.path, error, exc_info=exc)
        return error_response(error)


async def _then(future: asyncio.Future, make: Any) -> Response:
    return make(await future)


def _method(req: Request, allowed: str) -> None:
    if req.method != allowed:
        raise _MethodNotAllowed(f"{req.method} is not allowed on {req.path}; use {allowed}")


class _MethodNotAllowed(ServingError):
    http_status = 405
    grpc_code = "UNIMPLEMENTED"


def _tf_tensor(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "dtype": _TF_DTYPES.get(spec.datatype, "DT_INVALID"),
            "tensor_shape": {"dim": [{"size": str(d)} for d in spec.shape]}}
