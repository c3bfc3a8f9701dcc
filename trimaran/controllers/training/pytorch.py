"""PyTorchJob: MASTER_*, WORLD_SIZE, RANK, PET_* and success rules (training-operator.md §1.2)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from trimaran.api.labels import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from trimaran.api.meta import replica_count
from trimaran.api.training import PYTORCHJOB
from trimaran.controllers.conditions import seconds_since
from trimaran.controllers.pods import phase, request_deletion, waiting_reason
from trimaran.controllers.training.etcd import ETCD_LABEL, LOOPBACK_HOSTS, etcd_installed, etcd_pod, serves_v2
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register
from trimaran.serving.autoscaler import HPA, HPAConfig

if TYPE_CHECKING:
    from trimaran.controllers.serving.autoscaling import ResourceSampler
    from trimaran.store import Store


class PyTorch(Framework):
    facts = PYTORCHJOB

    def __init__(self) -> None:
        self._hpas: dict[str, HPA] = {}  # per elastic job with metrics (by uid): its autoscaler's history

    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        spec = job.spec
        out = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        total = self.total_replicas(spec)
        nproc = spec.get("nprocPerNode")
        elastic = spec.get("elasticPolicy")
        if "Master" in addresses:
            master = addresses["Master"][0]
            try:
                nproc_int = int(nproc) if nproc is not None else 1
            except ValueError:
                nproc_int = 1  # "auto", "cpu", "gpu" count as one process per node here
            rank = index if rtype == "Master" else index + 1
            out += [
                {"name": "MASTER_PORT", "value": str(master.port)},
                {"name": "PET_MASTER_PORT", "value": str(master.port)},
                {"name": "MASTER_ADDR", "value": master.host},
                {"name": "PET_MASTER_ADDR", "value": master.host},
                {"name": "WORLD_SIZE", "value": str(total * nproc_int)},
                {"name": "RANK", "value": str(rank)},
                {"name": "PET_NODE_RANK", "value": str(rank)},
            ]
        if nproc is not None:
            out.append({"name": "PET_NPROC_PER_NODE", "value": str(nproc)})
        if not elastic:
            out.append({"name": "PET_NNODES", "value": str(total)})
            return out
        worker0 = addresses.get("Worker", [None])[0]
        host = elastic.get("rdzvHost") or (worker0.host if worker0 else "")
        port = elastic.get("rdzvPort") or (worker0.port if worker0 else self.default_port)
        workers = replica_count((spec.get(self.spec_key) or {}).get("Worker", {}))
        lo = elastic.get("minReplicas") or elastic.get("maxReplicas") or workers
        hi = elastic.get("maxReplicas") or elastic.get("minReplicas") or workers
        out += [
            {"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"},
            {"name": "PET_RDZV_BACKEND", "value": elastic.get("rdzvBackend") or "c10d"},
            {"name": "PET_NNODES", "value": f"{lo}:{hi}"},
        ]
        if elastic.get("maxRestarts") is not None:
            out.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
        if elastic.get("nProcPerNode") is not None:
            out.append({"name": "PET_NPROC_PER_NODE", "value": str(elastic["nProcPerNode"])})
        if elastic.get("rdzvId"):
            out.append({"name": "PET_RDZV_ID", "value": str(elastic["rdzvId"])})
        conf = [f"{kv['key']}={kv['value']}" for kv in elastic.get("rdzvConf") or []]
        if (elastic.get("rdzvBackend") or "c10d") == "c10d" and not elastic.get("rdzvHost") \
                and "is_host" not in _rdzv_conf(elastic):
            # Every replica's name is on the same loopback line of /etc/hosts, so torch's hostname
            # test makes each agent think it hosts the store; worker 0 hosts it, as on a cluster.
            conf.append(f"is_host={'true' if (rtype, index) == ('Worker', 0) else 'false'}")
        if conf:
            out.append({"name": "PET_RDZV_CONF", "value": ",".join(conf)})
        # torch names a rendezvous node by its FQDN and pid, and every sandbox here has the same
        # pid and resolves its name through one shared loopback line; the pod's own name keeps
        # the nodes apart (torchrun's --local-addr).
        out.append({"name": "PET_LOCAL_ADDR", "value": self.pod_name(job.name, rtype, index)})
        if not any(e.get("name") == SHARED_STORE_SWITCH for e in container.get("env") or []):
            # torch 2.13 shares the rendezvous store with the workers, and then a node that joins a
            # later round (a scale-up) waits forever for a master address that an older rank 0
            # never writes for that round; per-round addresses make scale-up work.
            out.append({"name": SHARED_STORE_SWITCH, "value": "1"})
        if elastic.get("standalone"):
            out.append({"name": "PET_STANDALONE", "value": ""})
        return out

    def status(self, job: JobView) -> tuple[str | None, str]:
        types = job.replica_specs(self.spec_key)
        done = f"PyTorchJob {job.namespace}/{job.name} successfully completed."
        outcome: str | None = None
        for rtype, c in job.counts.items():
            if "Master" in types:
                if rtype == "Master":
                    if c.expected == 0:
                        return "Succeeded", done
                    if c.active > 0:
                        outcome = "Running"
            elif rtype == "Worker":
                if (job.spec.get("elasticPolicy") and c.succeeded > 0) or c.expected == 0:
                    return "Succeeded", done
                if c.active > 0:
                    outcome = "Running"
        for rtype, c in job.counts.items():
            if c.failed > 0 and c.replicas > c.succeeded + c.active:
                return "Failed", (f"PyTorchJob {job.namespace}/{job.name} has failed because {c.failed} "
                                  f"{rtype} replica(s) failed.")
        return outcome, f"PyTorchJob {job.namespace}/{job.name} is running."

    def prerequisites(self, job: JobView, pods: list[dict]) -> tuple[list[dict], bool]:
        """An etcd rendezvous needs its etcd answering before the workers start (torch gives up at
        once on an etcd that does not answer): the job's own etcd pod when none answers on loopback."""
        plan, port = self._etcd_plan(job, pods)
        if plan == "start":
            return [etcd_pod(job.name, job.namespace, port)], False
        return [], plan in ("none", "external", "ready")

    def stuck(self, job: JobView, pods: list[dict]) -> tuple[str | None, float | None]:
        """An elastic job whose workers stay below minReplicas past torchrun's join timeout fails,
        naming the workers that never started, instead of waiting on a rendezvous that cannot end;
        so does an etcd rendezvous with no etcd to use."""
        elastic = job.spec.get("elasticPolicy")
        if not elastic:
            return None, None
        plan, port = self._etcd_plan(job, pods)
        if plan not in ("none", "external", "ready", "start", "starting"):
            return f"PyTorchJob {job.namespace}/{job.name} has failed because {plan}", None
        timeout = float(_rdzv_conf(elastic).get("join_timeout", DEFAULT_JOIN_TIMEOUT))
        if plan == "starting":
            # The workers wait for the job's etcd; one that never answers must not hold them forever.
            own = next(p for p in pods if p["metadata"].get("labels", {}).get(ETCD_LABEL) == job.name)
            age = seconds_since(own["metadata"].get("creationTimestamp"))
            if age < timeout:
                return None, timeout - age + 0.05
            why = waiting_reason([own]) or f"pod {own['metadata']['name']} is {phase(own)}"
            return (f"PyTorchJob {job.namespace}/{job.name} has failed because its etcd did not answer at "
                    f"127.0.0.1:{port} within the join timeout of {timeout:g}s ({why})"), None
        workers = {int(p["metadata"]["labels"].get(REPLICA_INDEX_LABEL, -1)): p for p in pods
                   if p["metadata"]["labels"].get(REPLICA_TYPE_LABEL) == "worker"}
        running = sum(1 for p in workers.values() if phase(p) == "Running")
        needed = int(elastic.get("minReplicas") or 1)
        if running >= needed:
            return None, None
        replicas = replica_count((job.spec.get(self.spec_key) or {}).get("Worker", {}))
        waiting = [(i, workers.get(i)) for i in range(replicas)
                   if workers.get(i) is None or phase(workers[i]) == "Pending"]
        if not waiting:
            return None, None  # failed or finished workers: the success and failure rules decide
        since = max(seconds_since(p["metadata"].get("creationTimestamp")) if p else 0.0 for _, p in waiting)
        if since < timeout:
            return None, timeout - since + 0.05
        missing = "; ".join(f"Worker {i} ({self._why_waiting(job.name, i, p)})" for i, p in waiting)
        return (f"PyTorchJob {job.namespace}/{job.name} has failed because its rendezvous could not complete "
                f"within the join timeout of {timeout:g}s: {running} of minReplicas {needed} workers are running; "
                f"missing: {missing}"), None

    def autoscale_period(self, job: JobView) -> float | None:
        return _hpa_sync_period() if _utilization_target(job.spec) else None

    def autoscale(self, job: JobView, pods: list[dict], usage: ResourceSampler) -> tuple[int, str] | None:
        """``elasticPolicy.metrics`` as the HorizontalPodAutoscaler the operator makes of them
        (name {job}, on the scale subresource, min/maxReplicas): Resource cpu/memory metrics with an
        Utilization target, by Kubernetes' rule (serving's HPA: 15 s syncs, tolerance, down
        stabilisation; the control plane's HPA sync period, TRIMARAN_HPA_SYNC_SECONDS, applies). Other
        metric types need a metrics API there is none of here: not acted on."""
        target = _utilization_target(job.spec)
        if target is None:
            return None
        metric, percent = target
        elastic = job.spec["elasticPolicy"]
        worker = (job.spec.get(self.spec_key) or {}).get("Worker") or {}
        current = replica_count(worker)
        running = [p for p in pods if phase(p) == "Running"
                   and p["metadata"].get("labels", {}).get(REPLICA_TYPE_LABEL) == "worker"]
        utilization = usage.utilization(running, (worker.get("template") or {}).get("spec") or {}, metric)
        if utilization is None:
            return None
        config = HPAConfig(metric=metric, target_utilization=percent, min_replicas=int(elastic["minReplicas"]),
                           max_replicas=int(elastic["maxReplicas"]), sync_period=_hpa_sync_period())
        now = time.monotonic()
        hpa = self._hpas.setdefault(job.uid, HPA(config, now=now))
        hpa.reconfigure(config)
        decision = hpa.recommend(now, current, utilization)
        if decision is None or decision.desired == current:
            return None
        side = "above" if decision.desired > current else "below"
        return decision.desired, f"{metric} resource utilization (percentage of request) {side} target"

    def finished(self, job: JobView, pods: list[dict], store: Store) -> bool:
        """The job's etcd stops with the job."""
        self._hpas.pop(job.uid, None)
        for pod in pods:
            if pod["metadata"].get("labels", {}).get(ETCD_LABEL) == job.name:
                request_deletion(store, pod)
        return True

    def networked(self, job: JobView) -> bool:
        # The job's own etcd and its workers meet on the host's loopback (rdzvHost 127.0.0.1).
        return (job.spec.get("elasticPolicy") or {}).get("rdzvBackend") not in ("etcd", "etcd-v2")

    def _etcd_plan(self, job: JobView, pods: list[dict]) -> tuple[str, int]:
        """Where an etcd rendezvous stands: "none" (not an etcd job), "external" (an etcd with the
        v2 API answers at the endpoint), "start" (the job's own etcd is to be made), "starting",
        "ready", or why it cannot run; and the endpoint's port."""
        elastic = job.spec.get("elasticPolicy") or {}
        if elastic.get("rdzvBackend") not in ("etcd", "etcd-v2"):
            return "none", 0
        host = elastic.get("rdzvHost") or ""
        ports = job.replica_ports.get("Worker") or [self.default_port]
        port = int(elastic.get("rdzvPort") or ports[0])
        own = next((p for p in pods if p["metadata"].get("labels", {}).get(ETCD_LABEL) == job.name), None)
        if own is not None:
            return ("ready" if phase(own) == "Running" and serves_v2("127.0.0.1", port) else "starting"), port
        local = host in LOOPBACK_HOSTS or host == self.pod_name(job.name, "Worker", 0)
        where = f"{host or self.pod_name(job.name, 'Worker', 0)}:{port}"
        answer = serves_v2("127.0.0.1" if local else host, port)
        if answer:
            return "external", port
        if answer is False:
            return (f"the etcd at {where} (rdzvBackend {elastic['rdzvBackend']}) does not serve the v2 API that "
                    "torch's etcd rendezvous uses: start it with --enable-v2=true"), port
        if not local:
            return (f"no etcd answers at {where} (rdzvBackend {elastic['rdzvBackend']}), and Trimaran starts one "
                    "itself only on this machine's loopback (spec.elasticPolicy.rdzvHost unset, localhost or "
                    "127.0.0.1)"), port
        if not etcd_installed():
            return (f"no etcd answers at {where} (rdzvBackend {elastic['rdzvBackend']}) and etcd is not installed "
                    "here to start one: apt-get install etcd-server (scripts/bootstrap.sh does)"), port
        return "start", port

    def _why_waiting(self, job: str, index: int, pod: dict | None) -> str:
        name = self.pod_name(job, "Worker", index)
        if pod is None:
            return f"pod {name} not created"
        return waiting_reason([pod]) or f"pod {name} is Pending"


#: torch's switch that makes each rendezvous round publish its own master address and port.
SHARED_STORE_SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

#: torch's default join_timeout of the c10d and etcd rendezvous (seconds).
DEFAULT_JOIN_TIMEOUT = 600


def _utilization_target(spec: dict) -> tuple[str, float] | None:
    """The first Resource metric of elasticPolicy.metrics with an Utilization target: (cpu|memory, %)."""
    for metric in (spec.get("elasticPolicy") or {}).get("metrics") or []:
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        if metric.get("type") == "Resource" and resource.get("name") in ("cpu", "memory") \
                and target.get("type") == "Utilization" and target.get("averageUtilization"):
            return resource["name"], float(target["averageUtilization"])
    return None


def _hpa_sync_period() -> float:
    """The HorizontalPodAutoscaler reconciler's sync period, which the operator's HPA of an elastic
    job follows as well."""
    return float(os.environ.get("TRIMARAN_HPA_SYNC_SECONDS", HPAConfig.sync_period))


def _rdzv_conf(elastic: dict) -> dict[str, str]:
    return {kv["key"]: str(kv["value"]) for kv in elastic.get("rdzvConf") or []}


register(PyTorch())
