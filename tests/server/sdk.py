"""Running a real Kubernetes or Kubeflow client against a control plane, in a virtualenv of its own.

Each client runs as a script in a subprocess with ``KUBECONFIG`` pointing at the plane's kubeconfig
(HTTPS with the home's CA and the user's bearer token), exactly as a user's program would, and prints
one JSON object on its last line of stdout for the test to assert on.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle


def venv_python(variable: str, module: str, built_by: str) -> str:
    """The interpreter named by ``$variable``; skip the test when it is unset.

    ``scripts/test.sh`` (CI) builds the virtualenv and exports the variable, so there the test always
    runs, and an interpreter that cannot import ``module`` is a failure, not a reason to skip.
    """
    python = os.environ.get(variable)
    if not python:
        pytest.skip(f"${variable} is unset: scripts/test.sh builds {built_by} and sets it")
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, f"{python} cannot import {module}:\n{probe.stderr}"
    return python


def run_client(python: str, plane: ControlPlaneHandle, script: str, tmp_path: Path, *args: str,
               timeout: float = 300, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` with ``python`` against ``plane``; return the JSON object it printed last."""
    path = tmp_path / f"client-{len(list(tmp_path.glob('client-*.py')))}.py"
    path.write_text(textwrap.dedent(script))
    home = tmp_path / "client-home"
    home.mkdir(exist_ok=True)
    # Nothing of ours on the client's path: it sees the API only, through its kubeconfig.
    client_env = {k: v for k, v in os.environ.items()
                  if not k.startswith(("TRIMARAN_", "KUBE", "PYTHON", "VIRTUAL_ENV"))}
    client_env.update(KUBECONFIG=str(plane.home / "kubeconfig"), HOME=str(home), PYTHONUNBUFFERED="1",
                      **(env or {}))
    done = subprocess.run([python, str(path), *args], env=client_env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    assert done.returncode == 0, f"client exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"client printed nothing\nstderr:\n{done.stderr}"
    return json.loads(lines[-1])
