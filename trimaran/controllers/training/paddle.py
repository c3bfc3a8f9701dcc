"""PaddleJob: PADDLE_* for collective (Workers only) and parameter-server (with a Master) mode,
and PyTorch-like success rules (training-operator.md §1.7)."""

from __future__ import annotations

from trimaran.api.training import PADDLEJOB
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, register, status_decided_by

#: Rank 0 advertises its own address through this variable (a fieldRef to the pod IP), which
#: PADDLE_MASTER then names as ``$(POD_IP_DUMMY)``.
_POD_IP = {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


class Paddle(Framework):
    facts = PADDLEJOB

    def is_master_role(self, spec: dict, rtype: str, index: int) -> bool:
        return rtype == "Master"  # upstream's IsMasterRole: no pod of a collective job has the role

    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        out = [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PADDLE_JOB_ID", "value": job.name},
            {"name": "PADDLE_NNODES", "value": str(self.total_replicas(job.spec))},
        ]
        ps_mode = "Master" in addresses
        rendezvous = addresses["Master" if ps_mode else "Worker"][0]
        # Collective mode: worker 0 is the rendezvous; PS mode: master 0 (upstream compares
        # ranks only, so in PS mode worker 0 points at the master by name).
        if index == 0 and (not ps_mode or rtype == "Master"):
            out += [dict(_POD_IP), {"name": "PADDLE_MASTER", "value": f"$(POD_IP_DUMMY):{rendezvous.port}"}]
        else:
            out.append({"name": "PADDLE_MASTER", "value": f"{rendezvous.host}:{rendezvous.port}"})
        if ps_mode:
            role = "PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM"
            out.append({"name": role, "value": "1"})
        return out

    def status(self, job: JobView) -> tuple[str | None, str]:
        return status_decided_by(job, self.kind, "Master" if "Master" in job.counts else "Worker")

register(Paddle())
