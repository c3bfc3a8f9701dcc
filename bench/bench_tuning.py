"""Tuning overhead: N trials of a trivial trainer through a Katib Experiment, against a bare loop
and Ray Tune, side by side in one run.

    .venv/bin/python bench/bench_tuning.py [--trials 200] [--parallel 2] [--script minimal|numpy]
        [--ray both|reuse|none] [--ray-subprocess]

Peers:
- a bare loop that launches the same script as subprocesses, `parallel` at a time, with the
  same interpreter. Both run the script unchanged; the ratio is the platform's whole overhead
  (suggestion, Trial and Job objects, gang admission, the sandbox, metrics collection).
- Ray Tune (bench/ray_tune_peer.py): the same trial count and random search over x ~ U(0, 1), the
  trivial objective (report x as the score) as a function trainable, `max_concurrent_trials` =
  `parallel` on `ray.init(num_cpus=parallel)` (a CPU a trial), with `reuse_actors=True` (Ray Tune's
  best) and, with `--ray both` (the default), without. `--ray-subprocess` adds a run whose trainable
  runs the same `python -c SCRIPT x` as the others, with reused actors. The ratio printed is
  Trimaran's trials/s over Ray Tune's best (the goal is >= 1).

Ray is not installed in the project's .venv (its pins clash): it lives in its own venv, .venv-ray
at the repository root (git ignores /.venv-*), which this script creates when it is missing:

    python3.11 -m venv .venv-ray && .venv-ray/bin/pip install 'ray[tune]==2.60.0'

Each Ray setting runs in its own process in that venv, offline and local (no dashboard, usage
stats off), and is timed over `Tuner.fit()` (Trimaran's over apply -> Succeeded with its server
already up). After each, any process it left behind is reported (and ended: this script is their
subreaper while Ray runs, so they can only be Ray's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent
RAY_VENV = ROOT / ".venv-ray"
RAY_VERSION = "2.60.0"
RAY_PEER = Path(__file__).resolve().parent / "ray_tune_peer.py"
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


def node_parts(metrics: str) -> dict[str, tuple[int, float]]:
    """``part -> (count, total seconds)`` from ``/metrics``' ``trimaran_node_part_seconds``."""
    found: dict[str, list[float]] = {}
    for line in metrics.splitlines():
        match = re.match(r'trimaran_node_part_seconds_(count|sum)\{part="([^"]+)"\} (\S+)$', line)
        if match:
            found.setdefault(match[2], [0, 0.0])[match[1] == "sum"] = float(match[3])
    return {part: (int(count), total) for part, (count, total) in found.items()}


def print_parts(parts: dict[str, tuple[int, float]], trials: int) -> None:
    """The node's time per part of the trials' pods (off a pod's path: the teardown, the pool)."""
    if not parts:
        print("node parts: none reported (the server predates trimaran_node_part_seconds?)")
        return
    print(f"node parts (trimaran_node_part_seconds; {trials} trials):")
    print(f"  {'part':<18} {'count':>6} {'mean ms':>9} {'per trial ms':>13}")
    for part, (count, total) in sorted(parts.items(), key=lambda item: _PART_ORDER.get(item[0], 99)):
        print(f"  {part:<18} {count:>6} {1e3 * total / max(count, 1):>9.2f} {1e3 * total / trials:>13.2f}")


# Parts in a pod's order (trimaran.runtime.timings), the ones off its path last.
_PART_ORDER = {part: i for i, part in enumerate((
    "network.setup", "network.adopt", "run.files", "shim.spawn", "shim.handoff", "shim.startup", "shim.prepare",
    "cgroup.create", "container.run", "cgroup.remove", "shim.finish", "exit.noticed", "network.teardown",
    "network.recycle", "pool.fill", "cgroup.release"))}


def trimaran_experiment(trials: int, parallel: int, script: str) -> tuple[float, dict[str, tuple[int, float]]]:
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
        # Read after the span, from the node's own counters (trimaran.runtime.timings), not timed.
        return elapsed, node_parts(client.request("GET", "/metrics", accept="text/plain").read().decode())
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        shutil.rmtree(home, ignore_errors=True)


def ensure_ray_venv() -> Path:
    """The Ray venv's interpreter, creating the venv (once) when it is missing."""
    python = RAY_VENV / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", "import ray.tune"],
                                          capture_output=True).returncode == 0:
        return python
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    print(f"creating {RAY_VENV} with ray[tune]=={RAY_VERSION} (once)", flush=True)
    subprocess.run([str(base), "-m", "venv", str(RAY_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"ray[tune]=={RAY_VERSION}"], check=True)
    return python


def _children() -> dict[int, str]:
    """This process's children (pid → command line)."""
    me, out = os.getpid(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == me:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
    return out


def _subreaper(on: bool) -> bool:
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def ray_tune(trials: int, parallel: int, script: str, reuse_actors: bool, objective: str) -> dict:
    """One Ray Tune run in the Ray venv; its JSON result, plus any process it left behind."""
    python = ensure_ray_venv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", PATH=f"{python.parent}:{env.get('PATH', '')}")
    before = set(_children())
    reaping = _subreaper(True)
    try:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            proc = subprocess.run(
                [str(python), str(RAY_PEER), "--trials", str(trials), "--parallel", str(parallel),
                 "--reuse-actors", str(int(reuse_actors)), "--objective", objective,
                 "--script", script, "--out", out.name],
                env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"ray_tune_peer.py exited {proc.returncode}:\n{proc.stdout[-4000:]}")
            result = json.loads(Path(out.name).read_text())
        time.sleep(1.0)  # Ray's processes exit on their own shortly after ray.shutdown()
        left = {pid: cmd for pid, cmd in _children().items() if pid not in before}
        result["left_behind"] = sorted(left.values())
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    finally:
        if reaping:
            _subreaper(False)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="minimal", help="the trivial trainer")
    parser.add_argument("--ray", choices=("both", "reuse", "none"), default="both",
                        help="Ray Tune peer: with reuse_actors=True and without (both), only with, or none")
    parser.add_argument("--ray-subprocess", action="store_true",
                        help="also a Ray Tune run (reused actors) whose trainable runs the same script as a subprocess")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, python {sys.version.split()[0]}")
    script = SCRIPTS[args.script]
    bare = bare_loop(args.trials, args.parallel, script)
    ours, parts = trimaran_experiment(args.trials, args.parallel, script)
    print(f"{args.trials} trials of the {args.script} trainer at parallelTrialCount {args.parallel}: "
          f"trimaran {ours:.1f} s "
          f"({args.trials / ours:.1f} trials/s), bare subprocess loop {bare:.1f} s "
          f"({args.trials / bare:.1f} trials/s); ratio {ours / bare:.2f}x (target <= 1.15)", flush=True)
    print_parts(parts, args.trials)
    runs = [(True, "function")] if args.ray != "none" else []
    runs += [(False, "function")] if args.ray == "both" else []
    runs += [(True, "subprocess")] if args.ray_subprocess else []
    best = None
    for reuse, objective in runs:
        r = ray_tune(args.trials, args.parallel, SCRIPTS[args.script], reuse, objective)
        rate = r["succeeded"] / r["fit_s"]
        what = f"reuse_actors={reuse}"
        if objective == "subprocess":
            what += f", trainable runs the {args.script} trainer"
        print(f"ray tune {r['ray']} ({what}): {r['fit_s']:.1f} s ({rate:.1f} trials/s; "
              f"{r['succeeded']}/{args.trials} succeeded; ray.init {r['init_s']:.1f} s, "
              f"shutdown {r['shutdown_s']:.1f} s); trimaran/ray {(args.trials / ours) / rate:.2f}x "
              f"in trials/s; processes left behind: {len(r['left_behind'])}"
              + "".join(f"\n  left behind: {c}" for c in r["left_behind"]), flush=True)
        if objective == "function" and (best is None or rate > best[0]):
            best = (rate, what)
    if best:
        print(f"trimaran {args.trials / ours:.1f} trials/s vs ray tune's best ({best[1]}) {best[0]:.1f} "
              f"trials/s: ratio {(args.trials / ours) / best[0]:.2f}x (goal >= 1)")


if __name__ == "__main__":
    main()
