"""The peer model servers, each installed into its own virtual environment under bench/.peers/<name>.

Idempotent: a stamp file in each venv records the requirements it was built with; a second run
with the same requirements only checks the stamp. scikit-learn is pinned to the version of
Trimaran's own environment so that the one `model.joblib` loads the same everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PEERS_DIR = Path(__file__).resolve().parent.parent / ".peers"

# Latest releases on PyPI when this benchmark was written (serving.md 3.3). MLServer 1.7.1's
# parallel-inference workers call asyncio.get_event_loop() before they have a loop, which
# uvloop >= 0.22 turns into a RuntimeError (the workers die at start): pin the uvloop of its time.
PINS = {
    "mlserver": ["mlserver==1.7.1", "mlserver-sklearn==1.7.1", "uvloop==0.21.0"],
    "kserve": ["kserve==0.21.0"],
    "bentoml": ["bentoml==1.4.40"],
    # gunicorn 20 (seldon-core's pin) imports pkg_resources, which setuptools 81 removed.
    "seldon": ["seldon-core==1.18.2", "setuptools<81"],
}
SHOW = {
    "mlserver": ["mlserver", "mlserver-sklearn", "uvloop", "scikit-learn", "numpy", "fastapi", "uvicorn", "grpcio",
                 "orjson"],
    "kserve": ["kserve", "uvloop", "scikit-learn", "numpy", "fastapi", "uvicorn", "grpcio", "orjson"],
    "bentoml": ["bentoml", "uvicorn", "starlette", "scikit-learn", "numpy", "pydantic"],
    "seldon": ["seldon-core", "flask", "gunicorn", "grpcio", "protobuf", "scikit-learn", "numpy"],
}


def requirements(name: str) -> list[str]:
    return [*PINS[name], f"scikit-learn=={metadata.version('scikit-learn')}", f"joblib=={metadata.version('joblib')}"]


def venv_python(name: str) -> Path:
    return PEERS_DIR / name / "bin" / "python"


def ensure(name: str, skip_install: bool = False) -> Path:
    """Returns the peer's interpreter, creating and filling its venv unless the stamp matches."""
    venv = PEERS_DIR / name
    stamp = venv / ".bench-stamp"
    want = "\n".join(requirements(name))
    if stamp.exists() and stamp.read_text() == want:
        return venv_python(name)
    if skip_install:
        if venv_python(name).exists():
            print(f"[{name}] --skip-install: using {venv} as it is (stamp differs or is missing)")
            return venv_python(name)
        raise SystemExit(f"{name} is not installed in {venv}; run without --skip-install")
    print(f"[{name}] installing {' '.join(requirements(name))} into {venv} ...", flush=True)
    if not venv_python(name).exists():
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv_python(name)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *requirements(name)], check=True)
    stamp.write_text(want)
    return venv_python(name)


def _base_python() -> str:
    """The interpreter this venv was made from (python3.X of the same minor version)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(base) if base.exists() else f"python{sys.version_info.major}.{sys.version_info.minor}"


def versions(name: str) -> dict[str, str]:
    code = ("import json, importlib.metadata as m, sys\n"
            f"names = {SHOW[name]!r}\n"
            "out = {'python': sys.version.split()[0]}\n"
            "for n in names:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    proc = subprocess.run([str(venv_python(name)), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)
