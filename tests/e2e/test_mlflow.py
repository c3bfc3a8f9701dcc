"""Trials tracked in MLflow: a real MLflow tracking server (sqlite backend), a real control plane
started with MLFLOW_TRACKING_URI, real trials. Every trial is one run, with its parameters, its
metric history as stored, its outcome and its tags; a control plane killed mid-experiment keeps
logging to the same runs; MLflow down does not hold tuning up."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_tuning import _experiment, _state, _trials
from tests.helpers import poll

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("mlflow", "flask", "alembic")),
                       reason="needs the full mlflow package (its tracking server)"),
]

RUN_ID = "trimaran.io/mlflow-run-id"
RUN_STATUS = "trimaran.io/mlflow-run-status"
MLFLOW_STATUS = {"Succeeded": "FINISHED", "Failed": "FAILED", "MetricsUnavailable": "FAILED",
                 "EarlyStopped": "KILLED", "Killed": "KILLED"}
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

# A learning curve; the lowest level fails after printing it (a Failed trial, a FAILED run).
SCRIPT = textwrap.dedent("""
    import sys, time
    level = float(sys.argv[1])
    for step in range({steps}):
        print(f"step={{step}} score={{level * (step + 1):.4f}}", flush=True)
        time.sleep({pause})
    sys.exit(1 if level < 0.3 else 0)
""")
LEVELS = [{"name": "level", "parameterType": "categorical", "feasibleSpace": {"list": ["0.2", "0.5", "0.9"]}}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a port chosen up front, so a control plane can be pointed at it before
    it runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = root / "mlflow-server.log"

    def start(self, timeout: float = 90.0) -> None:
        if self.proc is None:
            cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                   "--default-artifact-root", str(self.root / "artifacts")]
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log.open("ab"),
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env=dict(os.environ, **QUIET))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"mlflow server exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"mlflow server not ready in {timeout}s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def client(self):  # noqa: ANN201
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.url)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        server.stop()


def _manifest(tmp_path: Path, name: str, steps: int, pause: float) -> str:
    """Three trials at once, one per level; the failing one is not retried (backoffLimit 0)."""
    path = _experiment(tmp_path, name, algorithm="grid", parameters=LEVELS, max_trials=3, parallel=3,
                       script=SCRIPT.format(steps=steps, pause=pause))
    doc = json.loads(Path(path).read_text())
    doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["backoffLimit"] = 0
    Path(path).write_text(json.dumps(doc))
    return path


def _tracked_plane(plane_with, server: MlflowServer):
    return plane_with(MLFLOW_TRACKING_URI=server.url, TRIMARAN_MLFLOW_BACKOFF_MAX="1", **QUIET)


def _annotations(trial: dict) -> dict:
    return trial["metadata"].get("annotations") or {}


def _observations(plane, trial: str) -> list[tuple[int, float, int]]:
    rows = plane.client()._json("GET", "/trimaran/v1/namespaces/default/observations",
                                params={"trial": trial, "metric": "score"})["items"]
    return sorted((int(r["step"]), float(r["value"]), int(float(r["timestamp"]) * 1000)) for r in rows)


def _history(client, run_id: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, "score"))


def _all_tracked(plane, experiment: str, count: int) -> list[dict]:
    trials = _trials(plane, experiment)
    done = len(trials) == count and all(_annotations(t).get(RUN_STATUS) for t in trials)
    return trials if done else []


def _check_runs(plane, client, experiment: str, trials: list[dict], algorithm: str) -> None:
    """One run per trial under the experiment ``default/<name>``, each matching its trial."""
    mlflow_experiment = client.get_experiment_by_name(f"default/{experiment}")
    assert mlflow_experiment is not None, "the MLflow experiment is named <namespace>/<name>"
    assert mlflow_experiment.tags["katib.experiment"] == experiment
    runs = client.search_runs([mlflow_experiment.experiment_id], max_results=100)
    assert sorted(r.data.tags["katib.trial"] for r in runs) == sorted(t["metadata"]["name"] for t in trials), \
        "exactly one run per trial"
    by_trial = {r.data.tags["katib.trial"]: r for r in runs}
    for trial in trials:
        name, state = trial["metadata"]["name"], _state(trial)
        run = by_trial[name]
        assert _annotations(trial)[RUN_ID] == run.info.run_id
        assert run.info.run_name == name
        assert run.data.params == {a["name"]: a["value"] for a in trial["spec"]["parameterAssignments"]}
        tags = run.data.tags
        assert (tags["katib.experiment"], tags["katib.namespace"], tags["katib.algorithm"]) == (
            experiment, "default", algorithm)
        assert tags["trimaran.trial_uid"] == trial["metadata"]["uid"]
        assert tags["trimaran.trial_state"] == state
        assert run.info.status == MLFLOW_STATUS[state] == _annotations(trial)[RUN_STATUS]
        stored = _observations(plane, name)
        assert stored and _history(client, run.info.run_id) == stored, \
            f"{name}: the run's score history is the stored observations, step by step, each once"


def test_trials_are_runs_even_when_mlflow_comes_up_late(plane_with, mlflow_server, tmp_path):
    # The control plane points at a port where nothing listens yet: tuning goes on regardless.
    plane = _tracked_plane(plane_with, mlflow_server)
    plane.cli("apply", "-f", _manifest(tmp_path, "late", steps=5, pause=0.1))
    log = plane.home / "server.log"
    poll(lambda: "failed for trial" in log.read_text(errors="replace"), timeout=60,
         what="a warning that MLflow is unreachable")

    mlflow_server.start()
    plane.cli("wait", "experiment/late", "--for=condition=Succeeded", "--timeout=180s")
    trials = poll(lambda: _all_tracked(plane, "late", 3), timeout=60, interval=0.3,
                  what="every trial's run to be ended once MLflow is up")
    assert sorted(_state(t) for t in trials) == ["Failed", "Succeeded", "Succeeded"]
    _check_runs(plane, mlflow_server.client(), "late", trials, "grid")
    assert "is reachable again" in log.read_text(errors="replace")


def test_a_killed_control_plane_logs_to_the_same_runs(plane_with, mlflow_server, tmp_path, monkeypatch):
    from trimaran.server.daemon import read_server_info, start_server

    mlflow_server.start()
    client = mlflow_server.client()
    plane = _tracked_plane(plane_with, mlflow_server)
    plane.cli("apply", "-f", _manifest(tmp_path, "restart", steps=12, pause=0.4))

    def logging_live() -> dict[str, str]:
        trials = _trials(plane, "restart")
        ids = {t["metadata"]["name"]: _annotations(t).get(RUN_ID) for t in trials}
        if len(ids) == 3 and all(ids.values()) and all(
                len(client.get_metric_history(run_id, "score")) >= 2 for run_id in ids.values()):
            return ids
        return {}

    before = poll(logging_live, timeout=60, interval=0.2, what="every trial logging to its run")
    assert all(_state(t) not in MLFLOW_STATUS for t in _trials(plane, "restart")), "killed mid-trial"
    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    for name, value in {"MLFLOW_TRACKING_URI": mlflow_server.url, "TRIMARAN_MLFLOW_BACKOFF_MAX": "1",
                        **QUIET}.items():
        monkeypatch.setenv(name, value)
    start_server(home=plane.home)

    plane.cli("wait", "experiment/restart", "--for=condition=Succeeded", "--timeout=180s")
    trials = poll(lambda: _all_tracked(plane, "restart", 3), timeout=60, interval=0.3,
                  what="every trial's run to be ended")
    assert {t["metadata"]["name"]: _annotations(t)[RUN_ID] for t in trials} == before, "the same runs"
    _check_runs(plane, client, "restart", trials, "grid")
    assert all(len(_observations(plane, t["metadata"]["name"])) == 12 for t in trials)


def test_every_outcome_maps_to_a_run_status_and_mlflow_down_is_harmless(mlflow_server, tmp_path):
    """The tracker on its own, against a real store: each trial state's run status, a run found
    again when the annotation was lost, a deleted trial's run ended, an unreachable server."""
    from trimaran.controllers.tuning.tracking import MlflowTracker
    from trimaran.store import open_store

    mlflow_server.start()
    store = open_store(tmp_path / "store.db")
    store.ensure_namespace("default")
    objective = {"type": "minimize", "objectiveMetricName": "loss"}
    store.create({"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
                  "metadata": {"name": "unit", "namespace": "default"},
                  "spec": {"objective": objective, "algorithm": {"algorithmName": "tpe"},
                           "earlyStopping": {"algorithmName": "medianstop"}}})

    def trial(name: str) -> dict:
        return store.create({"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial", "metadata": {
            "name": name, "namespace": "default", "labels": {"katib.kubeflow.org/experiment": "unit"}},
            "spec": {"objective": objective, "parameterAssignments": [{"name": "lr", "value": name[-1]}]},
            "status": {}})

    def end(obj: dict, state: str) -> dict:
        obj = store.get("Trial", "default", obj["metadata"]["name"])
        obj["status"] = {"conditions": [{"type": state, "status": "True"}], "completionTime": "2030-01-02T03:04:05Z"}
        return store.update_status(obj)

    tracker = MlflowTracker(store, mlflow_server.url)
    client = mlflow_server.client()
    for i, state in enumerate(MLFLOW_STATUS):
        t = trial(f"t{i}")
        tracker.start(t)
        store.add_observations("default", t["metadata"]["name"], t["metadata"]["uid"],
                               [{"metric": "loss", "value": 1.0 / (s + 1), "step": s, "timestamp": 1.7e9 + s}
                                for s in range(3)])
        tracker.observe(t)
        t = end(t, state)
        assert tracker.finish(t, state) is None
        t = store.get("Trial", "default", t["metadata"]["name"])
        run = client.get_run(_annotations(t)[RUN_ID])
        assert (run.info.status, _annotations(t)[RUN_STATUS]) == (MLFLOW_STATUS[state],) * 2
        assert run.info.end_time == 1893553445000
        assert run.data.tags["katib.early_stopping"] == "medianstop" and run.data.params == {"lr": str(i)}
        assert [(m.step, m.value, m.timestamp) for m in client.get_metric_history(run.info.run_id, "loss")] == [
            (s, 1.0 / (s + 1), int((1.7e9 + s) * 1000)) for s in range(3)]

    # The run was created but the controller died before annotating the trial: a new controller
    # finds the run by the trial's uid instead of creating a second one, and logs only what is missing.
    lost = trial("lost1")
    tracker.start(lost)
    run_id = store.get("Trial", "default", "lost1")["metadata"]["annotations"][RUN_ID]
    store.add_observations("default", "lost1", lost["metadata"]["uid"],
                           [{"metric": "loss", "value": 0.5, "step": 0, "timestamp": 1.7e9}])
    tracker.observe(lost)
    fresh = store.get("Trial", "default", "lost1")
    fresh["metadata"]["annotations"] = {}
    store.update(fresh)
    store.add_observations("default", "lost1", lost["metadata"]["uid"],
                           [{"metric": "loss", "value": 0.25, "step": 1, "timestamp": 1.7e9 + 1}])
    again = MlflowTracker(store, mlflow_server.url)
    again.observe(store.get("Trial", "default", "lost1"))
    assert _annotations(store.get("Trial", "default", "lost1"))[RUN_ID] == run_id
    assert [m.value for m in client.get_metric_history(run_id, "loss")] == [0.5, 0.25]
    experiment_id = client.get_experiment_by_name("default/unit").experiment_id
    assert len(client.search_runs([experiment_id], "tags.`katib.trial` = 'lost1'")) == 1

    # A trial deleted while running: its run is ended.
    store.delete("Trial", "default", "lost1")
    again.deleted("default", "lost1")
    assert client.get_run(run_id).info.status == "KILLED"

    # MLflow unreachable: no exception, no stall, a retry later; the trial is untouched.
    down = MlflowTracker(store, f"http://127.0.0.1:{_free_port()}")
    t = trial("down1")
    started = time.monotonic()
    down.start(t)
    down.observe(t)
    t = end(t, "Succeeded")
    delay = down.finish(t, "Succeeded")
    assert delay is not None and delay > 0 and time.monotonic() - started < 10
    assert not _annotations(store.get("Trial", "default", "down1"))
    assert store.get("Trial", "default", "down1")["status"]["conditions"][0]["type"] == "Succeeded"
