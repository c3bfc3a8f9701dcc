"""Ports are unique on the machine: two control planes (here, two processes) are never handed the same
port, even before anything binds it, and a process's reservations end with it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers import REPO
from trimaran.controllers.ports import PortAllocator

# Allocates argv[1] ports without binding them (a job's replicas before they start), prints them,
# and holds them until its stdin closes.
HOLDER = """
import sys
from trimaran.controllers.ports import PortAllocator
ports = PortAllocator().allocate(int(sys.argv[1]))
print(",".join(map(str, ports)), flush=True)
sys.stdin.read()
"""


class Holder:
    def __init__(self, count: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(count)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=REPO,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the holder exited before printing its ports"
        self.ports = [int(p) for p in line.strip().split(",")]

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.end()


def test_two_processes_never_get_the_same_port(holders: list[Holder]) -> None:
    holders += [Holder(8), Holder(8)]
    first, second = holders
    assert len(set(first.ports)) == len(set(second.ports)) == 8
    assert not set(first.ports) & set(second.ports)
    # And this process, a third control plane, gets neither's.
    mine = PortAllocator()
    got = mine.allocate(8)
    try:
        assert not set(got) & set(first.ports + second.ports)
    finally:
        mine.release(got)


def test_a_reservation_ends_with_its_process(holders: list[Holder]) -> None:
    holders.append(Holder(4))
    ports = holders[0].ports
    restarted = PortAllocator()  # a control plane that recorded the same ports (its own, it believes)
    assert restarted.reserve(ports) == ports, "another live process reserves them"
    restarted.release(ports)
    holders[0].end()  # killed: nothing released them but the kernel
    assert restarted.reserve(ports) == []
    restarted.release(ports)


def test_released_ports_can_be_reserved_elsewhere() -> None:
    allocator = PortAllocator()
    ports = allocator.allocate(3)
    script = ("import sys\nfrom trimaran.controllers.ports import PortAllocator\n"
              "print(PortAllocator().reserve([int(p) for p in sys.argv[1:]]))")

    def reserve_elsewhere() -> str:
        return subprocess.run([sys.executable, "-c", script, *map(str, ports)], capture_output=True, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout.strip()

    assert reserve_elsewhere() == str(ports)
    allocator.release(ports)
    assert reserve_elsewhere() == "[]"


def test_allocators_of_one_process_share_its_reservations() -> None:
    first, second, third = PortAllocator(), PortAllocator(), PortAllocator()
    a, b = first.allocate(5), second.allocate(5)
    c: list[int] = []
    try:
        assert not set(a) & set(b)
        second.reserve(a)  # both now hold a: it stays reserved until both let go
        first.release(a)
        c = third.allocate(5)
        assert not set(a + b) & set(c)
    finally:
        second.release(a + b)
        third.release(c)
