"""A closed-loop load generator for V2 gRPC `ModelInfer` (there is no ghz on this machine).

    python grpc_load.py --target 127.0.0.1:8081 --request req.bin --concurrency 64 --duration 5

`--request` holds one serialized `inference.ModelInferRequest`; every call sends those bytes
unchanged and does not parse the answer (as wrk does for REST), so the client costs as little
CPU as Python allows. The calls are spread over `--processes` worker processes, each an asyncio
loop with its share of the callers; each caller has its own channel with a local subchannel
pool, i.e. its own HTTP/2 connection, as each wrk connection is its own TCP connection.
Prints one JSON line: requests, seconds, errors by status code, p50/p90/p99/max latency (ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

METHOD = "/inference.GRPCInferenceService/ModelInfer"


async def _worker(target: str, request: bytes, callers: int, duration: float, warmup: float) -> dict:
    import grpc

    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 64 << 20)]
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(callers)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    state = {"record": False, "stop": False}

    async def caller(channel) -> None:
        call = channel.unary_unary(METHOD)
        clock = time.perf_counter
        while not state["stop"]:
            t0 = clock()
            try:
                await call(request, timeout=30)
            except grpc.aio.AioRpcError as exc:
                if state["record"]:
                    errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                continue
            if state["record"]:
                latencies.append(clock() - t0)

    for ch in channels:
        await ch.channel_ready()
    tasks = [asyncio.create_task(caller(ch)) for ch in channels]
    await asyncio.sleep(warmup)
    state["record"] = True
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    state["stop"] = True
    elapsed = time.perf_counter() - t0
    state["record"] = False
    await asyncio.gather(*tasks)
    for ch in channels:
        await ch.close()
    return {"latencies": latencies, "errors": errors, "seconds": elapsed}


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q / 100 * len(sorted_values)))]


def run(target: str, request_file: str, concurrency: int, duration: float, processes: int = 2,
        warmup: float = 1.0) -> dict:
    """Runs the load from `processes` child processes; returns the merged summary."""
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    children = [
        subprocess.Popen([sys.executable, __file__, "--worker", "--target", target, "--request", request_file,
                          "--concurrency", str(n), "--duration", str(duration), "--warmup", str(warmup)],
                         stdout=subprocess.PIPE, text=True)
        for n in shares]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    seconds = []
    for child in children:
        out, _ = child.communicate(timeout=duration + warmup + 120)
        part = json.loads(out.strip().splitlines()[-1])
        latencies += part["latencies"]
        seconds.append(part["seconds"])
        for k, v in part["errors"].items():
            errors[k] = errors.get(k, 0) + v
    latencies.sort()
    secs = max(seconds)
    return {
        "requests": len(latencies), "seconds": secs, "rps": len(latencies) / secs, "errors": errors,
        "p50_ms": _percentile(latencies, 50) * 1e3, "p90_ms": _percentile(latencies, 90) * 1e3,
        "p99_ms": _percentile(latencies, 99) * 1e3, "max_ms": (latencies[-1] * 1e3) if latencies else float("nan"),
        "processes": processes,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--request", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with open(args.request, "rb") as f:
            request = f.read()
        print(json.dumps(asyncio.run(_worker(args.target, request, args.concurrency, args.duration, args.warmup))))
        return
    print(json.dumps(run(args.target, args.request, args.concurrency, args.duration, args.processes, args.warmup)))


if __name__ == "__main__":
    main()
