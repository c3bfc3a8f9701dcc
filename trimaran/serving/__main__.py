"""``python -m trimaran.serving --model-name NAME --model-dir PATH ...``: run the model server in the foreground."""

from __future__ import annotations

import sys

from trimaran.serving.config import config_from_args
from trimaran.serving.server import serve


def main(argv: list[str] | None = None) -> int:
    return serve(config_from_args(argv))


if __name__ == "__main__":
    sys.exit(main())
