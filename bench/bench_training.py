"""Training-core benchmarks, each measured side by side with the peer it names, in one run.

    .venv/bin/python bench/bench_training.py [--rounds 5]

1. apply -> all replicas Running, 4-replica PyTorchJob (target < 0.5 s); peer: starting the same
   four processes with subprocess.Popen directly.
2. A 2-replica DDP job of 20 steps through `trimaran apply` + `trimaran wait`; peer:
   `torchrun --standalone --nproc_per_node=2` on the same script (target ratio <= 1.10).
3. Control-plane idle RSS (target < 150 MB) and `trimaran get pytorchjobs` with 500 stored jobs
   (target < 0.3 s); peer: a bare `python -c` that reads the same rows from SQLite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TRAIN = REPO / "examples" / "pytorch-ddp" / "train.py"


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([PY, "-m", "trimaran.cli", *args], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"trimaran {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def start_plane(home: Path) -> dict:
    env = dict(os.environ, TRIMARAN_HOME=str(home), PATH=f"{Path(PY).parent}:{os.environ['PATH']}")
    cli(env, "server", "start")
    return env


def stop_plane(env: dict) -> None:
    subprocess.run([PY, "-m", "trimaran.cli", "server", "stop"], env=env, capture_output=True)
    from trimaran.server.daemon import stop_pods

    stop_pods(Path(env["TRIMARAN_HOME"]), grace_seconds=1.0)


def bench_apply_to_running(rounds: int) -> None:
    from trimaran.cli.client import Client

    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    env = start_plane(home)
    client = Client.connect(home, autostart=False)
    ours, peer = [], []
    try:
        for i in range(rounds):
            name = f"start-{i}"
            manifest = textwrap.dedent(f"""
                apiVersion: kubeflow.org/v1
                kind: PyTorchJob
                metadata: {{name: {name}}}
                spec:
                  pytorchReplicaSpecs:
                    Master:
                      replicas: 1
                      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [sleep, "30"]}}]}}}}
                    Worker:
                      replicas: 3
                      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [sleep, "30"]}}]}}}}
            """)
            t0 = time.perf_counter()
            subprocess.run(
                [PY, "-m", "trimaran.cli", "apply", "-f", "-"], input=manifest, env=env, text=True,
                capture_output=True, check=True)
            while True:
                pods = [p for p in client.list("Pod", "default") if p["metadata"]["name"].startswith(name + "-")]
                if len(pods) == 4 and all((p.get("status") or {}).get("phase") == "Running" for p in pods):
                    break
                time.sleep(0.005)
            ours.append(time.perf_counter() - t0)
            subprocess.run([PY, "-m", "trimaran.cli", "delete", "pytorchjob", name], env=env, capture_output=True)

            t0 = time.perf_counter()
            procs = [subprocess.Popen(["sleep", "30"]) for _ in range(4)]
            peer.append(time.perf_counter() - t0)
            for p in procs:
                p.kill()
                p.wait()
    finally:
        stop_plane(env)
        shutil.rmtree(home, ignore_errors=True)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"apply -> 4 replicas Running: trimaran {o:.3f} s (target < 0.5 s); "
          f"peer Popen x4 {p * 1000:.1f} ms; ratio {o / p:.1f}x (includes the CLI's own start)")


def bench_ddp(rounds: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    env = start_plane(home)
    code = TRAIN.read_text()
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "ddp-bench"},
        "spec": {"pytorchReplicaSpecs": {
            rtype: {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
                "containers": [{"name": "pytorch", "image": "x",
                                "command": ["python", "/app/train.py", "--steps", "20", "--output-dir", "/output"],
                                "volumeMounts": [{"name": "code", "mountPath": "/app"},
                                                 {"name": "out", "mountPath": "/output"}]}],
                "volumes": [{"name": "code", "configMap": {"name": "ddp-bench-code"}},
                            {"name": "out", "emptyDir": {}}]}}}
            for rtype in ("Master", "Worker")}},
    }
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ddp-bench-code"}, "data": {"train.py": code}}
    ours, peer = [], []
    out_dir = Path(tempfile.mkdtemp(prefix="torchrun-out-"))
    try:
        subprocess.run([PY, "-m", "trimaran.cli", "apply", "-f", "-"], input=json.dumps(cm), env=env, text=True,
                       check=True, capture_output=True)
        for _ in range(rounds):
            t0 = time.perf_counter()
            subprocess.run([PY, "-m", "trimaran.cli", "apply", "-f", "-"], input=json.dumps(manifest), env=env,
                           text=True, check=True, capture_output=True)
            cli(env, "wait", "pytorchjob/ddp-bench", "--for=condition=Succeeded", "--timeout=120s")
            ours.append(time.perf_counter() - t0)
            cli(env, "delete", "pytorchjob", "ddp-bench")

            t0 = time.perf_counter()
            proc = subprocess.run([str(Path(PY).parent / "torchrun"), "--standalone", "--nproc_per_node=2",
                                   str(TRAIN), "--steps", "20", "--output-dir", str(out_dir)],
                                  capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"torchrun failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            peer.append(time.perf_counter() - t0)
    finally:
        stop_plane(env)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"DDP 2 replicas x 20 steps end to end: trimaran apply+wait {o:.2f} s, torchrun --standalone {p:.2f} s; "
          f"ratio {o / p:.2f}x (target <= 1.10)")


def bench_idle_and_get(rounds: int) -> None:
    import psutil

    from trimaran.server.daemon import read_server_info
    from trimaran.store import open_store

    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-"))
    home.mkdir(exist_ok=True)
    # Fill the store before the control plane starts, with suspended jobs so nothing runs.
    store = open_store(home / "trimaran.db")
    store.ensure_namespace("default")
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x", "command": ["true"],
                                         "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)]}]}}
    for i in range(500):
        store.create({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                      "metadata": {"name": f"job-{i:03d}", "namespace": "default"},
                      "spec": {"runPolicy": {"suspend": True},
                               "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                                       "Worker": {"replicas": 2, "template": template}}}})
    store.close()
    env = start_plane(home)
    try:
        time.sleep(3)  # let the first resync settle before reading idle memory
        rss = psutil.Process(int(read_server_info(home)["pid"])).memory_info().rss / 2**20
        ours, peer = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            out = cli(env, "get", "pytorchjobs").stdout
            ours.append(time.perf_counter() - t0)
            assert out.count("job-") == 500, out[:200]
            t0 = time.perf_counter()
            subprocess.run([PY, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                            "rows=c.execute(\"select body from objects where kind='PyTorchJob'\").fetchall(); "
                            "print(len(rows))", str(home / "trimaran.db")], check=True, capture_output=True)
            peer.append(time.perf_counter() - t0)
    finally:
        stop_plane(env)
        shutil.rmtree(home, ignore_errors=True)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"control plane idle RSS with 500 jobs stored: {rss:.0f} MB (target < 150 MB)")
    print(f"`trimaran get pytorchjobs` with 500 jobs: {o:.3f} s (target < 0.3 s); "
          f"peer bare python+sqlite3 read {p:.3f} s; ratio {o / p:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["start", "ddp", "get"], default=None)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, python {sys.version.split()[0]}")
    if args.only in (None, "start"):
        bench_apply_to_running(args.rounds)
    if args.only in (None, "ddp"):
        bench_ddp(args.rounds)
    if args.only in (None, "get"):
        bench_idle_and_get(args.rounds)


if __name__ == "__main__":
    main()
