"""PyTorchJob: MASTER_*, WORLD_SIZE, RANK, PET_* and success rules (training-operator.md §1.2)."""

from __future__ import annotations

from trimaran.api.training import PYTORCHJOB
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register


class PyTorch(Framework):
    facts = PYTORCHJOB

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
        workers = int((spec.get(self.spec_key) or {}).get("Worker", {}).get("replicas", 1))
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
        if elastic.get("rdzvConf"):
            conf = ",".join(f"{kv['key']}={kv['value']}" for kv in elastic["rdzvConf"])
            out.append({"name": "PET_RDZV_CONF", "value": conf})
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


register(PyTorch())
