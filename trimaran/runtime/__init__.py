"""The local node: runs pods as sandboxed processes.

Names are imported lazily (PEP 562) so that ``python -S -m trimaran.runtime.shim`` loads
only the standard-library shim, not the rest of the runtime: the shim must start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trimaran._lazy import lazy_exports

_EXPORTS = {
    "gpus": ["GPUDevice", "GPUAllocator", "discover_gpus", "parse_fake_inventory", "gpu_env",
             "gpu_labels", "is_gpu_resource", "GPU_RESOURCE", "MIG_RESOURCE_PREFIX"],
    "node": ["Node", "Resources", "Allocation", "Admission", "pod_requests", "container_requests"],
    "env": ["ConfigError", "Lookup", "resolve_env", "expand", "expand_command"],
    "volumes": ["VolumeError", "Mount", "PodVolume", "prepare_volumes", "container_mounts"],
    "sandbox": ["SandboxUnavailable", "sandbox_available", "build_argv", "hosts_file"],
    "serviceaccount": ["ServiceAccountAccess"],
    "local": ["LocalRuntime", "PodProcessStatus", "ContainerStatus", "PodNotFound", "ImageRun"],
    "nodeapi": ["NodeAPI"],
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from trimaran.runtime.env import ConfigError, Lookup, expand, expand_command, resolve_env
    from trimaran.runtime.gpus import (
        GPU_RESOURCE,
        MIG_RESOURCE_PREFIX,
        GPUAllocator,
        GPUDevice,
        discover_gpus,
        gpu_env,
        gpu_labels,
        is_gpu_resource,
        parse_fake_inventory,
    )
    from trimaran.runtime.local import ContainerStatus, ImageRun, LocalRuntime, PodNotFound, PodProcessStatus
    from trimaran.runtime.node import (
        Admission,
        Allocation,
        Node,
        Resources,
        container_requests,
        pod_requests,
    )
    from trimaran.runtime.nodeapi import NodeAPI
    from trimaran.runtime.sandbox import SandboxUnavailable, build_argv, hosts_file, sandbox_available
    from trimaran.runtime.serviceaccount import ServiceAccountAccess
    from trimaran.runtime.volumes import Mount, PodVolume, VolumeError, container_mounts, prepare_volumes

