"""GPU discovery and assignment, as the NVIDIA device plugin does it on a Kubernetes node.

Whole GPUs are the extended resource ``nvidia.com/gpu``; MIG instances are
``nvidia.com/mig-<profile>`` (the device plugin's "mixed" strategy), and a GPU with MIG
enabled offers only its instances, never itself.

``TRIMARAN_GPUS`` replaces discovery with a fake inventory so that assignment can be
exercised (and tested) on a machine without GPUs: a comma-separated list of
``[PRODUCT:]COUNT`` entries for whole GPUs and ``mig-<profile>:COUNT`` for MIG instances,
e.g. ``"4"``, ``"NVIDIA-A100-SXM4-80GB:2"``, ``"A100:1,mig-3g.20gb:2"``. An empty value or
``"0"`` means no GPUs (and skips ``nvidia-smi``).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "GPU_RESOURCE",
    "MIG_RESOURCE_PREFIX",
    "GPUDevice",
    "GPUAllocator",
    "discover_gpus",
    "parse_fake_inventory",
    "gpu_env",
    "gpu_labels",
    "is_gpu_resource",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
FAKE_PRODUCT = "Fake-GPU"

_NVIDIA_SMI_TIMEOUT_S = 10.0
_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?) \(UUID: (?P<uuid>[^)]+)\)")
_MIG_LINE = re.compile(
    r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)"
)


@dataclass(frozen=True)
class GPUDevice:
    """One assignable device: a whole GPU or a MIG instance.

    ``id`` is what goes into ``CUDA_VISIBLE_DEVICES``: the GPU's index (nvidia-smi's,
    i.e. PCI bus order) for a whole GPU, the ``MIG-…`` UUID for a MIG instance.
    """

    id: str
    resource: str
    product: str
    uuid: str
    gpu_index: int
    memory_mib: int | None = None


def parse_fake_inventory(spec: str) -> list[GPUDevice]:
    """Devices described by a ``TRIMARAN_GPUS`` value (see the module docstring)."""
    devices: list[GPUDevice] = []
    whole = 0
    mig_counts: dict[str, int] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, count_text = entry.rpartition(":")
        if not sep:
            name, count_text = "", entry
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(
                f"TRIMARAN_GPUS entry {entry!r} is not [PRODUCT:]COUNT or mig-PROFILE:COUNT"
            ) from None
        if count < 0:
            raise ValueError(f"TRIMARAN_GPUS entry {entry!r} has a negative count")
        if name.startswith("mig-"):
            profile = name[len("mig-"):]
            for _ in range(count):
                n = mig_counts.get(profile, 0)
                mig_counts[profile] = n + 1
                devices.append(
                    GPUDevice(
                        id=f"MIG-fake-{profile}-{n}",
                        resource=MIG_RESOURCE_PREFIX + profile,
                        product=FAKE_PRODUCT,
                        uuid=f"MIG-fake-{profile}-{n}",
                        gpu_index=-1,
                    )
                )
            continue
        product = (name or FAKE_PRODUCT).replace(" ", "-")
        for _ in range(count):
            devices.append(
                GPUDevice(
                    id=str(whole),
                    resource=GPU_RESOURCE,
                    product=product,
                    uuid=f"GPU-fake-{whole}",
                    gpu_index=whole,
                )
            )
            whole += 1
    return devices


def _run_nvidia_smi(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _parse_memory_mib(text: str) -> int | None:
    number = text.strip().split(" ")[0]
    return int(number) if number.isdigit() else None


def discover_gpus(env: Mapping[str, str] | None = None) -> list[GPUDevice]:
    """The devices of this machine: the fake inventory when ``TRIMARAN_GPUS`` is set,
    else what ``nvidia-smi`` reports (none when it is absent or fails)."""
    env = os.environ if env is None else env
    if "TRIMARAN_GPUS" in env:
        return parse_fake_inventory(env["TRIMARAN_GPUS"])
    query = _run_nvidia_smi("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader")
    if not query:
        return []
    gpus: list[tuple[int, str, str, int | None]] = []
    for line in query.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        gpus.append((int(fields[0]), fields[1], fields[2], _parse_memory_mib(fields[3])))

    mig_by_gpu: dict[int, list[tuple[str, str]]] = {}
    listing = _run_nvidia_smi("-L") or ""
    current: int | None = None
    for line in listing.splitlines():
        gpu_match = _GPU_LINE.match(line)
        if gpu_match:
            current = int(gpu_match["index"])
            continue
        mig_match = _MIG_LINE.match(line)
        if mig_match and current is not None:
            mig_by_gpu.setdefault(current, []).append((mig_match["profile"], mig_match["uuid"]))

    devices: list[GPUDevice] = []
    for index, uuid, name, memory in gpus:
        product = name.replace(" ", "-")
        migs = mig_by_gpu.get(index)
        if not migs:
            devices.append(GPUDevice(str(index), GPU_RESOURCE, product, uuid, index, memory))
            continue
        for profile, mig_uuid in migs:
            devices.append(
                GPUDevice(mig_uuid, MIG_RESOURCE_PREFIX + profile, product, mig_uuid, index)
            )
    return devices


def gpu_env(devices: list[GPUDevice]) -> dict[str, str]:
    """The environment that gives a process exactly these devices.

    With none, ``CUDA_VISIBLE_DEVICES`` is set empty so that a CPU pod never picks up a GPU
    it was not given. ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number devices as
    nvidia-smi does (CUDA's default puts the fastest first), so indices mean the same GPU.
    """
    if not devices:
        return {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "none"}
    ids = ",".join(d.id for d in devices)
    return {
        "CUDA_VISIBLE_DEVICES": ids,
        "NVIDIA_VISIBLE_DEVICES": ids,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def gpu_labels(devices: list[GPUDevice]) -> dict[str, str]:
    """Node labels as NVIDIA's GPU feature discovery writes them (none without GPUs)."""
    if not devices:
        return {}
    first = devices[0]
    physical = {d.gpu_index if d.gpu_index >= 0 else d.uuid for d in devices}
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": first.product,
        "nvidia.com/gpu.count": str(len(physical)),
    }
    if first.memory_mib is not None:
        labels["nvidia.com/gpu.memory"] = str(first.memory_mib)
    if any(d.resource != GPU_RESOURCE for d in devices):
        labels["nvidia.com/mig.strategy"] = "mixed"
    return labels


class GPUAllocator:
    """Hands out devices to owners (pod uids) and takes them back.

    Devices are given lowest index first, so assignments are predictable.
    """

    def __init__(self, devices: list[GPUDevice]) -> None:
        self.devices = list(devices)
        self._owner: dict[str, str] = {}  # device id → owner
        self._lock = threading.Lock()

    def capacity(self) -> dict[str, int]:
        """Device count per resource name."""
        counts: dict[str, int] = {}
        for device in self.devices:
            counts[device.resource] = counts.get(device.resource, 0) + 1
        return counts

    def free(self) -> dict[str, int]:
        """Unassigned device count per resource name (zero counts included)."""
        with self._lock:
            counts = {resource: 0 for resource in self.capacity()}
            for device in self.devices:
                if device.id not in self._owner:
                    counts[device.resource] += 1
            return counts

    def allocate(self, owner: str, requests: Mapping[str, int]) -> list[GPUDevice]:
        """Assign ``requests`` (resource → count; non-GPU resources ignored) to ``owner``.

        All or nothing: raises ``ValueError`` naming the short resource and leaves the
        assignment unchanged when any count cannot be met.
        """
        with self._lock:
            chosen: list[GPUDevice] = []
            for resource, count in sorted(requests.items()):
                if not is_gpu_resource(resource) or count <= 0:
                    continue
                available = [
                    d for d in self.devices if d.resource == resource and d.id not in self._owner
                ]
                if len(available) < count:
                    raise ValueError(
                        f"Insufficient {resource} (requested {count}, free {len(available)})"
                    )
                chosen.extend(available[:count])
            for device in chosen:
                self._owner[device.id] = owner
            return chosen

    def restore(self, owner: str, device_ids: list[str]) -> list[GPUDevice]:
        """Mark devices as ``owner``'s again (after a restart); unknown ids are skipped."""
        with self._lock:
            by_id = {d.id: d for d in self.devices}
            restored = [by_id[i] for i in device_ids if i in by_id]
            for device in restored:
                self._owner[device.id] = owner
            return restored

    def release(self, owner: str) -> None:
        """Give back every device ``owner`` holds."""
        with self._lock:
            for device_id in [i for i, o in self._owner.items() if o == owner]:
                del self._owner[device_id]

    def owned_by(self, owner: str) -> list[GPUDevice]:
        """The devices ``owner`` holds, in inventory order."""
        with self._lock:
            return [d for d in self.devices if self._owner.get(d.id) == owner]


def is_gpu_resource(resource: str) -> bool:
    """Whether a resource name is a GPU or MIG resource this module assigns."""
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)
