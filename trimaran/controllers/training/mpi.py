"""MPIJob: a launcher that runs ``mpirun`` and workers it starts ranks on (training-operator.md
§1.3 for ``kubeflow.org/v1``, §1.4 for the MPI operator's ``kubeflow.org/v2beta1``).

Pods are ``{job}-launcher`` and ``{job}-worker-{i}``. As the operators do, a ConfigMap
``{job}-config`` mounted at ``/etc/mpi`` holds the ``hostfile`` (one line per worker, the
launcher first when it is a worker too), the rsh agent ``kubexec.sh`` and ``discover_hosts.sh``;
the launcher's first container gets the operator's environment (``OMPI_MCA_plm_rsh_agent``,
``OMPI_MCA_orte_default_hostfile``, ``K_MPI_JOB_ROLE``, ...).

Where a cluster uses ``kubectl exec`` (v1) or ssh (v2beta1), ``kubexec.sh`` here runs
``runtime/podexec.py connect``: it skips ssh's options and runs OpenMPI's ``orted`` inside the
named worker's sandbox, with that worker's environment and working directory, through the exec
server that is the worker's main process (``sshd -De`` / ``sleep 365d`` on a cluster; a worker
with a command of its own runs it under the server). When the job finishes, idle workers are
asked to exit (their pods end Succeeded and are kept or deleted by cleanPodPolicy).

Every pod on the machine can reach every exec server (their abstract sockets are in the shared
network namespace), so each request carries the job's exec token: a Secret ``{job}-podexec``
made with the job (as the MPI operator's ``{job}-ssh`` key), given to the launcher and the workers
as ``$TRIMARAN_PODEXEC_TOKEN`` and read by the control plane when it ends idle workers.

Every replica name resolves to loopback, which OpenMPI would take for this very node and so
start every rank in the launcher; ``OMPI_MCA_if_base_do_not_resolve`` stops it resolving names,
and its TCP transports are kept on the loopback interface, which every sandbox shares.
"""

from __future__ import annotations

import base64
import secrets
import shlex
import sys
from pathlib import Path

from trimaran.api.labels import JOB_NAME_LABEL, REPLICA_TYPE_LABEL
from trimaran.api.training import MPIJOB
from trimaran.controllers.pods import phase
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register
from trimaran.runtime import podexec
from trimaran.runtime.gpus import is_gpu_resource
from trimaran.store import NotFound, Store

LAUNCHER = "Launcher"
WORKER = "Worker"
V2BETA1 = "kubeflow.org/v2beta1"
CONFIG_VOLUME = "mpi-job-config"
CONFIG_DIR = "/etc/mpi"
HOSTFILE = f"{CONFIG_DIR}/hostfile"
AGENT = f"{CONFIG_DIR}/kubexec.sh"
_SSH_ARGS = "-o ConnectionAttempts=10"
_LAUNCHER_JOB_BACKOFF = 6  # a batch/v1 Job's default, which v2beta1's launcher Job inherits
_PODEXEC = [sys.executable, "-I", "-S", str(Path(podexec.__file__).resolve())]
_TOKEN_KEY = "token"


def _token_secret(job: str) -> str:
    return f"{job}-podexec"


def _first_container(job: JobView, rtype: str) -> dict:
    spec = (job.spec.get("mpiReplicaSpecs") or {}).get(rtype) or {}
    return ((spec.get("template") or {}).get("spec") or {}).get("containers", [{}])[0]


def _wants_gpu(container: dict) -> bool:
    resources = container.get("resources") or {}
    names = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return any(is_gpu_resource(name) for name in names)


class MPI(Framework):
    facts = MPIJOB

    # -- names and labels -----------------------------------------------------------------------
    def pod_name(self, job: str, rtype: str, index: int) -> str:
        if rtype == LAUNCHER:
            return f"{job.replace('/', '-')}-launcher"
        return super().pod_name(job, rtype, index)

    def is_master_role(self, spec: dict, rtype: str, index: int) -> bool:
        return rtype == LAUNCHER

    def job_role(self, job: JobView, rtype: str, index: int) -> str | None:
        if job.api_version == V2BETA1:
            return rtype.lower()
        return super().job_role(job, rtype, index)

    def operator_label(self, job: JobView) -> str:
        return "mpi-operator" if job.api_version == V2BETA1 else self.operator_name

    def host_aliases(self, job: JobView, host: str) -> list[str]:
        # v2beta1's headless Service named after the job: {pod}.{job}.{namespace}.svc.
        return [f"{host}.{job.name}.{job.namespace}.svc"] if job.api_version == V2BETA1 else []

    # -- the ConfigMap ----------------------------------------------------------------------------
    def _slots(self, job: JobView) -> int:
        return int(job.spec.get("slotsPerWorker") or 1)

    def _hosts(self, job: JobView, addresses: dict[str, list[ReplicaAddress]]) -> list[str]:
        """Hostfile names in order. The launcher goes by its own hostname, which mpirun knows for
        itself, so its ranks start in place rather than through the agent."""
        v2 = job.api_version == V2BETA1
        hosts = []
        if LAUNCHER in addresses and (
                job.spec.get("runLauncherAsWorker") if v2 else _wants_gpu(_first_container(job, LAUNCHER))):
            hosts.append(addresses[LAUNCHER][0].host)
        for worker in addresses.get(WORKER, []):
            hosts.append(f"{worker.host}.{job.name}.{job.namespace}.svc" if v2 else worker.host)
        return hosts

    def children(self, job: JobView, addresses: dict[str, list[ReplicaAddress]]) -> list[dict]:
        slots = self._slots(job)
        hosts = self._hosts(job, addresses)
        if job.api_version == V2BETA1 and job.spec.get("mpiImplementation") in ("Intel", "MPICH"):
            hostfile = [f"{h}:{slots}" for h in hosts]
            discovered = hosts
        else:
            hostfile = [f"{h} slots={slots}" for h in hosts]
            discovered = [f"{h}:{slots}" for h in hosts] if job.api_version != V2BETA1 else hosts
        agent = ("#!/bin/sh\n"
                 "# Runs the command on the named worker, in its sandbox (for kubectl exec / ssh).\n"
                 f'exec {shlex.join(_PODEXEC)} connect {shlex.quote(job.uid)} "$@"\n')
        labels = {JOB_NAME_LABEL: job.name}
        # Drawn on every pass that creates pods, but only the first pass's Secret is stored.
        token = base64.b64encode(secrets.token_hex(32).encode()).decode()
        return [{
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": _token_secret(job.name), "namespace": job.namespace, "labels": labels},
            "data": {_TOKEN_KEY: token},
        }, {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{job.name}-config", "namespace": job.namespace, "labels": labels},
            "data": {
                "hostfile": "".join(f"{line}\n" for line in hostfile),
                "kubexec.sh": agent,
                "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in discovered),
            },
        }]

    # -- pods -------------------------------------------------------------------------------------
    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        if container.get("name") != _first_container(job, rtype).get("name"):
            return []
        v2 = job.api_version == V2BETA1
        if rtype == WORKER:
            return [{"name": "K_MPI_JOB_ROLE", "value": "worker"}] if v2 else []
        own = {e.get("name") for e in container.get("env") or []}
        out: dict[str, str] = {}

        def unless_set(name: str, value: str) -> None:
            if name not in own:
                out[name] = value

        implementation = job.spec.get("mpiImplementation") or "OpenMPI"
        if v2:
            out["K_MPI_JOB_ROLE"] = "launcher"
        if not v2 or implementation == "OpenMPI":
            out["OMPI_MCA_plm_rsh_agent"] = AGENT
            out["OMPI_MCA_orte_default_hostfile"] = HOSTFILE
            if v2:
                out["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"
                out["OMPI_MCA_plm_rsh_args"] = _SSH_ARGS
                out["OMPI_MCA_orte_set_default_slots"] = str(self._slots(job))
            unless_set("OMPI_MCA_if_base_do_not_resolve", "1")
            for transport in ("btl", "oob"):
                if not own & {f"OMPI_MCA_{transport}_tcp_if_include", f"OMPI_MCA_{transport}_tcp_if_exclude"}:
                    out[f"OMPI_MCA_{transport}_tcp_if_include"] = "lo"
        if not v2 or implementation == "Intel":
            unless_set("I_MPI_HYDRA_BOOTSTRAP", "rsh")
            unless_set("I_MPI_HYDRA_BOOTSTRAP_EXEC", AGENT)
            if v2:
                out["I_MPI_HYDRA_HOST_FILE"] = HOSTFILE
                out["I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"] = _SSH_ARGS
                out["I_MPI_PERHOST"] = str(self._slots(job))
        if v2 and implementation == "MPICH":
            out["HYDRA_HOST_FILE"] = HOSTFILE
            out["HYDRA_LAUNCH_EXTRA_ARGS"] = _SSH_ARGS
            unless_set("HYDRA_LAUNCHER", "rsh")
            unless_set("HYDRA_LAUNCHER_EXEC", AGENT)
        no_gpu = not job.spec.get("runLauncherAsWorker") if v2 else not _wants_gpu(container)
        if no_gpu:
            out["NVIDIA_VISIBLE_DEVICES"] = ""
            out["NVIDIA_DRIVER_CAPABILITIES"] = ""
        return [{"name": k, "value": v} for k, v in out.items()]

    # The launcher execs into workers through abstract Unix sockets (runtime/podexec.py) and ranks
    # talk TCP over loopback: both need the replicas in one network namespace, the host's.
    own_network = False

    def prepare_pod(self, job: JobView, rtype: str, index: int, pod_spec: dict) -> None:
        containers = pod_spec.get("containers") or []
        if not containers:
            return
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), {
            "name": CONFIG_VOLUME,
            "configMap": {"name": f"{job.name}-config", "items": [
                {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
                {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
            ]},
        }]
        main = containers[0]
        if rtype == WORKER:
            wanted = job.spec.get("mainContainer")
            main = next((c for c in containers if c.get("name") == wanted), containers[0])
        main["volumeMounts"] = [*(main.get("volumeMounts") or []), {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR}]
        main["env"] = [*(main.get("env") or []), {"name": podexec.TOKEN_ENV, "valueFrom": {
            "secretKeyRef": {"name": _token_secret(job.name), "key": _TOKEN_KEY}}}]
        if rtype == WORKER and (main.get("command") or not main.get("args")):
            server = [*_PODEXEC, "serve", job.uid, self.pod_name(job.name, rtype, index)]
            main["command"] = [*server, "--", *main["command"]] if main.get("command") else server

    def holds_back(self, job: JobView, rtype: str, pods: list[dict]) -> bool:
        if rtype != LAUNCHER or job.spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
            return False
        wanted = int((job.replica_specs(self.spec_key).get(WORKER) or {}).get("replicas", 0))
        running = [p for p in pods
                   if (p["metadata"].get("labels") or {}).get(REPLICA_TYPE_LABEL) == "worker"
                   and phase(p) == "Running"]
        return len(running) < wanted

    def backoff_limit(self, job: JobView) -> int | None:
        limit = super().backoff_limit(job)
        if limit is None and job.api_version == V2BETA1:
            return _LAUNCHER_JOB_BACKOFF
        return limit

    # -- outcome ----------------------------------------------------------------------------------
    def status(self, job: JobView) -> tuple[str | None, str]:
        name = f"{job.namespace}/{job.name}"
        launcher = job.counts.get(LAUNCHER)
        if launcher is None:
            return None, f"MPIJob {name} has no launcher."
        if launcher.succeeded > 0:
            return "Succeeded", f"MPIJob {name} successfully completed."
        if launcher.failed > 0:
            return "Failed", f"MPIJob {name} has failed because the launcher failed."
        # Worker failures are not the job's: mpirun on the launcher fails when it needs them.
        if launcher.active > 0 and all(c.active == c.replicas for c in job.counts.values()):
            return "Running", f"MPIJob {name} is running."
        return None, f"MPIJob {name} is created."

    def finished(self, job: JobView, pods: list[dict], store: Store) -> bool:
        # Idle workers would wait forever (sshd on a cluster): end them, as their job has.
        try:
            secret = store.get("Secret", job.namespace, _token_secret(job.name))
            token = base64.b64decode((secret.get("data") or {}).get(_TOKEN_KEY, "")).decode()
        except (NotFound, ValueError):
            return True  # deleted by hand: the workers stay until their pods are deleted
        reached = True
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(REPLICA_TYPE_LABEL) == "worker" and phase(pod) == "Running":
                reached = podexec.request_exit(job.uid, pod["metadata"]["name"], token) and reached
        return reached


register(MPI())
