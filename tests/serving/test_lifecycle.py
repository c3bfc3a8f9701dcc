"""Worker processes: SIGTERM drains, no orphans when the supervisor dies, metrics summed over workers."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import joblib
import psutil

from tests.helpers import poll
from tests.serving.models import EchoRows
from tests.serving.test_batching import metric, rows_body


def echo_dir(tmp_path: Path) -> Path:
    base = tmp_path / "echo"
    (base / "1").mkdir(parents=True)
    joblib.dump(EchoRows(), base / "1" / "model.joblib")
    return base


def test_sigterm_drains_in_flight_requests(start_server, tmp_path: Path) -> None:
    server = start_server(echo_dir(tmp_path), name="echo", workers=2).wait_ready()
    workers = server.worker_pids()
    assert len(workers) == 2
    answer: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answer.append(httpx.post(
        f"{server.url}/v2/models/echo/infer", json=rows_body([4.0], 1.0), timeout=10)))
    thread.start()
    poll(lambda: metric(server, "trimaran_inflight_requests") == 1, what="request in flight")
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    thread.join()
    assert answer[0].status_code == 200 and answer[0].json()["outputs"][0]["data"] == [8.0]
    assert server.process.wait(10) == 0
    assert time.monotonic() - started < 5
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in workers)
    log = server.log()
    assert "draining" in log and "server stopped" in log
    try:
        httpx.get(f"{server.url}/v2/health/live", timeout=2)
        raise AssertionError("the server still accepts connections")
    except httpx.TransportError:
        pass


def test_no_orphan_workers_when_the_supervisor_is_killed(start_server, tmp_path: Path) -> None:
    server = start_server(echo_dir(tmp_path), name="echo", workers=2).wait_ready()
    workers = [psutil.Process(pid) for pid in server.worker_pids()]
    assert len(workers) == 2
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()

    def gone() -> bool:
        return not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)

    poll(gone, timeout=15, what="workers to exit after their supervisor died")


def test_metrics_from_two_workers_add_up(start_server, tmp_path: Path) -> None:
    server = start_server(echo_dir(tmp_path), name="echo", workers=2).wait_ready()
    workers = server.worker_pids()
    # Each request on a new connection: the kernel spreads connections over the workers (SO_REUSEPORT).
    poll(lambda: all(httpx.get(f"{server.url}/v2/health/ready").status_code == 200 for _ in range(10)),
         what="both workers ready")
    for i in range(40):
        r = httpx.post(f"{server.url}/v2/models/echo/infer", json=rows_body([float(i)]))
        assert r.status_code == 200
    for _ in range(5):
        assert httpx.post(f"{server.url}/v1/models/echo:predict", json={"instances": [[1, 0]]}).status_code == 200
    assert httpx.post(f"{server.url}/v2/models/echo/infer", json={"inputs": []}).status_code == 400
    assert metric(server, "trimaran_requests_total", protocol="v2", code="200", model_name="echo") == 40
    assert metric(server, "trimaran_requests_total", protocol="v1", code="200") == 5
    assert metric(server, "trimaran_requests_total", protocol="v2", code="400") == 1
    assert metric(server, "trimaran_request_duration_seconds_count", protocol="v2") == 41
    assert metric(server, "request_predict_seconds_count", model_name="echo") == 45
    assert metric(server, "trimaran_inflight_requests") == 0
    # Both workers wrote their share into the server's private metrics directory.
    directory = Path(psutil.Process(workers[0]).environ()["PROMETHEUS_MULTIPROC_DIR"])
    writers = {f.stem.rsplit("_", 1)[1] for f in directory.glob("counter_*.db")}
    assert writers == {str(pid) for pid in workers}
    server.stop()
    assert not directory.exists()


def test_trimaran_serve_command(digits_dir: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers import REPO
    from tests.serving.conftest import free_port

    port = free_port()
    log = (tmp_path / "serve.log").open("w+")
    process = subprocess.Popen([sys.executable, "-m", "trimaran.cli", "serve", str(digits_dir), "--name", "digits",
                                "--http-port", str(port), "--grpc-port", "0", "--workers", "1"],
                               stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        poll(lambda: _ready(f"http://127.0.0.1:{port}"), timeout=30, what="trimaran serve ready")
        assert httpx.post(f"http://127.0.0.1:{port}/v1/models/digits:predict",
                          json={"instances": [[0.0] * 64]}).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(15)
    log.seek(0)
    output = log.read()
    assert code == 0, output
    assert "trimaran serve" in output and f"http://127.0.0.1:{port}" in output and "server stopped" in output


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v2/health/ready").status_code == 200
    except httpx.TransportError:
        return False


def test_a_crashed_worker_is_replaced(start_server, tmp_path: Path) -> None:
    server = start_server(echo_dir(tmp_path), name="echo", workers=2, grpc=False).wait_ready()
    victim, survivor = server.worker_pids()
    os.kill(victim, signal.SIGKILL)
    poll(lambda: len(pids := server.worker_pids()) == 2 and victim not in pids, what="a replacement worker")
    assert survivor in server.worker_pids()
    # New connections may land on either worker: all of them are answered once the replacement listens.
    poll(lambda: all(_ready(server.url) for _ in range(10)), what="both workers serving")
    assert "restarting worker" in server.log()
    assert metric(server, "trimaran_inflight_requests") == 0


def test_a_port_in_use_is_refused(start_server, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers import REPO

    model = echo_dir(tmp_path)
    first = start_server(model, name="echo", grpc=False).wait_ready()
    second = subprocess.run([sys.executable, "-m", "trimaran.serving", "--model-name", "echo", "--model-dir",
                             str(model), "--http-port", str(first.http_port), "--grpc-port", "0"],
                            capture_output=True, text=True, cwd=REPO, timeout=30)
    assert second.returncode == 2
    assert "already served by another process" in second.stderr
