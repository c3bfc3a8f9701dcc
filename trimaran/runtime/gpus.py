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

import functools
import os
import re
import shutil
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
    "DriverFiles",
    "parse_container_cli_list",
    "parse_ldconfig",
    "driver_files",
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


# -- the driver inside image containers ------------------------------------------------------------

# The host driver's user-space files an image container needs, as the NVIDIA container toolkit
# mounts them: libraries found by ldconfig when nvidia-container-cli is absent.
_DRIVER_LIBRARY = re.compile(r"^lib(cuda|nvidia-[\w.-]+|nvcuvid|nvoptix|nvidia)\.so")
_DRIVER_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                    "nvidia-cuda-mps-server")


@dataclass(frozen=True)
class DriverFiles:
    """What a GPU pod running its image gets from the host, each bound read-only at its own path:
    ``devices`` (``/dev/nvidia*``) and ``files`` as ``(host path, path in the container)``."""

    devices: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()


def _soname_link(path: str) -> str | None:
    """Where the loader looks for a versioned library (``libcuda.so.1`` for
    ``libcuda.so.535.104.05``: its ELF SONAME), when that differs from its own name. The toolkit
    runs ldconfig in the container to make these links; binding the file there gives the same."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as handle:
            for section in ELFFile(handle).iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags("DT_SONAME"):
                        soname = tag.soname
                        directory, _, name = path.rpartition("/")
                        return f"{directory}/{soname}" if soname != name else None
    except (OSError, ELFError):
        pass
    return None


def parse_container_cli_list(listing: str) -> DriverFiles:
    """``nvidia-container-cli list``'s output (one absolute path per line: device nodes, binaries,
    libraries, firmware, IPC sockets) as the files to bind."""
    devices: list[str] = []
    files: list[tuple[str, str]] = []
    for line in listing.splitlines():
        path = line.strip()
        if not path.startswith("/"):
            continue
        if path.startswith("/dev/"):
            devices.append(path)
            continue
        files.append((path, path))
        link = _soname_link(path) if ".so" in path.rpartition("/")[2] else None
        if link is not None:
            files.append((path, link))
    return DriverFiles(tuple(dict.fromkeys(devices)), tuple(dict.fromkeys(files)))


def parse_ldconfig(cache: str, binaries: Mapping[str, str] | None = None,
                   devices: tuple[str, ...] = ()) -> DriverFiles:
    """The documented fallback without nvidia-container-cli: the driver's libraries from
    ``ldconfig -p`` (each name the cache lists, bound from the file it leads to), the driver's
    tools found on PATH (``binaries``: name -> path) and the device nodes."""
    files: list[tuple[str, str]] = []
    for line in cache.splitlines():
        name, sep, path = line.strip().partition(" => ")
        if not sep:
            continue
        library = name.split(" ", 1)[0]
        if "x86-64" not in name and "64bit" not in name and "AArch64" not in name:
            continue  # the 32-bit copies are of no use to a 64-bit container
        if _DRIVER_LIBRARY.match(library):
            files.append((os.path.realpath(path), path.strip()))
    files += [(path, path) for path in (binaries or {}).values()]
    return DriverFiles(tuple(devices), tuple(dict.fromkeys(files)))


@functools.cache
def driver_files() -> DriverFiles:
    """This host's driver files for GPU containers (looked up once per process): from
    ``nvidia-container-cli list`` when installed, else ``ldconfig -p`` and PATH."""
    import glob

    devices = tuple(sorted(glob.glob("/dev/nvidia*")))
    cli = shutil.which("nvidia-container-cli")
    if cli is not None:
        try:
            listing = subprocess.run([cli, "list"], capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S,
                                     check=True).stdout
            found = parse_container_cli_list(listing)
            # Every GPU's node, as host pods get them: CUDA_VISIBLE_DEVICES selects by host index.
            return DriverFiles(tuple(dict.fromkeys((*found.devices, *devices))), found.files)
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    binaries = {name: path for name in _DRIVER_BINARIES if (path := shutil.which(name))}
    return parse_ldconfig(cache, binaries, devices)
