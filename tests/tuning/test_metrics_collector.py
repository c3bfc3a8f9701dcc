"""MetricsCollector.for_spec per collector kind, and Katib's observation summaries."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trimaran.tuning.metrics import (
    UNAVAILABLE,
    CollectorSources,
    MetricsCollector,
    Observation,
    UnsupportedCollectorError,
    format_value,
    objective_value,
    summarize,
)


def values(observations: list[Observation]) -> list[tuple[str, float]]:
    return [(o.metric, o.value) for o in observations]


# -- collectors ------------------------------------------------------------------------------------
def test_stdout_reads_every_attempt_in_order(tmp_path: Path) -> None:
    logs: list[Path] = []
    collector = MetricsCollector.for_spec({"collector": {"kind": "StdOut"}}, ["loss", "accuracy"],
                                          CollectorSources(log_paths=lambda: list(logs)))
    assert collector.kind == "StdOut"
    assert collector.poll() == []
    logs.append(tmp_path / "0.log")
    logs[0].write_text("starting\nepoch=1 loss=0.9\nloss=0.8")
    assert values(collector.poll()) == [("loss", 0.9)]
    logs.append(tmp_path / "1.log")  # the container restarted
    logs[1].write_text("loss=0.7 accuracy=0.5\n")
    assert values(collector.poll()) == [("loss", 0.7), ("accuracy", 0.5)]
    # The first attempt's unterminated last line is taken by the final read.
    assert values(collector.finish()) == [("loss", 0.8)]
    assert collector.finish() == [] and collector.poll() == []


def test_stdout_follows_a_log_through_its_rotations(tmp_path: Path) -> None:
    """The shim rotates a live log by renaming it (``0.log`` -> ``0.log.1``) and starting a new one:
    what was written before the rename is read once, from either name, and nothing is lost."""
    live = tmp_path / "0.log"

    def files() -> list[Path]:
        return [*sorted(tmp_path.glob("0.log.*"), key=lambda p: int(p.suffix[1:])), live]

    sources = CollectorSources(log_paths=files)
    collector = MetricsCollector.for_spec({"collector": {"kind": "StdOut"}}, ["loss"], sources)
    with open(live, "w") as out:
        out.write("loss=0.9\n")
        out.flush()
        assert values(collector.poll()) == [("loss", 0.9)]
        out.write("loss=0.8\n")  # after the last read, before the rotation
    live.rename(tmp_path / "0.log.1")
    live.write_text("loss=0.7\n")
    assert values(collector.poll()) == [("loss", 0.8), ("loss", 0.7)]
    # Two more rotations, the oldest deleted as the shim keeps a few files, between two reads.
    with open(live, "a") as out:
        out.write("loss=0.6\n")
    live.rename(tmp_path / "0.log.2")
    (tmp_path / "0.log.1").unlink()
    live.write_text("loss=0.5\n")
    live.rename(tmp_path / "0.log.3")
    live.write_text("loss=0.4\n")
    assert values(collector.poll()) == [("loss", 0.6), ("loss", 0.5), ("loss", 0.4)]
    assert collector.poll() == []


def test_stdout_with_custom_filter() -> None:
    spec = {"collector": {"kind": "StdOut"},
            "source": {"filter": {"metricsFormat": [r"([\w]+):\s+([\d.]+)"]}}}
    collector = MetricsCollector.for_spec(spec, ["loss"], CollectorSources())
    assert collector.parser.filters[0].pattern == r"([\w]+):\s+([\d.]+)"


def test_bare_or_missing_spec_is_stdout() -> None:
    assert MetricsCollector.for_spec(None, ["loss"], CollectorSources()).kind == "StdOut"
    assert MetricsCollector.for_spec({}, ["loss"], CollectorSources()).kind == "StdOut"


def test_file_text_through_the_resolver(tmp_path: Path) -> None:
    host = tmp_path / "volume"
    asked: list[str] = []

    def resolve(path: str) -> Path | None:
        asked.append(path)
        return host / "metrics.log" if host.exists() else None

    spec = {"collector": {"kind": "File"},
            "source": {"fileSystemPath": {"path": "/var/log/katib/metrics.log", "kind": "File", "format": "TEXT"}}}
    collector = MetricsCollector.for_spec(spec, ["loss"], CollectorSources(file_path_resolver=resolve))
    assert collector.poll() == []  # no volume yet
    host.mkdir()
    assert collector.poll() == []  # volume, no file yet
    (host / "metrics.log").write_text("2024-05-01T12:00:00Z loss=0.5\n")
    [obs] = collector.poll()
    assert (obs.metric, obs.value, obs.step, obs.timestamp) == ("loss", 0.5, 0, 1714564800.0)
    assert asked == ["/var/log/katib/metrics.log"] * 3


def test_file_defaults(tmp_path: Path) -> None:
    (tmp_path / "metrics.log").write_text("loss=0.5\n")
    seen: list[str] = []

    def resolve(path: str) -> Path:
        seen.append(path)
        return tmp_path / "metrics.log"

    collector = MetricsCollector.for_spec({"collector": {"kind": "File"}}, ["loss"],
                                          CollectorSources(file_path_resolver=resolve))
    assert values(collector.finish()) == [("loss", 0.5)]
    assert seen == ["/var/log/katib/metrics.log"]


def test_file_json(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text('{"loss": "0.5", "step": 4}\n{"loss": 0.25, "step": 5}\n')
    spec = {"collector": {"kind": "File"},
            "source": {"fileSystemPath": {"path": "/out/m.json", "kind": "File", "format": "JSON"}}}
    collector = MetricsCollector.for_spec(spec, ["loss"],
                                          CollectorSources(file_path_resolver=lambda p: tmp_path / "m.json"))
    assert [(o.value, o.step) for o in collector.poll()] == [(0.5, 4), (0.25, 5)]


def test_file_directory(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "a.log").write_text("loss=0.5\n")
    (tmp_path / "b" / "c.log").write_text("loss=0.4\n")
    spec = {"collector": {"kind": "File"},
            "source": {"fileSystemPath": {"path": "/out", "kind": "Directory", "format": "TEXT"}}}
    collector = MetricsCollector.for_spec(spec, ["loss"], CollectorSources(file_path_resolver=lambda p: tmp_path))
    assert values(collector.poll()) == [("loss", 0.5), ("loss", 0.4)]
    (tmp_path / "a.log").write_text("loss=0.5\nloss=0.3\n")
    assert values(collector.poll()) == [("loss", 0.3)]


@pytest.mark.parametrize("kind", ["Push", "None"])
def test_push_collects_nothing(kind: str) -> None:
    collector = MetricsCollector.for_spec({"collector": {"kind": kind}}, ["loss"], CollectorSources())
    assert collector.kind == "Push"
    assert collector.poll() == [] and collector.finish() == []


@pytest.mark.parametrize("kind", ["PrometheusMetric", "Custom", "Bogus"])
def test_unsupported_kinds(kind: str) -> None:
    with pytest.raises(UnsupportedCollectorError):
        MetricsCollector.for_spec({"collector": {"kind": kind}}, ["loss"], CollectorSources())


def test_bad_specs() -> None:
    with pytest.raises(ValueError, match="metricsFormat"):
        MetricsCollector.for_spec({"source": {"filter": {"metricsFormat": ["(only one group)"]}}}, ["loss"],
                                  CollectorSources())
    with pytest.raises(ValueError, match="format"):
        MetricsCollector.for_spec({"collector": {"kind": "File"}, "source": {"fileSystemPath": {"format": "XML"}}},
                                  ["loss"], CollectorSources())
    with pytest.raises(ValueError, match="objective"):
        MetricsCollector.for_spec({}, [], CollectorSources())


def test_an_unreadable_source_is_retried(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    collector = MetricsCollector.for_spec({}, ["loss"], CollectorSources(log_paths=lambda: [directory]))
    assert collector.poll() == []  # IsADirectoryError is logged, not raised


# -- summaries -------------------------------------------------------------------------------------
def obs(metric: str, *numbers: float) -> list[Observation]:
    return [Observation(metric, v, i, None) for i, v in enumerate(numbers)]


def test_summarize() -> None:
    observations = obs("loss", 0.9, 0.2, 0.4) + obs("accuracy", 0.5) + obs("ignored", 1.0)
    summary = summarize(observations, ["loss", "accuracy", "f1"])
    assert list(summary) == ["loss", "accuracy", "f1"]
    assert summary["loss"] == {"min": "0.2", "max": "0.9", "latest": "0.4"}
    assert summary["accuracy"] == {"min": "0.5", "max": "0.5", "latest": "0.5"}
    assert summary["f1"] == {"min": UNAVAILABLE, "max": UNAVAILABLE, "latest": UNAVAILABLE}


def test_summarize_nan() -> None:
    summary = summarize(obs("loss", 0.5, math.nan, 0.25, math.nan), ["loss"])
    assert summary["loss"] == {"min": "0.25", "max": "0.5", "latest": "nan"}
    assert summarize(obs("loss", math.nan), ["loss"])["loss"] == {"min": "nan", "max": "nan", "latest": "nan"}


@pytest.mark.parametrize(("value", "text"), [(0.3, "0.3"), (1.0, "1.0"), (-7.53e-05, "-7.53e-05"), (1e300, "1e+300"),
                                             (0.30000001192092896, "0.3"), (1 / 3, repr(1 / 3))])
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(("strategy", "expected"), [("min", 0.2), ("max", 0.9), ("latest", 0.4)])
def test_objective_value_strategies(strategy: str, expected: float) -> None:
    summary = summarize(obs("loss", 0.9, 0.2, 0.4), ["loss"])
    assert objective_value(summary, "loss", strategy) == expected  # type: ignore[arg-type]


def test_objective_value_unavailable() -> None:
    summary = summarize([], ["loss"])
    for strategy in ("min", "max", "latest"):
        assert objective_value(summary, "loss", strategy) is None  # type: ignore[arg-type]
    assert objective_value(summary, "not-there", "min") is None
    # Katib's rule: min/max fall back to latest when they are "unavailable".
    odd = {"loss": {"min": UNAVAILABLE, "max": "0.9", "latest": "0.5"}}
    assert objective_value(odd, "loss", "min") == 0.5
    assert objective_value(odd, "loss", "max") == 0.9
    with pytest.raises(ValueError, match="strategy"):
        objective_value(odd, "loss", "median")  # type: ignore[arg-type]
