"""Cold pull and unpack of a ~200 MB image from a loopback registry (target: within 1.5x of
``skopeo copy`` + ``umoci unpack`` by hand), and the disk one image and ten containers' lookups take.

    .venv/bin/python bench/bench_image_pull.py [--rounds 3] [--megabytes 200]

The image: the test busybox image plus four layers of random (incompressible) files, built with
tests/imagekit.py and pushed into ``docker-registry`` on a free loopback port. Each round, in
alternating order, pulls it cold into a fresh directory twice:

- Trimaran: ``ImageStore(dir).pull(ref)`` (resolve, copy into the shared blob directory, unpack,
  rename into place);
- by hand: ``skopeo copy --src-tls-verify=false docker://REF oci:DIR:img`` then
  ``umoci unpack --image DIR:img BUNDLE`` (``--rootless`` when not root), the same tools.

Then disk use (``du``, hard links counted once) of one pulled image, and after ten lookups of it
(what ten containers of the image are given: the same ``rootfs``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.imagekit import ImageSpec, Layer, OCILayout, build_test_images, start_registry  # noqa: E402
from trimaran.runtime.images import ImageStore, parse_reference  # noqa: E402

LAYERS = 4


def disk_use(path: Path) -> int:
    """Bytes on disk under ``path`` (``du``: each inode once)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def build_image(layout_dir: Path, megabytes: int) -> OCILayout:
    base = build_test_images()
    layout = OCILayout(layout_dir)
    # The base image's blobs, so the bench image can be layered on busybox in its own layout.
    for blob in (base.path / "blobs" / "sha256").iterdir():
        target = layout_dir / "blobs" / "sha256" / blob.name
        if not target.exists():
            os.link(blob, target)
    layout.tag("busybox", base.layout.descriptor("busybox"))
    per_layer = megabytes * 1024 * 1024 // LAYERS
    layers = [Layer(files={f"data/layer{i}/file{j}.bin": os.urandom(per_layer // 8) for j in range(8)})
              for i in range(LAYERS)]
    layout.build("bench", layers, ImageSpec(cmd=["sh"]), base="busybox")
    return layout


def pull_with_store(ref: str, directory: Path) -> float:
    start = time.perf_counter()
    ImageStore(directory).pull(parse_reference(ref))
    return time.perf_counter() - start


def pull_by_hand(ref: str, directory: Path) -> float:
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    directory.mkdir(parents=True)
    start = time.perf_counter()
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}",
                    f"oci:{directory}/layout:img"], check=True, capture_output=True)
    subprocess.run(["umoci", "unpack", *rootless, "--image", f"{directory}/layout:img", str(directory / "bundle")],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-image-pull-", dir=os.environ.get("TMPDIR")))
    registry = None
    try:
        layout = build_image(work / "oci", args.megabytes)
        registry = start_registry(work / "registry")
        ref = registry.push(layout, "bench", "bench/image:1")
        compressed = sum(layer["size"] for layer in layout.manifest("bench")["layers"])
        print(f"image {ref}: {len(layout.manifest('bench')['layers'])} layers, {compressed / 1e6:.0f} MB compressed")
        print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
              f"{'root' if os.geteuid() == 0 else 'rootless'}")
        ours: list[float] = []
        theirs: list[float] = []
        for round_number in range(args.rounds):
            order = [("trimaran", pull_with_store, ours), ("skopeo+umoci", pull_by_hand, theirs)]
            if round_number % 2:
                order.reverse()
            for name, pull, times in order:
                target = work / f"{name.replace('+', '-')}-{round_number}"
                os.sync()  # the previous pull's writeback is not charged to this one
                times.append(pull(ref, target))
                print(f"round {round_number + 1} {name:13s} {times[-1]:6.2f} s")
                if name == "trimaran" and round_number == 0:
                    store = ImageStore(target)
                    one = disk_use(target)
                    rootfs = {store.lookup(parse_reference(ref)).rootfs for _ in range(10)}
                    ten = disk_use(target)
                    print(f"disk: one image {one / 1e6:.0f} MB (blobs {disk_use(target / 'blobs') / 1e6:.0f} MB, "
                          f"rootfs {disk_use(next(iter(rootfs))) / 1e6:.0f} MB); after ten containers' lookups "
                          f"{ten / 1e6:.0f} MB, {len(rootfs)} distinct rootfs")
                shutil.rmtree(target, ignore_errors=True)
        ratio = statistics.median(ours) / statistics.median(theirs)
        print(f"median: trimaran {statistics.median(ours):.2f} s, skopeo+umoci {statistics.median(theirs):.2f} s, "
              f"ratio {ratio:.2f}x (target <= 1.5x)")
    finally:
        if registry is not None:
            registry.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
