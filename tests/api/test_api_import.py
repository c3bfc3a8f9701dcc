"""`import trimaran.api` stays light: the CLI imports it on every invocation.

What it must not pull in is checked here; how long it takes is a speed question, left to
benchmarks (a wall-clock budget in a test fails on a busy machine, not on slow code).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
import trimaran.api
from trimaran.api import ManifestError, load_manifests
(read,) = load_manifests("x.yaml", text="apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: x}\\n")
assert read.object["kind"] == "ConfigMap"
print(json.dumps(sorted(sys.modules)))
"""
REPO = Path(__file__).resolve().parents[2]
# pydantic too: reading manifests (what `trimaran apply` does) needs no model.
HEAVY = ("torch", "tensorflow", "numpy", "sqlalchemy", "fastapi", "uvicorn", "rich", "typer", "httpx", "pydantic")


def _modules_after_import() -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def test_import_loads_no_heavy_library_and_no_other_trimaran_package() -> None:
    modules = _modules_after_import()
    assert "trimaran.api" in modules
    loaded = {m.split(".")[0] for m in modules}
    assert not loaded & set(HEAVY)
    assert not any(m.startswith("trimaran.") and not m.startswith("trimaran.api") and m != "trimaran._lazy"
                   for m in modules)
