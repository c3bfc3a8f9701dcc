"""``trimaran logs``: a pod's log, or the pod a person means by a job's name.

Like ``get`` it starts without typer and rich: tests and scripts read logs in loops. Which pod a job
name means is decided here: the master or launcher, else node 0, else the first pod.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from trimaran.api.labels import JOB_ROLE_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL, REPLICATED_JOB_NAME_KEY
from trimaran.cli.client import APIError, Client, owned_by

__all__ = ["POD_WAIT_SECONDS", "pods_of", "run"]

# How long `logs -f` waits for a job's pod to be created, as kubectl's --pod-running-timeout: right
# after `apply` the controller may not have made it yet.
POD_WAIT_SECONDS = 20.0

_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


class _NoPodYet(APIError):
    """The job exists, the pod asked for does not (yet)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran logs",
        description="Print a pod's log (a job's master replica by default, a pipeline run's task with --task).")
    parser.add_argument("name", help="a pod, or a job (KIND/NAME or NAME) with --replica-type/--replica-index")
    parser.add_argument("-n", "--namespace", help="namespace (default: 'default')")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing as the pod writes")
    parser.add_argument("-p", "--previous", action="store_true",
                        help="the previous attempt of a restarted container")
    parser.add_argument("-c", "--container", help="the container (default: the pod's first)")
    parser.add_argument("--replica-type", help="e.g. worker, Master, ps (any case)")
    parser.add_argument("--replica-index", type=int, default=0, help="the replica's index (default 0)")
    parser.add_argument("--task", help="a pipeline run's task (run/NAME): its name or its id (a loop "
                                       "iteration's, e.g. for-loop-2.iteration-0.add)")
    return parser


def pods_of(client: Client, obj: dict) -> list[dict]:
    """A workload's pods: those it owns, or for a JobSet (and a TrainJob's, named like it) its Jobs' pods."""
    from trimaran.api.kinds import pods_label_of

    ns = obj["metadata"].get("namespace")
    label = pods_label_of(obj["kind"])
    if label:
        return client.list("Pod", ns, selector=f"{label}={obj['metadata']['name']}")
    uid = obj["metadata"]["uid"]
    return [p for p in client.list("Pod", ns) if owned_by(p, uid)]


def _resolve_pod(client: Client, ns: str, ref: str, replica_type: str | None, index: int, wait: float = 0) -> str:
    deadline = time.monotonic() + wait
    while True:
        try:
            return _find_pod(client, ns, ref, replica_type, index)
        except _NoPodYet:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _find_pod(client: Client, ns: str, ref: str, replica_type: str | None, index: int) -> str:
    kind, _, name = ref.rpartition("/")
    if not kind and replica_type is None:
        try:
            client.get("Pod", ns, name)
            return name
        except APIError as exc:
            if exc.status != 404:
                raise
    if kind:
        candidates = [client.resolve(kind).kind]
    else:
        from trimaran.api.kinds import jobset_backed_kinds, kubeflow_job_kinds

        candidates = [*kubeflow_job_kinds(), *jobset_backed_kinds(), "Job"]
    for k in candidates:
        if k == "Pod":
            return name
        try:
            job = client.get(k, ns, name)
        except APIError as exc:
            if exc.status == 404:
                continue
            raise
        pods = pods_of(client, job)
        if replica_type is not None:
            rt = replica_type.lower()
            for p in pods:
                labels = p["metadata"].get("labels") or {}
                if (labels.get(REPLICA_TYPE_LABEL) or labels.get(REPLICATED_JOB_NAME_KEY)) == rt and \
                        (labels.get(REPLICA_INDEX_LABEL) or labels.get(_INDEX_LABEL)) == str(index):
                    return p["metadata"]["name"]
            raise _NoPodYet(404, f"{k} {name} has no pod for replica {replica_type}[{index}]")
        for p in pods:
            # The pod a person means: the master (TF, PyTorch, MPIJob v1's launcher), the MPI
            # operator's launcher, or a TrainJob's launcher, else its node 0 (the SDK's node-0).
            labels = p["metadata"].get("labels") or {}
            if labels.get(JOB_ROLE_LABEL) in ("master", "launcher") or \
                    labels.get(REPLICATED_JOB_NAME_KEY) == "launcher":
                return p["metadata"]["name"]
        for p in pods:
            labels = p["metadata"].get("labels") or {}
            if labels.get(REPLICATED_JOB_NAME_KEY) == "node" and labels.get(_INDEX_LABEL) == "0":
                return p["metadata"]["name"]
        if pods:
            return sorted(pods, key=lambda p: p["metadata"]["name"])[0]["metadata"]["name"]
        raise _NoPodYet(404, f"{k} {name} has no pods yet")
    raise APIError(404, f"no pod or job named {name!r} in namespace {ns}")


def _pod(client: Client, ns: str, args: argparse.Namespace) -> str:
    wait = POD_WAIT_SECONDS if args.follow else 0
    if args.task is None:
        return _resolve_pod(client, ns, args.name, args.replica_type, args.replica_index, wait=wait)
    from trimaran.cli.pipelines import wait_for_task_pod

    kind, _, run_name = args.name.rpartition("/")
    if kind and client.resolve(kind).kind != "Run":
        raise APIError(400, "--task names a task of a pipeline run: trimaran logs run/NAME --task T")
    return wait_for_task_pod(client, ns, run_name, args.task, wait=wait)


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran logs ARGV``; the exit code."""
    args = _parser().parse_args(argv)
    ns = args.namespace or "default"
    written = 0
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
        pod = _pod(client, ns, args)
        for chunk in client.log(ns, pod, container=args.container, previous=args.previous, follow=args.follow):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            written += len(chunk)
    except (APIError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if not written:
        # An empty log and a wrong pod look alike on a terminal: say which pod it was.
        print(f"pod {pod} has written nothing to its log" + ("" if args.follow else " yet"), file=sys.stderr)
    return 0
