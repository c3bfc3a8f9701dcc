"""Elastic data-parallel training on scikit-learn's digits, launched by torchrun.

Written for an elastic PyTorchJob: the operator gives each worker torchrun's settings as PET_*
variables (PET_RDZV_ENDPOINT, PET_NNODES=min:max, ...), and `python -m torch.distributed.run
train.py` joins the rendezvous. Workers may be added (`kubectl scale`) or lost at any time:
torchrun then restarts every node's process on a new rendezvous, with a new world size.

Each node keeps a checkpoint of the model, the epoch and the data split in --checkpoint-dir (its own
emptyDir); after each rendezvous the furthest checkpoint among the nodes is broadcast, so a node that
joins with none, or a group torchrun restarted, goes on from the last finished epoch without loading
the data again. Every rank prints `joined rank=R world=W epoch=E`, then `epoch=E world=W rank=R
loss=L` per epoch, and at the end `test_accuracy=0.9xxx world=W`.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def load_split() -> dict[str, torch.Tensor]:
    """The digits, scaled to [0, 1], split 3:1 as train and test."""
    # Imported here: only a fresh start needs scikit-learn, and its import costs seconds of CPU that
    # every restart (each scale-up restarts every node) would otherwise pay again.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = (torch.tensor(a) for a in train_test_split(x / 16.0, y, test_size=0.25,
                                                                         random_state=0, stratify=y))
    return {"x_tr": x_tr.float(), "x_te": x_te.float(), "y_tr": y_tr, "y_te": y_te}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--pace", type=float, default=0.1, help="seconds to wait after each epoch, so a "
                   "scale has time to happen while it trains")
    p.add_argument("--batch-size", type=int, default=128, help="per rank")
    p.add_argument("--checkpoint-dir", default="/ckpt")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(args.checkpoint_dir, "state.pt")
    state = torch.load(path) if os.path.exists(path) else None
    # The furthest epoch wins, the lowest rank among equals: one number all-reduced by MAX says both.
    lead = torch.tensor([(state["epoch"] if state else 0) * 1000 + 999 - rank])
    dist.all_reduce(lead, op=dist.ReduceOp.MAX)
    source = 999 - int(lead) % 1000
    shared = [state if rank == source else None]
    dist.broadcast_object_list(shared, src=source)
    state = shared[0] or {"epoch": 0, "model": None, "data": load_split()}
    epoch, data = state["epoch"], state["data"]
    x_tr, y_tr = data["x_tr"], data["y_tr"]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    if state["model"] is not None:
        model.load_state_dict(state["model"])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.2)
    share = len(x_tr) // world  # equal shares: every rank takes as many steps
    print(f"joined rank={rank} world={world} epoch={epoch}", flush=True)

    while epoch < args.epochs:
        order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(epoch))
        for batch in order[rank * share:(rank + 1) * share].split(args.batch_size):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x_tr[batch]), y_tr[batch])
            loss.backward()
            optimizer.step()
        epoch += 1
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "epoch": epoch, "data": data}, path + ".tmp")
        os.replace(path + ".tmp", path)  # a node killed mid-write keeps its previous checkpoint
        print(f"epoch={epoch} world={world} rank={rank} loss={loss.item():.4f}", flush=True)
        time.sleep(args.pace)

    with torch.no_grad():
        accuracy = (model(data["x_te"]).argmax(1) == data["y_te"]).float().mean().item()
    print(f"test_accuracy={accuracy:.4f} world={world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
