"""What the control plane may ask of the node: the one interface between them.

The controllers (except the kubelet's own: ``controllers/kubelet.py``, ``probes.py``, ``node.py``,
and the kube-proxy/CoreDNS/NetworkPolicy agent of ``controllers/workloads/network.py``, which are the
node, and the wiring that builds it: ``server/controlplane.py``, ``daemon.py``), the API's log,
exec, attach and port-forward routes, Katib's DB manager and the dashboard hold a :class:`NodeAPI`,
never the runtime's files: so the node could be a real cluster's kubelet, whose API
(``/containerLogs``, ``/exec``, ``/attach``, ``/stats``), local-path provisioner and CRI answer the
same questions. :class:`~trimaran.runtime.local.LocalRuntime` is
the one implementation; ``tests/test_layers.py`` holds the control plane to this list.

Paths in the answers (a log file, a pod's emptyDir, a claim's directory) are on this machine,
which the control plane shares with its node; a remote node would stream what they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from trimaran.runtime.local import PodNotFound, PodProcessStatus
from trimaran.runtime.stats import NodeUsage
from trimaran.runtime.streaming import AttachedStdin, ContainerNotFound, ExecProcess

__all__ = ["NodeAPI", "PodNotFound", "PodProcessStatus", "AttachedStdin", "ContainerNotFound", "ExecProcess"]


class NodeAPI(Protocol):
    """The node's pods, logs, streams and volumes, as the control plane reaches them."""

    # -- pods -------------------------------------------------------------------------------------
    def running_pods(self) -> list[str]:
        """Uids of the pods that have a live process."""
        ...

    def pod_identity(self, pod_uid: str) -> tuple[str, str] | None:
        """``(namespace, name)`` the pod was started as."""
        ...

    def pod_status(self, pod_uid: str) -> PodProcessStatus:
        """Each container's state from its latest run. Raises :class:`PodNotFound`."""
        ...

    def stop_pod(self, pod_uid: str, grace_seconds: float = 5.0) -> None:
        """Stop the pod's containers (TERM, then KILL after the grace period)."""
        ...

    def pod_of_process(self, pid: int) -> str | None:
        """The uid of the pod that process ``pid`` belongs to (who calls a socket on this machine)."""
        ...

    def pod_at_address(self, ip: str) -> tuple[str, str] | None:
        """``(namespace, name)`` of the pod that has ``ip`` on the pod network now."""
        ...

    def update_service_hosts(self, pod_uid: str, hosts: Mapping[str, str]) -> None:
        """Make ``hosts`` (name → IP) the Services' lines of the running pod's /etc/hosts."""
        ...

    # -- logs, the kubelet's /containerLogs -------------------------------------------------------
    def log_path(self, namespace: str, pod_name: str, container: str | None = None,
                 attempt: int | None = None) -> Path:
        """The live log file of a container's attempt (the latest by default)."""
        ...

    def log_files(self, namespace: str, pod_name: str, container: str | None = None,
                  attempt: int | None = None) -> list[Path]:
        """That attempt's log as files, the rotated ones oldest first, then the live one."""
        ...

    def log_attempts(self, namespace: str, pod_name: str, container: str) -> list[int]:
        """Attempts that have a log, oldest first."""
        ...

    # -- streams, the kubelet's /exec and /attach ---------------------------------------------------
    def container_pid(self, pod_uid: str, container: str) -> tuple[int, int | None] | None:
        """Whether (and as which process) the container runs now; None when it does not."""
        ...

    def container_starting(self, pod_uid: str, container: str) -> bool:
        """Whether the container is about to run (its pod's latest run has not started it yet)."""
        ...

    def exec(self, pod_uid: str, container: str, argv: list[str], *, tty: bool, stdin: bool, stdout: bool,
             stderr: bool, size: tuple[int, int] | None = None) -> ExecProcess:
        """Run ``argv`` in the running container. Raises :class:`ContainerNotFound`."""
        ...

    def attach(self, pod_uid: str, container: str) -> AttachedStdin | None:
        """The running container's stdin (``stdin: true``) for an attach session; None where it has none."""
        ...

    # -- resources, the kubelet's /stats and /metrics ----------------------------------------------
    def stats(self) -> NodeUsage:
        """The node's counters and every running container's."""
        ...

    def part_timings(self) -> dict[str, tuple[int, float]]:
        """Each part of pods' starts and ends: how many, and their seconds in all."""
        ...

    # -- volumes ----------------------------------------------------------------------------------
    def volume_dir(self, pod_uid: str, volume_name: str) -> Path:
        """Where the pod's emptyDir lies (a file a metrics collector reads)."""
        ...

    def provision_claim(self, namespace: str, claim: str, *, reclaim_delete: bool) -> str:
        """Provision a PersistentVolumeClaim's local volume; where it lies, to show."""
        ...

    def release_claim(self, namespace: str, claim: str) -> None:
        """The claim is deleted: remove its volume where it goes with it."""
        ...

    def released_claims(self) -> list[tuple[str, str]]:
        """``(namespace, claim)`` of volumes that go with their claims and are still here."""
        ...

    def seed_claim_path(self, namespace: str, claim: str, sub_path: str, copy_of: str | None) -> bool:
        """Make ``sub_path`` of a claim's volume as a copy of its sibling ``copy_of``."""
        ...

    def make_pod_writable(self, path: Path) -> None:
        """Make a host directory that pods write in through a ``hostPath`` volume."""
        ...
