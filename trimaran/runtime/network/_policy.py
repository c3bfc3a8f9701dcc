"""NetworkPolicy (networking.k8s.io/v1) enforced by nftables, in the home's table.

`policy_rules` is pure: from the NetworkPolicies, Pods and Namespaces (as stored) it writes a
``policy-forward`` chain on the forward hook, which sees every packet between pods (routed, and
bridged ones: the kernel passes bridged IPv4 through netfilter, `_proxy.ensure_bridge_netfilter`)
and between pods and other machines, after a Service's DNAT (so a policy applies to a Service's
traffic by the real pod behind it):

- replies of allowed connections pass (``ct state established,related``);
- a new connection from a pod isolated for egress goes through that pod's ``egress-…`` chain, then
  one to a pod isolated for ingress through the pod's ``ingress-…`` chain: each chain returns for
  what the union of the pod's policies allows and drops the rest;
- pods no policy selects for a direction are not isolated in it (default allow).

Peers are the upstream ones: ``podSelector`` (the policy's namespace), ``namespaceSelector`` (every pod
of matching namespaces), both in one peer (AND), ``ipBlock`` with ``except``; ports by number, range
(``endPort``) or container port name (resolved on the destination pod), per protocol. A selector
that selects nothing allows nothing. As on a cluster, the node itself reaching its pods is not
filtered (probes), and here neither is a pod reaching the node (cluster DNS and the API server
listen there): those packets take the input/output hooks, not forward.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

from trimaran.api.apps import selector_matches
from trimaran.runtime.network._proxy import ipv4

__all__ = ["policy_rules"]

_NAME_LABEL = "kubernetes.io/metadata.name"


def _h(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def _selectable(pod: dict[str, Any]) -> bool:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return (ipv4(status.get("podIP")) is not None and not spec.get("hostNetwork")
            and status.get("phase") not in ("Succeeded", "Failed"))


def _named_port(pod: dict[str, Any], name: str, protocol: str) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def _port_match(entry: dict[str, Any], pod: dict[str, Any] | None) -> str | None:
    """nft match for one ``ports[]`` entry, or None when it matches nothing (a name the pod lacks)."""
    protocol = (entry.get("protocol") or "TCP").upper()
    match = f"meta l4proto {protocol.lower()}"
    port = entry.get("port")
    if port is None:
        return match
    if isinstance(port, str):
        if not port.isdigit():
            number = _named_port(pod, port, protocol) if pod is not None else None
            return None if number is None else f"{match} th dport {number}"
        port = int(port)
    end = entry.get("endPort")
    return f"{match} th dport {port}-{end}" if end and end > port else f"{match} th dport {port}"


def _ipv4_network(text: object) -> str | None:
    try:
        return str(ipaddress.IPv4Network(str(text), strict=False))
    except ValueError:
        return None


def _set(ips: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(set(ips))) + " }"


class _Cluster:
    def __init__(self, pods: Sequence[dict[str, Any]], namespaces: Sequence[dict[str, Any]]) -> None:
        self.pods = [p for p in pods if _selectable(p)]
        self.ns_labels = {}
        for ns in namespaces:
            name = ns["metadata"]["name"]
            self.ns_labels[name] = {_NAME_LABEL: name, **(ns["metadata"].get("labels") or {})}

    def peer_pods(self, peer: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
        out = []
        for pod in self.pods:
            pod_ns = pod["metadata"].get("namespace")
            if ns_sel is None:
                if pod_ns != namespace:
                    continue
            elif not selector_matches(ns_sel, self.ns_labels.get(pod_ns, {_NAME_LABEL: pod_ns})):
                continue
            if pod_sel is not None and not selector_matches(pod_sel, pod["metadata"].get("labels")):
                continue
            out.append(pod)
        return out


class _Peers:
    """One ingress/egress rule's peers, resolved once for every pod the policy selects: whole
    sets of pod IPs become named sets of the table, shared by every chain that allows them."""

    def __init__(self, rule: dict[str, Any], peers_key: str, namespace: str, cluster: _Cluster,
                 sets: dict[str, str]) -> None:
        self.any = not rule.get(peers_key)
        self.blocks: list[tuple[str, list[str]]] = []
        self.pods: list[tuple[str, list[dict[str, Any]]]] = []  # (set name, its pods)
        for peer in rule.get(peers_key) or []:
            block = peer.get("ipBlock")
            if block:
                cidr = _ipv4_network(block.get("cidr"))
                if cidr is not None:  # an IPv6 block: no IPv6 on the pod network
                    self.blocks.append((cidr, [e for e in map(_ipv4_network, block.get("except") or []) if e]))
                continue
            selected = cluster.peer_pods(peer, namespace)
            if selected:  # a peer that selects nothing allows nothing
                ips = sorted({p["status"]["podIP"] for p in selected})
                name = f"peers-{_h(*ips)}"
                sets[name] = ", ".join(ips)
                self.pods.append((name, selected))


def _rule_lines(rule: dict[str, Any], peers: _Peers, direction: str, target: dict[str, Any]) -> list[str]:
    """The ``return`` rules of one ingress/egress rule, for the pod ``target`` the policy selects.
    A named port is the destination pod's: ``target``'s for ingress, each peer's for egress."""
    addr = "ip saddr" if direction == "ingress" else "ip daddr"
    ports = rule.get("ports") or [None]
    named = direction == "egress" and any(p and isinstance(p.get("port"), str) and not p["port"].isdigit()
                                          for p in ports)
    # (address match, the pod named ports resolve on)
    atoms: list[tuple[str, dict[str, Any] | None]] = []
    own = target if direction == "ingress" else None
    if peers.any:
        atoms.append(("", own))
    for cidr, excepts in peers.blocks:
        atoms.append((f"{addr} {cidr}" + (f" {addr} != {_set(excepts)}" if excepts else ""), own))
    for name, selected in peers.pods:
        if named:
            atoms += [(f"{addr} {p['status']['podIP']}", p) for p in selected]
        else:
            atoms.append((f"{addr} @{name}", own))
    lines = []
    for match, port_pod in atoms:
        for entry in ports:
            port = "" if entry is None else _port_match(entry, port_pod)
            if port is None:
                continue
            lines.append(" ".join(x for x in (match, port, "return") if x))
    return lines


def policy_rules(policies: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]],
                 namespaces: Sequence[dict[str, Any]]) -> str:
    """The chains of the home's table that enforce ``policies`` (see the module's doc)."""
    cluster = _Cluster(pods, namespaces)
    sets: dict[str, str] = {}
    chains: dict[tuple[str, str], list[str]] = {}  # (direction, pod ip) -> return rules
    for policy in sorted(policies, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"])):
        namespace = policy["metadata"].get("namespace", "default")
        spec = policy.get("spec") or {}
        types = spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])]
        selected = [p for p in cluster.pods if p["metadata"].get("namespace") == namespace
                    and selector_matches(spec.get("podSelector") or {}, p["metadata"].get("labels"))]
        for direction, peers_key in (("ingress", "from"), ("egress", "to")):
            if direction.capitalize() not in types or not selected:
                continue
            rules = [(rule, _Peers(rule, peers_key, namespace, cluster, sets)) for rule in spec.get(direction) or []]
            for pod in selected:
                lines = chains.setdefault((direction, pod["status"]["podIP"]), [])
                for rule, peers in rules:
                    lines += _rule_lines(rule, peers, direction, pod)
    base = ["ct state established,related accept"]
    body = [f"\tset {name} {{\n\t\ttype ipv4_addr\n\t\telements = {{ {ips} }}\n\t}}\n"
            for name, ips in sorted(sets.items())]
    for direction, key in (("egress", "saddr"), ("ingress", "daddr")):
        # Pods under the same rules share one chain (its name is a digest of them).
        by_pod = {ip: list(dict.fromkeys(chains[(d, ip)])) for (d, ip) in chains if d == direction}
        named = {ip: f"{direction}-{_h(*rules)}" for ip, rules in by_pod.items()}
        if named:
            base.append(f"ip {key} vmap {{ {', '.join(f'{ip} : jump {named[ip]}' for ip in sorted(named))} }}")
        written: set[str] = set()
        for ip, rules in sorted(by_pod.items(), key=lambda item: named[item[0]]):
            if named[ip] in written:
                continue
            written.add(named[ip])
            body.append(f"\tchain {named[ip]} {{\n" + "".join(f"\t\t{r}\n" for r in rules) + "\t\tdrop\n\t}\n")
    head = ("\tchain policy-forward {\n\t\ttype filter hook forward priority -5; policy accept;\n"
            + "".join(f"\t\t{r}\n" for r in base) + "\t}\n")
    return head + "".join(body)
