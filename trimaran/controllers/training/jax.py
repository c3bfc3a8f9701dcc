"""JAXJob: COORDINATOR_*, NUM_PROCESSES, PROCESS_ID, and all-workers success
(training-operator.md §1.6)."""

from __future__ import annotations

from trimaran.api.training import JAXJOB
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register, status_decided_by


class JAX(Framework):
    facts = JAXJOB

    def is_master_role(self, spec: dict, rtype: str, index: int) -> bool:
        return index == 0  # upstream's IsMasterRole: worker 0 hosts the coordinator

    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        coordinator = addresses["Worker"][0]
        return [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "COORDINATOR_PORT", "value": str(coordinator.port)},
            {"name": "COORDINATOR_ADDRESS", "value": coordinator.host},
            {"name": "NUM_PROCESSES", "value": str(self.total_replicas(job.spec))},
            {"name": "PROCESS_ID", "value": str(index)},
        ]

    def status(self, job: JobView) -> tuple[str | None, str]:
        return status_decided_by(job, self.kind, "Worker")

register(JAX())
