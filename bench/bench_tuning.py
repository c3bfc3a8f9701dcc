"""Tuning overhead: N trials of a trivial trainer through a Katib Experiment, against a bare loop.

    .venv/bin/python bench/bench_tuning.py [--trials 200] [--parallel 2] [--script minimal|numpy]

Peer: a bare loop that launches the same script as subprocesses, `parallel` at a time, with the
same interpreter. Both run the script unchanged; the ratio is the platform's whole overhead
(suggestion, Trial and Job objects, gang admission, the sandbox, metrics collection).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PY = sys.executable
#: The trainer each trial runs. "minimal" only starts Python and prints (the bare loop runs
#: ~145 trials/s here); "numpy" imports NumPy first, as nearly any real trainer does (~22/s here;
#: the issue measured 43 trials/s for its trivial trainer).
SCRIPTS = {
    "minimal": "import sys; print(f'score={float(sys.argv[1]):.4f}')",
    "numpy": "import sys, numpy as np; print(f'score={np.float64(sys.argv[1]):.4f}')",
}


def bare_loop(trials: int, parallel: int, script: str) -> float:
    def run(i: int) -> None:
        subprocess.run([PY, "-c", script, str(i / trials)], check=True, capture_output=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(run, range(trials)))
    return time.perf_counter() - t0


def trimaran_experiment(trials: int, parallel: int, script: str) -> float:
    from trimaran.cli.client import Client
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    os.environ["TRIMARAN_HOME"] = str(home)
    os.environ["PATH"] = f"{Path(PY).parent}:{os.environ['PATH']}"
    start_server(home=home)
    client = Client.connect(home, autostart=False)
    experiment = {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "overhead"},
        "spec": {
            "objective": {"type": "maximize", "objectiveMetricName": "score"},
            "algorithm": {"algorithmName": "random", "algorithmSettings": [{"name": "random_state", "value": "1"}]},
            "maxTrialCount": trials, "parallelTrialCount": parallel,
            "parameters": [{"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1"}}],
            "trialTemplate": {
                "primaryContainerName": "main",
                "trialParameters": [{"name": "x", "reference": "x"}],
                "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "x",
                                    "command": ["python", "-c", script, "${trialParameters.x}"]}]}}}},
            },
        },
    }
    try:
        t0 = time.perf_counter()
        client.apply([{"location": "bench", "object": json.loads(json.dumps(experiment))}])
        # Wait on a watch, as `trimaran wait` does, rather than poll: polling would add API load
        # that is the benchmark's, not the platform's.
        done = []
        stream = client.request("GET", "/apis/kubeflow.org/v1beta1/experiments",
                                params={"watch": "true", "timeoutSeconds": "3600"}, stream=True, timeout=3700)
        for line in iter(stream.readline, b""):
            exp = json.loads(line)["object"]
            done = [c for c in (exp.get("status") or {}).get("conditions") or []
                    if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"]
            if done:
                break
        elapsed = time.perf_counter() - t0
        assert done[0]["type"] == "Succeeded", done
        assert exp["status"]["trialsSucceeded"] == trials, exp["status"]
        return elapsed
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="minimal", help="the trivial trainer")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, python {sys.version.split()[0]}")
    script = SCRIPTS[args.script]
    bare = bare_loop(args.trials, args.parallel, script)
    ours = trimaran_experiment(args.trials, args.parallel, script)
    print(f"{args.trials} trials of the {args.script} trainer at parallelTrialCount {args.parallel}: "
          f"trimaran {ours:.1f} s "
          f"({args.trials / ours:.1f} trials/s), bare subprocess loop {bare:.1f} s "
          f"({args.trials / bare:.1f} trials/s); ratio {ours / bare:.2f}x (target <= 1.15)")


if __name__ == "__main__":
    main()
