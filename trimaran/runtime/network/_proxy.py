"""Services' forwarding as kube-proxy's nftables mode does it, for one home's pod network.

`proxy_rules` is pure: from the Services (cluster IP, ports, node ports, LoadBalancer addresses,
ClientIP affinity) and each port's ready endpoints ``(pod_ip, port)`` it writes the chains, sets
and maps of the home's table (`_nft.apply_table` loads them). The shape follows kube-proxy's
(k8s ``pkg/proxy/nftables``):

- ``nat-prerouting`` (traffic of pods and of other machines) and ``nat-output`` (the host's own)
  look ``daddr . proto . dport`` up in the verdict map ``service-ips`` (cluster IPs and
  LoadBalancer addresses) and ``proto . dport`` in ``service-nodeports`` for the host's own
  non-loopback addresses (nftables mode serves no NodePort on 127.0.0.1: the DNAT'd packet could
  not leave loopback);
- a chain per Service port picks an endpoint with ``numgen random mod N`` (after ClientIP affinity
  sets, when asked), and a chain per endpoint marks hairpin traffic (a pod reaching itself through
  its Service) and DNATs;
- ``nat-postrouting`` masquerades marked packets, and those DNAT'd into the bridge from outside the
  pod range (the host, other machines), so the reply comes back through this host's conntrack;
- ``filter-*`` reject new connections still addressed to a cluster IP after DNAT (a Service port
  without ready endpoints, or a port the Service does not have) and to a node port without
  endpoints: ICMP port unreachable, so a client fails at once (``ECONNREFUSED``), as kube-proxy;
  and drop what goes to an address of the service range no Service has.

Pod-to-pod replies through a Service cross the bridge at layer 2; they are un-NATed because the
kernel passes bridged IPv4 through netfilter (``bridge-nf-call-iptables``, which kube-proxy also
needs); `ensure_bridge_netfilter` turns it on.

TCP, UDP and SCTP ports are forwarded alike. A DNAT is decided on a flow's first packet and kept in
its conntrack entry, and a UDP client that keeps its socket (a resolver) keeps its flow alive, so
when a UDP Service loses an endpoint the flows DNAT'd to it are deleted (`stale_udp_flows`,
`delete_flows`, by Debian's ``conntrack`` tool) as kube-proxy deletes them; a TCP or SCTP client
sees its connection fail and connects again, through the new rules (kube-proxy leaves those too).
SCTP is forwarded by netfilter even where the kernel has no SCTP sockets (``CONFIG_IP_SCTP``), but
then no pod can serve or call it: `sctp_sockets` says which.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import shutil
import socket
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProxiedService", "ServicePort", "delete_flows", "ensure_bridge_netfilter", "ipv4", "proxy_rules",
           "sctp_sockets", "stale_udp_flows"]

log = logging.getLogger(__name__)

_MASQ_MARK = "0x00004000"  # kube-proxy's bit
_PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
_BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


@dataclass(frozen=True)
class ServicePort:
    port: int
    protocol: str = "TCP"
    node_port: int | None = None
    endpoints: tuple[tuple[str, int], ...] = ()  # ready pods' (ip, port)


@dataclass(frozen=True)
class ProxiedService:
    namespace: str
    name: str
    cluster_ip: str  # a headless Service is not proxied: leave it out
    ports: tuple[ServicePort, ...]
    load_balancer_ips: tuple[str, ...] = ()
    affinity_timeout: int | None = None  # seconds, for sessionAffinity: ClientIP


def ipv4(text: object) -> str | None:
    """``text`` when it is an IPv4 address (what goes into a rule is checked: the objects it comes
    from are users' to write), else None."""
    try:
        return str(ipaddress.IPv4Address(str(text)))
    except ValueError:
        return None


def _h(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def _elements(items: Iterable[str]) -> str:
    items = sorted(set(items))
    return f"\t\telements = {{ {', '.join(items)} }}\n" if items else ""


def proxy_rules(services: Sequence[ProxiedService], *, bridge: str, pod_cidr: str,
                service_cidr: str | None = None) -> str:
    """The body of the home's table that forwards ``services`` (see the module's doc)."""
    service_ips: list[str] = []
    nodeports: list[str] = []
    no_endpoints: list[str] = []
    no_endpoint_nodeports: list[str] = []
    cluster_ips: set[str] = set()
    chains: list[str] = []
    sets: list[str] = []
    for svc in services:
        if ipv4(svc.cluster_ip) is None:
            continue
        cluster_ips.add(svc.cluster_ip)
        for sp in svc.ports:
            proto = _PROTOCOLS.get(str(sp.protocol).upper())
            if proto is None:
                continue
            addresses = (svc.cluster_ip, *(ip for ip in svc.load_balancer_ips if ipv4(ip)))
            port = int(sp.port)
            node_port = int(sp.node_port) if sp.node_port else None
            endpoints = sorted({(ip, int(p)) for ip, p in sp.endpoints if ipv4(ip) and 0 < int(p) < 65536})
            if not endpoints:
                no_endpoints += [f"{ip} . {proto} . {port}" for ip in addresses]
                if node_port:
                    no_endpoint_nodeports.append(f"{proto} . {node_port}")
                continue
            chain = f"svc-{_h(svc.namespace, svc.name, proto, port)}"
            service_ips += [f"{ip} . {proto} . {port} : goto {chain}" for ip in addresses]
            if node_port:
                nodeports.append(f"{proto} . {node_port} : goto {chain}")
            names = [f"ep-{_h(chain, ip, target)}" for ip, target in endpoints]
            rules = []
            if svc.affinity_timeout:
                for name in names:
                    sets.append(f"\tset aff-{name[3:]} {{\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n"
                                f"\t\ttimeout {int(svc.affinity_timeout)}s\n\t}}\n")
                    rules.append(f"ip saddr @aff-{name[3:]} goto {name}")
            if len(names) == 1:
                rules.append(f"goto {names[0]}")
            else:
                choices = ", ".join(f"{i} : goto {name}" for i, name in enumerate(names))
                rules.append(f"numgen random mod {len(names)} vmap {{ {choices} }}")
            chains.append(_chain(chain, None, rules, comment=f"{svc.namespace}/{svc.name}:{port}/{proto}"))
            for name, (ip, target) in zip(names, endpoints, strict=True):
                rules = [f"ip saddr {ip} meta mark set meta mark | {_MASQ_MARK}"]
                if svc.affinity_timeout:
                    rules.append(f"update @aff-{name[3:]} {{ ip saddr }}")
                rules.append(f"meta l4proto {proto} dnat ip to {ip}:{target}")
                chains.append(_chain(name, None, rules))
    head = [
        f"\tset cluster-ips {{\n\t\ttype ipv4_addr\n{_elements(cluster_ips)}\t}}\n",
        f"\tset no-endpoint-services {{\n\t\ttype ipv4_addr . inet_proto . inet_service\n"
        f"{_elements(no_endpoints)}\t}}\n",
        f"\tset no-endpoint-nodeports {{\n\t\ttype inet_proto . inet_service\n"
        f"{_elements(no_endpoint_nodeports)}\t}}\n",
        f"\tmap service-ips {{\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n"
        f"{_elements(service_ips)}\t}}\n",
        f"\tmap service-nodeports {{\n\t\ttype inet_proto . inet_service : verdict\n{_elements(nodeports)}\t}}\n",
        *sets,
    ]
    base = [
        _chain("nat-prerouting", "type nat hook prerouting priority -100", ["jump services"]),
        _chain("nat-output", "type nat hook output priority -100", ["jump services"]),
        _chain("nat-postrouting", "type nat hook postrouting priority 100", [
            f"meta mark & {_MASQ_MARK} == {_MASQ_MARK} meta mark set meta mark ^ {_MASQ_MARK} masquerade",
            f'oifname "{bridge}" ct status dnat ip saddr != {pod_cidr} masquerade',
        ]),
        _chain("services", None, [
            "ip daddr . meta l4proto . th dport vmap @service-ips",
            "ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @service-nodeports",
        ]),
        _chain("endpoints-check", None, [
            "ip daddr . meta l4proto . th dport @no-endpoint-services reject",
            "ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport @no-endpoint-nodeports reject",
            "ip daddr @cluster-ips reject",
            *([f"ip daddr {service_cidr} drop"] if service_cidr else []),
        ]),
        *(_chain(f"filter-{hook}", f"type filter hook {hook} priority filter", ["ct state new jump endpoints-check"])
          for hook in ("input", "forward", "output")),
    ]
    return "".join(head + base + chains)


def _chain(name: str, hook: str | None, rules: list[str], comment: str = "") -> str:
    lines = [f"\tchain {name} {{\n"]
    if comment:
        lines.append(f'\t\tcomment "{comment}"\n')
    if hook:
        lines.append(f"\t\t{hook}; policy accept;\n")
    lines += [f"\t\t{rule}\n" for rule in rules]
    lines.append("\t}\n")
    return "".join(lines)


def ensure_bridge_netfilter() -> None:
    """Let netfilter see bridged IPv4, as kube-proxy requires, so replies between pods of one bridge
    are un-NATed and NetworkPolicy sees pod-to-pod traffic."""
    if _BRIDGE_NF.exists() and _BRIDGE_NF.read_text().strip() != "1":
        _BRIDGE_NF.write_text("1\n")


def stale_udp_flows(before: Sequence[ProxiedService], after: Sequence[ProxiedService]) -> list[tuple[str, ...]]:
    """``conntrack -D`` arguments for the UDP flows that ``before``'s rules DNAT'd to an endpoint
    ``after`` no longer has for that Service port (k8s ``pkg/proxy/conntrack``): one per address of
    the Service (ClusterIP, LoadBalancer addresses) and per node port, matching the endpoint (pod IP
    and target port) as the reply's source. A port that had no endpoint needs nothing: its packets
    were rejected, or dropped as a service-range address without a Service, before their flow was
    confirmed."""
    old, new = _udp_ports(before), _udp_ports(after)
    out: list[tuple[str, ...]] = []
    for key, (addresses, node_port, endpoints) in old.items():
        gone = endpoints - new.get(key, ((), None, set()))[2]
        for ip, target in sorted(gone):
            endpoint = ("--reply-src", ip, "--reply-port-src", str(target))
            out += [("-p", "udp", "--orig-dst", address, "--orig-port-dst", str(key[2]), *endpoint)
                    for address in addresses]
            if node_port:
                out.append(("-p", "udp", "--orig-port-dst", str(node_port), *endpoint))
    return out


def _udp_ports(services: Sequence[ProxiedService]) -> dict[tuple[str, str, int],
                                                         tuple[tuple[str, ...], int | None, set[tuple[str, int]]]]:
    """Each UDP Service port, by (namespace, name, port): its addresses, node port and endpoints."""
    out = {}
    for svc in services:
        if ipv4(svc.cluster_ip) is None:
            continue
        addresses = (svc.cluster_ip, *(ip for ip in svc.load_balancer_ips if ipv4(ip)))
        for sp in svc.ports:
            if str(sp.protocol).upper() == "UDP":
                endpoints = {(ip, int(p)) for ip, p in sp.endpoints if ipv4(ip)}
                out[(svc.namespace, svc.name, int(sp.port))] = (
                    addresses, int(sp.node_port) if sp.node_port else None, endpoints)
    return out


def delete_flows(flows: Iterable[tuple[str, ...]]) -> None:
    """Delete conntrack entries (``conntrack -D`` with each argument tuple). Without the tool the
    flows stay until they idle out (30 s unanswered, 120 s answered, longer while a client keeps
    sending), which is logged: the Service still forwards every new flow right."""
    flows = list(flows)
    if not flows:
        return
    tool = shutil.which("conntrack")
    if tool is None:
        log.warning("conntrack is not installed (Debian's package conntrack): %d UDP flow(s) to removed "
                    "Service endpoints stay until they idle out, and their clients keep reaching the old pod",
                    len(flows))
        return
    for args in flows:
        result = subprocess.run([tool, "-D", *args], capture_output=True, text=True, check=False)
        # conntrack exits 1 when no entry matched: not a failure.
        if result.returncode != 0 and "0 flow entries" not in result.stderr:
            log.warning("conntrack -D %s: %s", " ".join(args), result.stderr.strip())


@functools.cache
def sctp_sockets() -> bool:
    """Whether this machine's kernel opens SCTP sockets (it may load the sctp module to do so)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP).close()
    except OSError:
        return False
    return True
