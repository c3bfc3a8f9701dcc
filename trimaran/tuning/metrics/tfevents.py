"""Scalars from TensorBoard event files, read incrementally (Katib's TensorFlowEvent collector,
katib.md §1.4).

Event files (``events.out.tfevents.*``, written by ``tf.summary``, ``torch.utils.tensorboard`` and
tensorboardX alike) are TFRecord files of ``Event`` protos. The records are framed here, with a
byte offset per file so each read returns only new events and a record still being written waits;
the protos are decoded with TensorBoard's compiled copies (``tensorboard.compat.proto``, protobuf
only), falling back to TensorFlow's. TensorBoard's own loaders are not used because they import
all of TensorFlow when it is installed (seconds and hundreds of MB in the control plane) and
expose no offsets. Nothing is imported until the first file is read.

The framing's length checksum is verified (a bad one means the file is not a record file, or is
corrupt, and the rest of it cannot be framed); the data checksum is not, since a pure-Python
CRC32C over images and histograms would cost more than the scalars are worth, and a record that
does not decode is skipped with a warning either way.

Which values count, as Katib's ``tfevent_loader``: a value whose tag *starts with* the metric name;
for a metric name with a directory (``train/accuracy``), a value whose tag starts with the last
part (``accuracy``) in an event file whose directory ends with the rest (``train``, compared by
whole path components here, where Katib compares strings). In addition a tag equal to the metric
name always counts, so ``torch``'s ``add_scalar("train/loss", ...)`` in the top directory is found
by ``train/loss``, which Katib would miss. Values are ``simple_value`` (TF1, torch, tensorboardX)
or single-element numeric tensors (TF2's ``tf.summary.scalar``); anything else (histograms,
images, text) is ignored. The step is the event's step; the time its ``wall_time``.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from trimaran.tuning.metrics.observation import Observation

log = logging.getLogger(__name__)

_HEADER = 12  # uint64 length + uint32 masked CRC32C of the length
_FOOTER = 4  # uint32 masked CRC32C of the data


@functools.lru_cache(maxsize=1)
def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC32C (Castagnoli), rotated and offset as TensorFlow masks it."""
    table = _crc32c_table()
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@functools.lru_cache(maxsize=1)
def _event_type() -> Any:
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        try:
            from tensorflow.core.util import event_pb2  # type: ignore[no-redef]
        except ImportError as exc:
            raise ImportError("reading TensorFlow event files needs the tensorboard package "
                              "(pip install tensorboard)") from exc
    return event_pb2.Event


# TensorProto dtype -> struct format of one element in tensor_content (types.proto numbers).
_CONTENT_FORMAT = {1: "<f", 2: "<d", 3: "<i", 4: "<B", 5: "<h", 6: "<b", 9: "<q", 10: "<?",
                   17: "<H", 19: "<e", 22: "<I", 23: "<Q"}
_DT_BFLOAT16 = 14
_DT_HALF = 19


def _tensor_scalar(tensor: Any) -> float | None:
    """The value of a one-element numeric tensor, else None."""
    count = 1
    for dim in tensor.tensor_shape.dim:
        count *= dim.size
    if count != 1:
        return None
    dtype = tensor.dtype
    if tensor.tensor_content:
        content = tensor.tensor_content
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            # bfloat16 is the upper half of a float32.
            return float(struct.unpack("<f", b"\x00\x00" + content)[0])
        fmt = _CONTENT_FORMAT.get(dtype)
        if fmt is None or struct.calcsize(fmt) != len(content):
            return None
        return float(struct.unpack(fmt, content)[0])
    if dtype in (_DT_HALF, _DT_BFLOAT16) and tensor.half_val:
        bits = tensor.half_val[0] & 0xFFFF
        if dtype == _DT_HALF:
            return float(struct.unpack("<e", struct.pack("<H", bits))[0])
        return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
    for field in ("float_val", "double_val", "int_val", "int64_val", "uint32_val", "uint64_val", "bool_val"):
        values = getattr(tensor, field)
        if values:
            return float(values[0])
    return None


class _RecordTail:
    """One event file: the offset after the last complete record, and whether framing failed."""

    __slots__ = ("offset", "broken")

    def __init__(self) -> None:
        self.offset = 0
        self.broken = False

    def read_records(self, path: Path) -> list[bytes]:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < self.offset:
                log.info("%s shrank from %d to %d bytes; reading it from the start", path, self.offset, size)
                self.offset = 0
                self.broken = False
            if self.broken or size - self.offset < _HEADER:
                return []
            f.seek(self.offset)
            data = f.read(size - self.offset)
        records: list[bytes] = []
        pos = 0
        while len(data) - pos >= _HEADER:
            header = data[pos:pos + 8]
            (length,) = struct.unpack("<Q", header)
            (length_crc,) = struct.unpack("<I", data[pos + 8:pos + _HEADER])
            if masked_crc32c(header) != length_crc:
                log.warning("%s: bad record header at byte %d; not reading the rest of this file",
                            path, self.offset + pos)
                self.broken = True
                break
            end = pos + _HEADER + length + _FOOTER
            if end > len(data):
                break  # the writer has not finished this record yet
            records.append(data[pos + _HEADER:pos + _HEADER + length])
            pos = end
        self.offset += pos
        return records


class TFEventReader:
    """New scalar observations from the event files under ``directory`` (recursively) per read.

    ``sandbox_dir`` is the directory as the training code saw it (``/var/log/katib/tfevent``), used
    for matching metric names with directories (``train/accuracy``); it defaults to ``directory``.
    """

    def __init__(self, directory: Path | str, metric_names: Sequence[str], sandbox_dir: str | None = None) -> None:
        if not metric_names:
            raise ValueError("at least one metric name is needed")
        self.directory = Path(directory)
        self.metric_names: tuple[str, ...] = tuple(metric_names)
        self.sandbox_dir = PurePosixPath(sandbox_dir if sandbox_dir is not None else self.directory.as_posix())
        self._tails: dict[Path, _RecordTail] = {}
        # (file directory parts, tag) -> the metric names that tag counts for there.
        self._matches: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {}

    def files(self) -> list[Path]:
        """The event files now under the directory, in a stable order (by relative path)."""
        if self.directory.is_file():
            return [self.directory]
        found: list[Path] = []
        for root, dirs, names in os.walk(self.directory):
            dirs.sort()
            found.extend(Path(root) / n for n in sorted(names) if "tfevents" in n)
        return found

    def read(self, final: bool = False) -> list[Observation]:
        """Observations from events written since the last read. ``final`` changes nothing but is
        accepted for symmetry with the line parsers: a half-written record at the end can never be
        completed into a value, so it is left (and logged at debug level)."""
        out: list[Observation] = []
        for path in self.files():
            tail = self._tails.setdefault(path, _RecordTail())
            try:
                records = tail.read_records(path)
            except FileNotFoundError:
                continue
            if records:
                out.extend(self._observations(path, records))
            if final and not tail.broken:
                try:
                    left = path.stat().st_size - tail.offset
                except OSError:
                    left = 0
                if left:
                    log.debug("%s ends with %d bytes of an unfinished record", path, left)
        return out

    def _observations(self, path: Path, records: list[bytes]) -> list[Observation]:
        from google.protobuf.message import DecodeError

        event_type = _event_type()
        dir_parts = self._dir_parts(path)
        out: list[Observation] = []
        for record in records:
            event = event_type()
            try:
                event.ParseFromString(record)
            except DecodeError:
                log.warning("%s: a record that is not an Event, skipped", path)
                continue
            if not event.HasField("summary"):
                continue
            timestamp = event.wall_time or None
            for value in event.summary.value:
                names = self._metrics_for(dir_parts, value.tag)
                if not names:
                    continue
                kind = value.WhichOneof("value")
                number: float | None
                if kind == "simple_value":
                    number = float(value.simple_value)
                elif kind == "tensor":
                    number = _tensor_scalar(value.tensor)
                else:
                    number = None
                if number is None:
                    continue
                out.extend(Observation(name, number, int(event.step), timestamp) for name in names)
        return out

    def _dir_parts(self, path: Path) -> tuple[str, ...]:
        if self.directory.is_file():
            return self.sandbox_dir.parent.parts
        relative = path.parent.relative_to(self.directory)
        return (self.sandbox_dir / PurePosixPath(relative.as_posix())).parts

    def _metrics_for(self, dir_parts: tuple[str, ...], tag: str) -> tuple[str, ...]:
        key = (dir_parts, tag)
        cached = self._matches.get(key)
        if cached is None:
            cached = tuple(m for m in self.metric_names if _tag_matches(m, tag, dir_parts))
            self._matches[key] = cached
        return cached


def _tag_matches(metric: str, tag: str, dir_parts: tuple[str, ...]) -> bool:
    if tag == metric:
        return True
    parts = [p for p in metric.split("/") if p]
    if len(parts) < 2:
        return tag.startswith(metric)
    suffix = tuple(parts[:-1])
    return tag.startswith(parts[-1]) and dir_parts[-len(suffix):] == suffix
