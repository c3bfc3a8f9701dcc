"""Train two scikit-learn classifiers on the digits data set and save each as a servable model.

    python train.py --out DIR     # DIR/logistic/model.joblib and DIR/forest/model.joblib

Each directory is what an InferenceService's storageUri points at (KServe's sklearn layout: the
model file directly in the directory, served as version 1). The batch Job in train-job.yaml runs
this into the digits-models PVC; run it by hand to serve from a local path (see README.md).
"""
import argparse
import os

import joblib
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

MODELS = {
    "logistic": lambda: LogisticRegression(max_iter=2000),
    "forest": lambda: RandomForestClassifier(n_estimators=50, random_state=0),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory that receives one subdirectory per model")
    args = p.parse_args()
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    for name, make in MODELS.items():
        model = make().fit(x_train, y_train)
        target = os.path.join(args.out, name)
        os.makedirs(target, exist_ok=True)
        # Written under a temporary name, then renamed: a model server polling the directory
        # never sees half a file.
        tmp = os.path.join(target, ".model.joblib.tmp")
        joblib.dump(model, tmp)
        os.replace(tmp, os.path.join(target, "model.joblib"))
        print(f"{name}: test_accuracy={model.score(x_test, y_test):.4f} -> {target}/model.joblib", flush=True)


if __name__ == "__main__":
    main()
