"""Asynchronous parameter-server training on scikit-learn's digits (TF2 ParameterServerStrategy).

One program for every replica of the TFJob; TF_CONFIG (injected by the operator or Trimaran)
says which one this is:

* ps, worker: start a tf.distribute.Server and serve until killed. They never exit by
  themselves; the TFJob succeeds when the chief does, and `runPolicy.cleanPodPolicy: Running`
  removes them afterwards.
* chief: creates the variables on the parameter servers, has a ClusterCoordinator schedule
  training steps onto the workers (each reads its own copy of the data), prints the loss per
  epoch and the test accuracy, then exits 0.

The model is two dense layers written with tf.Variable and plain SGD, so it depends on no Keras
version.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# Recommended for ParameterServerStrategy: RPCs to a dead task fail rather than hang forever.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

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


class MLP(tf.Module):
    def __init__(self, hidden=128):
        super().__init__()
        init = tf.random.stateless_normal
        self.w1 = tf.Variable(init((64, hidden), seed=(1, 0)) * 0.1, name="w1")
        self.b1 = tf.Variable(tf.zeros(hidden), name="b1")
        self.w2 = tf.Variable(init((hidden, 10), seed=(2, 0)) * 0.1, name="w2")
        self.b2 = tf.Variable(tf.zeros(10), name="b2")

    def __call__(self, x):
        return tf.nn.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


def serve(resolver):
    """ps and worker tasks: host variables / run the steps the chief sends, forever."""
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc", start=True)
    print(f"{resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    server.join()


def train(resolver, args):
    t0 = time.time()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    workers = resolver.cluster_spec().num_tasks("worker")
    print(f"chief: {workers} workers, {resolver.cluster_spec().num_tasks('ps')} ps", flush=True)

    x_tr, y_tr, x_te, y_te = load_data()
    with strategy.scope():
        model = MLP(args.hidden)  # variables are placed on the parameter servers

    def dataset_fn():
        ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr))
        return ds.shuffle(len(x_tr)).repeat().batch(args.batch_size)

    per_worker_iter = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=model(x)))
            grads = tape.gradient(loss, model.trainable_variables)
            for var, grad in zip(model.trainable_variables, grads, strict=True):
                var.assign_sub(args.lr * grad)  # applied on the ps, asynchronously
            return loss

        x, y = next(iterator)
        return strategy.run(step, args=(x, y))

    steps_per_epoch = len(x_tr) // args.batch_size
    for epoch in range(args.epochs):
        losses = [coordinator.schedule(train_step, args=(per_worker_iter,))
                  for _ in range(steps_per_epoch)]
        coordinator.join()  # wait for every scheduled step of this epoch
        mean = np.mean([r.fetch() for r in losses])
        print(f"epoch={epoch} loss={mean:.4f} steps={steps_per_epoch * (epoch + 1)}", flush=True)

    acc = float(np.mean(np.argmax(model(x_te).numpy(), axis=1) == y_te))
    print(f"elapsed_s={time.time() - t0:.2f}")
    print(f"test_accuracy={acc:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per step, on one worker")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--hidden", type=int, default=128)
    args = p.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not resolver.cluster_spec().as_dict():
        raise SystemExit("TF_CONFIG is not set: this program runs as one task of a TFJob")
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
    elif resolver.task_type == "chief":
        train(resolver, args)
    else:  # e.g. an evaluator, which the operator also lists in TF_CONFIG: nothing to do here
        print(f"task type {resolver.task_type!r} has no role in this example; exiting")


if __name__ == "__main__":
    main()
