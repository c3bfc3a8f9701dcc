"""Data-parallel softmax regression on scikit-learn's digits with mpi4py.

Written for an MPIJob: the launcher runs `mpirun -np N python train.py`, each rank trains on
its shard of the training split, and the ranks average their gradients with an allreduce every
step, so all of them hold the same weights. Rank 0 prints the loss every 50 steps and ends with
`test_accuracy=0.9xxx`. It also runs alone (`python train.py`, a world of one).
"""
import numpy as np
from mpi4py import MPI
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

comm = MPI.COMM_WORLD
x, y = load_digits(return_X_y=True)
x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
scaler = StandardScaler().fit(x_tr)
x_tr, x_te = scaler.transform(x_tr), scaler.transform(x_te)
xs, ys = np.array_split(x_tr, comm.size)[comm.rank], np.array_split(y_tr, comm.size)[comm.rank]
onehot = np.eye(10)[ys]
w, b = np.zeros((64, 10)), np.zeros(10)


def probabilities(features):
    logits = features @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


for step in range(300):
    p = probabilities(xs)
    # Sums over the shard, summed over the ranks, divided by the global count: the full-batch mean.
    grad_w = comm.allreduce(xs.T @ (p - onehot)) / len(y_tr)
    grad_b = comm.allreduce((p - onehot).sum(axis=0)) / len(y_tr)
    w -= 0.5 * grad_w
    b -= 0.5 * grad_b
    if step % 50 == 0:
        loss = comm.allreduce(-np.log(p[np.arange(len(ys)), ys] + 1e-12).sum()) / len(y_tr)
        if comm.rank == 0:
            print(f"step={step} loss={loss:.4f} ranks={comm.size}", flush=True)

accuracy = (probabilities(x_te).argmax(axis=1) == y_te).mean()
print(f"rank={comm.rank} host={MPI.Get_processor_name()} test_accuracy={accuracy:.4f}", flush=True)
