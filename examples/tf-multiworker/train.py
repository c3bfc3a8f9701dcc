"""Synchronous multi-worker Keras training on scikit-learn's digits (MultiWorkerMirroredStrategy).

Written for a TFJob: the operator (or Trimaran) gives each worker a TF_CONFIG naming every
worker's address and this worker's index; this script never writes TF_CONFIG itself. Each
worker reads its own shard of the training data; gradients are all-reduced each step.
Worker 0 is the chief: it saves the model to --output-dir/digits.keras and prints
`test_accuracy=...`.

Keras 3 (the default tf.keras since TF 2.16) fails in model.fit under this strategy with
"Attempt to convert a value (PerReplica:...) to a Tensor"; this program needs the tf-keras
package and TF_USE_LEGACY_KERAS=1 (set in the manifest, defaulted here too).
"""
import argparse
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # must precede the TensorFlow import
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SPLIT_SEED = 0


def load_data():
    """Digits standardised with the training split's statistics, as float32/int32 arrays."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=0.25, random_state=SPLIT_SEED, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    def f32(a):
        return scaler.transform(a).astype(np.float32)
    return f32(x_tr), y_tr.astype(np.int32), f32(x_te), y_te.astype(np.int32)


def task_from_tf_config():
    """(task type, index, number of workers) from TF_CONFIG; a lone process is worker 0 of 1."""
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = cfg.get("task", {})
    workers = cfg.get("cluster", {}).get("worker", [])
    return task.get("type", "worker"), int(task.get("index", 0)), max(len(workers), 1)


def build_model(hidden=128):
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(64,)),
        tf.keras.layers.Dense(hidden, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.002, help="per worker; scaled by the worker count")
    p.add_argument("--output-dir", default="/output")
    args = p.parse_args()

    t0 = time.time()
    task_type, task_index, num_workers = task_from_tf_config()
    is_chief = task_type == "chief" or (task_type == "worker" and task_index == 0)
    print(f"task={task_type}:{task_index} workers={num_workers} chief={is_chief}", flush=True)

    # Reads TF_CONFIG and connects to the other workers (it waits for them to come up).
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync

    x_tr, y_tr, x_te, y_te = load_data()
    steps_per_epoch = len(x_tr) // global_batch  # the same on every worker, or fit would hang

    def dataset_fn(ctx: tf.distribute.InputContext):
        # One input pipeline per worker: shard the examples, then batch per replica.
        ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        print(f"input shard {ctx.input_pipeline_id} of {ctx.num_input_pipelines}", flush=True)
        ds = ds.shuffle(len(x_tr), seed=ctx.input_pipeline_id).repeat()
        return ds.batch(ctx.get_per_replica_batch_size(global_batch)).prefetch(2)

    train_ds = strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=tf.keras.optimizers.Adam(args.lr * strategy.num_replicas_in_sync),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"])

    verbose = 2 if is_chief else 0
    model.fit(train_ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=verbose)

    # Evaluate locally on this worker's copy of the (synchronised) weights: no collectives.
    logits = model(x_te, training=False)
    acc = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_te))
    # Saving reads the metrics' sync-on-read variables, an all-reduce: every worker must call
    # save. The chief writes to the shared volume, the others to a scratch directory.
    out_dir = args.output_dir if is_chief else tempfile.mkdtemp()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "digits.keras")
    model.save(path)
    if not is_chief:
        shutil.rmtree(out_dir, ignore_errors=True)
    if is_chief:
        print(f"saved {path}")
        print(f"elapsed_s={time.time() - t0:.2f}")
        print(f"test_accuracy={acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
