"""A ``torch-distributed`` TrainJob of 2 nodes beside ``torchrun --nnodes=2`` started by hand, in one run.

    .venv/bin/python bench/trainjob_torchrun.py [--rounds 5] [--steps 20] [--hops] [--trace N]

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
round also runs the same TrainJob with ``true`` as its command, whose time is all the platform's
(the two CLI calls, the controllers' hops, the sandboxes, completion detection).
``--hops`` adds a batch Job and a JobSet of the same two ``true`` pods, to see what the TrainJob →
JobSet → Job hops add; ``--trace N`` first follows N TrainJobs of ``true`` step by step through the
API (no CLI), in milliseconds.
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


def empty_job(kind: str, name: str) -> dict:
    """A batch Job or a JobSet of two Indexed pods running ``true``: the hops below a TrainJob."""
    job = {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
           "template": {"spec": {"restartPolicy": "Never",
                                 "containers": [{"name": "node", "image": "x", "command": ["true"]}]}}}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": job}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}}


def run(env: dict, obj: dict, condition: str = "Complete") -> float:
    """``trimaran apply`` then ``trimaran wait`` for the condition; deleted afterwards, not timed."""
    ref = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
    start = time.perf_counter()
    cli(env, "apply", "-f", "-", stdin=json.dumps(obj))
    cli(env, "wait", ref, f"--for=condition={condition}", "--timeout=300s")
    elapsed = time.perf_counter() - start
    cli(env, "delete", *ref.split("/"))
    return elapsed


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


def _true(obj: dict, ctype: str) -> bool:
    return any(c["type"] == ctype and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def trace(home: Path, name: str) -> str:
    """Milliseconds from creating a TrainJob of ``true`` (through the API, no CLI) to each step
    seen, polled as fast as the API answers."""
    from trimaran.cli.client import Client

    client = Client.connect(home, autostart=False)
    seen: dict[str, float] = {}
    start = time.perf_counter()
    client.apply([{"object": trainjob(name, ["true"])}])
    seen["created"] = time.perf_counter() - start
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    while "TrainJob Complete" not in seen and time.perf_counter() - start < 60:
        job = client.get("TrainJob", "default", name)
        jobsets = [j for j in client.list("JobSet", "default") if j["metadata"]["name"] == name]
        jobs = client.list("Job", "default", selector=selector)
        phases = [(p.get("status") or {}).get("phase") for p in client.list("Pod", "default", selector=selector)]
        for step, reached in (("JobSet", bool(jobsets)), ("Job", bool(jobs)), ("2 pods", len(phases) == 2),
                              ("pods Succeeded", len(phases) == 2 and set(phases) == {"Succeeded"}),
                              ("Job Complete", bool(jobs) and _true(jobs[0], "Complete")),
                              ("JobSet Completed", bool(jobsets) and _true(jobsets[0], "Completed")),
                              ("TrainJob Complete", _true(job, "Complete"))):
            if reached:
                seen.setdefault(step, time.perf_counter() - start)
    return ", ".join(f"{step} {at * 1000:.0f} ms" for step, at in seen.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hops", action="store_true", help="also time a batch Job and a JobSet of `true`")
    parser.add_argument("--trace", type=int, default=0, metavar="N",
                        help="first trace N TrainJobs of `true` step by step through the API")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    env = dict(os.environ, TRIMARAN_HOME=str(tmp / "home"), PATH=f"{Path(PY).parent}:{os.environ['PATH']}")
    env.pop("KUBECONFIG", None)
    ours, peer, empty, hops = [], [], [], {"Job": [], "JobSet": []}
    load_before = os.getloadavg()[0]
    train = ["torchrun", "/app/train.py", "--steps", str(args.steps)]
    try:
        cli(env, "server", "start")
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CODE},
                     "data": {"train.py": TRAIN.read_text()}}
        cli(env, "apply", "-f", "-", stdin=json.dumps(configmap))
        for i in range(args.trace):
            print(f"trace {i}: {trace(tmp / 'home', f'trace-{i}')}", flush=True)
        for i in range(args.rounds):
            ours.append(run(env, trainjob(f"bench-{i}", train)))
            peer.append(run_torchrun(args.steps, tmp / "out"))
            empty.append(run(env, trainjob(f"empty-{i}", ["true"])))
            line = (f"round {i}: TrainJob {ours[-1]:.2f} s, torchrun x2 {peer[-1]:.2f} s, "
                    f"TrainJob of `true` {empty[-1]:.2f} s")
            if args.hops:
                hops["Job"].append(run(env, empty_job("Job", f"job-{i}")))
                hops["JobSet"].append(run(env, empty_job("JobSet", f"jobset-{i}"), "Completed"))
                line += f", Job {hops['Job'][-1]:.2f} s, JobSet {hops['JobSet'][-1]:.2f} s"
            print(line, flush=True)
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
    if args.hops:
        print(f"2 Indexed pods of `true`, apply -> Complete: batch Job {statistics.median(hops['Job']):.2f} s, "
              f"JobSet {statistics.median(hops['JobSet']):.2f} s")


if __name__ == "__main__":
    main()
