"""The real kubectl against this directory's control planes, in a namespace of the test's own."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run")

Kubectl = Callable[..., subprocess.CompletedProcess]


def kubectl_for(plane: ControlPlaneHandle, tmp_path: Path, namespace: str | None = None) -> Kubectl:
    """``kubectl [-n NAMESPACE] ...`` on ``plane``; ``check=False`` returns a refusal rather than raising."""
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))
    scope = ["-n", namespace] if namespace else []

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL or "kubectl", *scope, *args], env=env, input=input, capture_output=True,
                              text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
