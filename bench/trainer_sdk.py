"""Kubeflow SDK benchmark: ``TrainerClient().train()`` to the first log line of node 0, on Trimaran
(the SDK's Kubernetes backend through Trimaran's kubeconfig) beside the SDK's own
``LocalProcessBackend``, for the same function, rounds alternating in one run.

The function imports torch and scikit-learn, loads sklearn's digits and prints one line; the time
is from ``train()`` until that line is read back through ``get_job_logs(follow=True)``, polled as
a user would (each call before the pod runs returns nothing).

- Trimaran: a ``torch-distributed`` TrainJob of 1 node (and of 2 nodes: the line then waits for
  torchrun's rendezvous across them), started by the platform's Python, which has torch.
- LocalProcessBackend: a virtual environment per job (``python -m venv``, ensurepip), then
  ``pip install`` of the runtime's ``torch`` and the trainer's ``packages_to_install``, then
  ``torchrun``. Installing torch needs an index: ``--pip-index-url``/``--find-links`` give a local
  one (this machine: ``file:///opt/pypi/simple`` and ``/opt/wheels``), so nothing is downloaded
  and the figure is a lower bound of what a user pays. It also runs with
  ``packages_to_install=None`` (nothing installed, no network): that venv has no torch and no
  ``torchrun``, so the job fails ("bash: .../bin/torchrun: No such file or directory"); the time to
  that end is printed.
- The floor: the platform's Python started by hand on the same function.

The SDK runs in its own virtualenv (``$TRIMARAN_KUBEFLOW_PYTHON``, ``scripts/test.sh`` builds
``.venv-kubeflow``); the control plane is a fresh one in a temporary home.

    .venv/bin/python bench/trainer_sdk.py --rounds 3 \\
        --pip-index-url file:///opt/pypi/simple --find-links /opt/wheels
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trimaran.server.daemon import start_server, stop_pods, stop_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

CLIENT = r'''
import inspect, json, subprocess, sys, time
from kubeflow.trainer import CustomTrainer, LocalProcessBackendConfig, TrainerClient

MARK = "digits loaded"


def first_line():
    import os
    import sklearn.datasets
    import torch
    x, _ = sklearn.datasets.load_digits(return_X_y=True)
    print(f"digits loaded: {len(x)} on node {os.environ.get('PET_NODE_RANK', '0')} torch {torch.__version__}",
          flush=True)


def until_first_line(client, name, follow, deadline=900):
    """When a line with MARK was read back, and the first line of any kind (None: the job ended without)."""
    start, first_any = time.perf_counter(), None
    while time.perf_counter() - start < deadline:
        # A follow returns at once while node 0's pod is pending. LocalProcessBackend's follow only
        # returns when the job ends (it prints the lines meanwhile), so its log is polled instead.
        for line in client.get_job_logs(name, follow=follow):
            if first_any is None:
                first_any = time.perf_counter()
            if MARK in line:
                return time.perf_counter(), first_any
        if client.get_job(name).status in ("Complete", "Failed"):
            return None, first_any
        time.sleep(0.02)
    raise TimeoutError(name)


def run(client, follow, **trainer):
    start = time.perf_counter()
    name = client.train(runtime="torch-distributed", trainer=CustomTrainer(func=first_line, **trainer))
    marked, first_any = until_first_line(client, name, follow)
    client.wait_for_job_status(name, status={"Complete", "Failed"}, timeout=900, polling_interval=0.2)
    status = client.get_job(name).status
    tail = list(client.get_job_logs(name))[-3:]
    client.delete_job(name)
    return {"to_mark": None if marked is None else marked - start,
            "to_first_line": None if first_any is None else first_any - start,
            "status": status, "tail": tail}


def by_hand(python):
    """The floor: the platform's Python started on the same function, no SDK and no platform."""
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", inspect.getsource(first_line) + "first_line()"],
                            stdout=subprocess.PIPE, text=True)
    marked = next((time.perf_counter() for line in proc.stdout if MARK in line), None)
    proc.wait()
    return {"to_mark": None if marked is None else marked - start, "to_first_line": None,
            "status": "Complete" if proc.returncode == 0 else "Failed", "tail": []}


args = json.loads(sys.argv[1])
kube, local = TrainerClient(), TrainerClient(backend_config=LocalProcessBackendConfig())
rounds = []
for _ in range(args["rounds"]):
    arms = {"by_hand": by_hand(args["platform_python"]),
            "trimaran_1": run(kube, True, num_nodes=1, resources_per_node={"cpu": 1}),
            "trimaran_2": run(kube, True, num_nodes=2, resources_per_node={"cpu": 1}),
            "local_bare": run(local, False, num_nodes=1)}
    if args["index_urls"]:
        arms["local"] = run(local, False, num_nodes=1, packages_to_install=["scikit-learn"],
                            pip_index_urls=args["index_urls"], env={"PIP_FIND_LINKS": args["find_links"] or ""})
    rounds.append(arms)
print(json.dumps(rounds))
'''


def kubeflow_python() -> str:
    python = os.environ.get("TRIMARAN_KUBEFLOW_PYTHON") or str(REPO / ".venv-kubeflow/bin/python")
    if not Path(python).exists():
        sys.exit(f"{python} is missing: scripts/test.sh builds .venv-kubeflow (or set $TRIMARAN_KUBEFLOW_PYTHON)")
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pip-index-url", action="append", default=[],
                        help="index for the local backend's pip (repeat for extra indexes)")
    parser.add_argument("--find-links", help="a directory of wheels for the local backend's pip (e.g. torch)")
    args = parser.parse_args()
    python = kubeflow_python()
    with tempfile.TemporaryDirectory(prefix="trimaran-bench-") as tmp:
        home = Path(tmp) / "home"
        old = os.environ.get("TRIMARAN_HOME")
        os.environ["TRIMARAN_HOME"] = str(home)
        try:
            start_server(home=home)
            script = Path(tmp) / "client.py"
            script.write_text(textwrap.dedent(CLIENT))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIMARAN_", "KUBE", "VIRTUAL_ENV"))}
            # The local backend makes its venv from the `python` on PATH: the SDK's interpreter.
            env.update(KUBECONFIG=str(home / "kubeconfig"), PATH=f"{Path(python).parent}:{env['PATH']}",
                       PYTHONUNBUFFERED="1")
            done = subprocess.run(
                [python, str(script), json.dumps({"rounds": args.rounds, "index_urls": args.pip_index_url,
                                                  "find_links": args.find_links,
                                                  "platform_python": sys.executable})],
                env=env, cwd=tmp, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"client exited {done.returncode}\n{done.stdout}\n{done.stderr}")
            rounds = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            stop_pods(home, grace_seconds=1.0)
            stop_server(home)
            if old is None:
                os.environ.pop("TRIMARAN_HOME", None)
            else:
                os.environ["TRIMARAN_HOME"] = old
    report(rounds, args)


def report(rounds: list[dict], args: argparse.Namespace) -> None:
    def median(arm: str, key: str) -> float | None:
        values = [r[arm][key] for r in rounds if r[arm][key] is not None]
        return statistics.median(values) if values else None

    def shown(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f} s"

    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, {len(rounds)} rounds")
    for arm, label in (("by_hand", "the platform's python on the function (floor)"),
                       ("trimaran_1", "Trimaran, torch-distributed, 1 node"),
                       ("trimaran_2", "Trimaran, torch-distributed, 2 nodes"),
                       ("local", "LocalProcessBackend, torch + scikit-learn installed"),
                       ("local_bare", "LocalProcessBackend, packages_to_install=None")):
        if arm not in rounds[0]:
            continue
        statuses = sorted({r[arm]["status"] for r in rounds})
        print(f"{label:55} train() -> function's first line {shown(median(arm, 'to_mark')):>9}   "
              f"-> first line of any kind {shown(median(arm, 'to_first_line')):>9}   job {'/'.join(statuses)}")
        if median(arm, "to_mark") is None:
            print(f"    its log ends: {rounds[-1][arm]['tail']}")
    local, ours = median("local", "to_mark"), median("trimaran_1", "to_mark")
    if local and ours:
        print(f"ratio Trimaran (1 node) / LocalProcessBackend: {ours / local:.3f}x "
              f"(LocalProcessBackend / Trimaran: {local / ours:.1f}x)")
    print(json.dumps(rounds))


if __name__ == "__main__":
    main()
