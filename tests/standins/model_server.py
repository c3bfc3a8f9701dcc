"""A stand-in for the ``tensorflow/serving`` image: TensorFlow Serving's REST API on a tiny model.

Started as the image's entrypoint is (``tensorflow_model_server --port=8500 --rest_api_port=8501
--model_name=$MODEL_NAME --model_base_path=$MODEL_BASE_PATH/$MODEL_NAME`` plus the container's
args), it serves ``GET /v1/models/NAME[/versions/N]``, ``GET .../metadata`` and
``POST /v1/models/NAME[/versions/N]:predict`` (row ``instances`` or columnar ``inputs``) for the
model in the highest numbered version directory under the base path. A model here is
``model.json``, ``{"w": 0.5, "b": 2.0}``: y = w*x + b elementwise (TensorFlow Serving's own test
model ``half_plus_two``), since this image carries no TensorFlow. Each answer carries the header
``X-Standin-Host`` (the pod's host name), TF Serving's does not. Standard library only: the image
is Debian's python3.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_ROUTE = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?(?:/(?P<meta>metadata))?"
                    r"(?::(?P<verb>predict|classify|regress))?$")


def _flags(argv: list[str]) -> dict[str, str]:
    out = {}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg[2:].partition("=")
            out[key] = value
    return out


def _versions(base: Path) -> dict[str, dict]:
    found = {}
    for entry in base.iterdir() if base.is_dir() else ():
        if entry.name.isdigit() and (entry / "model.json").is_file():
            found[entry.name] = json.loads((entry / "model.json").read_text())
    return found


def _apply(model: dict, value):  # noqa: ANN001, ANN202 -- JSON values
    if isinstance(value, list):
        return [_apply(model, v) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected numbers, got {value!r}")
    return model["w"] * value + model["b"]


def main(argv: list[str]) -> None:
    flags = _flags(argv)
    name = flags.get("model_name") or os.environ.get("MODEL_NAME", "model")
    base = Path(flags.get("model_base_path") or f"{os.environ.get('MODEL_BASE_PATH', '/models')}/{name}")
    port = int(flags.get("rest_api_port", "8501"))
    versions = _versions(base)
    if not versions:
        print(f"No versions of servable {name} found under base path {base}", file=sys.stderr, flush=True)
        sys.exit(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            # The stand-in's own (TF Serving sends no such header): which replica answered, so a
            # test can see a Service balance its replicas.
            self.send_header("X-Standin-Host", socket.gethostname())
            self.end_headers()
            self.wfile.write(data)

        def _target(self, method: str) -> tuple[re.Match, str] | None:
            """The route and model version asked for; None once an error is sent."""
            match = _ROUTE.match(self.path.split("?", 1)[0])
            if match is None:
                self._send(404, {"error": f"Malformed request: {method} {self.path}"})
                return None
            if match["name"] != name:
                self._send(404, {"error": f"Servable not found for request: Latest({match['name']})"})
                return None
            version = match["version"] or max(versions, key=int)
            if version not in versions:
                self._send(404, {"error": f"Servable not found for request: Specific({name}, {version})"})
                return None
            return match, version

        def do_GET(self) -> None:  # noqa: N802 -- http.server's name
            target = self._target("GET")
            if target is None:
                return
            match, version = target
            if match["meta"]:
                self._send(200, {"model_spec": {"name": name, "signature_name": "", "version": version},
                                 "metadata": {"signature_def": {"signature_def": {"serving_default": {}}}}})
                return
            self._send(200, {"model_version_status": [{"version": v, "state": "AVAILABLE",
                                                       "status": {"error_code": "OK", "error_message": ""}}
                                                      for v in sorted(versions, key=int)
                                                      if match["version"] in (None, v)]})

        def do_POST(self) -> None:  # noqa: N802 -- http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = self._target("POST")
            if target is None:
                return
            match, version = target
            if match["verb"] != "predict":
                self._send(400, {"error": f"Malformed request: only :predict is served, not {match['verb']}"})
                return
            try:
                request = json.loads(body)
                model = versions[version]
                if "instances" in request:
                    self._send(200, {"predictions": [_apply(model, i) for i in request["instances"]]})
                elif "inputs" in request:
                    self._send(200, {"outputs": _apply(model, request["inputs"])})
                else:
                    self._send(400, {"error": "Missing 'inputs' or 'instances' key"})
            except (ValueError, TypeError) as error:
                self._send(400, {"error": f"JSON Parse error: {error}"})

        def log_message(self, *args) -> None:  # noqa: ANN002 -- http.server's signature
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    print(f"Exporting HTTP/REST API at:localhost:{port} ...", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
