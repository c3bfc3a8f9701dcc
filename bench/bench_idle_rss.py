"""Idle RSS of the control plane (target < 150 MB), beside a bare server on the same stack.

    .venv/bin/python bench/bench_idle_rss.py [--rounds 3] [--jobs 200]

Each round starts a real control plane, ``python -m trimaran.server --host 127.0.0.1 --port 0``
with ``TRIMARAN_HOME`` a fresh temporary directory, waits for ``$TRIMARAN_HOME/server.json``,
waits for its ``VmRSS`` (``/proc/PID/status``) to settle, reads it and stops it with SIGTERM.
Twice: with an empty store, and with ``--jobs`` batch/v1 Jobs stored before the start (suspended,
so no pod runs; the controllers still read and reconcile every one of them).

The peer, measured in the same rounds the same way: a FastAPI app served by uvicorn with a
SQLAlchemy engine connected to a SQLite file, and nothing else. That is the stack the control
plane is built on (its HTTP API, its store, its pydantic models), so the difference is what
Trimaran itself keeps in memory: its own modules, controllers and caches, and whatever libraries
it imports beyond that stack. A bare ``python -c`` shows the interpreter's floor.

The code measured is the checkout this script sits in (``PYTHONPATH`` is set to it).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SETTLE_WINDOW_S = 3.0
SETTLE_TOLERANCE_KB = 512
SETTLE_LIMIT_S = 30.0

PEER = """
import asyncio, sys
import fastapi, pydantic, sqlalchemy, uvicorn

engine = sqlalchemy.create_engine("sqlite:///" + sys.argv[1])
with engine.begin() as conn:
    conn.execute(sqlalchemy.text("create table objects (k text primary key, body text)"))
app = fastapi.FastAPI()


class Health(pydantic.BaseModel):
    ok: bool


@app.get("/healthz")
def healthz() -> Health:
    return Health(ok=True)


async def main() -> None:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        open(sys.argv[2], "w").close()

    ready = asyncio.create_task(announce())
    await server.serve()  # uvicorn's own SIGTERM handling ends it
    ready.cancel()


asyncio.run(main())
"""

BARE = "import sys, time\nopen(sys.argv[1], 'w').close()\ntime.sleep(3600)\n"


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def settled_rss_kb(proc: subprocess.Popen) -> int:
    """VmRSS once it has moved less than the tolerance over the settle window."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} while settling")
        now = time.monotonic()
        samples.append((now, rss_kb(proc.pid)))
        window = [kb for t, kb in samples if t >= now - SETTLE_WINDOW_S]
        if samples[0][0] <= now - SETTLE_WINDOW_S and max(window) - min(window) <= SETTLE_TOLERANCE_KB:
            return window[-1]
        time.sleep(0.25)
    return samples[-1][1]


def measure(argv: list[str], env: dict[str, str], ready: Path) -> int:
    """Start ``argv``, wait for ``ready`` to exist, return its settled RSS in kB, stop it."""
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv} did not get ready in 60 s")
            time.sleep(0.05)
        return settled_rss_kb(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fill_store(home: Path, jobs: int) -> None:
    from trimaran.store import open_store

    store = open_store(home / "trimaran.db")
    store.ensure_namespace("default")
    for i in range(jobs):
        store.create({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"job-{i:04d}", "namespace": "default", "labels": {"bench": "idle-rss"}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "python", "command": ["python", "-c", "print(1)"],
                 "env": [{"name": f"VAR_{k}", "value": "x" * 40} for k in range(10)]}]}}},
        })
    store.close()


def control_plane(jobs: int) -> int:
    home = Path(tempfile.mkdtemp(prefix="trimaran-rss-"))
    try:
        if jobs:
            fill_store(home, jobs)
        env = dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO))
        return measure([PY, "-m", "trimaran.server", "--host", "127.0.0.1", "--port", "0"], env,
                       home / "server.json")
    finally:
        from trimaran.server.daemon import stop_pods

        stop_pods(home, grace_seconds=1.0)
        shutil.rmtree(home, ignore_errors=True)


def script(source: str, with_db: bool) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="trimaran-rss-peer-"))
    try:
        args = [str(tmp / "peer.db")] if with_db else []
        return measure([PY, "-c", source, *args, str(tmp / "ready")], dict(os.environ), tmp / "ready")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=200, help="Jobs stored for the second measurement")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))

    arms: dict[str, Callable[[], int]] = {
        "control plane, empty store": lambda: control_plane(0),
        f"control plane, {args.jobs} Jobs stored": lambda: control_plane(args.jobs),
        "peer: FastAPI + uvicorn + SQLAlchemy/SQLite server": lambda: script(PEER, with_db=True),
        "bare python -c (interpreter floor)": lambda: script(BARE, with_db=False),
    }
    results: dict[str, list[int]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, arm in arms.items():  # interleaved, so drift in the machine's load hits every arm
            results[name].append(arm())

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {args.rounds} rounds (median; min-max)")
    peer = statistics.median(results["peer: FastAPI + uvicorn + SQLAlchemy/SQLite server"])
    for name, values in results.items():
        med = statistics.median(values)
        print(f"  {name:<52} {med / 1024:6.1f} MB  ({min(values) / 1024:.1f}-{max(values) / 1024:.1f})"
              f"  {med / peer:5.2f}x peer")
    print("  target: control plane < 150 MB")


if __name__ == "__main__":
    main()
