"""One point of the NVIDIA seed's grid sweep, as a Katib trial: hyperparameters come as arguments,
the result is printed in the `name=value` form Katib's StdOut collector reads.

The same model, data split and seeds as examples/indexed-sweep/train.py, so the Katib grid and the
Indexed Job find the same best set.
"""
import argparse
import time
import warnings

from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--learning_rate", type=float, required=True)
    p.add_argument("--momentum", type=float, required=True)
    p.add_argument("--batch_size", type=int, required=True)
    p.add_argument("--epochs", type=int, default=20)
    args = p.parse_args()

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_te = scaler.transform(x_tr), scaler.transform(x_te)
    model = MLPClassifier(hidden_layer_sizes=(64,), solver="sgd", nesterovs_momentum=False,
                          learning_rate_init=args.learning_rate, momentum=args.momentum,
                          batch_size=args.batch_size, max_iter=args.epochs, random_state=0)
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, on purpose
        model.fit(x_tr, y_tr)
    print(f"train_time={time.time() - t0:.3f}")
    print(f"train_acc={model.score(x_tr, y_tr):.4f}")
    print(f"test_acc={model.score(x_te, y_te):.4f}", flush=True)


if __name__ == "__main__":
    main()
