"""A toy that population-based training solves and any fixed learning rate does not.

After Ray Tune's PBT benchmark (which Katib's simple-pbt example also uses): accuracy grows fastest
when the learning rate is close to an optimum that itself depends on the accuracy reached, rising
from 0.001 to 0.01 while accuracy climbs to 50 and falling back to 0.001 at 100. A trial trains
``--epochs`` steps from the checkpoint in ``--checkpoint`` (resuming where its parent stopped),
saves the checkpoint and prints the metric as Katib's StdOut collector reads it.

The checkpoint also records every step count and every trial that trained it, so the lineage a
trial inherited can be checked from its directory.

    python train.py --lr 0.005 --epochs 10 --checkpoint /tmp/pbt-demo
"""

import argparse
import json
import os
import random
from pathlib import Path

CHECKPOINT = "training.json"


def optimal_lr(accuracy: float) -> float:
    peak = 0.01 * accuracy / 50 if accuracy < 50 else 0.01 - 0.01 * (accuracy - 50) / 50
    return min(0.01, max(0.001, peak))


def train_step(accuracy: float, lr: float, rng: random.Random) -> float:
    best = optimal_lr(accuracy)
    ratio = max(lr, best) / min(lr, best)
    if ratio < 3:
        accuracy += 3.0 * rng.random() / ratio
    elif lr > best:
        accuracy -= (ratio - 3) * rng.random()  # far too large a step undoes progress
    accuracy += rng.gauss(0, 0.3)
    return min(100.0, max(0.0, accuracy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.0001)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--checkpoint", default="/var/log/katib/checkpoints/",
                        help="checkpoint directory (resumed from, then saved to)")
    args = parser.parse_args()

    directory = Path(args.checkpoint)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT
    state = json.loads(path.read_text()) if path.exists() else {"step": 0, "accuracy": 0.0, "trials": []}
    trial = os.environ.get("KATIB_TRIAL_NAME", "local")
    rng = random.Random(f"{trial}:{state['step']}")

    accuracy = state["accuracy"]
    for _ in range(args.epochs):
        accuracy = train_step(accuracy, args.lr, rng)
    state = {"step": state["step"] + args.epochs, "accuracy": accuracy, "trials": [*state["trials"], trial],
             "resumed_from_step": state["step"]}
    # Written beside and renamed over: a trial killed mid-write leaves the old checkpoint whole.
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)

    print(f"epoch {state['step']}:")
    print(f"lr={args.lr:.4f}")
    print(f"Validation-accuracy={accuracy / 100:.4f}")


if __name__ == "__main__":
    main()
