"""NetworkPolicy through the API with the real kubectl: stored, defaulted, listed with kubectl's
columns, refused when invalid as kube-apiserver refuses it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

plane = shared_plane("netpol-api")

POLICY = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-allow, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: b}}
      podSelector: {matchLabels: {role: client}}
    - ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}
    ports:
    - {port: http}
    - {port: 9000, endPort: 9100, protocol: UDP}
  egress:
  - {}
"""


def _kubectl(plane: ControlPlaneHandle, tmp_path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))
    return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=120, input=input)


def test_networkpolicy_through_kubectl(plane: ControlPlaneHandle, tmp_path) -> None:  # noqa: ANN001
    applied = _kubectl(plane, tmp_path, "apply", "-f", "-", input=POLICY)
    assert applied.stdout.strip() == "networkpolicy.networking.k8s.io/web-allow created", applied.stderr
    stored = json.loads(_kubectl(plane, tmp_path, "get", "netpol", "web-allow", "-o", "json").stdout)
    assert stored["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert stored["spec"]["ingress"][0]["ports"][0] == {"port": "http", "protocol": "TCP"}
    assert stored["spec"]["ingress"][0]["from"][1]["ipBlock"]["except"] == ["10.1.0.0/16"]
    table = _kubectl(plane, tmp_path, "get", "networkpolicies").stdout.splitlines()
    assert table[0].split() == ["NAME", "POD-SELECTOR", "AGE"]
    assert table[1].split()[:2] == ["web-allow", "app=web"]

    bad = POLICY.replace("{port: http}", "{port: http, endPort: 90}").replace("web-allow", "bad")
    refused = _kubectl(plane, tmp_path, "apply", "-f", "-", input=bad)
    assert refused.returncode != 0
    assert "may not be specified when `port` is non-numeric" in refused.stderr
    assert _kubectl(plane, tmp_path, "delete", "netpol", "web-allow").returncode == 0
