"""``trimaran serve MODEL_DIR --name NAME``: the model server in the foreground, with a startup panel.

The options are those of ``python -m trimaran.serving`` (:mod:`trimaran.serving.config`); the server itself is
imported only when the command runs, so the rest of the CLI does not pay for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from trimaran.cli.app import app

err = Console(stderr=True)


@app.command(no_args_is_help=True)
def serve(
    model_dir: Path = typer.Argument(..., help="Model base path: DIR/<version>/... (TF Serving) or the model itself."),
    name: str = typer.Option(None, "--name", help="Model name clients use (default: the directory's name)."),
    model_format: str = typer.Option(None, "--model-format", help="KServe modelFormat; detected when omitted."),
    host: str = typer.Option("127.0.0.1", "--host"),
    http_port: int = typer.Option(8080, "--http-port"),
    grpc_port: int = typer.Option(8081, "--grpc-port", help="0 disables gRPC."),
    workers: int = typer.Option(0, "--workers", help="Worker processes (default: one per core)."),
    max_batch_size: int = typer.Option(0, "--max-batch-size", help="Requests per adaptive batch (0/1: off)."),
    max_batch_latency_ms: float = typer.Option(1.0, "--max-batch-latency-ms",
                                               help="Longest a request waits for its batch to fill."),
    max_queue: int = typer.Option(1024, "--max-queue", help="Requests waiting per worker before 503."),
    request_timeout: float = typer.Option(60.0, "--request-timeout", help="Seconds before a request gets 504."),
    max_body_bytes: int = typer.Option(64 * 1024 * 1024, "--max-body-bytes", help="Larger bodies get 413."),
    version_policy: str = typer.Option("latest:1", "--version-policy", help="latest[:N] | all | specific:V1,V2"),
    poll_interval: float = typer.Option(1.0, "--poll-interval", help="Seconds between model directory scans."),
    predictor_host: str = typer.Option(None, "--predictor-host", help="HOST:PORT of the predictor (transformer)."),
    predictor_protocol: str = typer.Option("v1", "--predictor-protocol", help="v1 or v2."),
    drain_timeout: float = typer.Option(5.0, "--drain-timeout", help="Seconds SIGTERM waits for in-flight requests."),
) -> None:
    """Serve a model over KServe V1 and V2 (REST and gRPC) until Ctrl-C or SIGTERM."""
    from trimaran.serving.config import ServerConfig
    from trimaran.serving.server import Supervisor
    from trimaran.serving.server import serve as run_server

    try:
        config = ServerConfig(
            model_name=name or model_dir.resolve().name, model_dir=str(model_dir), model_format=model_format,
            host=host, http_port=http_port, grpc_port=grpc_port, workers=workers, max_batch_size=max_batch_size,
            max_batch_latency_ms=max_batch_latency_ms, max_queue=max_queue, request_timeout=request_timeout,
            max_body_bytes=max_body_bytes, version_policy=version_policy, poll_interval=poll_interval,
            predictor_host=predictor_host, predictor_protocol=predictor_protocol, drain_timeout=drain_timeout)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    if not model_dir.exists():
        err.print(f"[yellow]warning:[/yellow] {escape(str(model_dir))} does not exist yet; the server is not ready "
                  "until it does",
                  highlight=False)

    def panel(supervisor: Supervisor) -> None:
        urls = supervisor.urls()
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        grid.add_row("model", f"{config.model_name} ({config.model_format or 'format detected'})")
        grid.add_row("from", str(model_dir))
        grid.add_row("REST", f"{urls['http']}  (V1 /v1/models/{config.model_name}:predict, "
                             f"V2 /v2/models/{config.model_name}/infer)")
        grid.add_row("gRPC", f"{urls['grpc']}  (inference.GRPCInferenceService)" if "grpc" in urls else "off")
        grid.add_row("metrics", f"{urls['http']}/metrics")
        batching = (f"up to {config.max_batch_size} requests, {config.max_batch_latency_ms:g} ms"
                    if config.max_batch_size > 1 else "off")
        grid.add_row("workers", f"{config.workers}; batching {batching}; versions {config.version_policy}, "
                                f"polled every {config.poll_interval:g} s")
        err.print(Panel(grid, title="trimaran serve", expand=False))
        err.print(f"try: curl {urls['http']}/v1/models/{config.model_name}", highlight=False)

    code = run_server(config, on_started=panel)
    if code:
        sys.exit(code)
