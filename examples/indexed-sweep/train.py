"""Train one point of a hyperparameter grid on scikit-learn's digits: one pod of an Indexed Job.

The pod's JOB_COMPLETION_INDEX (set by Kubernetes, or Trimaran, for `completionMode: Indexed`)
picks a set from hyperparams.yml; the seed's JOB_ID (1-based) is accepted too. The result goes
to --results-dir/results_job_id_{index}.log as "key,value" lines, for analyze.py.
"""
import argparse
import os
import time
import warnings

import yaml


def sweep_index():
    if "JOB_COMPLETION_INDEX" in os.environ:
        return int(os.environ["JOB_COMPLETION_INDEX"])
    if "JOB_ID" in os.environ:
        return int(os.environ["JOB_ID"]) - 1
    raise SystemExit("set JOB_COMPLETION_INDEX (0-based) or JOB_ID (1-based)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hyperparams", default="/app/hyperparams.yml")
    p.add_argument("--results-dir", default="/results")
    p.add_argument("--epochs", type=int, default=20)
    args = p.parse_args()

    t_start = time.time()
    index = sweep_index()
    with open(args.hyperparams) as f:
        sets = yaml.safe_load(f)
    if not 0 <= index < len(sets):
        raise SystemExit(f"index {index} is outside the {len(sets)} sets in {args.hyperparams}")
    hp = sets[index]["hyperparam_set"]
    print(f"index={index} {hp}", flush=True)

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_te = scaler.transform(x_tr), scaler.transform(x_te)

    model = MLPClassifier(hidden_layer_sizes=(64,), solver="sgd", nesterovs_momentum=False,
                          learning_rate_init=hp["learning_rate"], momentum=hp["momentum"],
                          batch_size=hp["batch_size"], max_iter=args.epochs, random_state=0)
    t_train = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, on purpose
        model.fit(x_tr, y_tr)
    train_time = time.time() - t_train
    t_test = time.time()
    test_acc = model.score(x_te, y_te)
    test_time = time.time() - t_test

    rows = [("epoch", model.n_iter_), *sorted(hp.items()),
            ("train time", train_time), ("train loss", model.loss_),
            ("train acc", model.score(x_tr, y_tr)),
            ("test time", test_time), ("test acc", test_acc),
            ("total time", time.time() - t_start)]
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, f"results_job_id_{index}.log")
    with open(path + ".tmp", "w") as f:  # write then rename: readers never see half a file
        f.writelines(f"{k},{v}\n" for k, v in rows)
    os.replace(path + ".tmp", path)
    print(f"test acc={test_acc:.4f} written to {path}", flush=True)


if __name__ == "__main__":
    main()
