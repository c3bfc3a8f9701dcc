"""A home that died with its whole session (never stopped, then deleted) leaves a bridge, its pods'
network namespaces and its nft tables; the next control plane on the machine removes them, and
keeps what a live control plane holds or a live process still uses."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import poll
from trimaran.runtime.network._nft import apply_table, table_exists, table_name
from trimaran.runtime.network._plan import home_digest, release_plan, reserve_plan
from trimaran.runtime.network._pods import NETNS_DIR, sweep_abandoned

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nft")),
                                reason="needs root, iproute2 and nft for bridges and network namespaces")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _exists(*args: str) -> bool:
    return subprocess.run(["ip", *args], capture_output=True, check=False).returncode == 0


class DeadHome:
    """What a killed control plane of ``home`` leaves: its bridge (on the slot it held), one pod's
    netns with a veth on the bridge, and its two nft tables."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.plan = reserve_plan(home)
        digest = home_digest(home)
        self.bridge = self.plan.bridge
        self.netns = f"trm-{digest}-pod1"
        self.tables = [f"trimaran-nat-{digest}", table_name(str(home.resolve()))]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.plan.gateway}/{self.plan.prefix_len}", "dev", self.bridge)
        _ip("netns", "add", self.netns)
        _ip("link", "add", f"v{digest}", "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        _ip("link", "set", f"v{digest}", "master", self.bridge)
        for table in self.tables:
            apply_table(table, "\tchain c {\n\t}\n", comment="a dead home's")

    def die(self) -> None:
        """Its control plane's process is gone: the slot is free again."""
        release_plan(self.plan)

    def left(self) -> list[str]:
        return ([self.bridge] if _exists("link", "show", self.bridge) else []) + \
            ([self.netns] if (NETNS_DIR / self.netns).exists() else []) + \
            [t for t in self.tables if table_exists(t)]

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        for table in self.tables:
            subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True, check=False)
        release_plan(self.plan)


@pytest.fixture
def dead(tmp_path: Path) -> Iterator[DeadHome]:
    home = tmp_path / "home"
    home.mkdir()
    made = DeadHome(home)
    yield made
    made.remove()


def test_a_home_gone_with_its_pods_is_removed_whole(dead: DeadHome) -> None:
    dead.die()
    assert len(dead.left()) == 4
    swept = sweep_abandoned("trm-another")
    # A control plane starting elsewhere on this machine at this moment may sweep it first (then
    # this sweep finds it held or gone); either way all four go.
    poll(lambda: not dead.left(), timeout=30, what=f"the dead home's network removed (this sweep: {swept})")


def test_a_live_control_plane_keeps_its_network(dead: DeadHome) -> None:
    # Its slot is still held (here, by this process, as the control plane's own process holds it).
    assert dead.bridge not in sweep_abandoned("trm-another")
    assert len(dead.left()) == 4


def test_a_pod_that_outlives_its_control_plane_keeps_its_network(dead: DeadHome) -> None:
    dead.die()
    pod = subprocess.Popen(["ip", "netns", "exec", dead.netns, "sleep", "600"])
    try:
        poll(lambda: subprocess.run(["ip", "netns", "pids", dead.netns], capture_output=True, text=True,
                                    check=False).stdout.strip(), timeout=30, what="the pod's process in its netns")
        assert dead.bridge not in sweep_abandoned("trm-another")
        assert len(dead.left()) == 4
    finally:
        pod.kill()
        pod.wait()
    assert dead.bridge in sweep_abandoned("trm-another")
    assert dead.left() == []
