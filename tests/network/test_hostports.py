"""hostPort rules (the portmap plugin's) live exactly as long as their pods' networks: a pod's DEL
removes them, and those of a home that died without its DELs are swept by the next control plane,
while a live home's stay. A leftover rule takes its host port from every process on the machine."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trimaran.runtime.network import PodNetwork
from trimaran.runtime.network._hostports import sweep_stale_hostports
from trimaran.runtime.network._pods import sweep_abandoned

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/lib/cni/portmap").exists(),
    reason="the pod network needs root and the CNI plugins (containernetworking-plugins)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rules(port: int) -> list[str]:
    listing = subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if f"--dport {port} " in line or f"--dports {port} " in line]


class Home:
    """A home's pod network with one pod whose port 8080 is published on a free host port."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.network = PodNetwork.from_env(root, {"TRIMARAN_POD_NETWORK": "on", "TRIMARAN_POD_NETWORK_POOL": "0"})
        self.home = root
        self.uid = str(uuid.uuid4())
        self.port = _free_port()
        self.network.setup(self.uid, "default", "web", port_mappings=[
            {"hostPort": self.port, "containerPort": 8080, "protocol": "tcp"}])

    def die(self) -> None:
        """Gone with its session: its bridge and namespaces removed, no DEL run."""
        subprocess.run(["ip", "netns", "delete", Path(self.network.netns_path(self.uid)).name], check=False)
        subprocess.run(["ip", "link", "delete", self.network.plan.bridge], check=False)

    def close(self) -> None:
        self.network.close()
        PodNetwork.remove_home(self.home)


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[list[Home]]:
    made: list[Home] = []
    try:
        yield made
    finally:
        for home in made:
            home.close()
        for home in made:
            assert _rules(home.port) == [], f"hostPort {home.port} rules left"


def test_a_pods_teardown_removes_its_hostport_rules(homes: list[Home], tmp_path: Path) -> None:
    homes.append(Home(tmp_path / "a"))
    home = homes[0]
    assert _rules(home.port), "portmap forwards the hostPort"
    home.network.teardown(home.uid)
    assert _rules(home.port) == []


def test_the_rules_of_a_home_gone_without_its_dels_are_swept_and_a_live_homes_kept(homes: list[Home],
                                                                                    tmp_path: Path) -> None:
    homes += [Home(tmp_path / "dead"), Home(tmp_path / "live")]
    dead, live = homes
    dead.die()
    assert _rules(dead.port) and _rules(live.port)
    sweep_abandoned("trm-another")  # what every control plane does as it starts
    assert _rules(dead.port) == []
    assert _rules(live.port), "a live home's pod keeps its hostPort"


def test_other_networks_rules_are_never_swept(homes: list[Home], tmp_path: Path) -> None:
    homes.append(Home(tmp_path / "a"))
    home = homes[0]
    home.die()
    assert sweep_stale_hostports("someone-elses-network", []) == []
    assert _rules(home.port)
