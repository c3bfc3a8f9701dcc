"""A home's pod network plan: its bridge, pod range and service range, reserved machine-wide.

Ranges are /21 slots of 10.224.0.0/12 (512 of them): the first /22 of a slot holds the pods, the
second the Services' virtual addresses. A slot is the home's when (1) no interface address or route
of this machine (``ip route show table all``) falls in it, other than its own bridge's, and (2) no
other live control plane reserves it: the reservation is an exclusive ``fcntl`` lock on byte N of
one machine-wide file, held by the control plane's process, so a crash leaks nothing. While a
control plane is down its pods keep the bridge and its routes, which (1) sees; on restart it takes
the slot its ``network.json`` records again.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["NetworkPlan", "PlanError", "home_digest", "hold_abandoned", "reserve_plan", "slot_of", "PLAN_FILE"]

PLAN_FILE = "network.json"
_SPACE = ipaddress.ip_network("10.224.0.0/12")
_SLOT_PREFIX = 21
_SLOTS = 2 ** (_SLOT_PREFIX - _SPACE.prefixlen)
#: Machine-wide, shared by every home and user (as the port registry, controllers/ports.py).
REGISTRY = Path("/tmp/trimaran-netplans.lock")

_lock = threading.Lock()
_held_here: dict[int, str] = {}  # slot -> home, for control planes of this process (fcntl never conflicts within one)
_registry_fd: int | None = None


class PlanError(RuntimeError):
    """No pod range is free on this machine."""


def home_digest(home: Path) -> str:
    """Eight hex digits naming the home's network objects (bridge, netns, nft table)."""
    return hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class NetworkPlan:
    bridge: str
    pod_cidr: str
    gateway: str
    service_cidr: str
    dns_ip: str
    api_ip: str
    slot: int

    @classmethod
    def for_slot(cls, home: Path, slot: int) -> NetworkPlan:
        base = int(_SPACE.network_address) + slot * 2 ** (32 - _SLOT_PREFIX)
        pods = ipaddress.ip_network((base, _SLOT_PREFIX + 1))
        services = ipaddress.ip_network((base + pods.num_addresses, _SLOT_PREFIX + 1))
        return cls(bridge=f"trm-{home_digest(home)}", pod_cidr=str(pods), gateway=str(pods[1]),
                   service_cidr=str(services), dns_ip=str(services[10]), api_ip=str(services[1]), slot=slot)

    @property
    def slot_network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(self.pod_cidr).supernet(new_prefix=_SLOT_PREFIX)

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.pod_cidr).prefixlen


def _registry() -> int | None:
    global _registry_fd
    if _registry_fd is None:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:
                _registry_fd = os.open(REGISTRY, flags)
            except FileNotFoundError:
                _registry_fd = os.open(REGISTRY, flags | os.O_CREAT, 0o666)
                os.fchmod(_registry_fd, 0o666)
        except OSError:
            return None
    return _registry_fd


def _claim(slot: int, home: str) -> bool:
    owner = _held_here.get(slot)
    if owner is not None:
        return owner == home
    if not _lock_slot(slot):
        return False
    _held_here[slot] = home
    return True


def _lock_slot(slot: int) -> bool:
    """The machine-wide lock on ``slot``, taken without waiting; False when another process has it
    (no registry file: nothing to share, so True)."""
    fd = _registry()
    if fd is not None:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
        except OSError:
            return False
    return True


def _unlock_slot(slot: int) -> None:
    if _registry_fd is not None:
        fcntl.lockf(_registry_fd, fcntl.LOCK_UN, 1, slot)


def release_plan(plan: NetworkPlan) -> None:
    """Give the slot back (the control plane stopped; its bridge is gone or stays only while pods live)."""
    with _lock:
        if _held_here.pop(plan.slot, None) is not None:
            _unlock_slot(plan.slot)


def slot_of(gateway: str) -> int | None:
    """The slot whose gateway ``gateway`` is, or None when it is no Trimaran gateway."""
    try:
        address = ipaddress.ip_address(gateway)
    except ValueError:
        return None
    if address not in _SPACE:
        return None
    slot = (int(address) - int(_SPACE.network_address)) // 2 ** (32 - _SLOT_PREFIX)
    return slot if NetworkPlan.for_slot(Path("/"), slot).gateway == gateway else None


@contextmanager
def hold_abandoned(slot: int) -> Iterator[bool]:
    """Hold ``slot`` for the time of the block when no control plane does (True), so that none takes
    it while what its dead owner left is removed; False when a live one holds it."""
    with _lock:
        if slot in _held_here or not _lock_slot(slot):
            yield False
            return
        try:
            yield True
        finally:
            _unlock_slot(slot)


def _used_networks(own_bridge: str) -> list[ipaddress.IPv4Network]:
    """Every IPv4 address and route destination of this machine but ``own_bridge``'s."""
    used = []
    for argv in (["ip", "-j", "-4", "route", "show", "table", "all"], ["ip", "-j", "-4", "addr", "show"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for entry in json.loads(out or "[]"):
            if "addr_info" in entry:
                if entry.get("ifname") == own_bridge:
                    continue
                for info in entry["addr_info"]:
                    used.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
                continue
            dst = entry.get("dst")
            if entry.get("dev") == own_bridge or dst in (None, "default") or entry.get("type") == "broadcast":
                continue
            net = ipaddress.ip_network(dst, strict=False)
            if net.prefixlen > 0:
                used.append(net)
    return used


def reserve_plan(home: Path) -> NetworkPlan:
    """The home's plan: the one ``network.json`` records when it is still free to this home, else a
    new free slot, persisted. Held until :func:`release_plan` or the process ends.

    Raises:
        PlanError: every slot collides with this machine's networks or another home's.
    """
    home = Path(home)
    key = str(home.resolve())
    path = home / PLAN_FILE
    recorded: NetworkPlan | None = None
    try:
        data = json.loads(path.read_text())
        recorded = NetworkPlan(**{k: data[k] for k in NetworkPlan.__dataclass_fields__})
    except (OSError, ValueError, TypeError, KeyError):
        pass
    digest_bridge = f"trm-{home_digest(home)}"
    with _lock:
        used = _used_networks(digest_bridge)
        order = list(range(_SLOTS))
        # Spread homes over the space: two homes starting together try different slots first.
        start = int(home_digest(home), 16) % _SLOTS
        order = order[start:] + order[:start]
        if recorded is not None and recorded.bridge == digest_bridge:
            order.insert(0, recorded.slot)
        for slot in order:
            plan = NetworkPlan.for_slot(home, slot)
            net = plan.slot_network
            if any(net.overlaps(u) for u in used):
                continue
            if not _claim(slot, key):
                continue
            if plan != recorded:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(asdict(plan), indent=1) + "\n")
                os.replace(tmp, path)
            return plan
    raise PlanError(f"no free pod range in {_SPACE}: every /{_SLOT_PREFIX} collides with this machine's "
                    f"addresses or routes or another Trimaran home's")
