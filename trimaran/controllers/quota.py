"""ResourceQuota, LimitRange and PriorityClass: their admission and the quota controller.

Admission runs where objects are created: the store calls `Admission.admit` inside the write
transaction of every create (``Store.admit_create``), so the API's creates and the pods the
controllers make from their templates meet the same plugins, in kube-apiserver's order: LimitRanger's
defaults, Priority, LimitRanger's bounds, then ResourceQuota. A quota is checked against the use
counted from the stored objects under the store's write lock, so two creates racing for the last of
a quota cannot both pass (upstream serialises them per namespace and writes ``status.used`` first).
A refusal is `AdmissionRefused`: a 403 on the API, a ``FailedCreate`` event on a controller's object,
which retries with back-off (``controllers/base.py``), as the Job and ReplicaSet controllers do.

`ResourceQuotaReconciler` keeps each quota's ``status.hard`` and ``status.used`` current as the
objects it counts come and go (pods that ended count nothing), and makes the built-in PriorityClasses.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable

from trimaran.api import kinds
from trimaran.api.kinds import KindInfo, UnknownKindError
from trimaran.api.quota import (
    AdmissionRefused,
    Usage,
    apply_limit_ranges,
    check_quota,
    object_usage,
    quota_matches,
    quota_status,
)
from trimaran.api.scheduling import PREEMPT_LOWER_PRIORITY, SYSTEM_CLASSES, system_class
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.store import AlreadyExists, NotFound, Store
from trimaran.store.base import WatchEvent

__all__ = ["Admission", "ResourceQuotaReconciler", "admit_update", "ensure_system_priority_classes"]

_LEDGERS_KEPT = 1024
# Quota keys of the core kinds' own counts (besides ``count/<plural>``).
_LEGACY_KEYS = {"services": "Service", "configmaps": "ConfigMap", "secrets": "Secret",
                "replicationcontrollers": "ReplicationController", "resourcequotas": "ResourceQuota",
                "persistentvolumeclaims": "PersistentVolumeClaim", "requests.storage": "PersistentVolumeClaim"}


def _kind_counted(key: str) -> KindInfo | None:
    """The kind whose objects a quota's key counts: ``count/deployments.apps`` Deployments,
    ``requests.cpu`` Pods, ``requests.storage`` PersistentVolumeClaims."""
    if key.startswith("count/"):
        plural, _, group = key[len("count/"):].partition(".")
        return next((i for i in kinds.all_kinds() if i.plural == plural and i.group == group and i.namespaced), None)
    kind = _LEGACY_KEYS.get(key)
    if kind is None and (key.startswith("services.") or ".storageclass.storage.k8s.io/" in key):
        kind = "Service" if key.startswith("services.") else "PersistentVolumeClaim"
    return kinds.for_object("v1", kind or "Pod")


def _pod_resource(key: str) -> bool:
    """Whether a quota's key is one the pod evaluator matches on (upstream's MatchingResources)."""
    return key in ("pods", "count/pods", "cpu", "memory", "ephemeral-storage") or \
        key.startswith(("requests.", "limits.", "hugepages-")) and key != "requests.storage"


def admit_update(store: Store, obj: dict, stored: dict) -> None:
    """The Priority plugin on an update (the API's; controllers' updates change neither): a pod's
    priority and preemption policy, set when it was created, stay when a client's update leaves
    them out (a PUT of a spec written by hand); a PriorityClass may become the globalDefault only
    while no other is. Raises `AdmissionRefused`."""
    if obj.get("kind") == "Pod":
        spec, before = obj.setdefault("spec", {}), stored.get("spec") or {}
        for field in ("priority", "preemptionPolicy"):
            if spec.get(field) is None and before.get(field) is not None:
                spec[field] = before[field]
    elif obj.get("kind") == "PriorityClass":
        _one_default(store, obj)


def _global_default(store: Store) -> dict | None:
    """The globalDefault class; of several, the lowest, as upstream picks."""
    defaults = [c for c in store.list("PriorityClass", shared=True) if c.get("globalDefault")]
    return min(defaults, key=lambda c: c.get("value", 0)) if defaults else None


def _one_default(store: Store, priority_class: dict) -> None:
    if not priority_class.get("globalDefault"):
        return
    existing = _global_default(store)
    if existing is not None and existing["metadata"]["name"] != priority_class["metadata"]["name"]:
        raise AdmissionRefused("priorityclasses", "scheduling.k8s.io", priority_class["metadata"]["name"],
                               f"PriorityClass {existing['metadata']['name']} is already marked as default. "
                               "Only one default can exist")


def ensure_system_priority_classes(store: Store) -> None:
    """Make kube-apiserver's built-in PriorityClasses, as it does at start."""
    for name in SYSTEM_CLASSES:
        try:
            store.create(system_class(name))
        except AlreadyExists:
            pass


class Admission:
    """The LimitRanger, Priority and ResourceQuota admission plugins, over the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()  # admission (under the store's write lock) and the controller share the ledgers
        self._ledgers: dict[tuple[str, str, str], _Ledger] = {}

    def admit(self, obj: dict) -> dict:
        """``Store.admit_create``: ``obj`` defaulted, or `AdmissionRefused`."""
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        if kind == "PriorityClass":
            _one_default(self.store, obj)
            return obj
        if not namespace:
            return obj
        try:
            info = kinds.for_object(str(obj.get("apiVersion")), str(kind))
        except UnknownKindError:
            return obj
        if kind in ("Pod", "PersistentVolumeClaim") and not info.group:
            # Defaulted here, the caller's dict left as it made it: a copy of what is written to.
            limit_ranges = self.store.list("LimitRange", namespace, shared=True)
            obj = copy.deepcopy(obj) if limit_ranges else {**obj, "spec": dict(obj.get("spec") or {})}
            if kind == "Pod":
                self._priority(obj)
            refusal = apply_limit_ranges(obj, limit_ranges)
            if refusal:
                raise AdmissionRefused(info.plural, info.group, meta.get("name", ""), refusal)
        self._quota(obj, info)
        return obj

    # -- Priority ------------------------------------------------------------------------------

    def _priority(self, pod: dict) -> None:
        """The Priority plugin: ``spec.priority`` and ``spec.preemptionPolicy`` from the pod's class
        (or the globalDefault one). Refused before a generated name is known, so a refusal names
        the ``generateName`` prefix, as upstream's."""
        meta, spec = pod["metadata"], pod["spec"]
        shown = meta.get("generateName") or meta.get("name", "")
        name = spec.get("priorityClassName")
        if name:
            try:
                found: dict | None = self.store.get("PriorityClass", "", name)
            except NotFound:
                raise AdmissionRefused("pods", "", shown, f"no PriorityClass with name {name} was found") from None
        else:
            found = _global_default(self.store)
            if found is not None:
                spec["priorityClassName"] = found["metadata"]["name"]
        priority = int(found.get("value", 0)) if found else 0
        given = spec.get("priority")
        if given is not None and given != priority:
            raise AdmissionRefused("pods", "", shown, f"the integer value of priority ({given}) must not be provided "
                                   f"in pod spec; priority admission controller computed {priority} from the given "
                                   "PriorityClass name")
        spec["priority"] = priority
        policy = (found or {}).get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
        if found is not None and spec.get("preemptionPolicy") not in (None, policy):
            raise AdmissionRefused("pods", "", shown, f"the string value of PreemptionPolicy "
                                   f"({spec['preemptionPolicy']}) must not be provided in pod spec; priority admission "
                                   f"controller computed {policy} from the given PriorityClass name")
        spec.setdefault("preemptionPolicy", policy)

    # -- ResourceQuota -------------------------------------------------------------------------

    def _quota(self, obj: dict, info: KindInfo) -> None:
        namespace = obj["metadata"]["namespace"]
        quotas = self.store.list("ResourceQuota", namespace, shared=True)
        if not quotas:
            return
        delta = object_usage(obj, info.plural, info.group)
        for quota in quotas:
            hard = (quota.get("spec") or {}).get("hard") or {}
            pod = info.kind == "Pod" and not info.group
            if not any(key in delta.amounts or pod and _pod_resource(key) for key in hard) or \
                    not quota_matches(quota, obj):
                continue
            used = self.usage(quota, [info])
            refusal = check_quota(quota, obj, delta, used)
            if refusal:
                raise AdmissionRefused(info.plural, info.group, obj["metadata"].get("name", ""), refusal)

    def usage(self, quota: dict, counted: Iterable[KindInfo] | None = None) -> Usage:
        """What the stored objects of the quota's namespace use of it (of the kinds ``counted``;
        by default every kind its keys name)."""
        namespace = quota["metadata"]["namespace"]
        if counted is None:
            hard = (quota.get("spec") or {}).get("hard") or {}
            counted = {i.kind: i for i in filter(None, map(_kind_counted, hard))}.values()
        used = Usage()
        for info in counted:
            objects = self.store.list(info.kind, namespace, shared=True)
            with self._lock:
                used.merge(self._ledger(quota, info).count(quota, info, objects))
        return used

    def _ledger(self, quota: dict, info: KindInfo) -> _Ledger:
        # By the quota's spec, not its resourceVersion: the controller's status writes change that.
        key = (quota["metadata"].get("uid", ""), json.dumps(quota.get("spec"), sort_keys=True), info.kind)
        ledger = self._ledgers.get(key)
        if ledger is None:
            if len(self._ledgers) >= _LEDGERS_KEPT:
                self._ledgers.clear()
            ledger = self._ledgers[key] = _Ledger()
        return ledger


class _Ledger:
    """One quota's use by the objects of one kind, kept from one count to the next: only objects
    whose resourceVersion changed are counted again (a create in a namespace of thousands of pods
    would otherwise add up every pod's requests, inside the store's write lock)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, Usage | None]] = {}
        self.total = Usage()

    def count(self, quota: dict, info: KindInfo, objects: list[dict]) -> Usage:
        current: dict[str, tuple[str, Usage | None]] = {}
        for obj in objects:
            name, version = obj["metadata"]["name"], obj["metadata"].get("resourceVersion", "")
            known = self.seen.get(name)
            if known is not None and known[0] == version:
                current[name] = known
                continue
            usage = object_usage(obj, info.plural, info.group) if quota_matches(quota, obj) else None
            if known is not None and known[1] is not None:
                self.total.merge(known[1], -1)
            if usage is not None:
                self.total.merge(usage)
            current[name] = (version, usage)
        for name, (_, usage) in self.seen.items():
            if name not in current and usage is not None:
                self.total.merge(usage, -1)
        self.seen = current
        return self.total


class ResourceQuotaReconciler(Reconciler):
    """The quota controller: each ResourceQuota's status from what its namespace holds, again
    whenever an object of its namespace changes. Installs the admission plugins on the store."""

    name = "resourcequota"
    kinds = ("ResourceQuota",)

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.admission = Admission(store)
        store.admit_create = self.admission.admit
        ensure_system_priority_classes(store)
        # Any namespaced kind may be counted (count/<plural>.<group>).
        self.watches = tuple(dict.fromkeys(i.kind for i in kinds.all_kinds()
                                           if i.namespaced and i.kind != "ResourceQuota"))
        self._lock = threading.Lock()
        self._quotas: dict[str, set[str]] = {}  # namespace -> names of its quotas

    def initial_keys(self) -> Iterable[Key]:
        found: dict[str, set[str]] = {}
        for quota in self.store.list("ResourceQuota", shared=True):
            found.setdefault(quota["metadata"]["namespace"], set()).add(quota["metadata"]["name"])
        with self._lock:  # merged, not replaced: an event handled since the list may have added one
            for namespace, names in found.items():
                self._quotas.setdefault(namespace, set()).update(names)
        return [Key("ResourceQuota", ns, name) for ns, names in found.items() for name in names]

    def keys_for_event(self, event: WatchEvent) -> Iterable[Key]:
        obj = event.object
        namespace = obj["metadata"].get("namespace") or ""
        with self._lock:
            if obj["kind"] == "ResourceQuota":
                names = self._quotas.setdefault(namespace, set())
                (names.discard if event.type == "DELETED" else names.add)(obj["metadata"]["name"])
                return [key_of(obj)]
            return [Key("ResourceQuota", namespace, name) for name in self._quotas.get(namespace, ())]

    def reconcile(self, key: Key) -> float | None:
        try:
            quota = self.store.get("ResourceQuota", key.namespace, key.name)
        except NotFound:
            with self._lock:
                self._quotas.get(key.namespace, set()).discard(key.name)
            return None
        status = quota_status(quota, self.admission.usage(quota))
        before = quota.get("status") or {}
        return self.settle_status(quota, {**before, **status}, before, None)
