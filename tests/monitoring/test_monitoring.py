"""ServiceMonitor and PodMonitor through Prometheus' HTTP service discovery, the control plane's
/metrics, and a real Prometheus scraping with the generated configuration.

One control plane and one pod serving metrics (a small Python server as a host process) serve the
module; each test uses monitors of its own.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.cli.client import Client
from trimaran.server.monitoring import SD_PATH, prometheus_config_path

NS = "default"

METRICS_SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"demo_requests_total 3\\n" if self.path == "/metrics" else b"no"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["METRICS_PORT"])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


plane = shared_plane("monitoring")


@pytest.fixture(scope="module")
def metrics_pod(api: Client) -> dict:
    """A running pod serving /metrics on its container port named ``metrics``."""
    port = _free_port()
    container = {"name": "exporter", "image": "python", "command": ["python", "-c", METRICS_SERVER],
                 "env": [{"name": "METRICS_PORT", "value": str(port)}],
                 "ports": [{"name": "metrics", "containerPort": port}]}
    api.apply([{"object": {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "exporter", "namespace": NS, "labels": {"app": "exporter"}},
                           "spec": {"containers": [container]}}}])
    poll(lambda: api.get("Pod", NS, "exporter").get("status", {}).get("phase") == "Running", timeout=30,
         what="the exporter pod running")
    return {"name": "exporter", "port": port, "ip": api.get("Pod", NS, "exporter")["status"]["podIP"]}


def _request(plane: ControlPlaneHandle, path: str, token: str | None = None) -> tuple[int, bytes]:
    url, own_token, context = plane.endpoint()
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token or own_token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _groups_of(plane: ControlPlaneHandle, job: str, token: str | None = None) -> list[dict]:
    status, body = _request(plane, SD_PATH, token)
    assert status == 200, body
    return [g for g in json.loads(body) if g["labels"].get("job") == job]


def test_pod_monitor_selects_a_named_port(plane: ControlPlaneHandle, api: Client, metrics_pod: dict) -> None:
    api.apply([{"object": {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": "exporters", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "exporter"}}, "podTargetLabels": ["app"],
                 "podMetricsEndpoints": [{"port": "metrics", "interval": "1s", "params": {"format": ["text"]},
                                          "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_name"],
                                                           "targetLabel": "instance_pod", "regex": "ex(.*)"}]}]}}}])
    [group] = poll(lambda: _groups_of(plane, f"{NS}/exporters"), timeout=10, what="the PodMonitor's target")
    assert group["targets"] == [f"{metrics_pod['ip']}:{metrics_pod['port']}"]  # the pod's own address
    labels = group["labels"]
    assert {k: labels[k] for k in ("namespace", "pod", "container", "endpoint", "app", "__metrics_path__",
                                   "__scrape_interval__", "__param_format")} == {
        "namespace": NS, "pod": "exporter", "container": "exporter", "endpoint": "metrics", "app": "exporter",
        "__metrics_path__": "/metrics", "__scrape_interval__": "1s", "__param_format": "text"}
    assert labels["__meta_kubernetes_pod_label_app"] == "exporter"
    assert labels["instance_pod"] == "porter"  # the endpoint's relabelings ran on the target

    # The token rules of the API: another namespace's token sees none of this namespace's targets.
    other = plane.cli("token", "create", "--namespace", "elsewhere", "--role", "view").stdout.strip().split()[-1]
    assert _groups_of(plane, f"{NS}/exporters", other) == []
    assert _request(plane, SD_PATH, "not-a-token")[0] == 401


def test_service_monitor_selects_through_a_service(plane: ControlPlaneHandle, api: Client,
                                                   metrics_pod: dict) -> None:
    api.apply([
        {"object": {"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "exporter-svc", "namespace": NS, "labels": {"team": "ml"}},
                    "spec": {"selector": {"app": "exporter"},
                             "ports": [{"name": "web", "port": 9100, "targetPort": "metrics"}]}}},
        {"object": {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                    "metadata": {"name": "by-service", "namespace": NS},
                    "spec": {"selector": {"matchLabels": {"team": "ml"}}, "targetLabels": ["team"],
                             "endpoints": [{"port": "web", "path": "/metrics"}]}}},
    ])
    [group] = poll(lambda: _groups_of(plane, "exporter-svc"), timeout=15, what="the ServiceMonitor's target")
    assert group["targets"] == [f"{metrics_pod['ip']}:{metrics_pod['port']}"]  # the pod's own address
    labels = group["labels"]
    assert {k: labels[k] for k in ("service", "namespace", "pod", "endpoint", "team")} == {
        "service": "exporter-svc", "namespace": NS, "pod": "exporter", "endpoint": "web", "team": "ml"}


def test_bad_monitor_is_refused_with_the_field_path(plane: ControlPlaneHandle) -> None:
    bad = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "bad", "namespace": NS},
           "spec": {"selector": {}, "podMetricsEndpoints": [{"interval": "often"}]}}
    proc = plane.cli("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert "spec.podMetricsEndpoints[0].interval" in proc.stderr and "spec.podMetricsEndpoints[0].port" in proc.stderr


def test_metrics_count_objects_by_kind(plane: ControlPlaneHandle, metrics_pod: dict) -> None:
    status, body = _request(plane, "/metrics")
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body.decode()) for s in family.samples}
    assert samples[("trimaran_objects", (("kind", "Pod"), ("phase", "Running")))] >= 1
    assert samples[("trimaran_pods", (("phase", "Running"),))] >= 1
    assert samples[("trimaran_objects", (("kind", "Namespace"), ("phase", "Active")))] >= 1
    assert any(name == "controller_runtime_reconcile_time_seconds_count" and dict(labels)["controller"] == "kubelet"
               and value > 0 for (name, labels), value in samples.items())
    assert ("workqueue_depth", (("name", "kubelet"),)) in samples
    assert ("trimaran_katib_trials_created_total", ()) in samples

    namespaced = plane.cli("token", "create", "--namespace", NS, "--role", "admin").stdout.strip().split()[-1]
    assert _request(plane, "/metrics", namespaced)[0] == 403


def test_prometheus_scrapes_with_the_generated_config(plane: ControlPlaneHandle, api: Client, metrics_pod: dict,
                                                      tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the Debian package prometheus is not installed (scripts/test.sh installs it)")
    import joblib
    from sklearn.dummy import DummyClassifier

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    joblib.dump(DummyClassifier(strategy="constant", constant=1).fit([[0.0], [1.0]], [1, 0]),
                model_dir / "model.joblib")
    api.apply([
        {"object": {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
                    "metadata": {"name": "scraped", "namespace": NS},
                    "spec": {"selector": {"matchLabels": {"app": "exporter"}},
                             "podMetricsEndpoints": [{"port": "metrics", "interval": "1s"}]}}},
        {"object": {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                    "metadata": {"name": "scraped-model", "namespace": NS},
                    "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"},
                                                     "storageUri": str(model_dir)}}}}},
        # A model server's replicas by KServe's label, at KServe's container port (each replica's own here).
        {"object": {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
                    "metadata": {"name": "model-servers", "namespace": NS},
                    "spec": {"selector": {"matchLabels": {"serving.kserve.io/inferenceservice": "scraped-model"}},
                             "podMetricsEndpoints": [{"targetPort": 8080, "interval": "1s"}]}}},
    ])
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={prometheus_config_path(plane.home)}",
                             f"--web.listen-address=127.0.0.1:{port}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def both_up() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as response:
                    targets = json.load(response)["data"]["activeTargets"]
            except OSError:
                return False
            up = {t["labels"].get("job") for t in targets if t["health"] == "up"}
            return {f"{NS}/scraped", f"{NS}/model-servers"} <= up

        try:
            poll(both_up, timeout=90, interval=0.5, what="Prometheus scraping the pod and the model server")
        except AssertionError as exc:
            log.flush()
            raise AssertionError(f"{exc}\n{(tmp_path / 'prometheus.log').read_text()[-3000:]}") from None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
