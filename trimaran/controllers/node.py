"""The node's own objects, as a kubelet and the node lifecycle controller keep them on a cluster.

- **Registration and status** (the kubelet's node status manager): the ``v1/Node`` named after this
  machine is created with its labels (well-known, GPU feature discovery's, ``TRIMARAN_NODE_LABELS``)
  and registration taints (``TRIMARAN_NODE_TAINTS``); on every later start the node's own labels are
  written over the stored ones (others, ``kubectl label``'s, stay). Its status (capacity,
  allocatable, conditions, addresses, nodeInfo) is computed every 10 s (``nodeStatusUpdateFrequency``)
  and posted when it changed, or every 5 min as a heartbeat (``nodeStatusReportFrequency``). The
  kubelet wakes it at once when a condition changes (disk pressure).
- **Spec** (what ``kubectl cordon``, ``taint`` and ``label`` write) is the stored object's: its labels,
  taints and ``spec.unschedulable`` become the runtime node's, which admission reads, and the
  kubelet is woken to admit again. As the node lifecycle controller does, the taints of the node's
  conditions (``node.kubernetes.io/disk-pressure``, ``memory-pressure``) and of
  ``spec.unschedulable`` (``node.kubernetes.io/unschedulable:NoSchedule``) are added and removed
  with them; a cordon or uncordon is a ``NodeNotSchedulable`` / ``NodeSchedulable`` event.
- **Heartbeat**: the ``coordination.k8s.io/v1`` Lease ``kube-node-lease/<node>``, held by the node
  for 40 s and renewed every 10 s (``TRIMARAN_NODE_LEASE_RENEW_INTERVAL``), as the kubelet's.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from trimaran.api.coordination import API_VERSION as COORDINATION_V1
from trimaran.api.coordination import NODE_LEASE_NAMESPACE
from trimaran.controllers.base import CONFLICT_RETRY_SECONDS, Key, Reconciler
from trimaran.controllers.conditions import now_rfc3339, set_condition
from trimaran.controllers.gc import request_delete
from trimaran.controllers.pods import is_terminating, phase
from trimaran.runtime import Node
from trimaran.runtime.node import no_execute_wait
from trimaran.store import Conflict, DiskFull, NotFound, Store

__all__ = ["NodeController", "LEASE_DURATION_SECONDS"]

log = logging.getLogger(__name__)

LEASE_DURATION_SECONDS = 40  # nodeLeaseDurationSeconds
LEASE_RENEW_SECONDS = float(os.environ.get("TRIMARAN_NODE_LEASE_RENEW_INTERVAL") or LEASE_DURATION_SECONDS / 4)
STATUS_UPDATE_SECONDS = 10.0  # nodeStatusUpdateFrequency: how often the status is computed
STATUS_REPORT_SECONDS = 300.0  # nodeStatusReportFrequency: posted at least this often


def _micro_time() -> str:
    """Now as a MicroTime (what a Lease's times are)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _without_heartbeats(status: dict) -> dict:
    return {**status, "conditions": [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                                     for c in status.get("conditions") or []]}


class NodeController(Reconciler):
    """Keeps this machine's Node object and Lease; see the module's docstring."""

    name = "node"
    kinds = ("Node",)

    def __init__(self, store: Store, node: Node, on_change: Callable[[], None],
                 host_network_reason: str | None = None) -> None:
        """``on_change`` is called when what admission reads changed (labels, taints, cordon):
        the kubelet looks at its pending pods again. ``host_network_reason``: why pods share this
        machine's network (None: each has its own), said once per start as a Node event."""
        super().__init__(store)
        self.host_network_reason = host_network_reason
        self.node = node
        self.on_change = on_change
        self.key = Key("Node", "", node.name)
        self.lease_key = Key("Lease", NODE_LEASE_NAMESPACE, node.name)
        self._registered = False
        self._own_labels = dict(node.labels)  # well-known, GPU and configured: written over the stored ones
        self._posted_at = 0.0  # monotonic time of the last status post
        try:
            # Before any admission: a node cordoned (or tainted) before a restart stays so from the start.
            stored = store.get("Node", "", node.name)
            spec = stored.get("spec") or {}
            node.apply_spec({**(stored["metadata"].get("labels") or {}), **self._own_labels},
                            spec.get("taints") or [], bool(spec.get("unschedulable")))
        except NotFound:
            pass  # registered at the first pass

    def initial_keys(self) -> Iterable[Key]:
        yield self.key
        yield self.lease_key

    def keys_for(self, event_kind: str, obj: dict) -> Iterable[Key]:
        return [self.key] if obj["metadata"]["name"] == self.node.name else []

    def changed(self) -> None:
        """A condition changed (the kubelet saw disk pressure come or go): report it now."""
        self.wake(self.key)

    def reconcile(self, key: Key) -> float | None:
        try:
            if key == self.lease_key:
                self._renew_lease()
                return LEASE_RENEW_SECONDS
            if key == self.key:
                return self._sync()
        except DiskFull as exc:  # the next pass tries again
            log.warning("node %s: %s", self.node.name, exc)
            return STATUS_UPDATE_SECONDS
        return None

    # -- the Node ------------------------------------------------------------------------------
    def _sync(self) -> float:
        if self.node.observe_memory():
            self.store.record_event(self.node.reference(), "Normal", reason := (
                "NodeHasInsufficientMemory" if self.node.memory_pressure else "NodeHasSufficientMemory"),
                f"Node {self.node.name} status is now: {reason}")
        try:
            stored = self.store.get("Node", "", self.node.name)
        except NotFound:
            stored = self._register()
        labels = stored["metadata"].get("labels") or {}
        if not self._registered:
            # The node's own labels over the stored ones, once per start (kubelet's updateDefaultLabels).
            labels = {**labels, **self._own_labels}
        spec = stored.get("spec") or {}
        was_unschedulable = self.node.unschedulable
        if self.node.apply_spec(labels, spec.get("taints") or [], bool(spec.get("unschedulable"))):
            self.on_change()
        if self.node.unschedulable != was_unschedulable:
            reason = "NodeNotSchedulable" if self.node.unschedulable else "NodeSchedulable"
            self.store.record_event(self.node.reference(), "Normal", reason,
                                    f"Node {self.node.name} status is now: {reason}")
        wanted = self.node.to_k8s(heartbeat=now_rfc3339())
        try:
            stored = self._write_spec(stored, wanted)
            if not self._registered:
                self._registered = True
                self.store.record_event(self.node.reference(), "Normal", "Starting", "Starting kubelet.")
                if self.host_network_reason:
                    self.store.record_event(
                        self.node.reference(), "Warning", "HostNetworkOnly",
                        f"Pods share this machine's network ({self.host_network_reason}): Services are loopback "
                        "addresses, containerPorts are this machine's ports and NetworkPolicy is not enforced")
            self._post_status(stored, wanted["status"])
        except Conflict:
            return CONFLICT_RETRY_SECONDS  # written meanwhile (a cordon): read it again
        except NotFound:
            return CONFLICT_RETRY_SECONDS  # deleted by hand: register again
        wait = self._evict_untolerating()
        return STATUS_UPDATE_SECONDS if wait is None else min(STATUS_UPDATE_SECONDS, max(wait, 0.1))

    def _evict_untolerating(self) -> float | None:
        """The taint manager: delete this node's running pods that do not tolerate one of its
        ``NoExecute`` taints (at once, or once their ``tolerationSeconds`` have passed), with the
        ``DisruptionTarget`` condition and event upstream gives them; their controllers make new
        ones, which admission holds back while the taint stays. Returns the seconds until the next
        pod is due, if any is."""
        taints = [t for t in self.node.current_taints() if t.get("effect") == "NoExecute"]
        if not taints:
            return None
        soonest: float | None = None
        now = time.time()
        for pod in self.store.list("Pod"):
            if pod["spec"].get("nodeName") != self.node.name or is_terminating(pod) or \
                    phase(pod) in ("Succeeded", "Failed"):
                continue
            wait = no_execute_wait(pod["spec"].get("tolerations") or [], taints, now)
            if wait is None:
                continue
            if wait > 0:
                soonest = wait if soonest is None else min(soonest, wait)
                continue
            meta = pod["metadata"]
            status = dict(pod.get("status") or {})
            if set_condition(status, "DisruptionTarget", "True", "DeletionByTaintManager",
                             "Taint manager: deleting due to NoExecute taint"):
                pod["status"] = status
                try:
                    pod = self.store.update_status(pod)
                except (Conflict, NotFound):
                    continue  # changed or gone meanwhile: the next pass sees it again
            self.store.record_event(pod, "Normal", "TaintManagerEviction",
                                    f"Marking for deletion Pod {meta['namespace']}/{meta['name']}")
            try:
                request_delete(self.store, pod)
            except (Conflict, NotFound):
                continue
        return soonest

    def _register(self) -> dict:
        wanted = self.node.to_k8s(heartbeat=now_rfc3339())
        status = wanted.pop("status")
        try:
            stored = self.store.create(wanted)
        except Conflict:  # created meanwhile
            return self.store.get("Node", "", self.node.name)
        stored["status"] = status
        stored = self.write_status(stored)
        self._posted_at = time.monotonic()
        self.store.record_event(self.node.reference(), "Normal", "NodeReady",
                                f"Node {self.node.name} status is now: NodeReady")
        return stored

    def _write_spec(self, stored: dict, wanted: dict) -> dict:
        """Store the node's labels and effective taints (the managed ones with its conditions);
        taints already stored keep their ``timeAdded``."""
        spec = dict(stored.get("spec") or {})
        before = {(t.get("key"), t.get("value"), t.get("effect")): t for t in spec.get("taints") or []}
        taints = [before.get((t.get("key"), t.get("value"), t.get("effect")), t)
                  for t in wanted["spec"].get("taints") or []]
        # A NoExecute taint's tolerationSeconds count from when it was added: stamp one that came without.
        taints = [{**t, "timeAdded": now_rfc3339()} if t.get("effect") == "NoExecute" and not t.get("timeAdded")
                  else t for t in taints]
        labels = wanted["metadata"]["labels"]
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        if spec == (stored.get("spec") or {}) and labels == stored["metadata"].get("labels"):
            return stored
        stored["spec"] = spec
        stored["metadata"]["labels"] = labels
        return self.store.update(stored)

    def _post_status(self, stored: dict, wanted: dict) -> None:
        """Post the status when it changed, or as a heartbeat once the report period passed."""
        current = stored.get("status") or {}
        due = time.monotonic() - self._posted_at >= STATUS_REPORT_SECONDS
        if not due and _without_heartbeats(current) == _without_heartbeats(wanted):
            return
        stored["status"] = wanted
        self.write_status(stored)
        self._posted_at = time.monotonic()

    # -- the Lease -----------------------------------------------------------------------------
    def _renew_lease(self) -> None:
        """Renew (or take) ``kube-node-lease/<node>``: the kubelet's heartbeat, every 10 s. It is
        owned by the Node, as the kubelet's (a Node registered again is its new owner)."""
        try:
            owners = [{"apiVersion": "v1", "kind": "Node", "name": self.node.name,
                       "uid": self.store.get("Node", "", self.node.name)["metadata"]["uid"]}]
        except NotFound:
            owners = []  # not registered yet: owned once it is
        try:
            lease = self.store.get("Lease", NODE_LEASE_NAMESPACE, self.node.name)
        except NotFound:
            self.store.ensure_namespace(NODE_LEASE_NAMESPACE)
            lease = {"apiVersion": COORDINATION_V1, "kind": "Lease",
                     "metadata": {"name": self.node.name, "namespace": NODE_LEASE_NAMESPACE}}
        spec = dict(lease.get("spec") or {})
        spec.update(holderIdentity=self.node.name, leaseDurationSeconds=LEASE_DURATION_SECONDS,
                    renewTime=_micro_time())
        lease["spec"] = spec
        if owners:
            lease["metadata"]["ownerReferences"] = owners
        try:
            if lease["metadata"].get("uid"):
                self.store.update(lease)
            else:
                self.store.create(lease)
        except (Conflict, NotFound):
            pass  # changed, created or removed meanwhile: the next pass renews it
