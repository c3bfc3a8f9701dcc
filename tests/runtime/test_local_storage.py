"""Local storage, as pure logic: log rotation in the shim, exit records written into reserved
space, hard eviction thresholds, the kubelet's eviction messages, ephemeral-storage admission, and
reading a rotated log as one stream (``server/kube/logs.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trimaran.runtime import shim
from trimaran.runtime.local import log_files, log_rotation_from_env
from trimaran.runtime.node import (
    DiskThreshold,
    Node,
    StorageUsage,
    disk_pressure_message,
    ephemeral_storage_violation,
    parse_eviction_hard,
)
from trimaran.server.kube.logs import _PARTIAL_LINE, _LogCursor, _tail_start, _whole

from .helpers import make_pod

MiB = 1024 * 1024


def _pipe_with(data: bytes) -> int:
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.write(write, data)
    os.close(write)
    return read


def _copy_all(writer: shim.LogWriter, data: bytes) -> None:
    source = _pipe_with(data)
    try:
        while writer.copy(source):
            pass
    finally:
        os.close(source)


def test_log_writer_rotates_at_line_ends_and_keeps_max_files(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    writer = shim.LogWriter(str(path), max_size=1000, max_files=3)
    lines = b"".join(b"line %05d\n" % i for i in range(1000))  # 11 bytes each, 11000 in all
    for start in range(0, len(lines), 4096):  # in pieces, as a container writes
        _copy_all(writer, lines[start:start + 4096])
    writer.close()
    files = log_files(path)
    assert len(files) == 3 and files[-1] == path and writer.rotations > 3
    contents = [p.read_bytes() for p in files]
    assert all(c.endswith(b"\n") and c.startswith(b"line ") and len(c) <= 1000 for c in contents)
    assert b"".join(contents) == lines[-len(b"".join(contents)):]


def test_log_writer_appends_to_an_existing_log_and_numbers_on(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"before\n")
    (tmp_path / "0.log.4").write_bytes(b"older\n")
    writer = shim.LogWriter(str(path), max_size=10, max_files=5)
    assert writer.start_offset == 7
    _copy_all(writer, b"after\n")
    writer.close()
    assert [p.name for p in log_files(path)] == ["0.log.4", "0.log.5", "0.log"]
    assert (tmp_path / "0.log.5").read_bytes() == b"before\n" and path.read_bytes() == b"after\n"


def test_a_record_is_written_into_its_reserve(tmp_path: Path) -> None:
    record = str(tmp_path / "c.exit.json")
    shim.reserve_record(record, size=4096)
    assert os.stat(record + ".reserve").st_blocks * 512 >= 4096
    shim.write_reserved(record, {"exitCode": 0, "reason": "Completed"})
    assert json.loads(Path(record).read_text()) == {"exitCode": 0, "reason": "Completed"}
    assert not os.path.exists(record + ".reserve")
    shim.write_reserved(str(tmp_path / "shim.done"), {"finishedAt": "now"})  # no reserve: written plainly
    assert json.loads((tmp_path / "shim.done").read_text()) == {"finishedAt": "now"}


def test_log_rotation_settings_from_env() -> None:
    assert log_rotation_from_env({}) == (10 * MiB, 5)
    assert log_rotation_from_env({"TRIMARAN_CONTAINER_LOG_MAX_SIZE": "4Mi",
                                  "TRIMARAN_CONTAINER_LOG_MAX_FILES": "3"}) == (4 * MiB, 3)
    for bad in ({"TRIMARAN_CONTAINER_LOG_MAX_SIZE": "10"}, {"TRIMARAN_CONTAINER_LOG_MAX_FILES": "1"},
                {"TRIMARAN_CONTAINER_LOG_MAX_SIZE": "lots"}):
        with pytest.raises(ValueError):
            log_rotation_from_env(bad)


def test_eviction_hard_is_the_kubelets_syntax() -> None:
    assert parse_eviction_hard("nodefs.available<10%, imagefs.available<64Mi") == [
        DiskThreshold("nodefs.available", percent=10.0), DiskThreshold("imagefs.available", bytes=64 * MiB)]
    assert DiskThreshold("nodefs.available", percent=10).floor(1000) == 100
    for bad in ("memory.available<100Mi", "nodefs.available>10%", "nodefs.available<150%"):
        with pytest.raises(ValueError):
            parse_eviction_hard(bad)


def _storage_pod(limits: dict | None = None, volumes: list | None = None) -> dict:
    container = {"name": "main", "command": ["true"], "resources": {"limits": limits or {}}}
    return make_pod("p", [container], volumes=volumes or [])


def test_eviction_messages_are_the_kubelets() -> None:
    within = StorageUsage({"main": 100}, {"scratch": 100})
    assert ephemeral_storage_violation(_storage_pod(), StorageUsage({"main": 10 * MiB})) is None
    sized = _storage_pod(volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
                                  {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}])
    assert ephemeral_storage_violation(sized, within) is None
    assert ephemeral_storage_violation(sized, StorageUsage({"main": 0}, {"scratch": 2 * MiB, "ram": MiB})) == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    limited = _storage_pod({"ephemeral-storage": "1Mi"}, [{"name": "scratch", "emptyDir": {}}])
    assert ephemeral_storage_violation(limited, StorageUsage({"main": MiB}, {"scratch": 1})) == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "
    message = disk_pressure_message(limited, StorageUsage({"main": 3 * MiB}), "6Mi", "1Mi")
    assert message == ("The node was low on resource: ephemeral-storage. Threshold quantity: 6Mi, available: 1Mi. "
                       "Container main was using 3Mi, which exceeds its request of 1Mi. ")


def test_ephemeral_storage_requests_count_at_admission(tmp_path: Path) -> None:
    node = Node.from_env({"TRIMARAN_NODE_CPU": "4", "TRIMARAN_NODE_MEMORY": "16Gi", "TRIMARAN_GPUS": ""},
                         storage=tmp_path)
    allocatable = node.capacity.ephemeral_storage
    assert 0 < allocatable < node.storage_capacity  # less the 10% eviction threshold
    huge = make_pod("huge", [{"name": "main", "command": ["true"],
                              "resources": {"requests": {"ephemeral-storage": str(allocatable + 1)}}}])
    reason = node.admit("huge", [huge])
    assert isinstance(reason, str) and "Insufficient ephemeral-storage" in reason and "node capacity" in reason
    quantities = node.to_k8s()["status"]
    assert quantities["allocatable"]["ephemeral-storage"] != quantities["capacity"]["ephemeral-storage"]
    assert {c["type"]: c["reason"] for c in quantities["conditions"]}["DiskPressure"] == "KubeletHasNoDiskPressure"


def test_disk_pressure_sets_the_taint_and_lasts_the_transition_period(tmp_path: Path) -> None:
    node = Node("box", cpu=1, memory=MiB, storage=tmp_path, pressure_transition_s=30,
                eviction_hard=[DiskThreshold("nodefs.available", percent=99.999)])
    assert node.observe_disk(now=0.0) is True and node.disk_pressure
    assert node.taints[0]["key"] == "node.kubernetes.io/disk-pressure" and node.taints[0]["effect"] == "NoSchedule"
    assert "untolerated taint {node.kubernetes.io/disk-pressure: }" in node.check_constraints({})
    node.eviction_hard = [DiskThreshold("nodefs.available", bytes=0)]
    assert node.observe_disk(now=10.0) is False and node.disk_pressure  # within the transition period
    assert node.observe_disk(now=31.0) is True and not node.disk_pressure and node.taints == []


def _rotated(tmp_path: Path, parts: list[bytes]) -> list[Path]:
    for index, part in enumerate(parts[:-1]):
        (tmp_path / f"0.log.{index + 1}").write_bytes(part)
    (tmp_path / "0.log").write_bytes(parts[-1])
    return log_files(tmp_path / "0.log")


def _read_from(files: list[Path], start: tuple[int, int]) -> bytes:
    cursor = _LogCursor(lambda: log_files(files[-1]), files, *start)
    read = b""
    while chunk := cursor.read(None):
        read += chunk
    cursor.close()
    return read


def test_a_tail_reaches_back_across_rotated_files(tmp_path: Path) -> None:
    files = _rotated(tmp_path, [b"a\nb\n", b"c\nd\n", b"e\n"])
    assert _read_from(files, _tail_start(files, 1, False)) == b"e\n"
    assert _read_from(files, _tail_start(files, 2, False)) == b"d\ne\n"
    assert _read_from(files, _tail_start(files, 4, False)) == b"b\nc\nd\ne\n"
    assert _read_from(files, _tail_start(files, 10, False)) == b"a\nb\nc\nd\ne\n"
    assert _read_from(files, _tail_start(files, 0, False)) == b""


def test_a_tail_of_a_running_container_leaves_out_the_line_it_has_begun(tmp_path: Path) -> None:
    files = _rotated(tmp_path, [b"a\nb\n", b"c\nd"])
    assert _whole(_read_from(files, _tail_start(files, 1, True))) == b"c\n"
    assert _whole(_read_from(files, _tail_start(files, 2, True))) == b"b\nc\n"
    assert _read_from(files, _tail_start(files, 1, False)) == b"d"
    (tmp_path / "alone").mkdir()
    alone = _rotated(tmp_path / "alone", [b"a\nb\n", b"begun"])  # the live file holds only the begun line
    assert _whole(_read_from(alone, _tail_start(alone, 1, True))) == b"b\n"
    long = b"x" * _PARTIAL_LINE
    assert _whole(b"a\n" + long) == b"a\n" + long  # containerd logs a line this long in parts


def test_a_cursor_follows_a_rotation_without_losing_or_repeating(tmp_path: Path) -> None:
    live = tmp_path / "0.log"
    live.write_bytes(b"one\n")
    cursor = _LogCursor(lambda: log_files(live), log_files(live), 0, 0)
    assert cursor.read(None) == b"one\n" and cursor.read(None) == b""
    with live.open("ab") as handle:
        handle.write(b"two\n")  # written, then the file rotated twice before the next read
    live.rename(tmp_path / "0.log.1")
    (tmp_path / "0.log.2").write_bytes(b"three\n")
    live.write_bytes(b"four\n")
    read = b""
    while chunk := cursor.read(None):
        read += chunk
    cursor.close()
    assert read == b"two\nthree\nfour\n"
