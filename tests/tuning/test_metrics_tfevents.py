"""TensorBoard event files: written by real tf.summary and torch.utils.tensorboard, read incrementally."""

from __future__ import annotations

import importlib.util
import logging
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trimaran.tuning.metrics import CollectorSources, MetricsCollector, TFEventReader, summarize
from trimaran.tuning.metrics.tfevents import _tag_matches, masked_crc32c

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None

# Runs in its own process, as a trial would: importing TensorFlow into the test process would
# cost every later test its memory and threads.
TF_WRITER = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    root = sys.argv[1]
    # tf.summary.write is TensorFlow's own op: it needs no TensorBoard.
    w = tf.summary.create_file_writer(os.path.join(root, "raw"))
    with w.as_default():
        for step in range(3):
            tf.summary.write("loss", tf.constant(1.0 / (step + 1), tf.float64), step=step)
            tf.summary.write("count", tf.constant(step * 10, tf.int64), step=step)
            tf.summary.write("half", tf.constant(0.5, tf.float16), step=step)
            tf.summary.write("brain", tf.constant(0.75, tf.bfloat16), step=step)
            tf.summary.write("vector", tf.constant([1.0, 2.0]), step=step)
            tf.summary.text("note", "loss is fine", step=step) if sys.argv[2] == "1" else None
    w.flush()
    if sys.argv[2] == "1":
        # tf.summary.scalar lives in TensorBoard; Keras' callback layout: train/ and validation/.
        for split, base in (("train", 1.0), ("validation", 2.0)):
            w = tf.summary.create_file_writer(os.path.join(root, "keras", split))
            with w.as_default():
                for epoch in range(4):
                    tf.summary.scalar("epoch_loss", base / (epoch + 1), step=epoch)
                    tf.summary.scalar("epoch_accuracy", 0.2 * epoch, step=epoch)
            w.flush()
""")


@pytest.fixture(scope="module")
def tf_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tensorflow")
    root = tmp_path_factory.mktemp("tfevents")
    proc = subprocess.run([sys.executable, "-c", TF_WRITER, str(root), "1" if HAS_TENSORBOARD else "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def only(observations: list, metric: str) -> list[tuple[int, float]]:
    return [(o.step, o.value) for o in observations if o.metric == metric]


def test_tf_summary_write_tensors(tf_events: Path) -> None:
    reader = TFEventReader(tf_events / "raw", ["loss", "count", "half", "brain", "vector", "note"])
    obs = reader.read()
    assert only(obs, "loss") == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert only(obs, "count") == [(0, 0.0), (1, 10.0), (2, 20.0)]
    assert only(obs, "half") == [(0, 0.5), (1, 0.5), (2, 0.5)]
    assert only(obs, "brain") == [(0, 0.75), (1, 0.75), (2, 0.75)]
    # Not scalars: a two-element tensor and a string tensor are not metric values.
    assert only(obs, "vector") == [] and only(obs, "note") == []
    assert all(o.timestamp and o.timestamp > 1e9 for o in obs)
    assert reader.read() == []  # nothing new


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tf.summary.scalar needs the tensorboard package")
def test_tf_summary_scalar_with_katib_directory_names(tf_events: Path) -> None:
    names = ["validation/epoch_loss", "train/epoch_loss", "epoch_accuracy"]
    reader = TFEventReader(tf_events / "keras", names, sandbox_dir="/var/log/katib/tfevent")
    obs = reader.read()
    assert only(obs, "train/epoch_loss") == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25)]
    assert only(obs, "validation/epoch_loss") == [(0, 2.0), (1, 1.0), (2, pytest.approx(2 / 3)), (3, 0.5)]
    # No directory in the name: every directory counts (train's four, then validation's).
    assert len(only(obs, "epoch_accuracy")) == 8
    # float32 values are summarised at their own precision, as Katib shows them.
    summary = summarize(obs, names)
    assert summary["train/epoch_loss"] == {"min": "0.25", "max": "1.0", "latest": "0.25"}
    assert summary["epoch_accuracy"]["max"] == "0.6"


def test_torch_summary_writer_incremental(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not HAS_TENSORBOARD:
        pytest.skip("torch.utils.tensorboard needs the tensorboard package")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "run"))
    reader = TFEventReader(tmp_path, ["loss", "accuracy"])
    try:
        for step in range(3):
            writer.add_scalar("loss", 1.0 - 0.25 * step, step)
        writer.add_histogram("loss_hist", torch.tensor([0.1, 0.2, 0.3]), 0)  # matches "loss" by prefix, not a scalar
        writer.flush()
        assert only(reader.read(), "loss") == [(0, 1.0), (1, 0.75), (2, 0.5)]
        writer.add_scalar("loss", 0.25, 7)
        writer.add_scalars("accuracy", {"top1": 0.5, "top5": 0.9}, 7)  # writes sub-directories
        writer.flush()
        obs = reader.read()
        assert only(obs, "loss") == [(7, 0.25)]
        assert sorted(v for _, v in only(obs, "accuracy")) == [0.5, pytest.approx(0.9)]
    finally:
        writer.close()
    assert reader.read(final=True) == []


def test_partial_records_wait(tf_events: Path, tmp_path: Path) -> None:
    [source] = list((tf_events / "raw").glob("*tfevents*"))
    data = source.read_bytes()
    whole = TFEventReader(source, ["loss", "count"]).read()
    copy = tmp_path / "events.out.tfevents.copy"
    copy.write_bytes(b"")
    reader = TFEventReader(tmp_path, ["loss", "count"])
    got = []
    for start in range(0, len(data), 5):
        with open(copy, "ab") as f:
            f.write(data[start:start + 5])
        got += reader.read()
    assert got == whole and len(got) == 6


def record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def test_framing_checksums() -> None:
    # Known value: TFRecord's masked CRC32C of an empty string.
    assert masked_crc32c(b"") == 0xA282EAD8
    # CRC32C check value for "123456789" is 0xE3069283 before masking.
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_corrupt_files_do_not_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("google.protobuf")
    (tmp_path / "events.out.tfevents.garbage").write_bytes(os.urandom(64))
    (tmp_path / "events.out.tfevents.notevent").write_bytes(record(b"\xff\xff\xff"))
    (tmp_path / "not-an-event-file.txt").write_text("loss=0.5\n")
    reader = TFEventReader(tmp_path, ["loss"])
    with caplog.at_level(logging.WARNING, logger="trimaran.tuning.metrics.tfevents"):
        assert reader.read() == []
        assert reader.read() == []
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "bad record header" in messages and "not an Event" in messages
    assert [p.name for p in reader.files()] == ["events.out.tfevents.garbage", "events.out.tfevents.notevent"]


@pytest.mark.parametrize(("metric", "tag", "dirs", "expected"), [
    ("loss", "loss", ("/", "logs"), True),
    ("loss", "loss_scale", ("/", "logs"), True),  # Katib matches by prefix
    ("loss", "val_loss", ("/", "logs"), False),
    ("train/accuracy", "accuracy", ("/", "logs", "train"), True),
    ("train/accuracy", "accuracy", ("/", "logs", "test"), False),
    ("train/accuracy", "accuracy", ("/", "logs", "pretrain"), False),  # whole components, unlike Katib
    ("train/accuracy", "train/accuracy", ("/", "logs"), True),  # exact tag: torch's add_scalar("train/...")
    ("a/b/accuracy", "accuracy", ("/", "x", "a", "b"), True),
])
def test_tag_matching(metric: str, tag: str, dirs: tuple[str, ...], expected: bool) -> None:
    assert _tag_matches(metric, tag, dirs) is expected


def test_tensorflow_event_collector(tf_events: Path) -> None:
    resolved: list[str] = []

    def resolve(path: str) -> Path | None:
        resolved.append(path)
        return tf_events / "raw" if len(resolved) > 1 else None  # the pod has not started at first

    spec = {"collector": {"kind": "TensorFlowEvent"},
            "source": {"fileSystemPath": {"path": "/var/log/katib/tfevent/", "kind": "Directory"}}}
    collector = MetricsCollector.for_spec(spec, ["loss", "count"], CollectorSources(file_path_resolver=resolve))
    assert collector.kind == "TensorFlowEvent"
    assert collector.poll() == []
    assert len(collector.poll()) == 6
    assert collector.finish() == []
    assert resolved == ["/var/log/katib/tfevent/"] * 3
