"""XGBoostJob: MASTER_*/WORLD_SIZE/RANK/WORKER_* and the Master-decides success rule
(training-operator.md §1.5)."""

from __future__ import annotations

from trimaran.api.training import XGBOOSTJOB
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register


class XGBoost(Framework):
    facts = XGBOOSTJOB

    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        master = addresses["Master"][0]
        total = self.total_replicas(job.spec)
        rank = index + len(addresses["Master"]) if rtype == "Worker" else index
        # Upstream's values and order, PYTHONUNBUFFERED "0" included (its setPodEnv writes "0").
        out = [
            {"name": "MASTER_PORT", "value": str(master.port)},
            {"name": "MASTER_ADDR", "value": master.host},
            {"name": "WORLD_SIZE", "value": str(total)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PYTHONUNBUFFERED", "value": "0"},
        ]
        workers = addresses.get("Worker", [])
        if total > 1 and workers:
            # Upstream has one worker port for all (every pod has its own IP); here each replica
            # listens on a loopback port of its own, so WORKER_PORT is worker 0's.
            out += [
                {"name": "WORKER_PORT", "value": str(workers[0].port)},
                {"name": "WORKER_ADDRS", "value": ",".join(
                    self.pod_name(job.name, "Worker", i) for i in range(total - 1))},
            ]
        return out

    def status(self, job: JobView) -> tuple[str | None, str]:
        outcome: str | None = None
        for rtype, c in job.counts.items():
            if rtype == "Master":
                if c.expected == 0:
                    return "Succeeded", f"XGBoostJob {job.name} is successfully completed."
                if c.active > 0:
                    outcome = "Running"
        for rtype, c in job.counts.items():
            if c.failed > 0:
                return "Failed", f"XGBoostJob {job.name} is failed because {c.failed} {rtype} replica(s) failed."
        return outcome, f"XGBoostJob {job.name} is running."


register(XGBoost())
