"""The local node: capacity, labels, taints, scheduling constraints and gang admission.

Ephemeral storage is the filesystem of ``$TRIMARAN_HOME`` (pods' writable layers, logs and
emptyDirs all live there): its size is the node's ``ephemeral-storage`` capacity, allocatable
is that less the hard eviction threshold, and pods' ``ephemeral-storage`` requests count
against it at admission. The kubelet's ``--eviction-hard`` signals ``nodefs.available`` (and
``imagefs.available``, the same filesystem here) come from ``TRIMARAN_EVICTION_HARD``
(``nodefs.available<5%`` by default, as k3s sets it; a quantity such as ``<64Mi`` too, several
joined by commas): while one is crossed the node has ``DiskPressure`` and the taint
``node.kubernetes.io/disk-pressure:NoSchedule``, so new pods wait.

Everything works on plain Kubernetes dicts (a Pod's ``metadata`` / ``spec``), so this module
does not depend on the api package. Reason strings follow the wording of the Kubernetes
scheduler (``0/1 nodes are available: …``) so that they read the same in ``describe``.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import trimaran
from trimaran.api.quantity import format_cpu, format_memory, parse_cpu, parse_memory, parse_quantity
from trimaran.runtime.gpus import (
    GPUAllocator,
    GPUDevice,
    discover_gpus,
    gpu_env,
    gpu_labels,
)

__all__ = [
    "Resources",
    "Allocation",
    "Admission",
    "Node",
    "container_requests",
    "pod_requests",
    "host_cpu_count",
    "host_memory_bytes",
    "parse_labels",
    "parse_taints",
    "DiskThreshold",
    "parse_eviction_hard",
    "DISK_PRESSURE_TAINT",
    "MEMORY_PRESSURE_TAINT",
    "UNSCHEDULABLE_TAINT",
    "MANAGED_TAINTS",
    "StorageUsage",
    "ephemeral_storage_violation",
    "disk_pressure_message",
    "node_info",
    "no_execute_wait",
]

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only steers, never blocks
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Resources the node tracks natively; any other name with a domain ("vendor.com/x") is an
# extended resource, counted in whole units.
_UNTRACKED = ("storage", "pods")
DISK_PRESSURE_TAINT = "node.kubernetes.io/disk-pressure"
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# The taints the node's own conditions and spec.unschedulable stand for (the node lifecycle
# controller's): added and removed with them, never by hand.
MANAGED_TAINTS = (DISK_PRESSURE_TAINT, MEMORY_PRESSURE_TAINT, UNSCHEDULABLE_TAINT)
# The kubelet's default hard eviction threshold for memory (memory.available<100Mi).
MEMORY_AVAILABLE_FLOOR = 100 * 1024 * 1024
# k3s's (its kubelet's --eviction-hard), not the upstream kubelet's 10%: a workstation's disk holds
# far more than the node's own files, and 10% of a large shared disk is many gigabytes.
DEFAULT_EVICTION_HARD = "imagefs.available<5%,nodefs.available<5%"
# evictionPressureTransitionPeriod: how long a pressure condition stays after its signal clears,
# so that the node does not flap. The kubelet's is 5 min; a workstation's user who just freed
# space should not wait that long.
DEFAULT_PRESSURE_TRANSITION_S = 30.0


@dataclass
class Resources:
    """An amount of node resources.

    ``gpus`` holds extended resources by name: ``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``
    and any other vendor resource a pod asks for (which this node then lacks).
    """

    cpu: float = 0.0
    memory: int = 0
    gpus: dict[str, int] = field(default_factory=dict)
    ephemeral_storage: int = 0

    def __add__(self, other: Resources) -> Resources:
        gpus = dict(self.gpus)
        for name, count in other.gpus.items():
            gpus[name] = gpus.get(name, 0) + count
        return Resources(_round_cpu(self.cpu + other.cpu), self.memory + other.memory, gpus,
                         self.ephemeral_storage + other.ephemeral_storage)

    def __sub__(self, other: Resources) -> Resources:
        gpus = dict(self.gpus)
        for name, count in other.gpus.items():
            gpus[name] = gpus.get(name, 0) - count
        return Resources(_round_cpu(self.cpu - other.cpu), self.memory - other.memory, gpus,
                         self.ephemeral_storage - other.ephemeral_storage)

    def max(self, other: Resources) -> Resources:
        """Element-wise maximum (how init containers combine with the app containers)."""
        gpus = dict(self.gpus)
        for name, count in other.gpus.items():
            gpus[name] = max(gpus.get(name, 0), count)
        return Resources(max(self.cpu, other.cpu), max(self.memory, other.memory), gpus,
                         max(self.ephemeral_storage, other.ephemeral_storage))

    def to_quantities(self) -> dict[str, str]:
        """As a Kubernetes resource list (``{"cpu": "500m", "memory": "4Gi", …}``)."""
        out = {"cpu": format_cpu(self.cpu), "memory": format_memory(self.memory)}
        if self.ephemeral_storage:
            out["ephemeral-storage"] = format_memory(self.ephemeral_storage)
        out.update({name: str(count) for name, count in sorted(self.gpus.items())})
        return out


def _round_cpu(cores: float) -> float:
    # Millicores are the unit of CPU accounting; rounding keeps 0.1 + 0.2 from becoming
    # 0.30000000000000004 and failing a comparison with 0.3.
    return round(cores * 1000) / 1000


HostPort = tuple[str, str, int]  # (protocol, host IP, port); IP "0.0.0.0" is every address


def pod_host_ports(pod_spec: Mapping[str, object]) -> frozenset[HostPort]:
    """The host ports the pod's containers ask for, as kube-scheduler's NodePorts filter reads them."""
    found = set()
    for container in pod_spec.get("containers") or []:  # type: ignore[union-attr]
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.add((str(port.get("protocol") or "TCP").upper(), str(port.get("hostIP") or "0.0.0.0"),
                           int(port["hostPort"])))
    return frozenset(found)


def _ports_conflict(a: HostPort, b: HostPort) -> bool:
    """kube-scheduler's rule: one protocol and port, and addresses that overlap (0.0.0.0 overlaps any)."""
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or "0.0.0.0" in (a[1], b[1]))


@dataclass(frozen=True)
class Allocation:
    """What one admitted pod holds on the node."""

    pod_uid: str
    group_key: str
    requests: Resources
    gpus: tuple[GPUDevice, ...] = ()
    host_ports: frozenset[HostPort] = frozenset()

    @property
    def gpu_ids(self) -> list[str]:
        """Device ids to persist so that ``Node.restore`` can rebuild this allocation."""
        return [d.id for d in self.gpus]

    @property
    def env(self) -> dict[str, str]:
        """Environment giving the pod's processes exactly their GPUs (none: ``CUDA_VISIBLE_DEVICES=""``)."""
        return gpu_env(list(self.gpus))


@dataclass(frozen=True)
class Admission:
    """A gang admitted as a whole: one allocation per pod uid."""

    group_key: str
    allocations: dict[str, Allocation]

    def env(self, pod_uid: str) -> dict[str, str]:
        """The GPU environment for one of the admitted pods."""
        return self.allocations[pod_uid].env


def host_cpu_count() -> int:
    """Cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def host_memory_bytes() -> int:
    """``MemTotal`` from /proc/meminfo."""
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("MemTotal missing from /proc/meminfo")


def _resource_list(values: Mapping[str, object] | None) -> Resources:
    out = Resources()
    for name, value in (values or {}).items():
        if name == "cpu":
            out.cpu = parse_cpu(value)  # type: ignore[arg-type]
        elif name == "memory":
            out.memory = parse_memory(value)  # type: ignore[arg-type]
        elif name == "ephemeral-storage":
            out.ephemeral_storage = parse_memory(value)  # type: ignore[arg-type]
        elif name in _UNTRACKED or name.startswith("hugepages-"):
            continue
        else:
            out.gpus[name] = int(parse_quantity(value))  # type: ignore[arg-type]
    return out


def container_requests(container: Mapping[str, object]) -> Resources:
    """A container's requests; a resource with only a limit requests that limit (as Kubernetes
    defaults it)."""
    resources = container.get("resources") or {}
    assert isinstance(resources, Mapping)
    requests = _resource_list(resources.get("requests"))
    limits = _resource_list(resources.get("limits"))
    declared = set((resources.get("requests") or {}).keys())
    return Resources(
        cpu=requests.cpu if "cpu" in declared else limits.cpu,
        memory=requests.memory if "memory" in declared else limits.memory,
        gpus={**limits.gpus, **requests.gpus},
        ephemeral_storage=requests.ephemeral_storage if "ephemeral-storage" in declared else limits.ephemeral_storage,
    )


def pod_requests(pod: Mapping[str, object]) -> Resources:
    """The pod's effective request: the sum over containers, at least the largest init
    container (init containers run one at a time, before the others)."""
    spec = pod.get("spec") or {}
    assert isinstance(spec, Mapping)
    total = Resources()
    for container in spec.get("containers") or []:
        total = total + container_requests(container)
    for container in spec.get("initContainers") or []:
        total = total.max(container_requests(container))
    return total


def parse_labels(text: str) -> dict[str, str]:
    """``"k=v,k2=v2"`` → labels."""
    labels: dict[str, str] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise ValueError(f"node label {entry!r} is not KEY=VALUE")
        labels[key.strip()] = value.strip()
    return labels


def parse_taints(text: str) -> list[dict[str, str]]:
    """``"key=value:NoSchedule,key2:NoExecute"`` (kubectl taint's syntax) → taints."""
    taints: list[dict[str, str]] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        key_value, sep, effect = entry.rpartition(":")
        if not sep or effect not in _TAINT_EFFECTS:
            raise ValueError(
                f"node taint {entry!r} is not KEY[=VALUE]:EFFECT with EFFECT one of "
                f"{', '.join(_TAINT_EFFECTS)}"
            )
        key, _, value = key_value.partition("=")
        if not key:
            raise ValueError(f"node taint {entry!r} has no key")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    return taints


def _tolerates(toleration: Mapping[str, object], taint: Mapping[str, str]) -> bool:
    # Mirrors k8s.io/api/core/v1 Toleration.ToleratesTaint.
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def no_execute_wait(tolerations: list[Mapping[str, object]], taints: list[Mapping[str, str]], now: float
                    ) -> float | None:
    """Seconds until a running pod with ``tolerations`` must leave a node with ``taints``, as the
    taint manager counts: only ``NoExecute`` taints matter; one the pod does not tolerate means
    now (0); else the smallest ``tolerationSeconds`` of the tolerations used, counted from the
    newest such taint's ``timeAdded`` (``now`` when it has none); None when none limits it."""
    taints = [t for t in taints if t.get("effect") == "NoExecute"]
    used: list[Mapping[str, object]] = []
    for taint in taints:
        matching = [t for t in tolerations if _tolerates(t, taint)]
        if not matching:
            return 0.0
        used += matching
    limits = [float(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]  # type: ignore[arg-type]
    if not limits:
        return None
    added = [_epoch(t["timeAdded"]) for t in taints if t.get("timeAdded")]
    since = max(added) if added else now
    return max(0.0, min(limits) - (now - since))


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _match_expression(expression: Mapping[str, object], value: str | None) -> bool:
    operator = expression.get("operator")
    values = [str(v) for v in (expression.get("values") or [])]  # type: ignore[union-attr]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


@dataclass(frozen=True)
class DiskThreshold:
    """One hard eviction threshold on the home's filesystem: ``nodefs.available<10%`` is
    ``DiskThreshold("nodefs.available", percent=10)``, ``nodefs.available<64Mi`` ``bytes=…``."""

    signal: str
    percent: float | None = None
    bytes: int | None = None

    def floor(self, total: int) -> int:
        """The free bytes below which the threshold is crossed, on a filesystem of ``total`` bytes."""
        return int(total * self.percent / 100) if self.percent is not None else int(self.bytes or 0)

    def __str__(self) -> str:
        value = f"{self.percent:g}%" if self.percent is not None else format_memory(self.bytes or 0)
        return f"{self.signal}<{value}"


def parse_eviction_hard(text: str) -> list[DiskThreshold]:
    """The kubelet's ``--eviction-hard`` syntax (``nodefs.available<10%,imagefs.available<1Gi``)
    for the signals of the home's filesystem. Raises ``ValueError`` for another signal (this node
    watches no other) or a value that is not a percentage or a quantity."""
    thresholds = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        signal, sep, value = entry.partition("<")
        if not sep or signal.strip() not in ("nodefs.available", "imagefs.available"):
            raise ValueError(f"eviction threshold {entry!r} is not nodefs.available<VALUE or "
                             f"imagefs.available<VALUE (the signals of $TRIMARAN_HOME's filesystem)")
        value = value.strip()
        if value.endswith("%"):
            percent = float(value[:-1])
            if not 0 <= percent < 100:
                raise ValueError(f"eviction threshold {entry!r}: a percentage must be in [0, 100)")
            thresholds.append(DiskThreshold(signal.strip(), percent=percent))
        else:
            thresholds.append(DiskThreshold(signal.strip(), bytes=parse_memory(value)))
    return thresholds


def _disk(path: Path) -> tuple[int, int]:
    """``(available, total)`` bytes of the filesystem holding ``path``, as an unprivileged writer sees it."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


@dataclass(frozen=True)
class StorageUsage:
    """What a pod holds on the home's filesystem, in bytes: per container its writable layers and
    logs, per disk-backed emptyDir volume its files."""

    containers: dict[str, int] = field(default_factory=dict)
    volumes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.containers.values()) + sum(self.volumes.values())


def _limit(container: Mapping, name: str) -> object | None:
    return ((container.get("resources") or {}).get("limits") or {}).get(name)  # type: ignore[union-attr]


def ephemeral_storage_violation(pod: Mapping[str, object], usage: StorageUsage) -> str | None:
    """The kubelet's eviction message when the pod uses more local storage than it may, checked in
    the kubelet's order: an emptyDir over its ``sizeLimit``, the pod over the sum of its
    containers' ``limits.ephemeral-storage``, a container over its own; else None."""
    spec = pod.get("spec") or {}
    assert isinstance(spec, Mapping)
    for volume in spec.get("volumes") or []:
        empty = volume.get("emptyDir")
        if empty is None or (empty or {}).get("medium") == "Memory" or not (empty or {}).get("sizeLimit"):
            continue  # a memory emptyDir is a tmpfs of its sizeLimit: the kernel holds it to it
        limit = empty["sizeLimit"]
        if usage.volumes.get(volume["name"], 0) > parse_memory(limit):
            return f'Usage of EmptyDir volume "{volume["name"]}" exceeds the limit "{limit}". '
    containers = list(spec.get("containers") or [])
    limited = [c for c in containers if _limit(c, "ephemeral-storage") is not None]
    if limited:
        total = sum(parse_memory(_limit(c, "ephemeral-storage")) for c in limited)  # type: ignore[arg-type]
        if usage.total > total:
            return f"Pod ephemeral local storage usage exceeds the total limit of containers {format_memory(total)}. "
    for container in limited:
        limit = _limit(container, "ephemeral-storage")
        if usage.containers.get(container["name"], 0) > parse_memory(limit):  # type: ignore[arg-type]
            return f'Container {container["name"]} exceeded its local ephemeral storage limit "{limit}". '
    return None


def disk_pressure_message(pod: Mapping[str, object], usage: StorageUsage, threshold: str, available: str) -> str:
    """The kubelet's eviction message for a pod evicted because the node is low on disk: the
    threshold, and each container that uses more than it requested."""
    spec = pod.get("spec") or {}
    assert isinstance(spec, Mapping)
    message = (f"The node was low on resource: ephemeral-storage. Threshold quantity: {threshold}, "
               f"available: {available}. ")
    for container in spec.get("containers") or []:
        used = usage.containers.get(container["name"], 0)
        requested = container_requests(container).ephemeral_storage
        if used > requested:
            message += (f"Container {container['name']} was using {format_memory(used)}, which exceeds its "
                        f"request of {format_memory(requested)}. ")
    return message


DEFAULT_MAX_PODS = 110  # the kubelet's --max-pods default


class Node:
    """This machine as a Kubernetes node, and the book of what pods hold on it."""

    def __init__(
        self,
        name: str,
        *,
        cpu: float,
        memory: int,
        gpus: list[GPUDevice] | None = None,
        labels: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        max_pods: int = DEFAULT_MAX_PODS,
        storage: Path | None = None,
        eviction_hard: list[DiskThreshold] | None = None,
        pressure_transition_s: float = DEFAULT_PRESSURE_TRANSITION_S,
    ) -> None:
        """Extra ``labels`` are added to (and override) the well-known ones; ``max_pods`` is
        the kubelet's ``--max-pods``: pods beyond it wait, whatever they request. ``storage`` is
        the directory whose filesystem is the node's ephemeral storage (none: not tracked), with
        the hard eviction thresholds ``eviction_hard`` (k3s's ``nodefs.available<5%`` by default)."""
        self.name = name
        self.max_pods = max_pods
        self.gpu_allocator = GPUAllocator(gpus or [])
        self.storage = storage
        self.eviction_hard = parse_eviction_hard(DEFAULT_EVICTION_HARD) if eviction_hard is None else eviction_hard
        self.pressure_transition_s = pressure_transition_s
        self.storage_capacity = _disk(storage)[1] if storage is not None else 0
        reserved = max((t.floor(self.storage_capacity) for t in self.eviction_hard), default=0)
        # Allocatable, as the kubelet reports it: capacity less the hard eviction threshold.
        self.capacity = Resources(_round_cpu(cpu), memory, self.gpu_allocator.capacity(),
                                  max(0, self.storage_capacity - reserved))
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.disk_pressure = False
        self.disk_pressure_message = ""
        self._disk_transition = self.started_at
        self.memory_pressure = False
        self._memory_transition = self.started_at
        self.unschedulable = False  # spec.unschedulable of the stored Node (kubectl cordon)
        self._pressure_seen = 0.0  # monotonic time a threshold was last crossed
        self.labels: dict[str, str] = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _ARCH.get(platform.machine().lower(), platform.machine().lower()),
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": _ARCH.get(platform.machine().lower(), platform.machine().lower()),
            # This machine runs the control plane too (kubeadm's label, without its taint, as a
            # single-node cluster's).
            "node-role.kubernetes.io/control-plane": "",
            **gpu_labels(self.gpu_allocator.devices),
            **(labels or {}),
        }
        self.taints: list[dict[str, str]] = list(taints or [])
        self.internal_ip = _internal_ip()
        # The kubelet's version follows the API's (server/kube/discovery.py: v1.32), as a kubelet
        # within the supported skew.
        self.node_info = node_info(self.labels["kubernetes.io/arch"], f"v1.32.0-trimaran.{trimaran.__version__}",
                                   f"trimaran-shim://{trimaran.__version__}")
        self._allocations: dict[str, Allocation] = {}
        self._reserved_ports: frozenset[HostPort] = frozenset()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, storage: Path | None = None) -> Node:
        """The host as configured: detected capacity unless overridden by ``TRIMARAN_NODE_CPU``
        and ``TRIMARAN_NODE_MEMORY`` (quantities); GPUs from ``TRIMARAN_GPUS`` or nvidia-smi;
        ``TRIMARAN_NODE_NAME``, ``TRIMARAN_NODE_LABELS`` ("k=v,…"), ``TRIMARAN_NODE_TAINTS``
        ("key=value:NoSchedule,…"), ``TRIMARAN_NODE_MAX_PODS`` (the kubelet's 110 by default);
        ephemeral storage on ``storage``'s filesystem with ``TRIMARAN_EVICTION_HARD`` (the
        kubelet's ``--eviction-hard``; k3s's ``nodefs.available<5%``) and
        ``TRIMARAN_EVICTION_PRESSURE_TRANSITION_PERIOD`` (seconds, 30)."""
        env = os.environ if env is None else env
        cpu_text = env.get("TRIMARAN_NODE_CPU")
        memory_text = env.get("TRIMARAN_NODE_MEMORY")
        return cls(
            env.get("TRIMARAN_NODE_NAME") or socket.gethostname().lower(),
            cpu=parse_cpu(cpu_text) if cpu_text else float(host_cpu_count()),
            memory=parse_memory(memory_text) if memory_text else host_memory_bytes(),
            gpus=discover_gpus(env),
            labels=parse_labels(env.get("TRIMARAN_NODE_LABELS", "")),
            taints=parse_taints(env.get("TRIMARAN_NODE_TAINTS", "")),
            max_pods=int(env.get("TRIMARAN_NODE_MAX_PODS") or DEFAULT_MAX_PODS),
            storage=storage,
            eviction_hard=parse_eviction_hard(env.get("TRIMARAN_EVICTION_HARD") or DEFAULT_EVICTION_HARD),
            pressure_transition_s=float(env.get("TRIMARAN_EVICTION_PRESSURE_TRANSITION_PERIOD")
                                        or DEFAULT_PRESSURE_TRANSITION_S),
        )

    # -- accounting ---------------------------------------------------------------------

    def allocated(self) -> Resources:
        """The sum of what admitted pods hold."""
        with self._lock:
            return self._allocated_locked()

    def _allocated_locked(self) -> Resources:
        total = Resources()
        for allocation in self._allocations.values():
            total = total + allocation.requests
        return total

    def free(self) -> Resources:
        """Capacity not held by any admitted pod."""
        with self._lock:
            return self.capacity - self._allocated_locked()

    def allocation(self, pod_uid: str) -> Allocation | None:
        """What a pod holds, if it was admitted."""
        with self._lock:
            return self._allocations.get(pod_uid)

    def fits(self, requests: Resources) -> str | None:
        """``None`` when ``requests`` fit in the free capacity, else the shortfalls
        (``"Insufficient cpu (requested 8, free 2)"``)."""
        with self._lock:
            return self._shortfall(requests, self.capacity - self._allocated_locked())

    def _shortfall(self, requests: Resources, free: Resources) -> str | None:
        problems: list[str] = []

        def short(name: str, requested: str, available: str, over_capacity: bool, cap: str) -> None:
            detail = f"requested {requested}, free {available}"
            if over_capacity:
                # Waiting will not help: say so, or the job looks merely queued forever.
                detail += f", node capacity {cap}"
            problems.append(f"Insufficient {name} ({detail})")

        if round(requests.cpu * 1000) > round(free.cpu * 1000):
            short("cpu", format_cpu(requests.cpu), format_cpu(max(free.cpu, 0.0)),
                  requests.cpu > self.capacity.cpu, format_cpu(self.capacity.cpu))
        if requests.memory > free.memory:
            short("memory", format_memory(requests.memory), format_memory(max(free.memory, 0)),
                  requests.memory > self.capacity.memory, format_memory(self.capacity.memory))
        if self.storage is not None and requests.ephemeral_storage > free.ephemeral_storage:
            short("ephemeral-storage", format_memory(requests.ephemeral_storage),
                  format_memory(max(free.ephemeral_storage, 0)),
                  requests.ephemeral_storage > self.capacity.ephemeral_storage,
                  format_memory(self.capacity.ephemeral_storage))
        for name, count in sorted(requests.gpus.items()):
            have = free.gpus.get(name, 0)
            if count > have:
                cap = self.capacity.gpus.get(name, 0)
                short(name, str(count), str(max(have, 0)), count > cap, str(cap))
        return ", ".join(problems) or None

    # -- admission ----------------------------------------------------------------------

    def admit(self, group_key: str, pods: list[dict]) -> Admission | str:
        """Gang admission: every pod in ``pods`` fits and is allocated, or none is.

        Pods already admitted keep their allocation (admitting twice is harmless). Returns the
        ``Admission`` or a scheduler-style reason such as
        ``"0/1 nodes are available: Insufficient cpu (requested 8, free 2)"``. Ordering between
        gangs (FIFO) is the caller's.
        """
        prefix = "0/1 nodes are available: "
        for pod in pods:
            reason = self.check_constraints(pod.get("spec") or {})
            if reason:
                return prefix + reason
        with self._lock:
            existing: dict[str, Allocation] = {}
            new: list[tuple[str, Resources]] = []
            for pod in pods:
                uid = _pod_uid(pod)
                if uid in self._allocations:
                    existing[uid] = self._allocations[uid]
                else:
                    new.append((uid, pod_requests(pod)))
            if len(self._allocations) + len(new) > self.max_pods:
                # The scheduler's words; a gang larger than the node can never run: say so.
                never = f" (the gang has {len(pods)} pods, the node runs at most {self.max_pods})" \
                    if len(pods) > self.max_pods else ""
                return f"{prefix}1 Too many pods{never}"
            ports = {_pod_uid(pod): pod_host_ports(pod.get("spec") or {}) for pod in pods}
            if self._ports_taken([ports[uid] for uid, _ in new]):
                return prefix + "1 node(s) didn't have free ports for the requested pod ports."
            total = Resources()
            for _, requests in new:
                total = total + requests
            reason = self._shortfall(total, self.capacity - self._allocated_locked())
            if reason:
                return prefix + reason
            admitted = dict(existing)
            for uid, requests in new:
                # Cannot fail: the GPU counts were checked above under the same lock.
                devices = self.gpu_allocator.allocate(uid, requests.gpus)
                admitted[uid] = Allocation(uid, group_key, requests, tuple(devices), ports[uid])
                self._allocations[uid] = admitted[uid]
            return Admission(group_key, admitted)

    def preemption_victims(self, pods: list[dict], candidates: list[tuple[str, int]]) -> list[str] | None:
        """The admitted pods to remove so that the gang ``pods`` fits, chosen among ``candidates``
        (``(uid, priority)``, the lower-priority pods), as the scheduler's preemption picks them on
        one node: all removed, then as many put back ("reprieved") as still leave room, highest
        priority first. None when even removing them all is not enough."""
        with self._lock:
            new = [pod_requests(pod) for pod in pods if _pod_uid(pod) not in self._allocations]
            need = Resources()
            for requests in new:
                need = need + requests
            removable = {uid: self._allocations[uid].requests for uid, _ in candidates if uid in self._allocations}
            free = self.capacity - self._allocated_locked()
            for requests in removable.values():
                free = free + requests
            kept = len(self._allocations) - len(removable)
            if self._shortfall(need, free) or kept + len(new) > self.max_pods:
                return None
            victims = []
            for uid, _ in sorted(candidates, key=lambda c: -c[1]):
                if uid not in removable:
                    continue
                without = free - removable[uid]
                if self._shortfall(need, without) is None and kept + 1 + len(new) <= self.max_pods:
                    free, kept = without, kept + 1  # reprieved: it keeps running
                else:
                    victims.append(uid)
            return victims

    def reserve_host_ports(self, ports: Iterable[HostPort]) -> None:
        """Ports no pod's ``hostPort`` may take: the control plane's own listeners (a hostPort is a
        DNAT of every connection to it, so a pod would take the API's address from its clients)."""
        with self._lock:
            self._reserved_ports = frozenset(ports)

    def _ports_taken(self, wanted: list[frozenset[HostPort]]) -> bool:
        """Whether the new pods' host ports meet each other's, an admitted pod's or a reserved one."""
        if not any(wanted):
            return False  # most pods ask for none: no walk over every admitted pod's
        held = [*self._reserved_ports, *(p for a in self._allocations.values() for p in a.host_ports)]
        for ports in wanted:
            if any(_ports_conflict(port, other) for port in ports for other in held):
                return True
            held.extend(ports)
        return False

    def release(self, pod_uid: str) -> None:
        """Free what the pod holds (nothing happens for an unknown uid)."""
        with self._lock:
            self._allocations.pop(pod_uid, None)
            self.gpu_allocator.release(pod_uid)

    def restore(
        self, pod_uid: str, requests: Resources, gpu_ids: list[str], group_key: str = "",
        host_ports: frozenset[HostPort] = frozenset(),
    ) -> Allocation:
        """Record a pod that is already running (after a control-plane restart) without
        checking capacity: its processes exist whether or not they fit."""
        with self._lock:
            self.gpu_allocator.release(pod_uid)
            devices = self.gpu_allocator.restore(pod_uid, gpu_ids)
            allocation = Allocation(pod_uid, group_key, requests, tuple(devices), host_ports)
            self._allocations[pod_uid] = allocation
            return allocation

    # -- constraints --------------------------------------------------------------------

    def check_constraints(self, pod_spec: Mapping[str, object]) -> str | None:
        """``None`` when the pod may run here, else the scheduler's reason for this one node, in
        its words (``1 node(s) were unschedulable.``): a different ``nodeName``, a cordoned node
        (``spec.unschedulable``) the pod does not tolerate, an untolerated ``NoSchedule`` /
        ``NoExecute`` taint, or a ``nodeSelector`` / required node affinity that the node's
        labels do not satisfy. The filters run in kube-scheduler's order; the first failing
        one is the reason."""
        node_name = pod_spec.get("nodeName")
        if node_name and node_name != self.name:
            return "1 node(s) didn't match the requested node name."
        # A pod its creator bound here (spec.nodeName) bypasses the scheduler, as on a cluster: a
        # cordon and NoSchedule taints do not hold it, but NoExecute ones (the kubelet's admission)
        # and the node's pressure taints (its eviction manager's) still do.
        bound = node_name == self.name
        tolerations = pod_spec.get("tolerations") or []
        with self._lock:
            taints = list(self.taints)
            unschedulable = self.unschedulable and not bound
        cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if unschedulable and not any(_tolerates(t, cordon) for t in tolerations):  # type: ignore[union-attr]
            return "1 node(s) were unschedulable."
        for taint in taints:
            if taint.get("effect") not in _SCHEDULING_EFFECTS:
                continue
            if bound and taint.get("effect") == "NoSchedule" and taint.get("key") not in (
                    DISK_PRESSURE_TAINT, MEMORY_PRESSURE_TAINT):
                continue
            if not any(_tolerates(t, taint) for t in tolerations):  # type: ignore[union-attr]
                return f"1 node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}."
        if not self._matches_selector(pod_spec):
            return "1 node(s) didn't match Pod's node affinity/selector."
        return None

    def apply_spec(self, labels: Mapping[str, str], taints: list[dict[str, str]], unschedulable: bool) -> bool:
        """Take the stored Node's labels, taints and ``spec.unschedulable`` (what ``kubectl label``,
        ``taint`` and ``cordon`` change) as the node's, with the managed taints its conditions
        stand for in place of any stored ones; True when admission may now differ."""
        with self._lock:
            before = (self.labels, self.taints, self.unschedulable)
            self.unschedulable = unschedulable
            kept = [dict(t) for t in taints if t.get("key") not in MANAGED_TAINTS]
            self.taints = kept + self.managed_taints()
            self.labels = dict(labels)
            return before != (self.labels, self.taints, self.unschedulable)

    def current_taints(self) -> list[dict[str, str]]:
        """A copy of the node's taints now (config, stored, managed)."""
        with self._lock:
            return [dict(t) for t in self.taints]

    def reference(self) -> dict:
        """The node as its events' involved object: the kubelet's reference, whose uid is the
        node's name (``kubectl describe node`` looks its events up by both)."""
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "uid": self.name}}

    def managed_taints(self) -> list[dict[str, str]]:
        """The taints the node's conditions and ``spec.unschedulable`` stand for, as the node
        lifecycle controller adds them (``timeAdded`` is the condition's transition)."""
        found = []
        if self.unschedulable:
            found.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        if self.memory_pressure:
            found.append({"key": MEMORY_PRESSURE_TAINT, "effect": "NoSchedule", "timeAdded": self._memory_transition})
        if self.disk_pressure:
            found.append({"key": DISK_PRESSURE_TAINT, "effect": "NoSchedule", "timeAdded": self._disk_transition})
        return found

    def _matches_selector(self, pod_spec: Mapping[str, object]) -> bool:
        selector = pod_spec.get("nodeSelector") or {}
        for key, value in selector.items():  # type: ignore[union-attr]
            if self.labels.get(key) != str(value):
                return False
        affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}  # type: ignore[union-attr]
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if not required:
            return True
        return any(self._matches_term(term) for term in required.get("nodeSelectorTerms") or [])

    def _matches_term(self, term: Mapping[str, object]) -> bool:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            return False  # an empty term selects no node, as in Kubernetes
        for expression in expressions:  # type: ignore[union-attr]
            if not _match_expression(expression, self.labels.get(expression.get("key", ""))):
                return False
        for expression in fields:  # type: ignore[union-attr]
            value = self.name if expression.get("key") == "metadata.name" else None
            if not _match_expression(expression, value):
                return False
        return True

    # -- disk pressure ------------------------------------------------------------------

    def disk_signal(self) -> tuple[DiskThreshold, int, int] | None:
        """The crossed hard eviction threshold of the home's filesystem with its floor and the
        bytes available, else None."""
        if self.storage is None:
            return None
        available, total = _disk(self.storage)
        for threshold in self.eviction_hard:
            floor = threshold.floor(total)
            if available < floor:
                return threshold, floor, available
        return None

    def observe_disk(self, now: float | None = None) -> bool:
        """Look at the home's filesystem and update ``disk_pressure`` (with its taint), which stays
        for the pressure transition period after the threshold clears; True when it changed."""
        now = time.monotonic() if now is None else now
        signal = self.disk_signal()
        if signal is not None:
            threshold, floor, available = signal
            self._pressure_seen = now
            self.disk_pressure_message = (f"{threshold.signal} {format_memory(available)} < "
                                          f"{format_memory(floor)} ({threshold})")
        pressure = signal is not None or (self.disk_pressure and now - self._pressure_seen < self.pressure_transition_s)
        if pressure == self.disk_pressure:
            return False
        self.disk_pressure = pressure
        self._disk_transition = _now()
        self._set_taint(DISK_PRESSURE_TAINT, pressure, self._disk_transition)
        return True

    def observe_memory(self, available: int | None = None) -> bool:
        """Compare the host's available memory (``MemAvailable``) with the kubelet's default hard
        threshold ``memory.available<100Mi`` and update ``memory_pressure`` (with its taint); True
        when it changed."""
        available = _mem_available() if available is None else available
        pressure = available is not None and available < MEMORY_AVAILABLE_FLOOR
        if pressure == self.memory_pressure:
            return False
        self.memory_pressure = pressure
        self._memory_transition = _now()
        self._set_taint(MEMORY_PRESSURE_TAINT, pressure, self._memory_transition)
        return True

    def _set_taint(self, key: str, present: bool, since: str) -> None:
        # At once, so admission honours the condition before the stored Node says so.
        with self._lock:
            self.taints = [t for t in self.taints if t.get("key") != key]
            if present:
                self.taints.append({"key": key, "effect": "NoSchedule", "timeAdded": since})

    def to_k8s(self, heartbeat: str | None = None) -> dict:
        """The node as the kubelet registers and reports it (``v1/Node``): labels, taints,
        capacity and allocatable (ephemeral storage less the eviction threshold), the kubelet's
        conditions (``lastHeartbeatTime`` is ``heartbeat``, else the condition's transition),
        addresses, the kubelet endpoint and ``nodeInfo``."""
        capacity = self.capacity.to_quantities()
        allocatable = dict(capacity)
        if self.storage is not None:
            capacity["ephemeral-storage"] = format_memory(self.storage_capacity)
        capacity["pods"] = allocatable["pods"] = str(self.max_pods)

        def condition(kind: str, status: str, reason: str, message: str, since: str) -> dict:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": heartbeat or since, "lastTransitionTime": since}

        if self.disk_pressure:
            disk = condition("DiskPressure", "True", "KubeletHasDiskPressure",
                             f"kubelet has disk pressure: {self.disk_pressure_message}", self._disk_transition)
        else:
            disk = condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                             "kubelet has no disk pressure", self._disk_transition)
        if self.memory_pressure:
            memory = condition("MemoryPressure", "True", "KubeletHasInsufficientMemory",
                               "kubelet has insufficient memory available", self._memory_transition)
        else:
            memory = condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                               "kubelet has sufficient memory available", self._memory_transition)
        with self._lock:
            labels, taints, unschedulable = dict(self.labels), [dict(t) for t in self.taints], self.unschedulable
        spec: dict = {}
        if unschedulable:
            spec["unschedulable"] = True
        if taints:
            spec["taints"] = taints
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [
                    memory,
                    disk,
                    condition("PIDPressure", "False", "KubeletHasSufficientPID",
                              "kubelet has sufficient PID available", self.started_at),
                    condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", self.started_at),
                ],
                "addresses": [{"type": "InternalIP", "address": self.internal_ip},
                              {"type": "Hostname", "address": self.name}],
                # Where kube-apiserver would dial the kubelet; here the API serves logs and exec itself.
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                "nodeInfo": self.node_info,
            },
        }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _mem_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (the kubelet's ``memory.available`` signal)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""  # absent or root-only (product_uuid): the field stays empty, as in a container


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        key, _, value = line.partition("=")
        if key == "PRETTY_NAME":
            return value.strip().strip('"')
    return platform.system()


def _internal_ip() -> str:
    """The address of the interface the default route leaves by (what the kubelet reports as
    ``InternalIP``); loopback on a machine with no route. A UDP connect sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never answered, only routed
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def node_info(arch: str, kubelet_version: str, runtime_version: str) -> dict[str, str]:
    """The ``status.nodeInfo`` of this machine, read once: ids, kernel, OS, versions."""
    return {"machineID": _read("/etc/machine-id"), "systemUUID": _read("/sys/class/dmi/id/product_uuid"),
            "bootID": _read("/proc/sys/kernel/random/boot_id"), "kernelVersion": platform.release(),
            "osImage": _os_image(), "containerRuntimeVersion": runtime_version, "kubeletVersion": kubelet_version,
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": arch}


def _pod_uid(pod: Mapping[str, object]) -> str:
    uid = (pod.get("metadata") or {}).get("uid")  # type: ignore[union-attr]
    if not uid:
        raise ValueError("pod has no metadata.uid; the store assigns one on create")
    return str(uid)
