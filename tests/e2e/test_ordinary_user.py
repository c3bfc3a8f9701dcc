"""An ordinary user's control plane is the subset the README documents ("An ordinary user's
control plane"): pods share this machine's network, and the node says so where a user looks,
instead of a silence that reads as isolation: a ``HostNetworkOnly`` warning on the Node with the
reason, and a ``NotEnforced`` warning on every NetworkPolicy. Run as uid 65534 when the suite is
root, as this user otherwise."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import ControlPlaneHandle
from tests.e2e.nobody import nobody_plane
from tests.helpers import poll
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")


@pytest.fixture
def ordinary_plane(plane_with: Callable[..., ControlPlaneHandle]) -> Iterator[ControlPlaneHandle]:
    if os.geteuid() != 0:
        yield plane_with()
        return
    with nobody_plane() as handle:
        yield handle


def _events(plane: ControlPlaneHandle, reason: str) -> list[dict]:
    shown = plane.cli("get", "events", "-A", "-o", "json")
    return [e for e in json.loads(shown.stdout)["items"] if e["reason"] == reason]


def test_an_ordinary_users_node_shares_the_hosts_network_and_says_so(ordinary_plane: ControlPlaneHandle) -> None:
    plane = ordinary_plane
    docs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "idle"},
         "spec": {"restartPolicy": "Never", "containers": [
             {"name": "main", "image": "busybox", "command": ["sleep", "600"]}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny-all"},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}},
    ]
    plane.cli("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    plane.cli("wait", "--for=condition=Ready", "pod/idle", "--timeout=120s")

    pod = json.loads(plane.cli("get", "pod", "idle", "-o", "json").stdout)
    # No network namespace of its own: the pod's address is this machine's.
    assert pod["status"]["podIP"] == pod["status"]["hostIP"] == "127.0.0.1"
    service = json.loads(plane.cli("get", "service", "web", "-o", "json").stdout)
    assert service["spec"]["clusterIP"].startswith("127.")

    node = poll(lambda: _events(plane, "HostNetworkOnly"), timeout=60, what="the Node's HostNetworkOnly event")
    assert node[0]["type"] == "Warning" and node[0]["involvedObject"]["kind"] == "Node"
    message = node[0]["message"]
    assert "root (the control plane runs as an ordinary user)" in message, message
    assert "NetworkPolicy is not enforced" in message, message

    policy = poll(lambda: _events(plane, "NotEnforced"), timeout=60, what="the NetworkPolicy's NotEnforced event")
    assert policy[0]["type"] == "Warning"
    assert policy[0]["involvedObject"] == {**policy[0]["involvedObject"], "kind": "NetworkPolicy", "name": "deny-all"}
    assert "pods share this machine's network" in policy[0]["message"]
    # What `kubectl describe networkpolicy` would show.
    described = plane.cli("describe", "networkpolicy", "deny-all").stdout
    assert "NotEnforced" in described, described
