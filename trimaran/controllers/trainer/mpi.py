"""Trainer's MPI plugin (deepspeed-distributed, mlx-distributed): the launcher runs ``mpirun``
over the hostfile ConfigMap ``<job>-mpi-hostfile`` with upstream's ``OMPI_MCA_*`` variables.

Where upstream's nodes run sshd and the launcher ssh's into them, here (as for MPIJob,
`controllers/training/mpi.py`) each node's main process is a `runtime/podexec.py` exec server
and OpenMPI's rsh agent (``/etc/mpi/kubexec.sh``) runs ``orted`` inside the named node's
sandbox, authenticated by the job's token (Secret ``<job>-podexec``). With
``runLauncherAsNode`` the launcher is node 0: its ranks start in place.
"""

from __future__ import annotations

import base64
import copy
import secrets
import shlex
import sys
from pathlib import Path

from trimaran.api.labels import TRAINJOB_NAME_LABEL
from trimaran.api.quantity import parse_quantity
from trimaran.api.trainer import LAUNCHER, NODE, MLPolicy
from trimaran.runtime import podexec
from trimaran.runtime.gpus import is_gpu_resource

CONFIG_DIR = "/etc/mpi"
HOSTFILE = f"{CONFIG_DIR}/hostfile"
AGENT = f"{CONFIG_DIR}/kubexec.sh"
_VOLUME = "mpi-hostfile"
_TOKEN_KEY = "token"
_PODEXEC = [sys.executable, "-I", "-S", str(Path(podexec.__file__).resolve())]


def hostfile_name(job: str) -> str:
    return f"{job}-mpi-hostfile"


def token_secret(job: str) -> str:
    return f"{job}-podexec"


def gpus_per_node(rjobs: dict[str, dict]) -> int:
    """GPUs of the trainer container (the launcher's, else a node's), from its limits or requests."""
    for rjob_name in (LAUNCHER, NODE):
        pod = (rjobs.get(rjob_name) or {}).get("template", {}).get("spec", {}).get("template", {})
        for container in (pod.get("spec") or {}).get("containers") or []:
            if container.get("name") == NODE:
                resources = container.get("resources") or {}
                amounts = resources.get("limits") or resources.get("requests") or {}
                return sum(int(parse_quantity(str(v))) for k, v in amounts.items() if is_gpu_resource(k))
    return 0


def prepare(job: dict, policy: MLPolicy, template: dict, trainer: dict) -> list[dict]:
    """Point the launcher's mpirun at the nodes; return the hostfile ConfigMap and token Secret."""
    assert policy.mpi is not None
    name, ns, uid = job["metadata"]["name"], job["metadata"]["namespace"], job["metadata"]["uid"]
    rjobs = {r["name"]: r for r in template["spec"]["replicatedJobs"]}
    slots = int(trainer.get("numProcPerNode") or policy.mpi.num_proc_per_node or 1)
    if not trainer.get("numProcPerNode") and slots == 1:
        slots = max(1, gpus_per_node(rjobs))  # upstream: a runtime's single slot becomes one per GPU
    as_node = bool(policy.mpi.run_launcher_as_node) and LAUNCHER in rjobs
    # The launcher by its own hostname, which mpirun knows for itself (its ranks start in place);
    # upstream lists every pod's FQDN and ssh's into the launcher too.
    hosts = [f"{name}-{LAUNCHER}-0-0"] if as_node else []
    nodes = rjobs[NODE]["template"]["spec"].get("parallelism", 1) if NODE in rjobs else 0
    hosts += [f"{name}-{NODE}-0-{i}.{name}" for i in range(nodes)]
    env = {
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": str(slots),
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_plm_rsh_agent": AGENT,
        # Every name resolves to loopback, which OpenMPI would take for the launcher itself.
        "OMPI_MCA_if_base_do_not_resolve": "1",
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        # Every rank's Python as in an image that does not set PYTHONUNBUFFERED (the node's "image"
        # sets it): mpirun gives ranks a pty, so Python line-buffers and still streams, and a line is
        # one write. Unbuffered, print writes the text and its newline apart, and mpirun, merging
        # the ranks' output by the chunk, can join two ranks' lines ("a" "b\n" "\n").
        "OMPI_MCA_mca_base_env_list": "PYTHONUNBUFFERED=",
        # The sandbox's uid 0 is a user namespace's (upstream's images run as mpiuser).
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    token_env = {"name": podexec.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": token_secret(name),
                                                                            "key": _TOKEN_KEY}}}
    for rjob_name, rjob in rjobs.items():
        pod = rjob["template"]["spec"]["template"]
        containers = pod["spec"].get("containers") or []
        main = next((c for c in containers if c.get("name") in (NODE, LAUNCHER)), containers[0] if containers else None)
        if main is None:
            continue
        pod["spec"]["volumes"] = [*(pod["spec"].get("volumes") or []), {"name": _VOLUME, "configMap": {
            "name": hostfile_name(name), "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444},
                                                   {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555}]}}]
        main["volumeMounts"] = [*(main.get("volumeMounts") or []), {"name": _VOLUME, "mountPath": CONFIG_DIR}]
        main["env"] = [*(main.get("env") or []), copy.deepcopy(token_env)]
        if rjob_name == LAUNCHER:
            own = {e.get("name") for e in main["env"]}
            # A PYTHONUNBUFFERED or env list the user gives is theirs.
            skip = {"OMPI_MCA_mca_base_env_list"} if own & {"PYTHONUNBUFFERED", "OMPI_MCA_mca_base_env_list"} else set()
            main["env"] += [{"name": k, "value": v} for k, v in env.items() if k not in skip]
        elif rjob_name == NODE:
            # The node waits for the launcher's orted as sshd would; the pod's name in the hostfile
            # is its hostname, whose index only the pod itself knows.
            serve = shlex.join([*_PODEXEC, "serve", uid])
            main["command"] = ["/bin/sh", "-c", f'exec {serve} "{name}-{NODE}-0-$JOB_COMPLETION_INDEX"']
            main.pop("args", None)
    agent = ("#!/bin/sh\n"
             "# Runs the command on the named node, in its sandbox (for ssh).\n"
             f'exec {shlex.join(_PODEXEC)} connect {shlex.quote(uid)} "$@"\n')
    labels = {TRAINJOB_NAME_LABEL: name}
    token = base64.b64encode(secrets.token_hex(32).encode()).decode()
    return [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": token_secret(name), "namespace": ns, "labels": labels},
         "data": {_TOKEN_KEY: token}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": hostfile_name(name), "namespace": ns, "labels": labels},
         "data": {"hostfile": "".join(f"{h} slots={slots}\n" for h in hosts), "kubexec.sh": agent}},
    ]
