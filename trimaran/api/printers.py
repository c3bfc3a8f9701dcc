"""``kubectl get`` columns of the built-in kinds, which kube-apiserver computes rather than reading
a JSONPath: a pod's READY and STATUS, a Job's COMPLETIONS and DURATION, and so on.

Each tuple is what `trimaran.api.kinds` registers as the kind's printer columns (after Name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

__all__ = ["AGE", "CONFIGMAP", "EVENT", "JOB", "NAMESPACE", "NODE", "POD", "PVC", "SECRET", "PrinterColumn", "age",
           "duration", "elapsed", "job_status", "node_roles", "node_status", "pod_ready", "pod_restarts", "pod_status",
           "short_duration"]


@dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get``, as a CRD's ``additionalPrinterColumns`` declares it.

    Custom resources name a Kubernetes JSONPath (``json_path``); built-in kinds, whose columns
    kube-apiserver computes in Go, name a function of the object instead (``value``).
    """

    name: str
    type: str = "string"  # string, integer, number, boolean, date
    json_path: str = ""
    priority: int = 0  # 0: always shown; more: only with -o wide
    description: str = ""
    value: Callable[[dict], object] | None = field(default=None, compare=False)


AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def _status(obj: dict) -> dict:
    return obj.get("status") or {}


def _time(value: str) -> datetime:
    # fromisoformat: strptime was a quarter of building a Table of hundreds of objects.
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def short_duration(seconds: float) -> str:
    """Kubernetes' human duration (``duration.HumanDuration``): ``45s``, ``3m12s``, ``5h``, ``2d``."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    return short_duration((datetime.now(timezone.utc) - _time(timestamp)).total_seconds())


def pod_status(pod: dict) -> str:
    """The STATUS column: an init container's progress or failure (``Init:0/1``, ``Init:Error``,
    ``Init:CrashLoopBackOff``), else the waiting or failure reason of a container, else the phase."""
    status = _status(pod)
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    inits = status.get("initContainerStatuses") or []
    for index, cs in enumerate(inits):  # as kubectl: the first init container not done says where the pod is
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            return f"Init:{terminated.get('reason') or 'ExitCode:' + str(terminated.get('exitCode'))}"
        reason = (state.get("waiting") or {}).get("reason")
        if reason and reason != "PodInitializing":
            return f"Init:{reason}"
        return f"Init:{index}/{len(inits)}"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state:
            return state["waiting"].get("reason", "Waiting")
        if "terminated" in state and status.get("phase") != "Succeeded":
            reason = state["terminated"].get("reason")
            if reason and reason != "Completed":
                return reason
    if status.get("phase") == "Succeeded":
        return "Completed"
    return status.get("reason") or status.get("phase", "Pending")


def pod_ready(pod: dict) -> str:
    statuses = _status(pod).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for cs in statuses if cs.get('ready'))}/{total}"


def pod_restarts(pod: dict) -> int:
    status = _status(pod)
    return sum(cs.get("restartCount", 0) for cs in [*(status.get("initContainerStatuses") or []),
                                                    *(status.get("containerStatuses") or [])])


def job_status(job: dict) -> str:
    status = _status(job)
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            return cond["type"]
    return "Running" if status.get("active") else "Pending"


def elapsed(start: str | None, end: str | None) -> str:
    """From one RFC 3339 time to another, or to now while there is no end, in ``short_duration``'s words."""
    if not start:
        return ""
    finished = _time(end) if end else datetime.now(timezone.utc)
    return short_duration((finished - _time(start)).total_seconds())


def duration(obj: dict) -> str:
    """A Job's DURATION: from startTime to completionTime, or to now while it runs."""
    status = _status(obj)
    return elapsed(status.get("startTime"), status.get("completionTime"))


def _data_count(obj: dict) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {}) + len(obj.get("stringData") or {})


def _spec(obj: dict) -> dict:
    return obj.get("spec") or {}


POD = (PrinterColumn("Ready", value=pod_ready), PrinterColumn("Status", value=pod_status),
       PrinterColumn("Restarts", "integer", value=pod_restarts), AGE,
       PrinterColumn("IP", priority=1, value=lambda o: _status(o).get("podIP", "<none>")),
       PrinterColumn("Node", priority=1, value=lambda o: _spec(o).get("nodeName", "<none>")))
JOB = (PrinterColumn("Status", value=job_status),
       PrinterColumn("Completions",
                     value=lambda o: f"{_status(o).get('succeeded', 0)}/{_spec(o).get('completions', 1)}"),
       PrinterColumn("Duration", value=duration), AGE)
CONFIGMAP = (PrinterColumn("Data", "integer", value=_data_count), AGE)
SECRET = (PrinterColumn("Type", value=lambda o: o.get("type", "Opaque")),
          PrinterColumn("Data", "integer", value=_data_count), AGE)
NAMESPACE = (PrinterColumn("Status", value=lambda o: _status(o).get("phase", "Active")), AGE)


def node_status(node: dict) -> str:
    """kubectl's STATUS of a node: Ready or NotReady, with SchedulingDisabled when cordoned."""
    ready = next((c for c in _status(node).get("conditions") or [] if c.get("type") == "Ready"), {})
    text = "Ready" if ready.get("status") == "True" else "NotReady"
    return text + (",SchedulingDisabled" if _spec(node).get("unschedulable") else "")


def node_roles(node: dict) -> str:
    """kubectl's ROLES of a node: the names of its ``node-role.kubernetes.io/NAME`` labels and the
    value of ``kubernetes.io/role``, sorted, else ``<none>``."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_address(kind: str) -> Callable[[dict], str]:
    def address(node: dict) -> str:
        found = [a.get("address", "") for a in _status(node).get("addresses") or [] if a.get("type") == kind]
        return ",".join(found) or "<none>"
    return address


def _node_info(field_name: str, default: str = "") -> Callable[[dict], str]:
    return lambda node: (_status(node).get("nodeInfo") or {}).get(field_name) or default


NODE = (PrinterColumn("Status", value=node_status),
        PrinterColumn("Roles", value=node_roles), AGE,
        PrinterColumn("Version", value=_node_info("kubeletVersion")),
        PrinterColumn("Internal-IP", priority=1, value=_node_address("InternalIP")),
        PrinterColumn("External-IP", priority=1, value=_node_address("ExternalIP")),
        PrinterColumn("OS-Image", priority=1, value=_node_info("osImage", "<unknown>")),
        PrinterColumn("Kernel-Version", priority=1, value=_node_info("kernelVersion", "<unknown>")),
        PrinterColumn("Container-Runtime", priority=1, value=_node_info("containerRuntimeVersion", "<unknown>")))
PVC = (PrinterColumn("Status", value=lambda o: _status(o).get("phase", "Pending")),
       PrinterColumn("Volume", value=lambda o: _spec(o).get("volumeName", "")),
       PrinterColumn("Capacity", value=lambda o: (_status(o).get("capacity") or {}).get("storage", "")),
       PrinterColumn("Access Modes", value=lambda o: ",".join(_status(o).get("accessModes") or [])),
       PrinterColumn("StorageClass", value=lambda o: _spec(o).get("storageClassName") or ""),
       AGE)
EVENT = (PrinterColumn("Last Seen", value=lambda o: age(o.get("lastTimestamp"))),
         PrinterColumn("Type", value=lambda o: o.get("type", "")),
         PrinterColumn("Reason", value=lambda o: o.get("reason", "")),
         PrinterColumn("Object", value=lambda o: f'{(o.get("involvedObject") or {}).get("kind", "").lower()}/'
                                                 f'{(o.get("involvedObject") or {}).get("name", "")}'),
         PrinterColumn("Message", value=lambda o: o.get("message", "")))
