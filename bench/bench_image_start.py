"""Warm start of a pod that runs its (cached) image against a host-process pod, side by side.

Both pods run ``echo up`` under the same runtime (bubblewrap, seccomp, the shim); the image pod
also looks its image up in the store, as the kubelet does when it is present, and mounts its
fuse-overlayfs root before bubblewrap. The time is from ``start_pod`` to the line in the pod's
log, alternating the two kinds each round; medians of ``--rounds``. The image is busybox from
tests/imagekit.py, pushed to a docker-registry on loopback and pulled once before timing.

    .venv/bin/python bench/bench_image_start.py --rounds 31
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.imagekit import build_test_images, start_registry  # noqa: E402
from trimaran.controllers.kubelet import _image_run  # noqa: E402
from trimaran.runtime import LocalRuntime  # noqa: E402
from trimaran.runtime.images import ImageStore, parse_reference  # noqa: E402


def pod(name: str, command: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x", "command": command}]}}


def time_start(runtime: LocalRuntime, manifest: dict, images: dict | None = None) -> float:
    """From ``start_pod`` to the pod's first log line ("up")."""
    log = runtime.home / "logs" / "default" / manifest["metadata"]["name"] / "main" / "0.log"
    started = time.perf_counter()
    runtime.start_pod(manifest, attempt=0, images=images)
    while True:
        try:
            if log.read_bytes().startswith(b"up"):
                return time.perf_counter() - started
        except FileNotFoundError:
            pass
        time.sleep(0.0005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-image-start-") as tmp:
        work = Path(tmp)
        registry = start_registry(work / "registry")
        try:
            reference = registry.push(build_test_images(), "busybox", "bench/busybox:1")
            store = ImageStore(work / "home" / "images")
            ref = parse_reference(reference)
            store.pull(ref)
            runtime = LocalRuntime(work / "home")
            host_times: list[float] = []
            image_times: list[float] = []
            for round_ in range(args.rounds + 1):
                kinds = ["host", "image"] if round_ % 2 else ["image", "host"]
                for kind in kinds:
                    manifest = pod(f"{kind}-{round_}", ["echo", "up"])
                    if kind == "image":
                        started = time.perf_counter()
                        image = store.lookup(ref)
                        lookup = time.perf_counter() - started
                        took = lookup + time_start(runtime, manifest, {"main": _image_run(image, ref)})
                    else:
                        took = time_start(runtime, manifest, {})
                    if round_:  # the first round warms caches
                        (image_times if kind == "image" else host_times).append(took)
                    runtime.stop_pod(manifest["metadata"]["uid"], grace_seconds=0)
                    runtime.remove_pod(manifest["metadata"]["uid"])
        finally:
            registry.stop()
    host, image = statistics.median(host_times), statistics.median(image_times)
    print(f"rounds: {args.rounds}")
    print(f"host-process pod, start_pod -> first log line: median {host * 1000:.1f} ms "
          f"(p10 {sorted(host_times)[len(host_times) // 10] * 1000:.1f}, max {max(host_times) * 1000:.1f})")
    print(f"image pod (cached), lookup + start_pod -> first log line: median {image * 1000:.1f} ms "
          f"(p10 {sorted(image_times)[len(image_times) // 10] * 1000:.1f}, max {max(image_times) * 1000:.1f})")
    print(f"difference: {(image - host) * 1000:+.1f} ms (target: within 50 ms)")


if __name__ == "__main__":
    main()
