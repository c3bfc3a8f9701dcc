"""Where a Trimaran model server's time goes under wrk load: py-spy on every worker, summarised.

    .venv/bin/python bench/serving/profile_trimaran.py [--rows 1] [--connections 64] [--seconds 10]
        [--workers 2] [--batch] [--out DIR]

Trains the benchmark's digits LogisticRegression, starts `python -m trimaran.serving` on it,
drives it with wrk (the benchmark's Lua script; with --grpc, V2 gRPC with h2load) and records all its processes with
`py-spy record --subprocesses --format raw` meanwhile. Prints the throughput under the profiler
(py-spy slows the server a little), then the functions with the most samples: own time (the
frame on top of the stack) and inclusive time, as shares of the samples of threads that were
running (add --idle to count waiting threads too), and the samples per process. Writes the raw
stacks to --out.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import bench_serving as bs  # noqa: E402


def summarise(raw: Path, top: int) -> str:
    own: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    per_process: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        proc = next((f.split(":", 1)[0] for f in reversed(frames) if f.startswith("process ")), "?")
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        per_process[proc] += n
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"{total} samples; per process: " + ", ".join(f"{p} {n}" for p, n in per_process.most_common())]
    out.append(f"\nown time (top {top}):")
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out.append(f"\ninclusive time (top {top}):")
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch", action="store_true", help="--max-batch-size 32 --max-batch-latency-ms 2")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--idle", action="store_true", help="count idle threads' samples too (waits, sleeps)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--grpc", action="store_true", help="drive V2 gRPC ModelInfer with h2load instead of REST")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="trimaran-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="trimaran-profile-model-"))
    model, X, model_path = bs.train(tmp)
    body = tmp / "body.json"
    body.write_bytes(bs.rest_body(X[: args.rows]))
    grpc_request = tmp / "grpc.bin"
    grpc_request.write_bytes(bs.grpc_request(X[: args.rows]))
    server = bs.trimaran_server(model_path, tmp, "trimaran", args.workers, batch=args.batch)
    server.start(tmp)
    py_spy = str(Path(sys.executable).parent / "py-spy")
    try:
        server.wait_ready(120)
        expected = [int(v) for v in model.predict(X[: args.rows])]
        bs.check_rest(server, body.read_bytes(), expected)
        if args.grpc:
            target = f"127.0.0.1:{server.grpc_port}"
            answer_size = bs.check_grpc(server, grpc_request.read_bytes(), expected)

            def load(seconds: float, connections: int) -> dict:
                return bs.h2load.run(target, str(grpc_request), connections, seconds, warmup=0.5,
                                     response_size=answer_size)
        else:
            def load(seconds: float, connections: int) -> dict:
                return bs.wrk(server.url, body, connections, seconds)
        load(2, 16)  # warm-up
        raw = out / "stacks.txt"
        spy = subprocess.Popen([py_spy, "record", "--pid", str(server.proc.pid), "--subprocesses",
                                *(["--idle"] if args.idle else []), "--nonblocking", "--rate", "200",
                                "--duration", str(round(args.seconds) + 2),
                                "--format", "raw", "--output", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        result = bs.measured(server, load, args.seconds, args.connections)
        spy.wait(timeout=args.seconds + 60)
        print(f"under py-spy: {result['rps']:,.0f} req/s, p50 {result['p50_ms']:.2f} ms, "
              f"p99 {result['p99_ms']:.2f} ms, errors {result['errors']}, server {result['server_cores']:.2f} cores, "
              f"load generator {result['client_cores']:.2f} cores ({args.rows}-row bodies, c={args.connections}, "
              f"{args.workers} workers"
              f"{', batching' if args.batch else ''}; load average {os.getloadavg()[0]:.2f})")
        print(summarise(raw, args.top))
        print(f"\nraw stacks (collapsed, for flamegraph.pl or speedscope): {raw}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
