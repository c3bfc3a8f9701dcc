"""Warm start of a host-process pod under crun (from an OCI bundle) against bubblewrap, side by side.

Both pods run ``echo up`` through the same shim; the time is from ``start_pod`` to the line in the
pod's log. The two runtimes alternate within each round in one process (so a busy machine weighs
on both alike); medians and p10 of ``--rounds``, the first round left out (it warms caches). Needs a
root control plane with crun and tini-static (else crun is not used and the bench says so).

    .venv/bin/python bench/bench_runtime_start.py --rounds 41
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_image_start import time_start  # noqa: E402
from trimaran.runtime import LocalRuntime, oci  # noqa: E402  (oci: the submodule)


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "command": ["echo", "up"]}]}}


def use(runtime_name: str) -> None:
    os.environ["TRIMARAN_RUNTIME"] = runtime_name
    oci.oci_available.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    use("crun")
    if not oci.oci_available():
        raise SystemExit("crun does not run pods here (not root, or crun / tini-static missing)")
    times: dict[str, list[float]] = {"bwrap": [], "crun": []}
    with tempfile.TemporaryDirectory(prefix="bench-runtime-start-") as tmp:
        runtime = LocalRuntime(Path(tmp) / "home")
        for round_ in range(args.rounds + 1):
            for name in (["bwrap", "crun"] if round_ % 2 else ["crun", "bwrap"]):
                use(name)
                manifest = pod(f"{name}-{round_}")
                took = time_start(runtime, manifest)
                if round_:
                    times[name].append(took)
                runtime.stop_pod(manifest["metadata"]["uid"], grace_seconds=0)
                runtime.remove_pod(manifest["metadata"]["uid"])
    print(f"rounds: {args.rounds}, load average at the end: {os.getloadavg()[0]:.2f}")
    for name, values in times.items():
        ordered = sorted(values)
        print(f"{name}: host-process pod, start_pod -> first log line: median "
              f"{statistics.median(values) * 1000:.1f} ms (p10 {ordered[len(ordered) // 10] * 1000:.1f}, "
              f"max {ordered[-1] * 1000:.1f})")
    ratio = statistics.median(times["crun"]) / statistics.median(times["bwrap"])
    print(f"crun / bubblewrap (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
