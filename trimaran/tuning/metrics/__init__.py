"""Trial metrics: Katib's collectors (StdOut, File TEXT/JSON, TensorFlowEvent, Push) read
incrementally, and the per-trial summaries Katib keeps (katib.md §1.2, §1.4).

Everything here imports only the standard library; protobuf (for event files) is imported on the
first event file read.
"""

from trimaran.tuning.metrics.collector import (
    CollectorSources,
    FileCollector,
    LogCollector,
    MetricsCollector,
    PushCollector,
    TFEventCollector,
    UnsupportedCollectorError,
)
from trimaran.tuning.metrics.observation import UNAVAILABLE, Observation, format_value, objective_value, summarize
from trimaran.tuning.metrics.push import NotInTrialError, ReportError, report_metrics, trial_identity
from trimaran.tuning.metrics.text import (
    DEFAULT_FILTER,
    JsonLinesParser,
    TextParser,
    compile_filter,
    parse_rfc3339,
    parse_timestamp,
)
from trimaran.tuning.metrics.tfevents import TFEventReader

__all__ = [
    "DEFAULT_FILTER",
    "UNAVAILABLE",
    "CollectorSources",
    "FileCollector",
    "JsonLinesParser",
    "LogCollector",
    "MetricsCollector",
    "NotInTrialError",
    "Observation",
    "PushCollector",
    "ReportError",
    "TFEventCollector",
    "TFEventReader",
    "TextParser",
    "UnsupportedCollectorError",
    "compile_filter",
    "format_value",
    "objective_value",
    "parse_rfc3339",
    "parse_timestamp",
    "report_metrics",
    "summarize",
    "trial_identity",
]
