"""A DDP PyTorchJob whose code lives in its image, as Kubeflow's examples are published: no
``command``, the image's Cmd runs. The image is the Debian python3 test image, a layer with torch
(the CPU wheel of this venv: cp311, as Debian bookworm's python3) copied from site-packages, and a
layer with the training script; pushed to a registry on loopback and pulled by the node."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import poll
from tests.imagekit import ImageSpec, Layer, cache_dir, registry, test_images  # noqa: F401 (fixtures)
from tests.runtime.test_image_run import overlay_daemons
from trimaran.runtime.shim import overlay_mounts_under

pytestmark = pytest.mark.heavy

# What `import torch` needs besides torch (its requirements); numpy for torch's own conversions.
_TORCH_PACKAGES = ("torch", "torchgen", "functorch", "sympy", "mpmath", "networkx", "filelock", "fsspec", "jinja2",
                   "markupsafe", "typing_extensions.py", "numpy", "numpy.libs")
_DIST_PACKAGES = "usr/local/lib/python3.11/dist-packages"
# Left out of the layer: headers and torch's own test suite (a sixth of the bytes to pull).
_TORCH_UNUSED = ("include", "test")

TRAIN = '''
import datetime
import os
import torch
import torch.distributed as dist

# A rendezvous that cannot complete fails the pod with gloo's message instead of hanging the test.
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(16, 8, generator=generator)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
weights = model.module.weight.detach().clone()
gathered = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
assert all(torch.equal(g, weights) for g in gathered), "replicas diverged"
print(f"rank {rank}/{world} in {os.getcwd()} trained 5 steps, weights in sync, python {os.sys.version.split()[0]}")
dist.destroy_process_group()
'''


def torch_layer_tag() -> str:
    """Named by torch's version and the packages copied, so that a change of either rebuilds it."""
    import hashlib

    import torch

    packages = hashlib.sha256(" ".join(_TORCH_PACKAGES + _TORCH_UNUSED).encode()).hexdigest()[:8]
    return f"debian-torch-{torch.__version__.replace('+', '-')}-{packages}"


@pytest.fixture(scope="module")
def trainer_image(test_images, registry) -> str:  # noqa: F811 (fixtures)
    """The Debian python3 image plus torch (built once and cached with the base images) plus the script."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("torch's wheel here must be cp311, as Debian bookworm's python3")
    layout = test_images.layout
    tag = torch_layer_tag()
    with open(cache_dir() / "torch-layer.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if layout.descriptor(tag) is None:
            site = Path(sysconfig.get_paths()["purelib"])
            staging = cache_dir() / f"{tag}.staging"
            shutil.rmtree(staging, ignore_errors=True)
            target = staging / _DIST_PACKAGES
            target.mkdir(parents=True)
            for name in _TORCH_PACKAGES:
                if (site / name).exists():
                    # Hard links: the layer is read from them, nothing is copied on disk.
                    subprocess.run(["cp", "-al", str(site / name), str(target / name)], check=True)
            unused = [f"{_DIST_PACKAGES}/torch/{part}" for part in _TORCH_UNUSED]
            layout.build(tag, [Layer(tree=staging, tree_excludes=unused)],
                         ImageSpec(cmd=["python3"]), base="debian-python")
            shutil.rmtree(staging, ignore_errors=True)
    layout.build("ddp-trainer", [Layer(files={"app/train.py": TRAIN})],
                 ImageSpec(cmd=["python3", "-u", "/app/train.py"], working_dir="/app",
                           env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "OMP_NUM_THREADS=1"]),
                 base=tag)
    return registry.push(layout, "ddp-trainer", "kubeflow/ddp-trainer:v1")


def test_a_ddp_pytorchjob_runs_the_code_baked_into_its_image(plane, trainer_image):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "baked"},
           "spec": {"pytorchReplicaSpecs": {
               role: {"replicas": 1, "restartPolicy": "OnFailure",
                      "template": {"spec": {"containers": [{"name": "pytorch", "image": trainer_image}]}}}
               for role in ("Master", "Worker")}}}
    plane.cli("apply", "-f", "-", input=json.dumps(job))
    plane.cli("wait", "pytorchjob/baked", "--for=condition=Succeeded", "--timeout=300s", timeout=360)
    for pod, rank in (("baked-master-0", 0), ("baked-worker-0", 1)):
        log = plane.cli("logs", pod).stdout
        assert f"rank {rank}/2 in /app trained 5 steps, weights in sync, python 3.11" in log, log
        status = plane.get("pod", pod)["status"]["containerStatuses"][0]
        assert status["imageID"].startswith(trainer_image.rsplit(":", 1)[0] + "@sha256:")
    poll(lambda: not overlay_mounts_under(str(plane.home)) and not overlay_daemons(plane.home),
         timeout=30, what="no overlay left once the replicas ended")
