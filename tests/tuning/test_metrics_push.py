"""report_metrics against a tiny stdlib HTTP server standing in for the control plane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers import REPO
from trimaran.tuning.metrics.push import NotInTrialError, ReportError, report_metrics, trial_identity


@dataclass
class Received:
    requests: list[dict] = field(default_factory=list)
    status: int = 200


@pytest.fixture
def server() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
            reply = b'{"accepted": true}' if received.status == 200 else b"trial is finished"
            self.send_response(received.status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:  # keep pytest's output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_report_posts_observations(server: tuple[str, Received]) -> None:
    url, received = server
    env = {"TRIMARAN_TRIAL": "team-a/random-abc123", "TRIMARAN_API": url + "/", "TRIMARAN_TOKEN": "s3cret"}
    report_metrics({"loss": 0.25, "accuracy": "0.9"}, step=3, environ=env)
    [request] = received.requests
    assert request["path"] == "/trimaran/v1/namespaces/team-a/trials/random-abc123/observations"
    assert request["headers"]["Authorization"] == "Bearer s3cret"
    assert request["headers"]["Content-Type"] == "application/json"
    observations = request["body"]["observations"]
    assert [(o["metric"], o["value"], o["step"]) for o in observations] == [("loss", 0.25, 3), ("accuracy", 0.9, 3)]
    assert observations[0]["timestamp"] == observations[1]["timestamp"] > 1e9


def test_katib_trial_name_and_no_step(server: tuple[str, Received]) -> None:
    url, received = server
    report_metrics({"loss": float("nan")}, environ={"KATIB_TRIAL_NAME": "t1", "TRIMARAN_API": url})
    [request] = received.requests
    assert request["path"] == "/trimaran/v1/namespaces/default/trials/t1/observations"
    assert "Authorization" not in request["headers"]
    assert request["body"]["observations"][0]["step"] is None
    assert request["body"]["observations"][0]["value"] == "nan"  # JSON has no NaN
    report_metrics({"loss": 1}, environ={"KATIB_TRIAL_NAME": "t1", "TRIMARAN_NAMESPACE": "ns", "TRIMARAN_API": url})
    assert received.requests[1]["path"] == "/trimaran/v1/namespaces/ns/trials/t1/observations"


def test_refusal_is_an_error(server: tuple[str, Received]) -> None:
    url, received = server
    received.status = 409
    with pytest.raises(ReportError, match="409: trial is finished"):
        report_metrics({"loss": 0.5}, environ={"TRIMARAN_TRIAL": "ns/t", "TRIMARAN_API": url})


def test_unreachable_control_plane() -> None:
    with pytest.raises(ReportError, match="cannot reach"):
        report_metrics({"loss": 0.5}, environ={"TRIMARAN_TRIAL": "ns/t", "TRIMARAN_API": "http://127.0.0.1:9"},
                       timeout=5)


def test_outside_a_trial() -> None:
    with pytest.raises(NotInTrialError, match="only inside a trial"):
        report_metrics({"loss": 0.5}, environ={})
    with pytest.raises(NotInTrialError, match="TRIMARAN_API"):
        report_metrics({"loss": 0.5}, environ={"TRIMARAN_TRIAL": "ns/t"})
    with pytest.raises(NotInTrialError, match="<namespace>/<trial name>"):
        trial_identity({"TRIMARAN_TRIAL": "just-a-name"})


def test_bad_values_are_refused_before_sending() -> None:
    env = {"TRIMARAN_TRIAL": "ns/t", "TRIMARAN_API": "http://127.0.0.1:9"}
    with pytest.raises(ValueError, match="not a number"):
        report_metrics({"loss": "high"}, environ=env)
    with pytest.raises(ValueError, match="not a number"):
        report_metrics({"loss": True}, environ=env)
    with pytest.raises(ValueError, match="step"):
        report_metrics({"loss": 0.1}, step=-1, environ=env)


def test_from_a_training_process(server: tuple[str, Received]) -> None:
    """As a trial uses it: the environment the controller injects, in a separate process."""
    url, received = server
    env = {**os.environ, "TRIMARAN_TRIAL": "default/trial-x", "TRIMARAN_API": url}
    env.pop("TRIMARAN_TOKEN", None)
    code = ("from trimaran.tuning.metrics.push import report_metrics\n"
            "for step in range(3):\n"
            "    report_metrics({'loss': 1.0 / (step + 1)}, step=step)\n")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, check=True, timeout=60)
    got = [o for r in received.requests for o in r["body"]["observations"]]
    assert [(o["metric"], o["step"]) for o in got] == [("loss", 0), ("loss", 1), ("loss", 2)]



def test_proxies_are_not_used_for_a_local_control_plane(server: tuple[str, Received]) -> None:
    # In a fresh process: urllib reads the proxy variables once, when its first opener is built.
    url, received = server
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "trimaran_token")}
    env.update({"TRIMARAN_TRIAL": "ns/t", "TRIMARAN_API": url, "HTTP_PROXY": "http://127.0.0.1:9",
                "http_proxy": "http://127.0.0.1:9"})
    code = "from trimaran.tuning.metrics.push import report_metrics; report_metrics({'loss': 0.5})"
    subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, check=True, timeout=60)
    assert len(received.requests) == 1
