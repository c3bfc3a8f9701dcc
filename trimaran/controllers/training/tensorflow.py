"""TFJob: TF_CONFIG, and the operator's TFJob success rules (training-operator.md §1.1)."""

from __future__ import annotations

from trimaran.api.training import TFJOB
from trimaran.controllers.training.framework import Framework, JobView, ReplicaAddress, compact_json, register


class TensorFlow(Framework):
    facts = TFJOB

    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        # The operator sets TF_CONFIG only on the "tensorflow" container of a distributed job.
        if container.get("name") != self.container_name or self.total_replicas(job.spec) == 1:
            return []
        if job.spec.get("enableDynamicWorker"):
            own = addresses[rtype][index]
            ps = [f"{a.fqdn}:{a.port}" for a in addresses.get("PS", [])]
            if rtype == "Worker":
                cluster = {"worker": {str(index): f"{own.fqdn}:{own.port}"}, "ps": ps}
            elif rtype == "PS":
                cluster = {"worker": {}, "ps": [f"{own.fqdn}:{own.port}"]}
            else:
                cluster = {"worker": {}, "ps": []}
            config: dict = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index}}
        else:
            cluster = {
                rt.lower(): [f"{a.fqdn}:{a.port}" for a in addrs]
                for rt, addrs in sorted(addresses.items(), key=lambda kv: kv[0].lower())
            }
            config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                      "environment": "cloud"}
        return [{"name": "TF_CONFIG", "value": compact_json(config)}]

    def status(self, job: JobView) -> tuple[str | None, str]:
        types = job.replica_specs(self.spec_key)
        has_chief = "Chief" in types or "Master" in types
        policy = job.spec.get("successPolicy") or ""
        outcome: str | None = None
        for rtype, c in job.counts.items():
            if has_chief and rtype in ("Chief", "Master"):
                if c.expected == 0:
                    return "Succeeded", f"TFJob {job.namespace}/{job.name} successfully completed."
                if c.active > 0:
                    outcome = "Running"
            elif not has_chief and rtype == "Worker":
                if c.expected == 0 or (policy != "AllWorkers" and job.worker0_succeeded):
                    return "Succeeded", f"TFJob {job.namespace}/{job.name} successfully completed."
                if c.active > 0:
                    outcome = "Running"
        for rtype, c in job.counts.items():
            if c.failed > 0 and not (job.spec.get("enableDynamicWorker") and rtype == "Worker"):
                return "Failed", (f"TFJob {job.namespace}/{job.name} has failed because {c.failed} "
                                  f"{rtype} replica(s) failed.")
        return outcome, f"TFJob {job.namespace}/{job.name} is running."


register(TensorFlow())
