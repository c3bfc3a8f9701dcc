"""``python -m trimaran.serving.router --routes FILE``: serve the routes in FILE until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from trimaran.serving.router._router import Router


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the router on uvloop when it is installed."""
    parser = argparse.ArgumentParser(prog="python -m trimaran.serving.router")
    parser.add_argument("--routes", type=Path, required=True, help="the routes file the controller writes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        task = asyncio.create_task(Router(args.routes).run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(run())


if __name__ == "__main__":
    main()
