"""A stand-in for ``seldonio/mock_classifier_rest:1.3``: Seldon's Python microservice API (REST)
answering as its mock classifier (``MeanClassifier``) does.

``POST /predict`` (and ``/api/v1.0/predictions``) takes a SeldonMessage, ``{"data": {"ndarray":
[[...], ...]}}`` as JSON or as the form field ``json``, and answers ``{"data": {"names": ["proba"],
"ndarray": [[p], ...]}, "meta": {}}`` with p = 1 / (1 + exp(-(mean(row) - threshold))), the
threshold being what the image's model gives (the documented request ``[[1.0, 2.0, 5.0]]`` answers
0.43782349911420193). ``GET /health/ping`` answers ``pong``. Its port is
``PREDICTIVE_UNIT_HTTP_SERVICE_PORT``, else ``PREDICTIVE_UNIT_SERVICE_PORT``, else 9000, as the
microservice wrapper's. Standard library only: the image is Debian's python3.
"""

from __future__ import annotations

import json
import math
import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

THRESHOLD = 2.9166666666666665


def _proba(row: list) -> list[float]:
    if not isinstance(row, list) or not row or not all(isinstance(v, (int, float)) for v in row):
        raise ValueError("Incorrect shape")
    return [1 / (1 + math.exp(-(sum(row) / len(row) - THRESHOLD)))]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, body: dict | str) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        if self.path.split("?", 1)[0] == "/health/ping":
            self._send(200, "pong")
        elif self.path.split("?", 1)[0] == "/health/status":
            self._send(200, {"data": {"names": ["proba"], "ndarray": [_proba([1.0])]}, "meta": {}})
        else:
            self._send(404, {"status": {"code": 404, "info": "Not Found", "reason": "NOT_FOUND", "status": 1}})

    def do_POST(self) -> None:  # noqa: N802 -- http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
        if self.path.split("?", 1)[0] not in ("/predict", "/api/v1.0/predictions"):
            self._send(404, {"status": {"code": 404, "info": "Not Found", "reason": "NOT_FOUND", "status": 1}})
            return
        try:
            if "form-urlencoded" in (self.headers.get("Content-Type") or ""):
                body = parse_qs(body).get("json", [""])[0]
            message = json.loads(body)
            rows = message["data"]["ndarray"]
            if not isinstance(rows, list):
                raise ValueError("ndarray must be a list")
            answer = {"data": {"names": ["proba"], "ndarray": [_proba(r) for r in rows]},
                      "meta": {"puid": (message.get("meta") or {}).get("puid", "")} if message.get("meta") else {}}
            self._send(200, answer)
        except (ValueError, KeyError, TypeError) as error:
            self._send(400, {"status": {"code": -1, "info": str(error), "reason": "MICROSERVICE_BAD_DATA",
                                        "status": 1}})

    def log_message(self, *args) -> None:  # noqa: ANN002 -- http.server's signature
        pass


class _Server(ThreadingHTTPServer):
    address_family = socket.AF_INET


def main() -> None:
    port = int(os.environ.get("PREDICTIVE_UNIT_HTTP_SERVICE_PORT") or os.environ.get("PREDICTIVE_UNIT_SERVICE_PORT")
               or 9000)
    server = _Server(("0.0.0.0", port), Handler)
    print(f"Running microservice on port {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
