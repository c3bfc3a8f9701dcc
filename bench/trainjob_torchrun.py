"""A ``torch-distributed`` TrainJob of 2 nodes beside ``torchrun --nnodes=2`` started by hand, in one run.

    .venv/bin/python bench/trainjob_torchrun.py [--rounds 5] [--steps 20]

Both arms run the same script (``examples/pytorch-ddp/train.py --steps 20``: DDP over gloo on
digits) under torchrun, each node a torchrun of one process, as the Kubeflow SDK's command does:

- Trimaran: ``trimaran apply`` of a TrainJob (runtime ``torch-distributed``, ``numNodes: 2``, the
  code from a ConfigMap mounted through a runtime patch) then ``trimaran wait
  --for=condition=Complete``: the CLI's start, the API, TrainJob → JobSet → Jobs → Pods, the
  sandboxes, torchrun's static rendezvous from ``PET_*``, and completion detection.
- peer: two ``torchrun --nnodes=2 --node-rank=R --nproc-per-node=1 --master-addr=127.0.0.1
  --master-port=P`` started together (a static rendezvous on loopback, as a user would start one
  on each of two machines), until both exit.

Rounds alternate the arms; the medians and their ratio are printed (goal: at most 1.10×). With
``--phases`` each TrainJob round also prints when its JobSet, Jobs and pods were created, when each
pod's process started and ended, and when the TrainJob said Complete, from the objects' own times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trimaran.controllers.ports import PortAllocator  # noqa: E402

PY = sys.executable
TORCHRUN = str(Path(PY).parent / "torchrun")
TRAIN = REPO / "examples" / "pytorch-ddp" / "train.py"
CODE = "trainjob-bench-code"


def cli(env: dict, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([PY, "-m", "trimaran.cli", *args], env=env, input=stdin, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"trimaran {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def trainjob(name: str, steps: int) -> dict:
    mounts = [{"name": "code", "mountPath": "/app"}, {"name": "out", "mountPath": "/output"}]
    volumes = [{"name": "code", "configMap": {"name": CODE}}, {"name": "out", "emptyDir": {}}]
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "volumeMounts": mounts}], "volumes": volumes}}}}}]}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "numProcPerNode": 1,
                                 "command": ["torchrun", "/app/train.py", "--steps", str(steps)]},
                     "runtimePatches": [{"manager": "bench", "trainingRuntimeSpec": {"template": {"spec": patch}}}]}}


def run_trainjob(env: dict, name: str, steps: int) -> float:
    start = time.perf_counter()
    cli(env, "apply", "-f", "-", stdin=json.dumps(trainjob(name, steps)))
    cli(env, "wait", f"trainjob/{name}", "--for=condition=Complete", "--timeout=300s")
    return time.perf_counter() - start


def run_torchrun(steps: int, out: Path) -> float:
    ports = PortAllocator()  # reserved machine-wide: control planes beside this one keep off it
    [port] = ports.allocate(1)
    try:
        start = time.perf_counter()
        nodes = [subprocess.Popen([TORCHRUN, "--nnodes=2", f"--node-rank={rank}", "--nproc-per-node=1",
                                   "--master-addr=127.0.0.1", f"--master-port={port}", str(TRAIN),
                                   "--steps", str(steps), "--output-dir", str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in (0, 1)]
        logs = [node.communicate()[0] for node in nodes]
        elapsed = time.perf_counter() - start
    finally:
        ports.release([port])
    if any(node.returncode for node in nodes):
        raise SystemExit("torchrun failed:\n" + "\n".join(log[-3000:] for log in logs))
    return elapsed


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def phases(env: dict, name: str) -> str:
    """Seconds from the TrainJob's creation to each step, as its objects recorded them."""
    def get(kind: str, selector: str = "") -> list[dict]:
        args = ["get", kind, "-o", "json"] + (["-l", selector] if selector else [])
        return json.loads(cli(env, *args))["items"]

    [job] = [j for j in get("trainjobs") if j["metadata"]["name"] == name]
    t0 = _ts(job["metadata"]["creationTimestamp"])
    marks = {"jobset": min(_ts(j["metadata"]["creationTimestamp"]) for j in get("jobsets")
                           if j["metadata"]["name"] == name)}
    pods = get("pods", f"jobset.sigs.k8s.io/jobset-name={name}")
    jobs = get("jobs", f"jobset.sigs.k8s.io/jobset-name={name}")
    marks["job"] = min(_ts(j["metadata"]["creationTimestamp"]) for j in jobs)
    marks["pods created"] = max(_ts(p["metadata"]["creationTimestamp"]) for p in pods)
    states = [(p["status"].get("containerStatuses") or [{}])[0].get("state", {}) for p in pods]
    marks["pods started"] = max(_ts((s.get("terminated") or s.get("running") or {}).get("startedAt")) or 0
                                for s in states)
    marks["pods finished"] = max(_ts((s.get("terminated") or {}).get("finishedAt")) or 0 for s in states)
    done = next(c for c in job["status"]["conditions"] if c["type"] == "Complete")
    marks["complete"] = _ts(done["lastTransitionTime"])
    return ", ".join(f"{k} +{v - t0:.2f}" for k, v in marks.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--phases", action="store_true", help="print where each TrainJob round's time went")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    env = dict(os.environ, TRIMARAN_HOME=str(tmp / "home"), PATH=f"{Path(PY).parent}:{os.environ['PATH']}")
    env.pop("KUBECONFIG", None)
    ours, peer = [], []
    try:
        cli(env, "server", "start")
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CODE},
                     "data": {"train.py": TRAIN.read_text()}}
        cli(env, "apply", "-f", "-", stdin=json.dumps(configmap))
        for i in range(args.rounds):
            name = f"bench-{i}"
            ours.append(run_trainjob(env, name, args.steps))
            if args.phases:
                print(f"round {i}: {phases(env, name)} (seconds after the TrainJob's creation)", flush=True)
            cli(env, "delete", "trainjob", name)
            peer.append(run_torchrun(args.steps, tmp / "out"))
            print(f"round {i}: TrainJob {ours[-1]:.2f} s, torchrun x2 {peer[-1]:.2f} s", flush=True)
    finally:
        subprocess.run([PY, "-m", "trimaran.cli", "server", "stop"], env=env, capture_output=True)
        from trimaran.server.daemon import stop_pods

        stop_pods(Path(env["TRIMARAN_HOME"]), grace_seconds=1.0)
        shutil.rmtree(tmp, ignore_errors=True)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} {platform.node()}: {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds")
    print(f"torch-distributed TrainJob, 2 nodes x {args.steps} DDP steps, apply -> Complete: {o:.2f} s; "
          f"torchrun --nnodes=2 by hand: {p:.2f} s; ratio {o / p:.2f}x (goal <= 1.10)")


if __name__ == "__main__":
    main()
