"""A pod's QoS class and the values its cgroups get (the kubelet's ``GetPodQOS`` and
``ResourceConfigForPod``), as the shim's spec carries them to :mod:`trimaran.runtime.cgroups`."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from trimaran.api.quantity import parse_cpu, parse_memory
from trimaran.runtime import cgroups

__all__ = ["DEFAULT_POD_PIDS_LIMIT", "container_resources", "pod_cgroup", "pod_pids_limit_from_env", "qos_class"]

# The kubelet's podPidsLimit is unlimited unless configured; distributions set one so that a fork
# bomb stays in its pod (OpenShift's default is 4096, which is ours).
DEFAULT_POD_PIDS_LIMIT = 4096


def pod_pids_limit_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """``TRIMARAN_POD_PIDS_LIMIT`` (the kubelet's ``podPidsLimit``): a number, or -1 for none;
    :data:`DEFAULT_POD_PIDS_LIMIT` when unset. Raises ``ValueError`` for anything else."""
    text = (os.environ if env is None else env).get("TRIMARAN_POD_PIDS_LIMIT", "").strip()
    if not text:
        return DEFAULT_POD_PIDS_LIMIT
    value = int(text)
    if value == -1:
        return None
    if value < 1:
        raise ValueError(f"TRIMARAN_POD_PIDS_LIMIT must be a positive number or -1, not {text}")
    return value


def _resources(container: Mapping, kind: str) -> Mapping:
    return (container.get("resources") or {}).get(kind) or {}


def _milli(value: object) -> int:
    return math.ceil(parse_cpu(value) * 1000 - 1e-9)  # type: ignore[arg-type]


def qos_class(pod: Mapping) -> str:
    """``Guaranteed`` (every container limits cpu and memory, requesting what it limits),
    ``BestEffort`` (no container requests or limits either) or ``Burstable``."""
    spec: Mapping = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    any_set = False
    guaranteed = True
    for container in containers:
        requests, limits = _resources(container, "requests"), _resources(container, "limits")
        for name in ("cpu", "memory"):
            any_set |= name in requests or name in limits
            if name not in limits:
                guaranteed = False
                continue
            parse = _milli if name == "cpu" else parse_memory
            if name in requests and parse(requests[name]) != parse(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def container_resources(container: Mapping) -> dict:
    """The container's cgroup values: shares from its cpu request (its limit when it requests
    none), the quota from its cpu limit, its memory limit."""
    requests, limits = _resources(container, "requests"), _resources(container, "limits")
    request = requests.get("cpu", limits.get("cpu"))
    return {
        "cpu_shares": cgroups.cpu_shares(_milli(request) if request is not None else None),
        "cpu_quota": cgroups.cpu_quota(_milli(limits["cpu"])) if limits.get("cpu") is not None else None,
        "memory": parse_memory(limits["memory"]) if limits.get("memory") is not None else None,
    }


def pod_cgroup(pod: Mapping, hierarchy: cgroups.Hierarchy, pids_limit: int | None) -> dict:
    """The shim's ``cgroups`` entry: the hierarchy, the pod's cgroup and its values (the sum over
    containers, or the largest init container's where that is more; a limit only where every
    container has one, as the kubelet sets them)."""
    spec: Mapping = pod.get("spec") or {}
    meta: Mapping = pod.get("metadata") or {}
    app, init = list(spec.get("containers") or []), list(spec.get("initContainers") or [])

    def total(kind: str, name: str, parse: object) -> int | None:
        values = [_resources(c, kind).get(name) for c in app + init]
        if kind == "limits" and any(v is None for v in values):
            return None
        amounts = [parse(v) if v is not None else 0 for v in values]  # type: ignore[operator]
        return max(sum(amounts[:len(app)]), max(amounts[len(app):], default=0))

    def request(c: Mapping) -> object:
        return _resources(c, "requests").get("cpu", _resources(c, "limits").get("cpu"))

    requested = [_milli(r) if (r := request(c)) is not None else 0 for c in app + init]
    cpu_limit = total("limits", "cpu", _milli)
    return {
        "hierarchy": hierarchy.to_json(),
        "pod": cgroups.pod_rel(qos_class(pod), str(meta.get("uid"))),
        "limits": {
            "cpu_shares": cgroups.cpu_shares(max(sum(requested[:len(app)]), max(requested[len(app):], default=0))),
            "cpu_quota": cgroups.cpu_quota(cpu_limit) if cpu_limit else None,
            "memory": total("limits", "memory", parse_memory) or None,
            "pids": pids_limit,
        },
    }
