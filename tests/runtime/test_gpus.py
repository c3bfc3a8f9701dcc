"""GPU discovery (nvidia-smi, the TRIMARAN_GPUS inventory) and the allocator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trimaran.runtime.gpus import (
    GPUAllocator,
    discover_gpus,
    gpu_env,
    gpu_labels,
    parse_fake_inventory,
)

QUERY = """0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 81920 MiB
1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 81920 MiB
"""
LISTING = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)
  MIG 3g.40gb     Device  0: (UUID: MIG-1111)
  MIG 1g.10gb     Device  1: (UUID: MIG-2222)
"""


@pytest.fixture
def nvidia_smi(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has an nvidia-smi printing a two-GPU machine, GPU 1 in MIG mode."""
    (tmp_path / "query.txt").write_text(QUERY)
    (tmp_path / "listing.txt").write_text(LISTING)
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-L" ]; then cat {tmp_path}/listing.txt; else cat {tmp_path}/query.txt; fi\n'
    )
    script.chmod(0o755)
    return {"PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_discovery_from_nvidia_smi(nvidia_smi: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", nvidia_smi["PATH"])
    devices = discover_gpus({})
    assert [(d.id, d.resource) for d in devices] == [
        ("0", "nvidia.com/gpu"),  # GPU 1 has MIG enabled: only its instances are offered
        ("MIG-1111", "nvidia.com/mig-3g.40gb"),
        ("MIG-2222", "nvidia.com/mig-1g.10gb"),
    ]
    assert devices[0].memory_mib == 81920
    labels = gpu_labels(devices)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.memory"] == "81920"


def test_no_nvidia_smi_means_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert discover_gpus({}) == []


def test_inventory_overrides_discovery(nvidia_smi: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", nvidia_smi["PATH"])
    assert discover_gpus({"TRIMARAN_GPUS": "0"}) == []
    assert [d.id for d in discover_gpus({"TRIMARAN_GPUS": "3"})] == ["0", "1", "2"]


def test_fake_inventory_format() -> None:
    devices = parse_fake_inventory("H100 80GB HBM3:1, mig-1g.10gb:2")
    assert [(d.id, d.resource, d.product) for d in devices] == [
        ("0", "nvidia.com/gpu", "H100-80GB-HBM3"),
        ("MIG-fake-1g.10gb-0", "nvidia.com/mig-1g.10gb", "Fake-GPU"),
        ("MIG-fake-1g.10gb-1", "nvidia.com/mig-1g.10gb", "Fake-GPU"),
    ]
    with pytest.raises(ValueError, match="TRIMARAN_GPUS"):
        parse_fake_inventory("A100:two")


def test_allocator_is_all_or_nothing() -> None:
    allocator = GPUAllocator(parse_fake_inventory("2,mig-3g.20gb:1"))
    with pytest.raises(ValueError, match="Insufficient nvidia.com/gpu"):
        allocator.allocate("pod-a", {"nvidia.com/gpu": 3, "nvidia.com/mig-3g.20gb": 1})
    assert allocator.free() == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}
    given = allocator.allocate("pod-a", {"nvidia.com/gpu": 1, "cpu": 4})
    assert [d.id for d in given] == ["0"]
    assert [d.id for d in allocator.owned_by("pod-a")] == ["0"]
    allocator.release("pod-a")
    assert allocator.free()["nvidia.com/gpu"] == 2


def test_env_for_no_gpu_hides_all_gpus() -> None:
    assert gpu_env([])["CUDA_VISIBLE_DEVICES"] == ""
    env = gpu_env(parse_fake_inventory("2"))
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "0,1",
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
