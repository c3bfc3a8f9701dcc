"""coordination.k8s.io/v1 Lease: a holder's claim renewed in time, as the kubelet's heartbeat
(``kube-node-lease/<node>``) and leader election use it. A minimal, faithful model of the kind."""

from __future__ import annotations

from typing import Literal

from trimaran.api.meta import ApiModel, Resource
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "LEASE_COLUMNS", "Lease", "LeaseSpec", "NODE_LEASE_NAMESPACE"]

API_VERSION = "coordination.k8s.io/v1"
# Where every kubelet keeps its node's Lease.
NODE_LEASE_NAMESPACE = "kube-node-lease"


class LeaseSpec(ApiModel):
    """Who holds the lease and until when: ``renewTime`` + ``leaseDurationSeconds``. Times are
    MicroTime (RFC 3339 with microseconds)."""

    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None
    strategy: Literal["OldestEmulationVersion"] | None = None
    preferred_holder: str | None = None


class Lease(Resource):
    """A Lease has no status: its spec is the holder's record."""

    spec: LeaseSpec | None = None


LEASE_COLUMNS = (PrinterColumn("Holder", value=lambda o: (o.get("spec") or {}).get("holderIdentity", "")), AGE)
