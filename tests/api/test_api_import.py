"""`import trimaran.api` stays cheap: the CLI imports it on every invocation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys, time
start = time.perf_counter()
import trimaran.api
elapsed = time.perf_counter() - start
print(json.dumps({"ms": elapsed * 1000, "modules": sorted(sys.modules)}))
"""
REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "tensorflow", "numpy", "sqlalchemy", "fastapi", "uvicorn", "rich", "typer", "httpx")


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def test_import_is_cheap_and_light() -> None:
    runs = [_probe() for _ in range(5)]
    # The fastest of a few runs: the budget is about our code, not about a busy machine.
    assert min(r["ms"] for r in runs) < 100
    loaded = {m.split(".")[0] for m in runs[0]["modules"]}
    assert not loaded & set(HEAVY)
    assert not any(m.startswith("trimaran.") and not m.startswith("trimaran.api") for m in runs[0]["modules"])
