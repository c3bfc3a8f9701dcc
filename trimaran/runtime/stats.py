"""The node's and its containers' resource counters, as the kubelet's ``/metrics/resource`` gives
them to metrics-server: cumulative CPU time and the memory working set, read at one moment.

Rates (``kubectl top``'s cores) are the difference of two readings over their interval, which the
reader works out (`trimaran.server.kube.metrics`, as metrics-server does). The node's counters
come from ``/proc`` (all CPUs' busy time, memory in use less inactive file pages), the
containers' from their cgroups (:func:`trimaran.runtime.cgroups.usage`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from trimaran.runtime import cgroups

__all__ = ["ContainerUsage", "NodeUsage", "PodUsage", "collect", "node_counters"]


@dataclass(frozen=True)
class ContainerUsage:
    """``cpu_ns``: CPU time used since the container started; ``memory_working_set`` in bytes;
    ``attempt``: the run the counters belong to (a restart starts them again)."""

    name: str
    attempt: int
    cpu_ns: int
    memory_working_set: int


@dataclass(frozen=True)
class PodUsage:
    uid: str
    containers: dict[str, ContainerUsage]


@dataclass(frozen=True)
class NodeUsage:
    """One reading: ``timestamp`` (seconds since the epoch), the whole machine's ``cpu_ns`` and
    ``memory_working_set``, and each pod that has a running container here, by uid."""

    timestamp: float
    cpu_ns: int
    memory_working_set: int
    pods: dict[str, PodUsage] = field(default_factory=dict)


def node_counters() -> tuple[int, int]:
    """``(cpu nanoseconds busy, memory working set bytes)`` of the whole machine: the time every
    CPU spent out of idle and iowait (``/proc/stat``), and memory in use less inactive file
    pages (``/proc/meminfo``), as cAdvisor counts the root cgroup's."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is counted in user already)
    busy = sum(fields[:3]) + sum(fields[5:8])
    meminfo: dict[str, int] = {}
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            meminfo[key] = int(value.split()[0]) * 1024
    used = meminfo["MemTotal"] - meminfo["MemFree"] - meminfo.get("Inactive(file)", 0)
    return busy * 1_000_000_000 // os.sysconf("SC_CLK_TCK"), max(0, used)


def collect(hierarchy: cgroups.Hierarchy | None) -> NodeUsage:
    """Read the node's counters and those of every container with a cgroup under ``hierarchy``."""
    cpu_ns, memory = node_counters()
    pods: dict[str, PodUsage] = {}
    if hierarchy is not None:
        for uid, containers in cgroups.usage(hierarchy).items():
            pods[uid] = PodUsage(uid, {name: ContainerUsage(name, *counters) for name, counters in containers.items()})
    return NodeUsage(time.time(), cpu_ns, memory, pods)
