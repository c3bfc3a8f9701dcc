"""Closed-loop V2 gRPC `ModelInfer` load with h2load (nghttp2's HTTP/2 load generator, in C, as wrk is for REST).

    python h2load.py --target 127.0.0.1:8081 --request req.bin [--response-size N] --concurrency 64 --duration 5

`--request` holds one serialized `inference.ModelInferRequest`; it is sent gRPC-framed (5-byte length prefix) as
the body of a POST to /inference.GRPCInferenceService/ModelInfer with `content-type: application/grpc` and
`te: trailers`, `--concurrency` calls in flight: by default over as many connections of one stream each (each a
caller, as each wrk connection), with `--streams N` over connections of N streams each (a gRPC client multiplexes
its calls over a few connections: a grpcio channel is one connection).
h2load judges an answer by its HTTP status alone, and a gRPC error is a 200 whose trailers say so; an error
answer carries no message, so with `--response-size` (the size of a correct answer's message, which the
benchmark checks before timing) the answers missing from the DATA bytes received are counted as errors.
Latency percentiles come from h2load's per-request log (`latencies=True`). That log costs h2load one unbuffered
write(2) per request, which on a 2-core machine is CPU taken from the server under test (wrk keeps its histogram
in memory), so throughput is measured in runs without it and percentiles in runs with it. Prints one JSON line:
requests, seconds, rps, errors by kind, and with latencies p50/p90/p99/max (ms).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile

METHOD = "/inference.GRPCInferenceService/ModelInfer"


def ensure() -> str:
    """h2load's version line, installing nghttp2-client with apt-get when it is missing."""
    if not shutil.which("h2load"):
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        print("installing h2load (apt-get install -y nghttp2-client) ...", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "nghttp2-client"], check=True, env=env)
    return subprocess.run(["h2load", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q / 100 * len(sorted_values)))]


def run(target: str, request_file: str, concurrency: int, duration: float, warmup: float = 1.0,
        response_size: int | None = None, latencies: bool = True, streams: int = 1) -> dict:
    """``concurrency`` calls in flight: ``concurrency // streams`` connections of ``streams`` calls each."""
    with open(request_file, "rb") as f:
        message = f.read()
    with tempfile.TemporaryDirectory(prefix="h2load-") as tmp:
        body = os.path.join(tmp, "body")
        with open(body, "wb") as f:
            f.write(b"\x00" + len(message).to_bytes(4, "big") + message)
        log = os.path.join(tmp, "log")
        cmd = ["h2load", "-t1", f"-c{concurrency // streams}", f"-m{streams}", f"-D{round(duration * 1000)}ms",
               f"--warm-up-time={round(warmup * 1000)}ms",
               "-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers",
               *(["--log-file", log] if latencies else []), f"http://{target}{METHOD}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 60)
        out = proc.stdout
        rows = []
        if os.path.exists(log):
            with open(log) as f:
                rows = [line.split("\t") for line in f if line.strip()]
    finished = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", out)
    counts = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                       r"(\d+) errored, (\d+) timeout", out)
    if proc.returncode != 0 or finished is None or counts is None:
        return {"rps": 0.0, "errors": {"h2load": -1}, "error_text": (out + proc.stderr)[-500:]}
    done, succeeded = int(counts.group(3)), int(counts.group(4))
    errors = {}
    if done - succeeded:
        errors["http"] = done - succeeded
    data = re.search(r"traffic: .*\((\d+)\) data", out)
    if response_size and data:
        missing = round((succeeded * (response_size + 5) - int(data.group(1))) / (response_size + 5))
        if missing > 0:
            errors["no message"] = missing
    # h2load's "finished in" includes the warm-up; its req/s and counts are the measured duration's.
    result = {"requests": done, "seconds": duration, "rps": float(finished.group(2)), "errors": errors}
    if latencies:
        logged = sorted(int(r[2]) / 1e6 for r in rows if len(r) >= 3)
        result.update(p50_ms=_percentile(logged, 50) * 1e3, p90_ms=_percentile(logged, 90) * 1e3,
                      p99_ms=_percentile(logged, 99) * 1e3, max_ms=(logged[-1] * 1e3) if logged else float("nan"),
                      logged=len(logged))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--request", required=True)
    parser.add_argument("--response-size", type=int)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--no-latencies", action="store_true", help="throughput only: no per-request log")
    parser.add_argument("--streams", type=int, default=1, help="calls in flight per connection")
    args = parser.parse_args()
    print(json.dumps(run(args.target, args.request, args.concurrency, args.duration, args.warmup,
                         args.response_size, latencies=not args.no_latencies, streams=args.streams)))


if __name__ == "__main__":
    main()
