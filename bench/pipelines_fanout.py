"""A 20-task pipeline of trivial lightweight components (tests/pipelines/corpus/fanout.py: a source, a
ParallelFor fan-out of 16 and a fan-in; with the loop and the root DAG, 20 tasks) on Trimaran against
kfp.local's SubprocessRunner, both running the components with the same Python (3.11, this venv's
base interpreter; kfp.local in .venv-kfp, which has kfp's dependencies). Prints each wall time and
their ratio (goal: at most 0.5x), the start-up overhead per task (a task's observed duration less the
bare cost of one component process), and a cached re-run's time (goal: under 1 s).

Trimaran's time runs from the Run's creation to its SUCCEEDED state (the control plane is started
before, as kfp.local's import is done before its clock starts)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trimaran.api.pipelines import TRIMARAN_API_VERSION  # noqa: E402

KFP_PYTHON = os.environ.get("TRIMARAN_KFP_PYTHON") or str(REPO / ".venv-kfp" / "bin" / "python")
CORPUS = REPO / "tests" / "pipelines" / "corpus" / "fanout.py"
STEPS = 18  # source, 16 workers, gather: the tasks that are processes

_COMPILE = """
import runpy, sys
from kfp import compiler
compiler.Compiler().compile(runpy.run_path(sys.argv[1])["pipeline"], sys.argv[2])
"""

# kfp.local: the same pipeline, timed from the call (kfp imported, runner set up) to its return.
_LOCAL = """
import json, runpy, sys, time
from kfp import local
local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=sys.argv[2])
pipeline = runpy.run_path(sys.argv[1])["pipeline"]
start = time.perf_counter()
task = pipeline(n=16)
print(json.dumps({"wall": time.perf_counter() - start, "output": task.output}))
"""

# One bare component process: kfp's executor on a trivial function, no orchestration around it.
_BARE = """
import json, subprocess, sys, tempfile, time, os
code = "def work(x: int) -> int:\\n    return x + 1\\n"
with tempfile.TemporaryDirectory() as out:
    module = os.path.join(out, "component.py")
    open(module, "w").write(code)
    executor_input = {"inputs": {"parameterValues": {"x": 1}},
                      "outputs": {"parameters": {"Output": {"outputFile": os.path.join(out, "Output")}},
                                  "outputFile": os.path.join(out, "executor_output.json")}}
    times = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kfp.dsl.executor_main", "--component_module_path", module,
                        "--executor_input", json.dumps(executor_input), "--function_to_execute", "work"],
                       check=True, capture_output=True, env={**os.environ, "_KFP_RUNTIME": "true"})
        times.append(time.perf_counter() - start)
print(json.dumps(sorted(times)[len(times) // 2]))
"""


def kfp_local(tmp: Path) -> dict:
    done = subprocess.run([KFP_PYTHON, "-W", "ignore", "-c", _LOCAL, str(CORPUS), str(tmp / "local-root")],
                          capture_output=True, text=True, cwd=tmp, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def bare_component(repeats: int) -> float:
    done = subprocess.run([KFP_PYTHON, "-c", _BARE, str(repeats)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def trimaran_run(client, spec: dict, name: str) -> tuple[float, dict, dict[str, float]]:  # noqa: ANN001
    """Wall time from create to SUCCEEDED, the finished Run, and each step's observed duration (from
    first seen started to first seen done, polled every 20 ms)."""
    run = {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run", "metadata": {"name": name, "namespace": "default"},
           "spec": {"pipelineSpec": spec, "parameters": {"n": 16}}}
    started: dict[str, float] = {}
    durations: dict[str, float] = {}
    start = time.perf_counter()
    client.create("Run", "default", run)
    deadline = start + 600
    while True:
        got = client.get("Run", "default", name)
        now = time.perf_counter()
        status = got.get("status") or {}
        for task in status.get("tasks") or []:
            if task.get("podName") and task["id"] not in started and task.get("state") in ("PENDING", "RUNNING"):
                started[task["id"]] = now
            if task.get("state") == "SUCCEEDED" and task["id"] in started and task["id"] not in durations:
                durations[task["id"]] = now - started[task["id"]]
        if status.get("state") in ("SUCCEEDED", "FAILED", "CANCELED"):
            assert status["state"] == "SUCCEEDED", status
            return now - start, got, durations
        assert now < deadline, f"run {name} did not finish: {status}"
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bare-repeats", type=int, default=5)
    args = parser.parse_args()
    from trimaran.cli.client import Client
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    tmp = Path(tempfile.mkdtemp(prefix="pipelines-fanout-"))
    subprocess.run([KFP_PYTHON, "-W", "ignore", "-c", _COMPILE, str(CORPUS), str(tmp / "fanout.yaml")], check=True)
    import yaml

    spec = yaml.safe_load((tmp / "fanout.yaml").read_text())
    bare = bare_component(args.bare_repeats)
    print(f"one bare component process (kfp's executor, {args.bare_repeats} runs, median): {bare:.3f} s")

    local = kfp_local(tmp)
    print(f"kfp.local SubprocessRunner: {local['wall']:.2f} s (output {local['output']}); "
          f"{local['wall'] / STEPS:.3f} s per step, {local['wall'] / STEPS - bare:+.3f} s over a bare process")

    home = tmp / "home"
    os.environ["TRIMARAN_HOME"] = str(home)
    start_server(home=home)
    try:
        client = Client.connect(home, autostart=False)
        wall, run, durations = trimaran_run(client, spec, "fanout")
        output = next(t for t in run["status"]["tasks"] if t["name"] == "gather")["outputs"]["parameters"]["Output"]
        observed = sorted(durations.values())
        print(f"Trimaran: {wall:.2f} s (output {output}); {len(observed)} steps observed, each from started to "
              f"done: median {statistics.median(observed):.3f} s, max {observed[-1]:.3f} s; start-up overhead "
              f"per task (median less a bare process): {statistics.median(observed) - bare:+.3f} s")
        print(f"ratio Trimaran / kfp.local: {wall / local['wall']:.2f}x (goal: at most 0.5x)")
        cached_wall, cached, _ = trimaran_run(client, spec, "fanout-cached")
        hits = sum(1 for t in cached["status"]["tasks"] if t.get("state") == "CACHED")
        print(f"cached re-run: {cached_wall:.3f} s, {hits} tasks from the cache (goal: under 1 s)")
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)


if __name__ == "__main__":
    main()
