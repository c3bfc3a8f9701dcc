"""A base class for custom models in KServe's shape whose ``predict`` forwards to a predictor over HTTP."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from typing import Any
from urllib.parse import urlsplit

import numpy as np

PROTOCOL_PATHS = {"v1": "/v1/models/{name}:predict", "v2": "/v2/models/{name}/infer"}
# Headers a transformer passes on, so that a request can be followed from transformer to predictor.
FORWARDED_HEADERS = ("x-request-id", "x-b3-traceid", "traceparent", "tracestate", "authorization")


class PredictorError(RuntimeError):
    """The predictor answered an error (``status`` is its status), could not be reached (502) or did not
    answer in time (504)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json_default(value: Any) -> Any:
    # Preprocessing usually produces numpy arrays; the predictor wants JSON lists.
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class TransformerModel:
    """Base for a custom model (``model.py``) in KServe's shape, whose default :meth:`predict` forwards the
    preprocessed payload to the predictor: ``POST /v1/models/{name}:predict`` (``predictor_protocol="v1"``) or
    ``POST /v2/models/{name}/infer`` (``"v2"``) on ``predictor_host``. Override :meth:`preprocess` and
    :meth:`postprocess` for a transformer, or :meth:`predict` for a predictor. Any method may be ``async``.
    kserve need not be installed; a ``kserve.Model`` subclass is served the same way.

    Example ``model.py``::

        from trimaran.serving.runtimes import TransformerModel

        class Scale(TransformerModel):
            def preprocess(self, payload, headers=None):
                return {"instances": [[v / 16 for v in row] for row in payload["instances"]]}

    Args:
        name: the model's name; the predictor is asked for the same name, as KServe does.
        predictor_host: ``host:port`` of the predictor (the server's ``--predictor-host``), or a URL with
            ``http://``/``https://``. None for a model that does not forward.
        predictor_protocol: ``v1`` or ``v2``. Also readable as ``self.protocol``, KServe's attribute.
        predictor_use_ssl: HTTPS when ``predictor_host`` has no scheme.
        predictor_request_timeout_seconds: per request, as KServe's flag of the same name (default 600).
    """

    def __init__(self, name: str, predictor_host: str | None = None, predictor_protocol: str = "v1", *,
                 predictor_use_ssl: bool = False, predictor_request_timeout_seconds: float = 600) -> None:
        if predictor_protocol not in PROTOCOL_PATHS:
            raise ValueError(f"predictor protocol {predictor_protocol!r} is not supported; use "
                             f"{' or '.join(PROTOCOL_PATHS)}")
        self.name = name
        self.predictor_host = predictor_host
        self.protocol = predictor_protocol
        self.predictor_use_ssl = predictor_use_ssl
        self.timeout = predictor_request_timeout_seconds
        self.ready = False

    def load(self) -> bool:
        """Load what the model needs; the default has nothing to load."""
        self.ready = True
        return self.ready

    def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        """The request body as the predictor should see it; the default passes it on unchanged."""
        return payload

    async def predict(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        """The predictor's JSON answer to ``payload``. Raises PredictorError for an error status."""
        if not self.predictor_host:
            raise PredictorError(502, f"model {self.name!r} has no predictor_host to forward to")
        path = PROTOCOL_PATHS[self.protocol].format(name=self.name)
        body = json.dumps(payload, default=_json_default).encode()
        sent = {"Content-Type": "application/json"}
        for key, value in (headers or {}).items():
            if key.lower() in FORWARDED_HEADERS:
                sent[key] = value
        return await asyncio.to_thread(self._post, path, body, sent)

    def postprocess(self, result: Any, headers: dict[str, str] | None = None) -> Any:
        """The response body for the client; the default returns the predictor's answer unchanged."""
        return result

    def _connection(self) -> http.client.HTTPConnection:
        ssl = getattr(self, "predictor_use_ssl", False)
        target = self.predictor_host if "://" in self.predictor_host else (
            f"{'https' if ssl else 'http'}://{self.predictor_host}")
        url = urlsplit(target)
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        return cls(url.netloc, timeout=getattr(self, "timeout", 600))

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> Any:
        # One keep-alive connection per thread; subclasses that skip __init__ get theirs here.
        local = self.__dict__.setdefault("_local", threading.local())
        for attempt in (0, 1):
            conn = getattr(local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = local.conn = self._connection()
            try:
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
                data = response.read()
                break
            except TimeoutError as e:
                conn.close()
                local.conn = None
                raise PredictorError(504, f"predictor {self.predictor_host} did not answer in time") from e
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                local.conn = None
                # A kept-alive connection the predictor has closed fails on first use: one fresh try.
                if reused and attempt == 0:
                    continue
                raise PredictorError(502, f"cannot reach predictor {self.predictor_host}: {e}") from e
        if response.status >= 400:
            try:
                message = json.loads(data).get("error") or data.decode(errors="replace")
            except (ValueError, AttributeError):
                message = data.decode(errors="replace")
            raise PredictorError(response.status, f"predictor {self.predictor_host} answered {response.status}: "
                                                  f"{message}")
        try:
            return json.loads(data)
        except ValueError as e:
            raise PredictorError(502, f"predictor {self.predictor_host} answered non-JSON: {data[:200]!r}") from e
