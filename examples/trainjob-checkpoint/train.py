"""Data-parallel training on scikit-learn's digits that checkpoints to a claim and resumes from it.

Written for a TrainJob on a torch runtime: `torchrun /app/train.py` reads the PET_* variables the
runtime injects (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR/PORT), one process per node.

Every --checkpoint-every steps rank 0 writes the model, the optimizer and the step to
--checkpoint-dir (a claim every node mounts); every rank reads that checkpoint when it starts. When
a node fails, the runtime's failurePolicy restarts the whole JobSet, and the new processes go on
from the last checkpoint instead of step 0. Each rank prints `start rank=R world=W step=S` (S: the
step it resumes from, 0 on a fresh start), rank 0 prints `checkpoint step=S loss=L` as it saves,
and at the end `test_accuracy=0.9xxx steps=N`.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--checkpoint-dir", default="/checkpoints")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--pace", type=float, default=0.05, help="seconds to wait after each step, so there is "
                   "time to fail a node while it trains")
    args = p.parse_args()

    torch.set_num_threads(1)  # the nodes share few cores
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = (torch.tensor(a) for a in train_test_split(x / 16.0, y, test_size=0.25,
                                                                         random_state=0, stratify=y))
    x_tr, x_te = x_tr.float(), x_te.float()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    path, step = os.path.join(args.checkpoint_dir, "checkpoint.pt"), 0
    # Every rank reads the same file: rank 0 cannot replace it before this rank has joined DDP's
    # first collective below, so all of them start from one step with one optimizer state.
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    print(f"start rank={rank} world={world} step={step}", flush=True)

    while step < args.steps:
        # The batch depends on the step only, so a resumed run sees the data it would have seen.
        order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(step))
        batch = order[rank * args.batch_size:(rank + 1) * args.batch_size]
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x_tr[batch]), y_tr[batch])
        loss.backward()
        optimizer.step()
        step += 1
        if rank == 0 and step % args.checkpoint_every == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       path + ".tmp")
            os.replace(path + ".tmp", path)  # a node killed mid-write leaves the previous checkpoint whole
            print(f"checkpoint step={step} loss={loss.item():.4f}", flush=True)
        time.sleep(args.pace)

    with torch.no_grad():
        accuracy = (model(x_te).argmax(1) == y_te).float().mean().item()
    print(f"test_accuracy={accuracy:.4f} steps={step} rank={rank}", flush=True)
    # Leave together, then skip the process group's teardown: gloo's can abort a rank whose peers have
    # already gone ("terminate called without an active exception"). Everything is saved and printed.
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
