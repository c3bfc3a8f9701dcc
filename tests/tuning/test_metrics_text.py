"""TEXT and JSON metrics parsing: Katib's rules (katib.md §1.4) and incremental reading."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trimaran.tuning.metrics import (
    DEFAULT_FILTER,
    JsonLinesParser,
    Observation,
    TextParser,
    compile_filter,
    parse_rfc3339,
)

KATIB_EXAMPLE_FILTER = r"{metricName: ([\w|-]+), metricValue: ((-?\d+)(\.\d+)?)}"


def values(observations: list[Observation]) -> list[tuple[str, float]]:
    return [(o.metric, o.value) for o in observations]


# -- Katib's default filter ------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "expected"), [
    ("loss=0.3", [("loss", 0.3)]),
    ("accuracy=.98", [("accuracy", 0.98)]),
    ("Score=-7.53e-05", [("Score", -7.53e-05)]),
    ("Score=1E0", [("Score", 1.0)]),
    ("Score=+2.5e+3", [("Score", 2500.0)]),
    ("loss = 0.25", [("loss", 0.25)]),
    ("epoch 1: loss=0.5 accuracy=0.8 Score=3", [("loss", 0.5), ("accuracy", 0.8), ("Score", 3.0)]),
    ("loss=0.5, loss=0.4", [("loss", 0.5), ("loss", 0.4)]),
    # Names are compared whole: val_loss is not loss even though the line contains "loss".
    ("val_loss=0.2 loss=0.1", [("loss", 0.1)]),
    ("val_loss=0.2", []),
    # No metric name on the line: skipped before any regex work.
    ("learning_rate=0.1 momentum=0.9", []),
    # The default filter matches an empty value; it is not a number, so it is skipped.
    ("loss= accuracy=0.5", [("accuracy", 0.5)]),
    ("loss=nan", []),
])
def test_default_filter(line: str, expected: list[tuple[str, float]]) -> None:
    parser = TextParser(["loss", "accuracy", "Score"])
    assert values(parser.parse_line(line)) == expected


def test_default_filter_is_katibs() -> None:
    assert DEFAULT_FILTER == r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"


def test_metric_names_with_dashes() -> None:
    parser = TextParser(["top-1"])
    assert values(parser.parse_line("top-1=0.75")) == [("top-1", 0.75)]


def test_non_ascii_digits_are_not_numbers() -> None:
    # Go's RE2 \d is ASCII only; re.ASCII keeps Python to the same.
    parser = TextParser(["loss"])
    assert parser.parse_line("loss=\u0663") == []


# -- timestamps ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("2024-05-01T12:00:00Z", 1714564800.0),
    ("2024-05-01T12:00:00.5Z", 1714564800.5),
    ("2024-05-01T12:00:00.123456789Z", 1714564800.123456789),
    ("2024-05-01T14:00:00+02:00", 1714564800.0),
    ("2024-05-01T07:30:00-04:30", 1714564800.0),
    ("2024-05-01", None),
    ("2024-05-01 12:00:00", None),
    ("2024-05-01T12:00:00", None),  # RFC3339 needs a zone
    ("2024-13-01T12:00:00Z", None),
    ("epoch", None),
])
def test_rfc3339(text: str, expected: float | None) -> None:
    got = parse_rfc3339(text)
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_timestamp_before_first_space() -> None:
    parser = TextParser(["loss"])
    [obs] = parser.parse_line("2024-05-01T12:00:00.25Z epoch 3 loss=0.5")
    assert obs.timestamp == pytest.approx(1714564800.25)
    [obs] = parser.parse_line("  2024-05-01T12:00:00Z loss=0.4  ")  # Katib trims the line first
    assert obs.timestamp == pytest.approx(1714564800.0)
    [obs] = parser.parse_line("INFO 2024-05-01T12:00:00Z loss=0.3")
    assert obs.timestamp is None
    [obs] = parser.parse_line("loss=0.2")  # no space at all
    assert obs.timestamp is None


# -- steps -----------------------------------------------------------------------------------------
def test_steps_are_per_metric_sequence_numbers() -> None:
    parser = TextParser(["loss", "accuracy"])
    obs = parser.parse_lines(["loss=0.9", "loss=0.8 accuracy=0.1", "loss=0.7", "accuracy=0.2"])
    assert [(o.metric, o.step) for o in obs] == [("loss", 0), ("loss", 1), ("accuracy", 0), ("loss", 2),
                                                 ("accuracy", 1)]


def test_step_or_epoch_on_the_line_is_the_step() -> None:
    parser = TextParser(["loss", "accuracy"])
    obs = parser.parse_lines([
        "epoch=3 loss=0.5 accuracy=0.7",
        "Epoch = 4 loss=0.4",
        "step=120 epoch=5 loss=0.3",  # step wins over epoch
        "global_step=7 loss=0.2",  # not a step key: the sequence number is used
        "loss=0.1",
    ])
    assert [(o.metric, o.step) for o in obs] == [("loss", 3), ("accuracy", 3), ("loss", 4), ("loss", 120),
                                                 ("loss", 3), ("loss", 4)]


# -- custom filters --------------------------------------------------------------------------------
def test_katib_example_filter() -> None:
    parser = TextParser(["accuracy", "loss"], [KATIB_EXAMPLE_FILTER])
    obs = parser.parse_lines([
        "{metricName: accuracy, metricValue: 0.8079}",
        "{metricName: loss, metricValue: -1}{metricName: accuracy, metricValue: 0.9}",
        "accuracy=0.5",  # the default filter is replaced, not added to
    ])
    assert values(obs) == [("accuracy", 0.8079), ("loss", -1.0), ("accuracy", 0.9)]


def test_several_filters_are_all_applied() -> None:
    parser = TextParser(["loss", "accuracy"], [r"(loss):\s*([\d.]+)", r"(accuracy) is ([\d.]+)"])
    assert values(parser.parse_line("loss: 0.5, accuracy is 0.75")) == [("loss", 0.5), ("accuracy", 0.75)]


def test_go_named_groups_are_translated() -> None:
    parser = TextParser(["loss"], [r"(?<name>\w+)\s+is\s+(?<value>[\d.]+)\z"])
    assert values(parser.parse_line("loss is 0.5")) == [("loss", 0.5)]
    assert parser.parse_line("loss is 0.5 then") == []
    # Python's own spelling works too.
    assert values(TextParser(["loss"], [r"(?P<n>\w+):(?P<v>[\d.]+)"]).parse_line("loss:1.5")) == [("loss", 1.5)]


@pytest.mark.parametrize("pattern", [r"(\w+)=[\d.]+", r"(?U)(\w+)=(\d+)", r"(\w+=(\d+"])
def test_bad_filters_are_rejected(pattern: str) -> None:
    with pytest.raises(ValueError, match="metricsFormat filter"):
        compile_filter(pattern)


# -- incremental reading ---------------------------------------------------------------------------
def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)


def test_incremental_reading_waits_for_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.log"
    parser = TextParser(["loss"])
    assert parser.read(path) == []  # not created yet
    append(path, "loss=0.1\nloss=0.")
    assert values(parser.read(path)) == [("loss", 0.1)]
    assert parser.read(path) == []
    append(path, "2\nno metric here\n")
    assert [(o.value, o.step) for o in parser.read(path)] == [(0.2, 1)]
    append(path, "loss=0.3\r\nloss=0.35")
    assert values(parser.read(path)) == [("loss", 0.3)]
    assert values(parser.read(path, final=True)) == [("loss", 0.35)]
    assert parser.read(path, final=True) == []


def test_a_truncated_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "metrics.log"
    parser = TextParser(["loss"])
    path.write_text("loss=0.1\nloss=0.2\n")
    assert len(parser.read(path)) == 2
    path.write_text("loss=0.9\n")
    assert [(o.value, o.step) for o in parser.read(path)] == [(0.9, 2)]


def test_offsets_are_per_file_and_steps_per_parser(tmp_path: Path) -> None:
    first, second = tmp_path / "0.log", tmp_path / "1.log"
    first.write_text("loss=0.5\nloss=0.4\n")
    second.write_text("loss=0.3\n")
    parser = TextParser(["loss"])
    obs = parser.read(first) + parser.read(second)
    assert [(o.value, o.step) for o in obs] == [(0.5, 0), (0.4, 1), (0.3, 2)]


def test_multibyte_text_split_across_reads(tmp_path: Path) -> None:
    path = tmp_path / "metrics.log"
    parser = TextParser(["loss"])
    data = "épоch ✓ loss=0.5\n".encode()
    path.write_bytes(data[:3])  # cut inside a two-byte character
    assert parser.read(path) == []
    with open(path, "ab") as f:
        f.write(data[3:])
    assert values(parser.read(path)) == [("loss", 0.5)]


def test_growing_file_read_in_arbitrary_chunks(tmp_path: Path) -> None:
    lines = [f"2024-05-01T12:00:{i:02d}Z epoch={i} loss={1 / (i + 1):.4f} accuracy={i / 10}" for i in range(30)]
    data = ("\n".join(lines) + "\n").encode()
    whole = TextParser(["loss", "accuracy"]).parse_lines(lines)
    path = tmp_path / "metrics.log"
    path.write_bytes(b"")
    parser = TextParser(["loss", "accuracy"])
    got: list[Observation] = []
    for start in range(0, len(data), 7):
        with open(path, "ab") as f:
            f.write(data[start:start + 7])
        got += parser.read(path)
    assert got == whole
    assert len(got) == 60


def test_feed_a_stream() -> None:
    parser = TextParser(["loss"])
    assert parser.feed("loss=0.1\nlos") != []
    assert values(parser.feed("s=0.2\nloss=0.3")) == [("loss", 0.2)]
    assert values(parser.feed("", final=True)) == [("loss", 0.3)]


# -- JSON lines ------------------------------------------------------------------------------------
def test_json_lines_katib_style(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    rows = [
        {"loss": "0.5", "accuracy": "0.6", "timestamp": "2024-05-01T12:00:00Z"},
        {"loss": "0.4", "timestamp": 1714564801.5, "other": "x"},
        {"accuracy": "0.7"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    obs = JsonLinesParser(["loss", "accuracy"]).read(path)
    assert [(o.metric, o.value, o.step, o.timestamp) for o in obs] == [
        ("loss", 0.5, 0, 1714564800.0),
        ("accuracy", 0.6, 0, 1714564800.0),
        ("loss", 0.4, 1, 1714564801.5),
        ("accuracy", 0.7, 1, None),
    ]


def test_json_numeric_values_accepted_with_a_hint(caplog: pytest.LogCaptureFixture) -> None:
    parser = JsonLinesParser(["loss"])
    with caplog.at_level(logging.WARNING, logger="trimaran.tuning.metrics.text"):
        obs = parser.parse_lines(['{"loss": 0.5}', '{"loss": 0.25}'])
    assert values(obs) == [("loss", 0.5), ("loss", 0.25)]
    hints = [r for r in caplog.records if "only string values" in r.getMessage()]
    assert len(hints) == 1  # once per metric, not per line
    assert "accepted here" in hints[0].getMessage()


def test_json_strict_katib_skips_numbers(caplog: pytest.LogCaptureFixture) -> None:
    parser = JsonLinesParser(["loss"], strict_katib=True)
    with caplog.at_level(logging.WARNING, logger="trimaran.tuning.metrics.text"):
        obs = parser.parse_lines(['{"loss": 0.5}', '{"loss": "0.25"}'])
    assert values(obs) == [("loss", 0.25)]
    assert any("skipped (strict_katib)" in r.getMessage() for r in caplog.records)


def test_json_steps_and_bad_lines() -> None:
    parser = JsonLinesParser(["loss"])
    obs = parser.parse_lines([
        '{"loss": "0.5", "step": 10}',
        '{"loss": "0.4", "epoch": "2"}',
        "not json at all",
        "[1, 2]",
        "",
        '{"loss": true}',
        '{"loss": "n/a"}',
        '{"loss": "0.3", "timestamp": "yesterday"}',
    ])
    assert [(o.value, o.step, o.timestamp) for o in obs] == [(0.5, 10, None), (0.4, 2, None), (0.3, 2, None)]


def test_json_incremental(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    parser = JsonLinesParser(["loss"])
    append(path, '{"loss": "0.5"}\n{"loss": "0.')
    assert values(parser.read(path)) == [("loss", 0.5)]
    append(path, '4"}\n')
    assert values(parser.read(path)) == [("loss", 0.4)]
