"""Early stopping on a learning-curve task: medianstop and ASHA against no early stopping.

    .venv/bin/python bench/bench_early_stopping.py [--trials 30] [--epochs 20] [--seeds 3]
        [--min-trials-required 3] [--start-step 2]

Task: an MLP trained epoch by epoch (scikit-learn, partial_fit) on the digits dataset that ships
with scikit-learn; the objective is validation accuracy, reported after every epoch. The same
random configurations (learning rate, width, batch size, L2) are tried in the same order by each
policy, one trial at a time; a policy's cost is the wall time spent training (trial-seconds), and
its result is the best final validation accuracy among the trials it let finish.
Targets (issue 3): within 0.5 points of the best accuracy found without early stopping, with at
least 40% fewer trial-seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from trimaran.tuning import TrialRecord, get_early_stopper


def configs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"lr": float(10 ** rng.uniform(-4, -0.5)), "width": int(rng.choice([16, 32, 64, 128])),
             "batch": int(rng.choice([16, 32, 64, 128])), "alpha": float(10 ** rng.uniform(-6, -1))}
            for _ in range(n)]


def run_policy(policy: str, cfgs: list[dict], epochs: int, data: tuple,
               median_settings: dict[str, str]) -> tuple[float, float, int]:
    x_tr, x_va, y_tr, y_va = data
    stopper = None
    if policy == "medianstop":
        stopper = get_early_stopper("medianstop", median_settings)
    elif policy == "asha":
        stopper = get_early_stopper("asha", {"min_resource": "2", "reduction_factor": "3"})
    done: list[TrialRecord] = []
    spent = 0.0
    stopped = 0
    classes = np.unique(y_tr)
    for i, cfg in enumerate(cfgs):
        model = MLPClassifier(hidden_layer_sizes=(cfg["width"],), learning_rate_init=cfg["lr"],
                              batch_size=cfg["batch"], alpha=cfg["alpha"], max_iter=1, random_state=i)
        curve: list[tuple[int, float]] = []
        state = "succeeded"
        for epoch in range(epochs):
            t0 = time.perf_counter()
            model.partial_fit(x_tr, y_tr, classes=classes)
            acc = model.score(x_va, y_va)
            spent += time.perf_counter() - t0
            curve.append((epoch, acc))
            if stopper is not None:
                me = TrialRecord(f"t{i}", {}, "running", intermediate=list(curve))
                if stopper.should_stop(me, done, "maximize"):
                    state = "early_stopped"
                    stopped += 1
                    break
        done.append(TrialRecord(f"t{i}", {}, state, value=curve[-1][1], intermediate=curve))
    best = max(r.value for r in done if r.state == "succeeded")
    return best, spent, stopped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--min-trials-required", default="3", help="medianstop's min_trials_required")
    parser.add_argument("--start-step", default="2", help="medianstop's start_step")
    args = parser.parse_args()
    median_settings = {"min_trials_required": args.min_trials_required, "start_step": args.start_step}
    warnings.simplefilter("ignore", ConvergenceWarning)
    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    data = (scaler.transform(x_tr), scaler.transform(x_va), y_tr, y_va)
    print(f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, python {sys.version.split()[0]}; "
          f"{args.trials} trials x {args.epochs} epochs, {args.seeds} seeds; medianstop {median_settings}")
    results: dict[str, list[tuple[float, float, int]]] = {"none": [], "medianstop": [], "asha": []}
    for seed in range(args.seeds):
        cfgs = configs(args.trials, seed)
        for policy in results:
            results[policy].append(run_policy(policy, cfgs, args.epochs, data, median_settings))
    base_acc = statistics.median(r[0] for r in results["none"])
    base_cost = statistics.median(r[1] for r in results["none"])
    for policy, runs in results.items():
        acc = statistics.median(r[0] for r in runs)
        cost = statistics.median(r[1] for r in runs)
        print(f"{policy:>10}: best val accuracy {acc:.4f} ({(acc - base_acc) * 100:+.2f} points), "
              f"trial-seconds {cost:.2f} ({(1 - cost / base_cost) * 100:.0f}% fewer), "
              f"stopped {statistics.median(r[2] for r in runs):.0f} of {args.trials}")


if __name__ == "__main__":
    main()
