"""Elastic scale-up: from `trimaran scale` to the new worker training, beside a torchrun agent
started by hand joining the same rendezvous, in one run.

    .venv/bin/python bench/elastic_scale.py [--rounds 3]

An elastic PyTorchJob (examples/pytorch-elastic, bounds 2..3, training without end) runs 2 workers.
Each round measures, one after the other:

- scale: `trimaran scale pytorchjob/... --replicas 3` → the first `epoch=N world=3` line of the new
  worker's log (the controller makes the pod, the kubelet starts its sandbox, its torchrun agent
  joins, every node restarts its training process on the new rendezvous); then back to 2;
- by hand: a `python -m torch.distributed.run` agent started on this machine with the same
  rendezvous settings (endpoint, c10d, 2:3, last_call_timeout=1) and the example's launcher options
  (`--run-path --start-method=fork`) → its first `epoch=N world=3` line; then it is stopped and the
  job is back to 2.

Both include the same rendezvous and the restart of the two running workers; what differs is
Trimaran's path from the API to a running agent. Target: scale under 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
EXAMPLE = REPO / "examples" / "pytorch-elastic"
JOB = "elastic-bench"
EPOCH_LINE = re.compile(rb"^epoch=\d+ world=(\d+)", re.M)


def cli(env: dict, *args: str) -> None:
    proc = subprocess.run([PY, "-m", "trimaran.cli", *args], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"trimaran {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")


def wait_until(predicate, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def last_world(client, pod: str) -> int | None:  # noqa: ANN001
    """The world size of the pod's latest epoch line, or None."""
    try:
        text = b"".join(client.log("default", pod, tail_lines=30))
    except Exception:  # noqa: BLE001 - the pod does not exist yet or has not started
        return None
    worlds = EPOCH_LINE.findall(text)
    return int(worlds[-1]) if worlds else None


def pod_phase(client, pod: str) -> str | None:  # noqa: ANN001
    try:
        return client.get("Pod", "default", pod).get("status", {}).get("phase")
    except Exception:  # noqa: BLE001 - not created yet
        return None


def launcher_options(job: dict) -> list[str]:
    """The torchrun options of the example's command (those before the script), which the agent
    started by hand takes too: both arms launch their training processes the same way."""
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    start = command.index("torch.distributed.run") + 1
    return command[start:command.index("/app/train.py")]


def by_hand(endpoint: str, options: list[str], ckpt: Path, env: dict) -> tuple[float, subprocess.Popen]:
    """Seconds from starting a torchrun agent by hand to its first epoch in a world of 3."""
    # Its address sorts before the pods' names, so it is rank 0 and publishes a master address
    # the pods resolve (theirs do not resolve outside the sandboxes).
    command = [PY, "-m", "torch.distributed.run", "--nnodes=2:3", "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={endpoint}", "--rdzv-conf=last_call_timeout=1,is_host=false",
               "--local-addr=127.0.0.1", "--max-restarts=20", *options, str(EXAMPLE / "train.py"),
               "--epochs", "100000", "--checkpoint-dir", str(ckpt)]
    seen = threading.Event()
    t0 = time.perf_counter()
    agent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                             start_new_session=True)

    def read() -> None:
        assert agent.stdout is not None
        for line in agent.stdout:
            match = EPOCH_LINE.match(line)
            if match and match.group(1) == b"3":
                seen.set()

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(300):
        raise SystemExit("the hand-started agent never trained in a world of 3")
    return time.perf_counter() - t0, agent


def cpu_seconds(code: str) -> float:
    """CPU seconds (user and system) a Python running ``code`` takes: unlike wall time, about the
    same on a loaded machine as on a quiet one."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([PY, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


#: The first optimizer step imports torch._dynamo (every torch.optim optimizer does).
FIRST_STEP = "torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1).step()"


def forked_cpu_seconds(code: str) -> float:
    """CPU seconds of a child forked from a Python that has imported torch, running ``code``."""
    program = (f"import os, torch\npid = os.fork()\nif pid == 0:\n    {code}\n    os._exit(0)\n"
               "_, _, use = os.wait4(pid, 0)\nprint(use.ru_utime + use.ru_stime)")
    return float(subprocess.run([PY, "-c", program], check=True, capture_output=True, text=True).stdout)


def components() -> None:
    """The CPU each part of a scale-up costs, for the wall time a quiet machine would give."""
    agent = cpu_seconds("import torch.distributed.run")
    spawned = cpu_seconds("import torch\nfrom sklearn.datasets import load_digits\n"
                          "from sklearn.model_selection import train_test_split\nload_digits()\n" + FIRST_STEP)
    forked = forked_cpu_seconds(FIRST_STEP)
    print(f"CPU seconds: the new agent's start (import torch.distributed.run) {agent:.2f}; a training process "
          f"started by python (torch, scikit-learn, digits, the first step) {spawned:.2f}; one forked from the "
          f"agent with its data from the checkpoint (the first step) {forked:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--components", action="store_true",
                        help="only print the CPU seconds of each part of a scale-up and exit")
    args = parser.parse_args()
    if args.components:
        components()
        return

    from trimaran.cli.client import Client

    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-elastic-"))
    env = dict(os.environ, TRIMARAN_HOME=str(home), PATH=f"{Path(PY).parent}:{os.environ['PATH']}")
    cli(env, "server", "start")
    client = Client.connect(home, autostart=False)
    try:
        job = yaml.safe_load((EXAMPLE / "pytorchjob.yaml").read_text())
        job["metadata"]["name"] = JOB
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
            "--epochs", "100000"]
        manifest = home / "job.json"
        manifest.write_text(json.dumps(job))
        cli(env, "apply", "-f", str(EXAMPLE / "code-configmap.yaml"), "-f", str(manifest))
        wait_until(lambda: last_world(client, f"{JOB}-worker-0") == 2, 300, "training with 2 workers")
        pod_env = {e["name"]: e.get("value") for e in
                   client.get("Pod", "default", f"{JOB}-worker-0")["spec"]["containers"][0]["env"]}
        endpoint = pod_env["PET_RDZV_ENDPOINT"].replace(f"{JOB}-worker-0", "127.0.0.1")
        hand_env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")

        scaled, hand, running = [], [], []
        for round_ in range(args.rounds):
            t0 = time.perf_counter()
            cli(env, "scale", f"pytorchjob/{JOB}", "--replicas", "3")
            wait_until(lambda: pod_phase(client, f"{JOB}-worker-2") == "Running", 300, "the scaled worker running")
            running.append(time.perf_counter() - t0)
            wait_until(lambda: last_world(client, f"{JOB}-worker-2") == 3, 300, "the scaled worker training")
            scaled.append(time.perf_counter() - t0)
            cli(env, "scale", f"pytorchjob/{JOB}", "--replicas", "2")
            wait_until(lambda: last_world(client, f"{JOB}-worker-0") == 2 and not client.list(
                "Pod", "default", selector=f"training.kubeflow.org/job-name={JOB},"
                                          "training.kubeflow.org/replica-index=2"), 300, "back to 2 workers")

            seconds, agent = by_hand(endpoint, launcher_options(job), home / f"hand-ckpt-{round_}", hand_env)
            hand.append(seconds)
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(60)
            wait_until(lambda: last_world(client, f"{JOB}-worker-0") == 2, 300, "back to 2 workers")
            print(f"round {round_ + 1}: scale {scaled[-1]:.2f} s (its pod Running after {running[-1]:.2f} s), "
                  f"by hand {hand[-1]:.2f} s", flush=True)

        ours, peer = statistics.median(scaled), statistics.median(hand)
        print(f"scale 2→3 to the new worker training: median {ours:.2f} s of {args.rounds} "
              f"({', '.join(f'{s:.2f}' for s in scaled)})")
        print(f"of which scale → the new pod Running (its agent started): median {statistics.median(running):.2f} s")
        print(f"torchrun agent by hand joining the same rendezvous: median {peer:.2f} s "
              f"({', '.join(f'{s:.2f}' for s in hand)})")
        print(f"ratio {ours / peer:.2f}x; target: scale under 10 s ({'met' if ours < 10 else 'NOT met'})")
    finally:
        client.close()
        subprocess.run([PY, "-m", "trimaran.cli", "delete", "pytorchjob", JOB], env=env, capture_output=True)
        subprocess.run([PY, "-m", "trimaran.cli", "server", "stop"], env=env, capture_output=True)
        from trimaran.server.daemon import stop_pods

        stop_pods(home, grace_seconds=1.0)


if __name__ == "__main__":
    main()
