"""``trimaran predict NAME -f input.json``: send one inference request to an InferenceService.

The protocol follows the body, as KServe's clients do: a body with ``instances`` (or any body that
is not a V2 request) goes to the V1 ``:predict`` endpoint; a body whose ``inputs`` is a list of
tensors (``{"name", "shape", "datatype", "data"}``) goes to V2 ``/infer``. The request is sent to
the service's ``status.url``, so it takes the same path (router, traffic split) as any client's.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

import typer

from trimaran.cli.app import NamespaceOpt, _client, _fail, app, console
from trimaran.cli.client import APIError


def request_path(name: str, body: object) -> str:
    """The V1 or V2 path for ``body`` (see the module docstring)."""
    inputs = body.get("inputs") if isinstance(body, dict) else None
    is_v2 = isinstance(inputs, list) and bool(inputs) and all(isinstance(t, dict) and "datatype" in t for t in inputs)
    return f"/v2/models/{name}/infer" if is_v2 else f"/v1/models/{name}:predict"


@app.command()
def predict(
    name: str = typer.Argument(..., help="The InferenceService."),
    filename: str = typer.Option(..., "--filename", "-f", help="JSON request body, or - for stdin."),
    namespace: str | None = NamespaceOpt,
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the response."),
) -> None:
    """Send a V1 (``instances``) or V2 (``inputs`` tensors) request to an InferenceService; print the response."""
    try:
        text = sys.stdin.read() if filename == "-" else open(filename, encoding="utf-8").read()
        body = json.loads(text)
    except OSError as exc:
        _fail(f"{filename}: {exc.strerror}")
    except ValueError as exc:
        _fail(f"{filename}: not JSON: {exc}")
    client = _client()
    try:
        isvc = client.get("InferenceService", namespace or "default", name)
    except APIError as exc:
        _fail(str(exc))
    url = (isvc.get("status") or {}).get("url")
    if not url:
        _fail(f"inferenceservice {name} has no URL yet (see: trimaran describe isvc {name})")
    request = urllib.request.Request(url + request_path(name, body), data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
    try:
        # The service is on this machine: an http_proxy in the environment must not be used for it.
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        _fail(f"{exc.code} from {url}: {detail}")
    except OSError as exc:
        _fail(f"{url}: {exc}")
    try:
        console.print_json(payload.decode())
    except ValueError:
        sys.stdout.write(payload.decode(errors="replace") + "\n")
