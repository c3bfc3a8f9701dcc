"""``python -m trimaran.serving.seldon``: see `trimaran.serving.seldon.server`."""

from __future__ import annotations

import sys

from trimaran.serving.seldon.server import main

if __name__ == "__main__":
    sys.exit(main())
