"""A trial's metrics collector: Katib's ``metricsCollectorSpec`` turned into something the trial
controller polls while the trial runs and reads once more when it ends (katib.md §1.4).

Katib runs a sidecar that parses the output after the training process exits. Here the
controller itself reads the sources as they grow, so observations (and early stopping) happen
mid-trial; the sources are the same ones Katib's sidecar would read:

========================  =====================================================================
kind                      source
========================  =====================================================================
``StdOut`` (default)      the primary container's log files, TEXT (Katib's wrapper redirects
                          stdout and stderr to a file; the local runtime already has them)
``File``                  ``source.fileSystemPath.path`` inside the pod, TEXT or JSON; with
                          ``kind: Directory`` every file under it
``TensorFlowEvent``       the event files under ``source.fileSystemPath.path``
``Push`` (old: ``None``)  nothing to read: the training code posts observations to the API
``PrometheusMetric``,     not supported: Katib ships no collector for the first, and the second
``Custom``                is a user sidecar that would talk to Katib's database service
========================  =====================================================================
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trimaran.tuning.metrics.observation import Observation
from trimaran.tuning.metrics.text import JsonLinesParser, TextParser, _LineParser
from trimaran.tuning.metrics.tfevents import TFEventReader

log = logging.getLogger(__name__)

DEFAULT_FILE_PATH = "/var/log/katib/metrics.log"
DEFAULT_TFEVENT_PATH = "/var/log/katib/tfevent/"
PUSH_KINDS = ("Push", "None")  # "None" is the name before Katib v0.18 (PR #2369)


class UnsupportedCollectorError(ValueError):
    """The spec names a collector kind that cannot run here."""


def _no_logs() -> list[Path]:
    return []


def _no_files(path: str) -> Path | None:
    return None


@dataclass
class CollectorSources:
    """Where a trial's outputs are on the host.

    ``log_paths`` lists the primary container's log files in attempt order, each attempt's rotated
    files before its live one (called on every read, since attempts and pods come and go).
    ``file_path_resolver`` maps a path as the training code sees it (``/var/log/katib/metrics.log``)
    to the host path, or None while there is none yet (the pod has not started).
    """

    log_paths: Callable[[], list[Path]] = field(default=_no_logs)
    file_path_resolver: Callable[[str], Path | None] = field(default=_no_files)


class MetricsCollector:
    """Reads one trial's metrics. Build it with :meth:`for_spec`.

    :meth:`poll` returns the observations that appeared since the previous call; :meth:`finish`
    is the last read once the trial's process has ended (it also takes a last line without a
    newline) and returns [] when called again. Observations come in source order, which is the
    same on a re-read from scratch, so a caller that rebuilt a collector can skip the number it
    already stored. An unreadable source is logged and read again on the next call rather than
    raised, since the controller calls this from its reconcile loop.
    """

    kind: str = ""

    def __init__(self, metric_names: Sequence[str]) -> None:
        self.metric_names: tuple[str, ...] = tuple(metric_names)
        self.finished = False

    @classmethod
    def for_spec(cls, collector_spec: dict[str, Any] | None, metric_names: Sequence[str],
                 sources: CollectorSources) -> MetricsCollector:
        """The collector for a Katib ``metricsCollectorSpec`` (defaults filled in here too, so a
        bare ``{"collector": {"kind": "StdOut"}}`` works). ``metric_names`` is the objective
        metric first, then the additional ones.

        Raises UnsupportedCollectorError for PrometheusMetric, Custom and unknown kinds, and
        ValueError for a filter that does not compile.
        """
        spec = collector_spec or {}
        kind = (spec.get("collector") or {}).get("kind") or "StdOut"
        source = spec.get("source") or {}
        fs_path = source.get("fileSystemPath") or {}
        filters = list((source.get("filter") or {}).get("metricsFormat") or []) or None
        if not metric_names:
            raise ValueError("a metrics collector needs at least the objective metric name")
        if kind in PUSH_KINDS:
            return PushCollector(metric_names)
        if kind == "StdOut":
            parser = _line_parser(fs_path.get("format") or "TEXT", metric_names, filters)
            return LogCollector(metric_names, parser, sources.log_paths)
        if kind == "File":
            parser = _line_parser(fs_path.get("format") or "TEXT", metric_names, filters)
            return FileCollector(metric_names, parser, fs_path.get("path") or DEFAULT_FILE_PATH,
                                 (fs_path.get("kind") or "File") == "Directory", sources.file_path_resolver)
        if kind == "TensorFlowEvent":
            return TFEventCollector(metric_names, fs_path.get("path") or DEFAULT_TFEVENT_PATH,
                                    sources.file_path_resolver)
        if kind in ("PrometheusMetric", "Custom"):
            raise UnsupportedCollectorError(
                f"metrics collector kind {kind} is not supported here; use StdOut, File, TensorFlowEvent or Push")
        raise UnsupportedCollectorError(f"unknown metrics collector kind {kind!r}")

    def poll(self) -> list[Observation]:
        """Observations that appeared since the last call (complete lines/records only)."""
        if self.finished:
            return []
        return self._safe_read(final=False)

    def finish(self) -> list[Observation]:
        """The last read; later calls of :meth:`poll` and :meth:`finish` return []."""
        if self.finished:
            return []
        self.finished = True
        return self._safe_read(final=True)

    def _safe_read(self, final: bool) -> list[Observation]:
        try:
            return self._read(final)
        except OSError as exc:
            log.warning("%s metrics collector could not read its source: %s", self.kind, exc)
            return []

    def _read(self, final: bool) -> list[Observation]:
        raise NotImplementedError


def _line_parser(fmt: str, metric_names: Sequence[str], filters: list[str] | None) -> _LineParser:
    if fmt == "JSON":
        if filters:
            # Katib's webhook rejects this combination; a spec that got here anyway still collects.
            log.warning("metricsFormat filters are ignored for the JSON format")
        return JsonLinesParser(metric_names)
    if fmt != "TEXT":
        raise ValueError(f"unknown metrics file format {fmt!r}: expected TEXT or JSON")
    return TextParser(metric_names, filters)


class PushCollector(MetricsCollector):
    """Push: the training code reports through the API, so there is nothing to read."""

    kind = "Push"

    def _read(self, final: bool) -> list[Observation]:
        return []


class LogCollector(MetricsCollector):
    """StdOut: the primary container's log files, every attempt in order.

    A last line without a newline is only taken by :meth:`finish`, also for earlier attempts,
    because with several primary pods (a Job with parallelism) an earlier file may still grow.
    """

    kind = "StdOut"

    def __init__(self, metric_names: Sequence[str], parser: _LineParser,
                 log_paths: Callable[[], list[Path]]) -> None:
        super().__init__(metric_names)
        self.parser = parser
        self._log_paths = log_paths

    def _read(self, final: bool) -> list[Observation]:
        out: list[Observation] = []
        paths = self._log_paths()
        for path in paths:
            out.extend(self.parser.read(path, final=final))
        self.parser.forget_except(paths)
        return out


class FileCollector(MetricsCollector):
    """File: one file the training code writes, or every file under a directory (by name)."""

    kind = "File"

    def __init__(self, metric_names: Sequence[str], parser: _LineParser, path: str, directory: bool,
                 resolve: Callable[[str], Path | None]) -> None:
        super().__init__(metric_names)
        self.parser = parser
        self.path = path
        self.directory = directory
        self._resolve = resolve

    def _read(self, final: bool) -> list[Observation]:
        host = self._resolve(self.path)
        if host is None:
            return []
        out: list[Observation] = []
        for path in _files_under(host) if self.directory else [host]:
            out.extend(self.parser.read(path, final=final))
        return out


def _files_under(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        found.extend(Path(root) / n for n in sorted(names))
    return found


class TFEventCollector(MetricsCollector):
    """TensorFlowEvent: the event files under a directory (see :class:`TFEventReader`)."""

    kind = "TensorFlowEvent"

    def __init__(self, metric_names: Sequence[str], path: str, resolve: Callable[[str], Path | None]) -> None:
        super().__init__(metric_names)
        self.path = path
        self._resolve = resolve
        # One reader per host directory: a recreated pod gets a new volume, and the old one's
        # offsets must not apply to it.
        self._readers: dict[Path, TFEventReader] = {}

    def _read(self, final: bool) -> list[Observation]:
        host = self._resolve(self.path)
        if host is None:
            return []
        reader = self._readers.get(host)
        if reader is None:
            reader = self._readers[host] = TFEventReader(host, self.metric_names, sandbox_dir=self.path.rstrip("/"))
        return reader.read(final=final)
