"""The seed's Katib trial script (train_with_katib.py), adapted to run here in seconds.

Same arguments and the same stdout format Katib's StdOut collector parses (`accuracy=`, `loss=`,
`val_accuracy=` after each epoch). It trains a scikit-learn MLP on the digits dataset that ships
with scikit-learn instead of a Keras CNN on MNIST (which would be downloaded at run time);
`--dropout_rate` is accepted for compatibility and not used (scikit-learn's MLP has no dropout).
"""

import argparse
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

# Keras' optimizer names mapped to the nearest scikit-learn solver.
SOLVERS = {"adam": "adam", "sgd": "sgd", "rmsprop": "adam"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_layers", type=int, default=3)
    parser.add_argument("--optimizer", type=str, default="adam", choices=sorted(SOLVERS))
    parser.add_argument("--dropout_rate", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_train)
    x_train, x_test = scaler.transform(x_train), scaler.transform(x_test)

    model = MLPClassifier(hidden_layer_sizes=(64,) * args.num_layers, solver=SOLVERS[args.optimizer],
                          learning_rate_init=args.learning_rate, batch_size=args.batch_size,
                          max_iter=1, random_state=0)
    classes = np.unique(y)
    warnings.simplefilter("ignore", ConvergenceWarning)
    for epoch in range(args.epochs):
        model.partial_fit(x_train, y_train, classes=classes)
        print(f"\nEpoch {epoch + 1}")
        print(f"accuracy={model.score(x_train, y_train):.4f}")
        print(f"loss={model.loss_:.4f}")
        print(f"val_accuracy={model.score(x_test, y_test):.4f}", flush=True)


if __name__ == "__main__":
    main()
