"""Katib Experiments run locally: real trials (jobs), metrics from stdout, the best trial, early
stopping, failures, and a control plane killed mid-experiment."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import textwrap

import pytest

from tests.conftest import shared_plane
from tests.helpers import EXAMPLES, pod_processes_of, poll

pytestmark = pytest.mark.heavy


plane = shared_plane("tuning")


# Prints a learning curve whose level is the trial's `level` parameter.
CURVE = textwrap.dedent("""
    import sys, time
    level = float(sys.argv[1])
    for step in range(8):
        print(f"step={step} score={level * (1 - 0.5 ** (step + 1)):.4f}", flush=True)
        time.sleep(0.15)
""")


def _experiment(tmp_path, name: str, *, algorithm: str = "random", settings: dict | None = None,
                parameters: list | None = None, max_trials: int | None = 4, parallel: int = 2,
                script: str = CURVE, early: dict | None = None, extra: dict | None = None) -> str:
    spec = {
        "objective": {"type": "maximize", "objectiveMetricName": "score"},
        "algorithm": {"algorithmName": algorithm,
                      "algorithmSettings": [{"name": k, "value": v} for k, v in (settings or {}).items()]},
        "parallelTrialCount": parallel,
        "parameters": parameters or [{"name": "level", "parameterType": "double",
                                      "feasibleSpace": {"min": "0.1", "max": "1.0"}}],
        "trialTemplate": {
            "primaryContainerName": "main",
            "trialParameters": [{"name": "level", "reference": "level"}],
            "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "x",
                                "command": ["python", "-c", script, "${trialParameters.level}"]}]}}}},
        },
    }
    if max_trials is not None:
        spec["maxTrialCount"] = max_trials
    if early:
        spec["earlyStopping"] = early
    spec.update(extra or {})
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
                                "metadata": {"name": name}, "spec": spec}))
    return str(path)


def _trials(plane, experiment: str, ns: str = "default") -> list[dict]:
    return plane.client().list("Trial", ns, f"katib.kubeflow.org/experiment={experiment}")


def _claims_of(plane, experiment: str) -> list[dict]:
    """The experiment's volume claims: those it owns, or named as Katib names its suggestion's."""
    return [c for c in plane.client().list("PersistentVolumeClaim", "default")
            if c["metadata"]["name"].startswith(f"{experiment}-")
            or any(r["kind"] == "Experiment" and r["name"] == experiment
                   for r in c["metadata"].get("ownerReferences") or [])]


def _state(obj: dict) -> str:
    true = [c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c["status"] == "True"]
    return true[-1] if true else ""


def test_seed_experiment_runs_and_reports_the_best_trial(plane):
    d = EXAMPLES / "katib-digits"
    plane.cli("apply", "-n", "kubeflow", "-f", str(d / "code-configmap.yaml"), "-f", str(d / "experiment.yaml"))
    plane.cli("wait", "experiment/cnn-hyperparameter-tuning", "-n", "kubeflow", "--for=condition=Succeeded",
              "--timeout=300s")
    exp = plane.get("experiment", "cnn-hyperparameter-tuning", namespace="kubeflow")
    trials = _trials(plane, "cnn-hyperparameter-tuning", "kubeflow")
    assert 1 <= len(trials) <= 6 and exp["status"]["trials"] == len(trials)
    best = exp["status"]["currentOptimalTrial"]
    assert {a["name"] for a in best["parameterAssignments"]} == {
        "learning_rate", "batch_size", "num_layers", "optimizer", "dropout_rate"}
    assert {m["name"] for m in best["observation"]["metrics"]} == {"accuracy", "loss", "val_accuracy"}
    best_accuracy = max(float(m["max"]) for t in trials if _state(t) == "Succeeded"
                        for m in t["status"]["observation"]["metrics"] if m["name"] == "accuracy")
    assert float(next(m["max"] for m in best["observation"]["metrics"] if m["name"] == "accuracy")) == best_accuracy
    reason = [c for c in exp["status"]["conditions"] if c["type"] == "Succeeded"][0]["reason"]
    assert reason in ("ExperimentGoalReached", "ExperimentMaxTrialsReached")

    out = plane.cli("trials", "cnn-hyperparameter-tuning", "-n", "kubeflow", "-o", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["trial"] == best["bestTrialName"] and len(rows) == len(trials)
    assert "Best Trial" in plane.cli("describe", "experiment", "cnn-hyperparameter-tuning", "-n", "kubeflow").stdout
    # Every observation of every epoch is stored, for curves and median rules.
    points = plane.client()._json("GET", "/trimaran/v1/namespaces/kubeflow/observations",
                                  params={"trial": best["bestTrialName"], "metric": "val_accuracy"})["items"]
    assert len(points) >= 2


def test_grid_covers_the_grid_once_then_ends(plane, tmp_path):
    params = [{"name": "level", "parameterType": "discrete", "feasibleSpace": {"list": ["0.2", "0.4", "0.6"]}},
              {"name": "unused", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "2"}}]
    plane.cli("apply", "-f", _experiment(tmp_path, "grid", algorithm="grid", parameters=params, max_trials=None))
    plane.cli("wait", "experiment/grid", "--for=condition=Succeeded", "--timeout=180s")
    trials = _trials(plane, "grid")
    combos = {tuple(sorted((a["name"], a["value"]) for a in t["spec"]["parameterAssignments"])) for t in trials}
    assert len(trials) == 6 and len(combos) == 6
    exp = plane.get("experiment", "grid")
    assert [c for c in exp["status"]["conditions"] if c["type"] == "Succeeded"][0]["reason"] == \
        "ExperimentSuggestionEndReached"
    best = exp["status"]["currentOptimalTrial"]["parameterAssignments"]
    assert {"name": "level", "value": "0.6"} in best


def test_median_stop_ends_poor_trials_early(plane, tmp_path):
    early = {"algorithmName": "medianstop",
             "algorithmSettings": [{"name": "min_trials_required", "value": "2"},
                                   {"name": "start_step", "value": "2"}]}
    params = [{"name": "level", "parameterType": "categorical",
               "feasibleSpace": {"list": ["0.9", "0.8", "0.1", "0.85", "0.05", "0.15"]}}]
    # Without random_state the grid is walked in list order, one trial at a time: the two good
    # trials finish first, and the poor ones are then measured against their median.
    plane.cli("apply", "-f", _experiment(tmp_path, "median", algorithm="grid", parameters=params,
                                         max_trials=6, parallel=1, early=early))
    plane.cli("wait", "experiment/median", "--for=condition=Succeeded", "--timeout=240s")
    trials = _trials(plane, "median")
    stopped = [t for t in trials if _state(t) == "EarlyStopped"]
    finished_high = [t for t in trials if _state(t) == "Succeeded"]
    assert stopped, [(_state(t), t["spec"]["parameterAssignments"]) for t in trials]
    for t in stopped:
        level = float(t["spec"]["parameterAssignments"][0]["value"])
        assert level < 0.5, "only the poor trials are stopped"
        message = [c for c in t["status"]["conditions"] if c["type"] == "EarlyStopped"][0]["message"]
        assert "median" in message
    assert finished_high
    assert plane.get("experiment", "median")["status"]["trialsEarlyStopped"] == len(stopped)


def test_missing_metrics_and_max_failed_trials(plane, tmp_path):
    silent = "import sys\nprint('no metrics here', sys.argv[1])"
    plane.cli("apply", "-f", _experiment(tmp_path, "silent", script=silent, max_trials=4,
                                         extra={"maxFailedTrialCount": 2}))
    plane.cli("wait", "experiment/silent", "--for=condition=Failed", "--timeout=180s")
    trials = _trials(plane, "silent")
    unavailable = [t for t in trials if _state(t) == "MetricsUnavailable"]
    assert len(unavailable) >= 2
    message = [c for c in unavailable[0]["status"]["conditions"] if c["type"] == "MetricsUnavailable"][0]["message"]
    assert "no metrics here" in message, "the last lines of the trial's log explain why"


def test_bad_search_space_is_rejected_at_apply(plane, tmp_path):
    params = [{"name": "level", "parameterType": "double", "feasibleSpace": {"min": "0.9", "max": "0.1"}}]
    proc = plane.cli("apply", "-f", _experiment(tmp_path, "bad", parameters=params), check=False)
    assert proc.returncode != 0 and "spec.parameters[0].feasibleSpace" in proc.stderr
    assert plane.cli("get", "experiment", "bad", check=False).returncode != 0


def test_kill_minus_nine_mid_experiment_loses_and_duplicates_nothing(fresh_plane, tmp_path):
    from trimaran.server.daemon import read_server_info, start_server

    plane = fresh_plane
    plane.cli("apply", "-f", _experiment(tmp_path, "crash", max_trials=6, parallel=2,
                                         settings={"random_state": "7"}))
    poll(lambda: any(_state(t) == "Succeeded" for t in _trials(plane, "crash")), timeout=120,
         what="a first finished trial")
    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    start_server(home=plane.home)
    plane.cli("wait", "experiment/crash", "--for=condition=Succeeded", "--timeout=240s")
    trials = _trials(plane, "crash")
    assert len(trials) == 6 and len({t["metadata"]["name"] for t in trials}) == 6
    assignments = [t["spec"]["parameterAssignments"][0]["value"] for t in trials]
    assert len(set(assignments)) == 6, "no assignment was suggested twice"
    exp = plane.get("experiment", "crash")
    assert exp["status"]["trialsSucceeded"] == 6


def test_long_running_experiment_continues_when_max_trials_is_raised(plane, tmp_path):
    path = _experiment(tmp_path, "resume", max_trials=2, settings={"random_state": "5"},
                       extra={"resumePolicy": "LongRunning"})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/resume", "--for=condition=Succeeded", "--timeout=180s")
    first = {t["metadata"]["name"] for t in _trials(plane, "resume")}
    assert len(first) == 2
    # LongRunning keeps the suggestion running after the experiment completes (and has no volume).
    assert _state(plane.get("suggestion", "resume")) == "Running"
    assert _claims_of(plane, "resume") == []
    doc = json.loads(open(path).read())
    # Katib's webhook: only the three trial counts are editable; a file that also changes the
    # algorithm is refused whole, naming the field, and changes nothing.
    edited = json.loads(json.dumps(doc))
    edited["spec"]["maxTrialCount"] = 4
    edited["spec"]["algorithm"]["algorithmName"] = "tpe"
    open(path, "w").write(json.dumps(edited))
    refused = plane.cli("apply", "-f", path, check=False)
    assert refused.returncode != 0
    assert 'Experiment "resume": spec.algorithm: Forbidden: only spec.parallelTrialCount' in refused.stderr
    assert plane.get("experiment", "resume")["spec"]["maxTrialCount"] == 2
    doc["spec"]["maxTrialCount"] = 4
    open(path, "w").write(json.dumps(doc))
    assert "configured" in plane.cli("apply", "-f", path).stdout
    poll(lambda: len(_trials(plane, "resume")) == 4, timeout=120, what="two more trials")
    poll(lambda: _state(plane.get("experiment", "resume")) == "Succeeded"
         and plane.get("experiment", "resume")["status"]["trialsSucceeded"] == 4, timeout=180,
         what="the resumed experiment to finish")
    events = plane.cli("describe", "experiment", "resume").stdout
    assert "ExperimentRestarting" in events
    assert first < {t["metadata"]["name"] for t in _trials(plane, "resume")}, "earlier trials are kept"


def test_from_volume_experiment_keeps_its_volume_and_restarts_its_finished_suggestion(plane, tmp_path):
    path = _experiment(tmp_path, "fromvol", max_trials=2, settings={"random_state": "5"},
                       extra={"resumePolicy": "FromVolume"})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/fromvol", "--for=condition=Succeeded", "--timeout=180s")
    volume = plane.home / "volumes" / "default" / "fromvol-random"
    # Katib's FromVolume: the suggestion ends with the experiment; its volume stays for a restart.
    suggestion = plane.get("suggestion", "fromvol")
    assert _state(suggestion) == "Succeeded"
    assert "volume fromvol-random is kept" in suggestion["status"]["conditions"][-1]["message"]
    assert plane.get("persistentvolumeclaim", "fromvol-random")["status"]["phase"] == "Bound" and volume.is_dir()

    doc = json.loads(open(path).read())
    doc["spec"]["maxTrialCount"] = 4
    open(path, "w").write(json.dumps(doc))
    plane.cli("apply", "-f", path)
    poll(lambda: plane.get("experiment", "fromvol")["status"].get("trialsSucceeded") == 4
         and _state(plane.get("experiment", "fromvol")) == "Succeeded", timeout=180, what="the restarted experiment")
    assert "restored from volume fromvol-random" in plane.cli("describe", "experiment", "fromvol").stdout
    assert plane.get("suggestion", "fromvol")["status"]["suggestionCount"] == 4

    plane.cli("delete", "experiment", "fromvol")
    poll(lambda: not volume.exists(), timeout=30, what="the volume directory to go with the experiment")


def test_never_experiment_cannot_be_restarted(plane, tmp_path):
    path = _experiment(tmp_path, "once", max_trials=2, settings={"random_state": "5"})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/once", "--for=condition=Succeeded", "--timeout=180s")
    suggestion = plane.get("suggestion", "once")
    assert _state(suggestion) == "Succeeded" and "cannot be restarted" in suggestion["status"]["conditions"][-1][
        "message"]
    assert _claims_of(plane, "once") == []
    doc = json.loads(open(path).read())
    doc["spec"]["maxTrialCount"] = 4
    open(path, "w").write(json.dumps(doc))
    refused = plane.cli("apply", "-f", path, check=False)
    assert refused.returncode != 0
    assert ('Experiment "once": spec.maxTrialCount: Forbidden: the experiment has completed and its resumePolicy '
            "is Never") in refused.stderr
    assert plane.get("experiment", "once")["spec"]["maxTrialCount"] == 2 and len(_trials(plane, "once")) == 2


def test_trials_can_be_distributed_pytorch_jobs(plane, tmp_path):
    script = textwrap.dedent("""
        import os, sys
        rank = int(os.environ["RANK"])
        level = float(sys.argv[1])
        if rank == 0:
            for step in range(3):
                print(f"score={level * (step + 1):.3f} world={os.environ['WORLD_SIZE']}", flush=True)
    """)
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "x", "command": ["python", "-c", script, "${trialParameters.level}"]}]}}}
    trial_spec = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                  "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": {**replica, "replicas": 2}}}}
    path = _experiment(tmp_path, "ddp", max_trials=2, parallel=1,
                       extra={"trialTemplate": {"primaryContainerName": "pytorch",
                                                "trialParameters": [{"name": "level", "reference": "level"}],
                                                "trialSpec": trial_spec}})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/ddp", "--for=condition=Succeeded", "--timeout=180s")
    trials = _trials(plane, "ddp")
    assert len(trials) == 2 and all(_state(t) == "Succeeded" for t in trials)
    for t in trials:
        level = float(t["spec"]["parameterAssignments"][0]["value"])
        latest = next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")["latest"]
        assert abs(float(latest) - round(level * 3, 3)) < 1e-6, "metrics come from the master replica"


@pytest.mark.parametrize("api_version", ["kubeflow.org/v1", "kubeflow.org/v2beta1"])
def test_trials_can_be_mpi_jobs(plane, tmp_path, api_version):
    # Two ranks under OpenMPI allreduce their shares of the score; rank 0 prints it from the
    # launcher, the trial's primary pod (job-role master in v1, launcher in v2beta1).
    script = textwrap.dedent("""
        import sys
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        level = float(sys.argv[1])
        for step in range(3):
            score = comm.allreduce(level * (step + 1) / comm.size)
            if comm.rank == 0:
                print(f"score={score:.3f} ranks={comm.size}", flush=True)
    """)
    command = ["mpirun", "--allow-run-as-root", "-np", "2", "-bind-to", "none",
               "python", "-c", script, "${trialParameters.level}"]
    pod = {"spec": {"containers": [{"name": "mpi", "image": "x"}]}}
    trial_spec = {"apiVersion": api_version, "kind": "MPIJob", "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "mpi", "image": "x", "command": command}]}}},
        "Worker": {"replicas": 2, "template": pod}}}}
    name = "mpi-" + api_version.rsplit("/", 1)[1]
    path = _experiment(tmp_path, name, max_trials=2, parallel=1,
                       extra={"trialTemplate": {"primaryContainerName": "mpi",
                                                "trialParameters": [{"name": "level", "reference": "level"}],
                                                "trialSpec": trial_spec}})
    plane.cli("apply", "-f", path)
    plane.cli("wait", f"experiment/{name}", "--for=condition=Succeeded", "--timeout=180s")
    trials = _trials(plane, name)
    assert len(trials) == 2 and all(_state(t) == "Succeeded" for t in trials)
    for t in trials:
        level = float(t["spec"]["parameterAssignments"][0]["value"])
        latest = next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")["latest"]
        assert abs(float(latest) - round(level * 3, 3)) < 1e-6, "the launcher's log carries rank 0's output"
    poll(lambda: not pod_processes_of(plane, "default", f"{name}-"), timeout=30,
         what="every trial's launcher and workers ended")


def test_trials_push_metrics_with_report_metrics(plane, tmp_path):
    script = textwrap.dedent("""
        import sys
        from trimaran.tuning.metrics.push import report_metrics
        level = float(sys.argv[1])
        for step in range(3):
            report_metrics({"score": level + step}, step=step)
    """)
    path = _experiment(tmp_path, "push", script=script, max_trials=2,
                       extra={"metricsCollectorSpec": {"collector": {"kind": "Push"}}})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/push", "--for=condition=Succeeded", "--timeout=180s")
    for t in _trials(plane, "push"):
        level = float(t["spec"]["parameterAssignments"][0]["value"])
        score = next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")
        assert abs(float(score["max"]) - (level + 2)) < 1e-9 and abs(float(score["min"]) - level) < 1e-9
    # A finished trial's record is final: a late push is refused, as by Katib's DB manager here.
    from trimaran.cli.client import APIError

    finished = _trials(plane, "push")[0]["metadata"]["name"]
    with pytest.raises(APIError) as refused:
        plane.client()._json("POST", f"/trimaran/v1/namespaces/default/trials/{finished}/observations",
                             {"observations": [{"metric": "score", "value": 99.0}]})
    assert refused.value.status == 409 and "finished" in str(refused.value)


def test_the_seed_grid_sweep_as_a_katib_grid_finds_the_indexed_jobs_best(plane):
    d = EXAMPLES / "katib-grid"
    plane.cli("apply", "-f", str(d / "code-configmap.yaml"), "-f", str(d / "experiment.yaml"))
    plane.cli("wait", "experiment/digits-grid", "--for=condition=Succeeded", "--timeout=300s")
    exp = plane.get("experiment", "digits-grid")
    assert exp["status"]["trials"] == 8 and exp["status"]["trialsSucceeded"] == 8
    best = {a["name"]: a["value"] for a in exp["status"]["currentOptimalTrial"]["parameterAssignments"]}
    # examples/indexed-sweep's analyze.py finds this set best with the same model and split.
    assert best == {"batch_size": "32", "learning_rate": "0.1", "momentum": "0.5"}


def test_deleting_an_experiment_removes_its_trials_jobs_and_processes(fresh_plane, tmp_path):
    plane = fresh_plane
    slow = "import sys, time\nprint('score=0.5', flush=True)\ntime.sleep(600)"
    plane.cli("apply", "-f", _experiment(tmp_path, "doomed", script=slow, max_trials=4, parallel=2))
    poll(lambda: len(plane.pod_processes()) >= 2, timeout=60, what="two trials running")
    plane.cli("delete", "experiment", "doomed")
    poll(lambda: not plane.pod_processes(), timeout=60, what="every trial process to stop")
    for kind in ("Trial", "Job", "Pod", "Suggestion"):
        # A pod object goes once its sandbox (processes, then network) is gone.
        poll(lambda kind=kind: plane.client().list(kind, "default") == [], timeout=30, what=f"every {kind} gone")
    assert plane.client()._json("GET", "/trimaran/v1/namespaces/default/observations")["items"] == []


def test_file_collector_reads_a_metrics_file_the_trial_writes(plane, tmp_path):
    script = textwrap.dedent("""
        import json, sys, time
        level = float(sys.argv[1])
        with open("/var/log/katib/metrics.json", "w") as fh:
            for step in range(3):
                fh.write(json.dumps({"score": str(level * (step + 1)), "step": step}) + "\\n")
                fh.flush()
                time.sleep(0.1)
        print("done, nothing on stdout that looks like a metric")
    """)
    collector = {"collector": {"kind": "File"},
                 "source": {"fileSystemPath": {"path": "/var/log/katib/metrics.json", "kind": "File",
                                               "format": "JSON"}}}
    plane.cli("apply", "-f", _experiment(tmp_path, "filecol", script=script, max_trials=2,
                                         extra={"metricsCollectorSpec": collector}))
    plane.cli("wait", "experiment/filecol", "--for=condition=Succeeded", "--timeout=180s")
    for t in _trials(plane, "filecol"):
        level = float(t["spec"]["parameterAssignments"][0]["value"])
        score = next(m for m in t["status"]["observation"]["metrics"] if m["name"] == "score")
        assert abs(float(score["latest"]) - 3 * level) < 1e-9
        steps = [o["step"] for o in plane.client()._json(
            "GET", "/trimaran/v1/namespaces/default/observations", params={"trial": t["metadata"]["name"]})["items"]]
        assert steps == [0, 1, 2]


def test_tensorflow_event_collector_reads_summaries_the_trial_writes(plane, tmp_path):
    script = textwrap.dedent("""
        import sys
        from torch.utils.tensorboard import SummaryWriter
        level = float(sys.argv[1])
        writer = SummaryWriter("/var/log/katib/tfevent")
        for step in range(3):
            writer.add_scalar("score", level * (step + 1), step)
        writer.close()
    """)
    collector = {"collector": {"kind": "TensorFlowEvent"},
                 "source": {"fileSystemPath": {"path": "/var/log/katib/tfevent/", "kind": "Directory"}}}
    plane.cli("apply", "-f", _experiment(tmp_path, "tfevents", script=script, max_trials=1, parallel=1,
                                         extra={"metricsCollectorSpec": collector}))
    plane.cli("wait", "experiment/tfevents", "--for=condition=Succeeded", "--timeout=180s")
    (trial,) = _trials(plane, "tfevents")
    level = float(trial["spec"]["parameterAssignments"][0]["value"])
    score = next(m for m in trial["status"]["observation"]["metrics"] if m["name"] == "score")
    assert abs(float(score["latest"]) - 3 * level) < 1e-5 and abs(float(score["min"]) - level) < 1e-5


def test_multi_objective_experiment_reports_the_pareto_front(plane, tmp_path):
    # accuracy rises with level; cost is lowest at level 0.5: trials below 0.5 are dominated by
    # their mirror images above it, so the front is the trials from 0.5 up.
    script = textwrap.dedent("""
        import sys
        level = float(sys.argv[1])
        print(f"accuracy={level:.4f} cost={(level - 0.5) ** 2 + 0.1:.4f}", flush=True)
    """)
    path = _experiment(tmp_path, "pareto", algorithm="nsga2", script=script, max_trials=8, parallel=2,
                       settings={"random_state": "3", "objective_types": "maximize,minimize"},
                       extra={"objective": {"type": "maximize", "objectiveMetricName": "accuracy",
                                            "additionalMetricNames": ["cost"]}})
    plane.cli("apply", "-f", path)
    plane.cli("wait", "experiment/pareto", "--for=condition=Succeeded", "--timeout=180s")
    exp = plane.get("experiment", "pareto")
    points = {}
    for t in _trials(plane, "pareto"):
        metrics = {m["name"]: float(m["latest"]) for m in t["status"]["observation"]["metrics"]}
        points[t["metadata"]["name"]] = (metrics["accuracy"], metrics["cost"])

    def dominated(p):
        return any(q[0] >= p[0] and q[1] <= p[1] and q != p for q in points.values())

    expected = sorted(name for name, p in points.items() if not dominated(p))
    assert sorted(exp["status"]["paretoOptimalTrials"]) == expected and expected
