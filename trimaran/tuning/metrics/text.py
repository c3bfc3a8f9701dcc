"""Katib's TEXT and JSON metrics formats, parsed incrementally (katib.md §1.4).

The trial controller tails growing files every fraction of a second so that early stopping can act
mid-trial; each parser therefore keeps, per file, the byte offset of the first line it has not
parsed yet, and a last line without its newline waits for the next read (the writer may be in the
middle of it) unless the read is final.

TEXT follows Katib's file-metricscollector:

* a line is considered only if it contains one of the metric names as a substring;
* if the text before the first space is an RFC3339 timestamp it is the observation's time,
  otherwise the time is unknown (None; Katib uses the zero time) and file order is the order;
* every filter (default :data:`DEFAULT_FILTER`) is applied find-all; group 1 is the name, group 2
  the value; names that are not requested metrics are dropped.

Two things Katib does not have, both harmless for Katib manifests:

* steps. TEXT carries none in Katib; here the step of an observation is the number of earlier
  observations of the same metric in this parser (0, 1, 2, ...), unless the line also carries
  ``step=N`` or ``epoch=N`` (``step`` wins when both do), which then is the step of every metric on
  that line. Early-stopping rules (``startStep``) compare against these steps.
* a value group that is empty or not a number (the default filter matches ``loss=`` with an empty
  value) is skipped with a debug log; Katib would store the empty string.

Filters are Python ``re`` patterns compiled with ``re.ASCII``, so ``\\d``, ``\\w``, ``\\s`` and
``\\b`` mean what they mean in Go's RE2 (ASCII only). Differences from RE2 that matter in practice:
Go's ``(?<name>...)`` is rewritten to Python's ``(?P<name>...)`` (RE2 accepts both); Go's ``\\z``
is rewritten to Python's ``\\Z``; RE2-only flags such as ``(?U)`` are rejected with a clear error;
Python-only constructs (look-around, back-references) are accepted here although Katib's webhook
would reject them. Like Katib, a filter needs at least two capturing groups.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from trimaran.tuning.metrics.observation import Observation

log = logging.getLogger(__name__)

#: Katib's ``DefaultFilter``: group 1 the metric name, group 2 its value.
DEFAULT_FILTER = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"

#: A line longer than this without a newline is parsed as it stands, so that a writer that never
#: ends its line (a progress bar redrawn with ``\r``) cannot make every read re-scan a growing tail.
MAX_LINE_BYTES = 1 << 20

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})", re.ASCII)
_STEP_ON_LINE = re.compile(r"(?<![\w-])(step|epoch)\s*=\s*(\d+)(?![\w.])", re.ASCII | re.IGNORECASE)
_GO_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z_])")
_GO_END_OF_TEXT = re.compile(r"(?<!\\)((?:\\\\)*)\\z")


def parse_rfc3339(text: str) -> float | None:
    """Seconds since the epoch for an RFC3339(Nano) timestamp as Go's ``time.Parse`` reads it
    (``T`` and ``Z`` upper-case, up to nine fraction digits), else None.

    Written out rather than ``datetime.fromisoformat`` because that accepts far more (dates alone,
    spaces, week dates) and would take words like ``2024-01-01`` at the start of a line as times.
    """
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 60):
        return None
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = m.group(8)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds + (float(m.group(7)) if m.group(7) else 0.0)


def parse_timestamp(value: object) -> float | None:
    """A JSON ``timestamp`` value: an RFC3339 string or epoch seconds (Katib's ``parseTimeStamp``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return parse_rfc3339(value.strip())
    return None


def compile_filter(pattern: str) -> re.Pattern[str]:
    """Compile a ``metricsFormat`` filter written for Go's RE2, as described in the module doc.

    Raises ValueError when it does not compile or has fewer than two capturing groups.
    """
    translated = _GO_NAMED_GROUP.sub("(?P<", pattern)
    translated = _GO_END_OF_TEXT.sub(r"\1\\Z", translated)
    try:
        compiled = re.compile(translated, re.ASCII)
    except re.error as exc:
        raise ValueError(f"metricsFormat filter {pattern!r} does not compile: {exc}") from exc
    if compiled.groups < 2:
        raise ValueError(f"metricsFormat filter {pattern!r} needs two capturing groups "
                         f"(metric name, then value); it has {compiled.groups}")
    return compiled


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class _FileTail:
    """Where reading a file stopped: the byte offset after the last complete line handed out."""

    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset = 0

    def read_lines(self, path: Path, final: bool) -> list[str]:
        """The complete lines added since the last call (all of the rest when ``final``).

        A file shorter than the offset was truncated or replaced: reading starts over, since the
        bytes that were there are gone and what is there now is new output.
        """
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < self.offset:
                log.info("%s shrank from %d to %d bytes; reading it from the start", path, self.offset, size)
                self.offset = 0
            if size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1
        if final or len(data) - end > MAX_LINE_BYTES:
            end = len(data)
        self.offset += end
        if not end:
            return []
        text = data[:end].decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]


class _LineParser:
    """Shared incremental machinery: per-file offsets and per-metric step counters."""

    def __init__(self, metric_names: Sequence[str]) -> None:
        if not metric_names:
            raise ValueError("at least one metric name is needed")
        self.metric_names: tuple[str, ...] = tuple(metric_names)
        self._wanted = frozenset(self.metric_names)
        # By the file's identity, not its name: a rotated log keeps its inode under a new name
        # (``N.log`` -> ``N.log.3``), and reading goes on where it stopped instead of starting over.
        self._tails: dict[tuple[int, int], _FileTail] = {}
        self._buffer = ""
        self._seen: dict[str, int] = {}

    def parse_line(self, line: str) -> list[Observation]:
        """The observations on one line (no newline)."""
        raise NotImplementedError

    def parse_lines(self, lines: Iterable[str]) -> list[Observation]:
        """The observations on several lines, in order."""
        out: list[Observation] = []
        for line in lines:
            out.extend(self.parse_line(line))
        return out

    def read(self, path: Path, final: bool = False) -> list[Observation]:
        """New observations in ``path`` since the last read of it. A file that does not exist
        (yet) gives none; ``final`` also parses a last line that has no newline."""
        try:
            identity = os.stat(path)
            tail = self._tails.setdefault((identity.st_dev, identity.st_ino), _FileTail())
            lines = tail.read_lines(Path(path), final)
        except FileNotFoundError:
            return []
        return self.parse_lines(lines)

    def forget_except(self, paths: Sequence[Path]) -> None:
        """Drop where reading stopped in files other than ``paths`` (rotated away, deleted): a
        later file may get a deleted one's inode and must be read from its start."""
        keep = set()
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                identity = os.stat(path)
                keep.add((identity.st_dev, identity.st_ino))
        for key in [k for k in self._tails if k not in keep]:
            del self._tails[key]

    def feed(self, data: str, final: bool = False) -> list[Observation]:
        """New observations in a chunk of a stream (for sources that are not files)."""
        self._buffer += data
        lines = self._buffer.split("\n")
        self._buffer = lines.pop()
        if final and self._buffer:
            lines.append(self._buffer)
            self._buffer = ""
        return self.parse_lines(line[:-1] if line.endswith("\r") else line for line in lines)

    def _next_step(self, metric: str, explicit: int | None) -> int:
        index = self._seen.get(metric, 0)
        self._seen[metric] = index + 1
        return index if explicit is None else explicit


class TextParser(_LineParser):
    """Katib's TEXT format (see the module doc for the rules and the step convention)."""

    def __init__(self, metric_names: Sequence[str], filters: list[str] | None = None) -> None:
        super().__init__(metric_names)
        self.filters: tuple[re.Pattern[str], ...] = tuple(compile_filter(f) for f in (filters or [DEFAULT_FILTER]))

    def parse_line(self, line: str) -> list[Observation]:
        # Katib's cheap pre-check: no metric name anywhere, no regex work.
        if not any(name in line for name in self.metric_names):
            return []
        line = line.strip()
        head, sep, _ = line.partition(" ")
        timestamp = parse_rfc3339(head) if sep else None
        step_match = _explicit_step(line)
        out: list[Observation] = []
        for pattern in self.filters:
            for match in pattern.finditer(line):
                name = (match.group(1) or "").strip()
                if name not in self._wanted:
                    continue
                raw = (match.group(2) or "").strip()
                value = _to_float(raw)
                if value is None:
                    log.debug("metric %s has no numeric value in %r", name, raw)
                    continue
                out.append(Observation(name, value, self._next_step(name, step_match), timestamp))
        return out


def _explicit_step(line: str) -> int | None:
    found = {m.group(1).lower(): int(m.group(2)) for m in _STEP_ON_LINE.finditer(line)}
    return found.get("step", found.get("epoch"))


class JsonLinesParser(_LineParser):
    """Katib's JSON format: one object per line, ``timestamp`` key (RFC3339 or epoch seconds).

    Katib reads only JSON *string* values (``{"loss": "0.12"}``) and silently skips numbers
    (kubeflow/katib#2162). Here numbers are read too unless ``strict_katib=True``; either way the
    first numeric value of each metric is logged once, because such a trial would report
    nothing on a Katib cluster. The step is the object's ``step`` (or ``epoch``) key when it is an
    integer, else the per-metric sequence number as in TEXT. Lines that are not JSON objects are
    skipped with a warning (Katib fails the whole collection on them).
    """

    def __init__(self, metric_names: Sequence[str], strict_katib: bool = False) -> None:
        super().__init__(metric_names)
        self.strict_katib = strict_katib
        self._hinted: set[str] = set()

    def parse_line(self, line: str) -> list[Observation]:
        line = line.strip()
        if not line:
            return []
        try:
            obj = json.loads(line)
        except ValueError:
            log.warning("metrics line is not JSON, skipped: %.200s", line)
            return []
        if not isinstance(obj, dict):
            log.warning("metrics line is not a JSON object, skipped: %.200s", line)
            return []
        timestamp = parse_timestamp(obj.get("timestamp"))
        step = _json_step(obj)
        out: list[Observation] = []
        for name in self.metric_names:
            if name not in obj:
                continue
            value = self._value(name, obj[name])
            if value is not None:
                out.append(Observation(name, value, self._next_step(name, step), timestamp))
        return out

    def _value(self, name: str, raw: object) -> float | None:
        if isinstance(raw, str):
            return _to_float(raw.strip())
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            if name not in self._hinted:
                self._hinted.add(name)
                action = "skipped (strict_katib)" if self.strict_katib else "accepted here"
                log.warning("metric %s has a numeric JSON value; Katib reads only string values "
                            "(write {\"%s\": \"%s\"}), so it is %s", name, name, raw, action)
            return None if self.strict_katib else float(raw)
        return None


def _json_step(obj: dict) -> int | None:
    for key in ("step", "epoch"):
        raw = obj.get(key)
        if isinstance(raw, bool):
            continue
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str) and raw.strip().isdigit():
            return int(raw.strip())
    return None
