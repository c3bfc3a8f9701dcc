"""Idle watches and log follows must not slow anything else: ``GET`` of a list with 1,000 idle
watches and 100 idle log follows open against with none, side by side in one run.

    .venv/bin/python bench/bench_watch_flood.py [--watches 1000] [--follows 100] [--requests 300] [--blocks 4]

A control plane in a fresh temporary ``TRIMARAN_HOME`` holds 50 ConfigMaps and one Pod that prints a
line and sleeps. In alternating blocks (without, with, without, with...) a client sends ``--requests``
``GET /api/v1/namespaces/default/configmaps`` one after another on one kept-alive HTTPS connection;
in a "with" block a child process first opens the watches (spread over five resources, at the
current resourceVersion, no bookmarks) and the follows (``pods/talker/log?follow=true``) and holds
them, idle, while the client measures. Prints each block's median and p99, the ratios with/without
(target: about 1), and the control plane's count of open long-running requests (its ``/metrics``)
during a "with" block. The code measured is the checkout this script sits in.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kube_api import Conn, Endpoint, hold_streams  # noqa: E402 - the bench's own HTTP client

PY = sys.executable
LIST = "/api/v1/namespaces/default/configmaps"
FOLLOW = "/api/v1/namespaces/default/pods/talker/log?follow=true"
WATCHED = ["/api/v1/namespaces/default/pods", "/api/v1/configmaps", "/apis/batch/v1/jobs",
           "/apis/kubeflow.org/v1/tfjobs", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"]


async def hold(kubeconfig: Path, watches: int, follows: int) -> None:
    """Open the streams, print ``ready OPENED FAILED``, hold them until stdin closes."""
    ep = Endpoint.of(kubeconfig)
    probe = await Conn.open(ep, ep.ssl_context())
    status, body = await probe.request("GET", LIST)
    probe.close()
    rv = body["metadata"]["resourceVersion"]
    paths = [f"{WATCHED[i % len(WATCHED)]}?watch=true&resourceVersion={rv}" for i in range(watches)]
    await hold_streams(ep, paths + [FOLLOW] * follows, head_timeout=60)


async def measure(ep: Endpoint, requests: int) -> list[float]:
    conn = await Conn.open(ep)
    try:
        for _ in range(20):  # warm-up
            await conn.request("GET", LIST)
        out = []
        for _ in range(requests):
            started = time.perf_counter()
            status, _ = await conn.request("GET", LIST)
            out.append(time.perf_counter() - started)
            assert status == 200
        return out
    finally:
        conn.close()


async def longrunning(ep: Endpoint) -> str:
    conn = await Conn.open(ep)
    try:
        conn._send("GET", "/metrics", None, "")
        _, headers = await conn._head()
        text = (await conn.reader.readexactly(int(headers["content-length"]))).decode()
    finally:
        conn.close()
    return ", ".join(line for line in text.splitlines() if line.startswith("apiserver_longrunning_requests{"))


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watches", type=int, default=1000)
    parser.add_argument("--follows", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold:
        asyncio.run(hold(args.kubeconfig, args.watches, args.follows))
        return

    from trimaran.server.daemon import start_server, stop_pods, stop_server

    root = Path(tempfile.mkdtemp(prefix="trimaran-flood-"))
    home = root / "home"
    os.environ["TRIMARAN_HOME"] = str(home)
    start_server(home=home)
    try:
        kubeconfig = home / "kubeconfig"
        ep = Endpoint.of(kubeconfig)
        cli = [PY, "-m", "trimaran.cli", "apply", "-f", "-"]
        items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"},
                  "data": {"k": "v" * 100}} for i in range(50)]
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"}, "spec": {"containers": [
            {"name": "main", "image": "x", "command": ["python", "-c", "import time; print('hi', flush=True); "
                                                                      "time.sleep(3600)"]}]}})
        subprocess.run(cli, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), text=True,
                       check=True, capture_output=True)
        results: dict[str, list[float]] = {"without": [], "with": []}
        seen = ""
        for block in range(args.blocks):
            flooded = block % 2 == 1
            holder = None
            if flooded:
                holder = subprocess.Popen([PY, __file__, "--hold", "--watches", str(args.watches), "--follows",
                                           str(args.follows), "--kubeconfig", str(kubeconfig)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                opened, failed = holder.stdout.readline().split()[1:]  # type: ignore[union-attr]
                time.sleep(1.0)  # let the opening settle: the streams are to be idle while measured
                seen = asyncio.run(longrunning(ep))
            try:
                times = asyncio.run(measure(ep, args.requests))
            finally:
                if holder is not None:
                    holder.stdin.close()  # type: ignore[union-attr]
                    holder.wait(timeout=60)
            results["with" if flooded else "without"] += times
            extra = f" (streams opened {opened}, failed {failed})" if flooded else ""
            print(f"block {block} {'with' if flooded else 'without'}: median {statistics.median(times) * 1e3:.2f} ms, "
                  f"p99 {p99(times) * 1e3:.2f} ms{extra}", flush=True)
        a, b = results["without"], results["with"]
        print(f"GET {LIST} (50 items), {len(a)} requests each: without streams median {statistics.median(a) * 1e3:.2f} "
              f"ms, p99 {p99(a) * 1e3:.2f} ms; with {args.watches} idle watches + {args.follows} idle log follows "
              f"median {statistics.median(b) * 1e3:.2f} ms, p99 {p99(b) * 1e3:.2f} ms; ratio median "
              f"{statistics.median(b) / statistics.median(a):.2f}x, p99 {p99(b) / p99(a):.2f}x")
        print(f"control plane during a flooded block: {seen}")
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
