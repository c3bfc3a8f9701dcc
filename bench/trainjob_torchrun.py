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

Rounds alternate the arms; the medians and their ratio are printed (goal: at most 1.10×). Each
round also runs the same TrainJob with ``true`` as its command: what is left of its time is the
platform's own (the two CLI calls, the controllers' hops, the sandboxes, completion detection).
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


def trainjob(name: str, command: list[str]) -> dict:
    mounts = [{"name": "code", "mountPath": "/app"}, {"name": "out", "mountPath": "/output"}]
    volumes = [{"name": "code", "configMap": {"name": CODE}}, {"name": "out", "emptyDir": {}}]
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "volumeMounts": mounts}], "volumes": volumes}}}}}]}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "numProcPerNode": 1,
                                 "command": command},
                     "runtimePatches": [{"manager": "bench", "trainingRuntimeSpec": {"template": {"spec": patch}}}]}}


def run_trainjob(env: dict, name: str, command: list[str]) -> float:
    start = time.perf_counter()
    cli(env, "apply", "-f", "-", stdin=json.dumps(trainjob(name, command)))
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
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  # A session each, as a pod's shim has: with the kernel's autogroup
                                  # scheduling, processes of one session share one slice of a busy CPU.
                                  start_new_session=True)
                 for rank in (0, 1)]
        logs = [node.communicate()[0] for node in nodes]
        elapsed = time.perf_counter() - start
    finally:
        ports.release([port])
    if any(node.returncode for node in nodes):
        raise SystemExit("torchrun failed:\n" + "\n".join(log[-3000:] for log in logs))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    env = dict(os.environ, TRIMARAN_HOME=str(tmp / "home"), PATH=f"{Path(PY).parent}:{os.environ['PATH']}")
    env.pop("KUBECONFIG", None)
    ours, peer, empty = [], [], []
    load_before = os.getloadavg()[0]
    train = ["torchrun", "/app/train.py", "--steps", str(args.steps)]
    try:
        cli(env, "server", "start")
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CODE},
                     "data": {"train.py": TRAIN.read_text()}}
        cli(env, "apply", "-f", "-", stdin=json.dumps(configmap))
        for i in range(args.rounds):
            ours.append(run_trainjob(env, f"bench-{i}", train))
            cli(env, "delete", "trainjob", f"bench-{i}")
            peer.append(run_torchrun(args.steps, tmp / "out"))
            empty.append(run_trainjob(env, f"empty-{i}", ["true"]))
            cli(env, "delete", "trainjob", f"empty-{i}")
            print(f"round {i}: TrainJob {ours[-1]:.2f} s, torchrun x2 {peer[-1]:.2f} s, "
                  f"TrainJob of `true` {empty[-1]:.2f} s", flush=True)
    finally:
        subprocess.run([PY, "-m", "trimaran.cli", "server", "stop"], env=env, capture_output=True)
        from trimaran.server.daemon import stop_pods

        stop_pods(Path(env["TRIMARAN_HOME"]), grace_seconds=1.0)
        shutil.rmtree(tmp, ignore_errors=True)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} {platform.node()}: {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after, {args.rounds} rounds")
    print(f"torch-distributed TrainJob, 2 nodes x {args.steps} DDP steps, apply -> Complete: {o:.2f} s; "
          f"torchrun --nnodes=2 by hand: {p:.2f} s; ratio {o / p:.2f}x (goal <= 1.10)")
    print(f"the same TrainJob running `true`, apply -> Complete: {statistics.median(empty):.2f} s")


if __name__ == "__main__":
    main()
