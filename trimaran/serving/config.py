"""The model server's settings and the command line of ``python -m trimaran.serving``.

The option names are a contract: the InferenceService controller starts replicas with them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True)
class VersionPolicy:
    """Which of the versions on disk to serve, as TF Serving's ``model_version_policy``.

    ``kind`` is ``latest`` (the ``count`` highest versions), ``all``, or ``specific`` (``versions``).
    """

    kind: str = "latest"
    count: int = 1
    versions: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        """``latest``, ``latest:N``, ``all`` or ``specific:1,3``; ValueError otherwise."""
        kind, _, arg = text.strip().partition(":")
        if kind == "latest":
            count = int(arg) if arg else 1
            if count < 1:
                raise ValueError(f"version policy {text!r}: latest needs at least 1 version")
            return cls("latest", count)
        if kind == "all" and not arg:
            return cls("all")
        if kind == "specific" and arg:
            try:
                versions = tuple(sorted({int(v) for v in arg.split(",") if v.strip()}))
            except ValueError:
                raise ValueError(f"version policy {text!r}: versions must be integers") from None
            return cls("specific", versions=versions)
        raise ValueError(f"version policy {text!r}: expected latest[:N], all or specific:V1,V2")

    def select(self, present: list[int]) -> set[int]:
        """The versions to serve among those present."""
        if self.kind == "all":
            return set(present)
        if self.kind == "specific":
            return set(self.versions) & set(present)
        return set(sorted(present)[-self.count:])

    def __str__(self) -> str:
        if self.kind == "latest":
            return f"latest:{self.count}"
        if self.kind == "specific":
            return "specific:" + ",".join(map(str, self.versions))
        return "all"


@dataclass
class ServerConfig:
    """Everything one model server needs; workers receive it as JSON."""

    model_name: str
    model_dir: str
    model_format: str | None = None
    host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 8081  # 0: no gRPC server
    workers: int = 0  # 0: one per core
    max_batch_size: int = 0  # 0 or 1: no adaptive batching
    max_batch_latency_ms: float = 1.0
    max_queue: int = 1024
    request_timeout: float = 60.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    version_policy: str = "latest:1"
    poll_interval: float = 1.0  # 0: load once, never poll
    predictor_host: str | None = None
    predictor_protocol: str = "v1"
    drain_timeout: float = 5.0
    keepalive_timeout: float = 65.0  # KServe's: longer than a proxy's idle timeout, so the proxy closes first
    # Payload logging (trimaran.serving.logger): KServe agent's --log-url/--log-mode, its ce-source and the
    # CloudEvents extensions it names the service by (inferenceservicename, namespace, component, endpoint).
    log_url: str | None = None
    log_mode: str = "all"
    log_source: str | None = None
    log_extensions: dict[str, str] = dataclasses.field(default_factory=dict)
    log_queue: int = 1024  # events waiting to be sent; more are dropped (and counted), never waited for

    def __post_init__(self) -> None:
        if self.workers <= 0:
            self.workers = os.cpu_count() or 1
        VersionPolicy.parse(self.version_policy)  # fail at startup, not in each worker
        if self.predictor_protocol not in ("v1", "v2"):
            raise ValueError(f"--predictor-protocol must be v1 or v2, not {self.predictor_protocol!r}")
        for name in ("max_queue", "max_body_bytes", "log_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.request_timeout <= 0:
            raise ValueError("--request-timeout must be positive")
        if self.log_url:
            from trimaran.serving.logger import SinkConfig

            SinkConfig(self.log_url, self.log_mode)  # a bad URL or mode fails at startup, not in each worker

    @property
    def policy(self) -> VersionPolicy:
        return VersionPolicy.parse(self.version_policy)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerConfig:
        return cls(**data)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m trimaran.serving``."""
    p = argparse.ArgumentParser(prog="python -m trimaran.serving",
                                description="Serve a model over KServe V1 and V2 (REST and gRPC).")
    p.add_argument("--model-name", required=True, help="name clients address the model by")
    p.add_argument("--model-dir", required=True,
                   help="base path: <dir>/<integer version>/... (TF Serving) or the model itself (version 1)")
    p.add_argument("--model-format", default=None, help="KServe modelFormat name; detected when omitted")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, default=8080)
    p.add_argument("--grpc-port", type=int, default=8081, help="0 disables gRPC")
    p.add_argument("--workers", type=int, default=0, help="worker processes (default: one per core)")
    p.add_argument("--max-batch-size", type=int, default=0, help="requests per adaptive batch (0/1: off)")
    p.add_argument("--max-batch-latency-ms", type=float, default=1.0,
                   help="longest a request waits for its batch to fill")
    p.add_argument("--max-queue", type=int, default=1024, help="requests waiting per worker before 503")
    p.add_argument("--request-timeout", type=float, default=60.0, help="seconds before a request gets 504")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY, help="larger bodies get 413")
    p.add_argument("--version-policy", default="latest:1", help="latest[:N] | all | specific:V1,V2")
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds between model directory scans")
    p.add_argument("--predictor-host", default=None, help="HOST:PORT of the predictor (transformer mode)")
    p.add_argument("--predictor-protocol", choices=["v1", "v2"], default="v1")
    p.add_argument("--drain-timeout", type=float, default=5.0,
                   help="seconds SIGTERM waits for in-flight requests before exiting")
    p.add_argument("--log-url", default=None, help="send inference requests/responses as CloudEvents here")
    p.add_argument("--log-mode", choices=["all", "request", "response"], default="all")
    p.add_argument("--log-source", default=None, help="the events' ce-source (default: this server's URL)")
    p.add_argument("--log-extension", dest="log_extensions", action="append", default=[], metavar="NAME=VALUE",
                   help="a CloudEvents extension sent on every event (repeatable)")
    p.add_argument("--log-queue", type=int, default=1024,
                   help="events waiting for the sink before more are dropped (counted in /metrics)")
    return p


def config_from_args(argv: list[str] | None = None) -> ServerConfig:
    """Parse a command line into a ServerConfig; exits with a usage message when it is invalid."""
    parser = build_parser()
    args = parser.parse_args(argv)
    extensions = {}
    for item in args.log_extensions:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--log-extension {item!r}: expected NAME=VALUE")
        extensions[name] = value
    args.log_extensions = extensions
    try:
        return ServerConfig(**vars(args))
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
