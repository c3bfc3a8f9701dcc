"""The portmap plugin's rules that outlived their pods.

portmap forwards a pod's ``hostPort`` with iptables rules on the host: a jump in
``CNI-HOSTPORT-DNAT`` (its comment names the network and the container) to a chain ``CNI-DN-*``
that DNATs the port to the pod's address. They are removed only by the pod's CNI DEL; a home that
died with its whole session never runs it, and its rules stay, each one taking its host port from
every process on the machine: a control plane that later listens on that port (the kernel hands out
the same ephemeral range hostPorts are often picked from) has its connections sent to a pod address
nobody serves. A chain is stale when it forwards into Trimaran's pod space (10.224.0.0/12) but
to no subnet a bridge of a live home carries; other CNI users' chains are never touched.
"""

from __future__ import annotations

import ipaddress
import logging
import shlex
import shutil
import subprocess
from collections.abc import Iterable

from trimaran.runtime.network._plan import _SPACE

log = logging.getLogger(__name__)

__all__ = ["sweep_stale_hostports"]


def _iptables(iptables: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([iptables, "-w", "-t", "nat", *args], capture_output=True, text=True, check=False)


def sweep_stale_hostports(network_name: str, live: Iterable[ipaddress.IPv4Network]) -> list[str]:
    """Remove the ``CNI-DN-*`` chains of network ``network_name`` whose pods' addresses lie in no
    ``live`` subnet, with their jumps; the chains removed."""
    iptables = shutil.which("iptables")
    if iptables is None:
        return []
    listing = _iptables(iptables, "-S")
    if listing.returncode != 0:
        return []
    live = list(live)
    marker = f'dnat name: \\"{network_name}\\"'
    jumps: dict[str, list[str]] = {}
    targets: dict[str, list[ipaddress.IPv4Address]] = {}
    for line in listing.stdout.splitlines():
        if line.startswith("-A CNI-HOSTPORT-DNAT ") and marker in line and " -j CNI-DN-" in line:
            jumps.setdefault(line.rsplit(" -j ", 1)[1].strip(), []).append(line)
        elif line.startswith("-A CNI-DN-") and " --to-destination " in line:
            address = line.split(" --to-destination ", 1)[1].split()[0].rsplit(":", 1)[0]
            try:
                targets.setdefault(line.split()[1], []).append(ipaddress.IPv4Address(address))
            except ValueError:
                continue  # an IPv6 mapping: not ours (the pod network is IPv4)
    swept = []
    for chain, rules in jumps.items():
        addresses = targets.get(chain) or []
        if not addresses or any(a not in _SPACE or any(a in net for net in live) for a in addresses):
            continue
        for rule in rules:
            _iptables(iptables, "-D", *shlex.split(rule)[1:])
        _iptables(iptables, "-F", chain)
        _iptables(iptables, "-X", chain)
        swept.append(chain)
    if swept:
        log.info("removed the hostPort rules of %d pods whose pod network is gone: %s", len(swept), ", ".join(swept))
    return swept
