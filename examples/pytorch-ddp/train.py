"""Data-parallel training of a small MLP on scikit-learn's digits with torch DDP.

Written for a PyTorchJob: the operator gives every replica MASTER_ADDR, MASTER_PORT,
WORLD_SIZE and RANK, and this script joins the process group from those. It also runs
under torchrun (which sets the same variables plus LOCAL_RANK) or alone (world of one).

Rank 0 prints the mean loss of each epoch over all replicas, writes checkpoint_epoch_{epoch}.pt
and model.pt to --output-dir, and ends with a line `test_accuracy=0.97xx`. Every other rank
prints the loss of its own share of each epoch, so each replica's log shows it is training.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SPLIT_SEED = 0  # the train/test split must be identical on every replica (and in evaluate.py)


def load_data():
    """Digits (8x8 images, 64 features) standardised with the training split's statistics.

    Returns float/long tensors (x_train, y_train, x_test, y_test).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=0.25, random_state=SPLIT_SEED, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    def as_x(a):
        return torch.tensor(scaler.transform(a), dtype=torch.float32)

    def as_y(a):
        return torch.tensor(a, dtype=torch.long)
    return as_x(x_tr), as_y(y_tr), as_x(x_te), as_y(y_te)


def build_model(hidden=128):
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    return (model(x).argmax(dim=1) == y).float().mean().item()


def setup():
    """Join the process group described by the environment; returns (rank, world, device)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # defaults only matter when run alone
    os.environ.setdefault("MASTER_PORT", "29500")
    rank = int(os.environ.setdefault("RANK", "0"))
    world = int(os.environ.setdefault("WORLD_SIZE", "1"))

    if torch.cuda.is_available():
        backend = "nccl"
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        backend = "gloo"
        device = torch.device("cpu")

    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    return rank, world, device


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--lr", type=float, default=0.002,
                   help="per replica; the optimizer uses lr * WORLD_SIZE")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--steps", type=int, default=0,
                   help="stop after this many optimizer steps (0: run all epochs)")
    p.add_argument("--output-dir", default="/output")
    args = p.parse_args()

    torch.set_num_threads(1)  # several replicas share few cores
    t0 = time.time()
    rank, world, device = setup()
    if rank == 0:
        print(f"world_size={world} backend={dist.get_backend()} device={device} "
              f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    else:
        print(f"rank={rank} joined world_size={world} at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
              flush=True)

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    x_tr, y_tr, x_te, y_te = load_data()
    train_set = TensorDataset(x_tr, y_tr)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = build_model(args.hidden).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    # linear scaling of the learning rate with the number of replicas
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr * world)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        os.makedirs(args.output_dir, exist_ok=True)

    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        ddp.train()
        total = torch.zeros(2, device=device)  # (sum of losses, number of batches)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()  # DDP averages the gradients across replicas here
            optimizer.step()
            total += torch.stack([loss.detach(), torch.ones((), device=device)])
            steps += 1
            if args.steps and steps >= args.steps:
                break
        if rank != 0:
            print(f"rank={rank} epoch={epoch} local_loss={(total[0] / total[1]).item():.4f} "
                  f"batches={int(total[1].item())}", flush=True)
        dist.all_reduce(total)  # mean loss over all replicas' batches
        if rank == 0:
            print(f"epoch={epoch} loss={(total[0] / total[1]).item():.4f} steps={steps}", flush=True)
            torch.save({"epoch": epoch,
                        "hidden": args.hidden,
                        "model_state_dict": model.state_dict(),
                        "optimizer_state_dict": optimizer.state_dict()},
                       os.path.join(args.output_dir, f"checkpoint_epoch_{epoch}.pt"))
        if args.steps and steps >= args.steps:
            break

    if rank == 0:
        acc = accuracy(model, x_te.to(device), y_te.to(device))
        torch.save({"hidden": args.hidden, "model_state_dict": model.state_dict(),
                    "test_accuracy": acc}, os.path.join(args.output_dir, "model.pt"))
        print(f"saved {os.path.join(args.output_dir, 'model.pt')}")
        print(f"elapsed_s={time.time() - t0:.2f}")
        print(f"test_accuracy={acc:.4f}", flush=True)
    # Leave together, then skip the process group's teardown: gloo's can abort a rank, or leave it
    # hanging, when its peers are already gone ("terminate called without an active exception").
    # Everything is saved and flushed by now.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
