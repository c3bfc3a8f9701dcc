"""What differs between Kubeflow job kinds: replica types, env contract, success rules.

One module per framework registers a :class:`Framework`; the shared job controller looks the
kind up here instead of branching on it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from trimaran.api.meta import replica_count
from trimaran.api.training import Framework as KindFacts

if TYPE_CHECKING:
    from trimaran.controllers.serving.autoscaling import ResourceSampler
    from trimaran.store import Store


@dataclass
class ReplicaAddress:
    """Where one replica listens: a name that resolves inside every replica's sandbox, and a port."""

    host: str
    fqdn: str
    port: int


@dataclass
class ReplicaCounts:
    replicas: int
    active: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def expected(self) -> int:
        return self.replicas - self.succeeded


@dataclass
class JobView:
    """The parts of a job a framework's rules read."""

    name: str
    namespace: str
    spec: dict
    counts: dict[str, ReplicaCounts] = field(default_factory=dict)
    worker0_succeeded: bool = False
    api_version: str = ""
    uid: str = ""
    #: Ports allocated to each replica type, by index (the job's ports annotation).
    replica_ports: dict[str, list[int]] = field(default_factory=dict)

    def replica_specs(self, spec_key: str) -> dict[str, dict]:
        return self.spec.get(spec_key) or {}


class Framework(ABC):
    """A kind's controller logic. Its facts (names, port, defaults) are the API's
    (:class:`trimaran.api.training.Framework`), read once from ``facts`` by each subclass."""

    facts: ClassVar[KindFacts]
    kind: str
    spec_key: str
    container_name: str
    port_name: str
    default_port: int
    operator_name: str
    default_restart_policy: str
    #: Whether replicas get pod networks of their own when the pod network is on (MPI's do not:
    #: its launcher reaches workers through abstract Unix sockets, which belong to a network namespace).
    own_network: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        facts = cls.facts
        derived = {"kind": facts.kind, "spec_key": facts.replica_specs_key, "container_name": facts.default_container,
                   "port_name": facts.port_name, "default_port": facts.default_port,
                   "operator_name": facts.operator_name, "default_restart_policy": facts.default_restart_policy}
        for name, value in derived.items():
            setattr(cls, name, value)

    def pod_name(self, job: str, rtype: str, index: int) -> str:
        return f"{job.replace('/', '-')}-{rtype.lower()}-{index}"

    def total_replicas(self, spec: dict) -> int:
        return sum(replica_count(r) for r in (spec.get(self.spec_key) or {}).values())

    def is_master_role(self, spec: dict, rtype: str, index: int) -> bool:
        types = spec.get(self.spec_key) or {}
        if "Chief" in types or "Master" in types:
            return rtype in ("Chief", "Master")
        return rtype == "Worker" and index == 0

    def job_role(self, job: JobView, rtype: str, index: int) -> str | None:
        """Value of the ``training.kubeflow.org/job-role`` pod label, if the pod gets one."""
        return "master" if self.is_master_role(job.spec, rtype, index) else None

    def operator_label(self, job: JobView) -> str:
        """Value of the ``training.kubeflow.org/operator-name`` pod label."""
        return self.operator_name

    def host_aliases(self, job: JobView, host: str) -> list[str]:
        """Names besides ``{pod}`` and ``{pod}.{namespace}.svc`` that resolve to a replica."""
        return []

    def children(self, job: JobView, addresses: dict[str, list[ReplicaAddress]]) -> list[dict]:
        """Objects the job owns besides its pods (e.g. a ConfigMap), created before the pods."""
        return []

    def prepare_pod(self, job: JobView, rtype: str, index: int, pod_spec: dict) -> None:
        """Last changes to a replica's pod spec, after the environment is added."""
        return None

    def networked(self, job: JobView) -> bool:
        """Whether the job's replicas each get a network of their own on the pod network (else
        they stay on the host's, with loopback ports of their own, as without it)."""
        return self.own_network

    def holds_back(self, job: JobView, rtype: str, pods: list[dict]) -> bool:
        """Whether replicas of ``rtype`` wait before being created (``pods``: the job's live ones)."""
        return False

    def backoff_limit(self, job: JobView) -> int | None:
        """The retry budget the run policy's backoffLimit check uses."""
        limit = (job.spec.get("runPolicy") or {}).get("backoffLimit")
        return None if limit is None else int(limit)

    def prerequisites(self, job: JobView, pods: list[dict]) -> tuple[list[dict], bool]:
        """What the replicas need running before they start (e.g. a rendezvous server): objects to
        create now (the job owns them; already there is fine), and whether the replicas may start."""
        return [], True

    def autoscale(self, job: JobView, pods: list[dict], usage: ResourceSampler) -> tuple[int, str] | None:
        """A new replica count for the scale subresource and why, as an autoscaler the job asks for
        would write it (``pods``: the running replicas it measures), or None to leave it."""
        return None

    def autoscale_period(self, job: JobView) -> float | None:
        """How often ``autoscale`` wants a pass while the job runs (None: only on changes)."""
        return None

    def stuck(self, job: JobView, pods: list[dict]) -> tuple[str | None, float | None]:
        """Why the running job can never go on (it fails with that message), else None and in how
        many seconds to look again (None: on the next change). ``pods``: the job's live ones."""
        return None, None

    def finished(self, job: JobView, pods: list[dict], store: Store) -> bool:
        """Called on every pass once the job has finished; False asks for another pass soon."""
        return True

    @abstractmethod
    def env(self, job: JobView, rtype: str, index: int, addresses: dict[str, list[ReplicaAddress]],
            container: dict) -> list[dict]:
        """Environment the operator appends to ``container`` of replica ``rtype``/``index``."""

    @abstractmethod
    def status(self, job: JobView) -> tuple[str | None, str]:
        """The job-level outcome from replica counts: (condition type or None, message)."""


def status_decided_by(job: JobView, kind: str, decider: str) -> tuple[str | None, str]:
    """The operators' rule for JAXJob and PaddleJob: the ``decider`` replica type succeeds the job
    once all of it has succeeded and runs it while any runs; a replica type with failures that
    cannot all be made good by the rest fails it."""
    ref = f"{job.namespace}/{job.name}"
    outcome: str | None = None
    counts = job.counts.get(decider)
    if counts is not None:
        if counts.expected == 0:
            return "Succeeded", f"{kind} {ref} successfully completed."
        if counts.active > 0:
            outcome = "Running"
    for rtype, c in job.counts.items():
        if c.failed > 0 and c.replicas > c.succeeded + c.active:
            return "Failed", f"{kind} {job.name} is failed because {c.failed} {rtype} replica(s) failed."
    return outcome, f"{kind} {ref} is running."


_REGISTRY: dict[str, Framework] = {}


def register(framework: Framework) -> Framework:
    _REGISTRY[framework.kind] = framework
    return framework


def framework_for(kind: str) -> Framework:
    return _REGISTRY[kind]


def frameworks() -> list[Framework]:
    return list(_REGISTRY.values())


def compact_json(value: object) -> str:
    """JSON as Go's json.Marshal writes it: no spaces."""
    return json.dumps(value, separators=(",", ":"))
