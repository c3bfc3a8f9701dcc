"""Load the model that train.py saved and print its accuracy on the digits test split.

Runs as a second job that mounts the same volume the training job wrote to (/output).
It imports the model and data definitions from train.py, which sits beside it (/app).
"""
import argparse
import os

import torch
from train import accuracy, build_model, load_data


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="/output/model.pt",
                   help="model.pt or any checkpoint_epoch_N.pt")
    args = p.parse_args()

    torch.set_num_threads(1)
    if not os.path.exists(args.checkpoint):
        raise SystemExit(f"no checkpoint at {args.checkpoint}: has the training job run?")
    state = torch.load(args.checkpoint, map_location="cpu")
    model = build_model(state["hidden"])
    model.load_state_dict(state["model_state_dict"])
    _, _, x_test, y_test = load_data()
    acc = accuracy(model, x_test, y_test)
    print(f"checkpoint={args.checkpoint}")
    if "epoch" in state:
        print(f"epoch={state['epoch']}")
    print(f"test_accuracy={acc:.4f}")


if __name__ == "__main__":
    main()
