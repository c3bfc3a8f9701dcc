"""A DDP PyTorchJob whose code lives in its image, as Kubeflow's examples are published: no
``command``, the image's Cmd runs. The image is the Debian python3 test image, a layer with torch
(``tests.imagekit.build_torch_image``) and a layer with the training script; pushed to a registry on
loopback and pulled by the node."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import poll
from tests.imagekit import ImageSpec, Layer, build_torch_image, registry, test_images  # noqa: F401 (fixtures)
from tests.runtime.test_image_run import overlay_daemons
from trimaran.runtime.shim import overlay_mounts_under

pytestmark = pytest.mark.heavy

TRAIN = '''
import datetime
import os
import sys
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
print(f"rank {rank}/{world} in {os.getcwd()} trained 5 steps, weights in sync, python {sys.version.split()[0]}")
# Leave together, then skip the process group's teardown: gloo's can abort a rank whose peer has already
# gone ("terminate called without an active exception"), and OnFailure then restarts that rank alone,
# to wait for a peer that finished. Everything is printed by now.
dist.barrier()
sys.stdout.flush()
os._exit(0)
'''


@pytest.fixture(scope="module")
def trainer_image(test_images, registry) -> str:  # noqa: F811 (fixtures)
    """The Debian python3 image plus torch (built with the base images) plus the script."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("torch's wheel here must be cp311, as Debian bookworm's python3")
    layout = test_images.layout
    layout.build("ddp-trainer", [Layer(files={"app/train.py": TRAIN})],
                 ImageSpec(cmd=["python3", "-u", "/app/train.py"], working_dir="/app",
                           env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "OMP_NUM_THREADS=1"]),
                 base=build_torch_image(test_images))
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
