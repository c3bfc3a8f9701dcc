"""A throw-away pod network for the Services / DNS / NetworkPolicy tests: a bridge and one network
namespace per "pod" on a veth pair, as the CNI bridge plugin lays them out, with addresses from a
10.250.x.0/24 no interface or route of this machine uses. Every name carries a random tag so
concurrent runs never collide; `close` removes all and `leftovers` says what is still there."""

from __future__ import annotations

import ipaddress
import json
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from trimaran.runtime.network import NetworkPlan

_SERVER = r"""
import socket, sys, threading
name, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(64)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
def udp():
    while True:
        data, peer = u.recvfrom(2048); u.sendto(name.encode(), peer)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
while True:
    c, peer = s.accept(); c.sendall(f"{name} {peer[0]}".encode()); c.close()
"""

# Connects N times to host:port and prints what each answered, or the error's name.
_CLIENT = r"""
import json, socket, sys
host, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
out = []
for _ in range(n):
    try:
        with socket.create_connection((host, port), timeout=timeout) as c:
            c.settimeout(timeout); out.append(c.recv(200).decode())
    except OSError as e:
        out.append(type(e).__name__)
print(json.dumps(out))
"""

# Sends N datagrams to host:port from one socket (bound to SPORT when not 0, as a resolver keeps its
# socket) and prints each answer, or the error's name.
_UDP_CLIENT = r"""
import json, socket, sys
host, port, n, timeout, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", sport)); s.connect((host, port)); s.settimeout(timeout)
out = []
for _ in range(n):
    try:
        s.send(b"?"); out.append(s.recv(200).decode())
    except OSError as e:
        out.append(type(e).__name__)
print(json.dumps(out))
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _used_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for line in _ip("-4", "-o", "addr").stdout.splitlines() + _ip("-4", "route").stdout.splitlines():
        for word in line.split():
            if "/" in word and word[0].isdigit():
                nets.append(ipaddress.ip_network(word, strict=False))
    return nets


class Lab:
    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        used = _used_networks()
        for _ in range(200):
            third = secrets.randbelow(254) + 1
            pods = ipaddress.ip_network(f"10.250.{third}.0/24")
            services = ipaddress.ip_network(f"10.251.{third}.0/24")
            if not any(pods.overlaps(n) or services.overlaps(n) for n in used):
                break
        self.pod_cidr, self.service_cidr = str(pods), str(services)
        self.gateway = str(pods[1])
        self.bridge = f"tsv{self.tag}"
        self.pods: dict[str, tuple[str, str]] = {}  # name -> (netns, ip)
        self.procs: list[subprocess.Popen] = []
        self.links: list[str] = []
        self._next = 2
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        # Pods' traffic is routed through the host (as with podnet); the switch is machine-wide and
        # podnet's network turns it on too, so it is left on.
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")

    def service_ip(self, n: int) -> str:
        return str(ipaddress.ip_network(self.service_cidr)[n])

    def plan(self) -> NetworkPlan:
        """The lab as a home's network plan: its bridge, ranges and the kubernetes/DNS Service addresses."""
        return NetworkPlan(self.bridge, self.pod_cidr, self.gateway, self.service_cidr, self.service_ip(10),
                           self.service_ip(1), slot=0)

    def add_pod(self, name: str) -> str:
        netns = f"tsv-{self.tag}-{name}"
        ip = str(ipaddress.ip_network(self.pod_cidr)[self._next])
        host_end = f"v{self.tag}{self._next:02x}"
        self._next += 1
        _ip("netns", "add", netns)
        self.pods[name] = (netns, ip)
        self.links.append(host_end)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", host_end, "master", self.bridge, "up")
        # As the CNI bridge plugin with hairpinMode (kubelet asks it): a pod reaching itself through a
        # Service is DNAT'd back out of the port it came in on.
        _ip("link", "set", host_end, "type", "bridge_slave", "hairpin", "on")
        _ip("-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.gateway)
        return ip

    def ip(self, name: str) -> str:
        return self.pods[name][1]

    def serve(self, name: str, port: int) -> None:
        """A server in the pod that answers each TCP connection with ``NAME CLIENT_IP`` (and each
        UDP datagram with ``NAME``); returns once it listens."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.pods[name][0], sys.executable, "-c", _SERVER, name,
                                 str(port)], stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def connect(self, source: str | None, host: str, port: int, n: int = 1, timeout: float = 2.0) -> list[str]:
        """What ``n`` TCP connections from pod ``source`` (None: the host) to host:port got."""
        prefix = [] if source is None else ["ip", "netns", "exec", self.pods[source][0]]
        out = subprocess.run([*prefix, sys.executable, "-c", _CLIENT, host, str(port), str(n), str(timeout)],
                             capture_output=True, text=True, check=True, timeout=60 + n * timeout)
        return json.loads(out.stdout)

    def ask_udp(self, source: str | None, host: str, port: int, n: int = 1, sport: int = 0,
                timeout: float = 2.0) -> list[str]:
        """What ``n`` datagrams from one socket of pod ``source`` (None: the host), from source port
        ``sport`` (0: any), to host:port got: the servers' names, ``ConnectionRefusedError`` (ICMP
        port unreachable) or ``TimeoutError``."""
        prefix = [] if source is None else ["ip", "netns", "exec", self.pods[source][0]]
        out = subprocess.run([*prefix, sys.executable, "-c", _UDP_CLIENT, host, str(port), str(n), str(timeout),
                              str(sport)], capture_output=True, text=True, check=True, timeout=60 + n * timeout)
        return json.loads(out.stdout)

    def exec(self, source: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.pods[source][0], *argv], **kwargs)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        for link in self.links:
            _ip("link", "del", link, check=False)
        for netns, _ in self.pods.values():
            _ip("netns", "del", netns, check=False)
        _ip("link", "del", self.bridge, check=False)

    def leftovers(self) -> list[str]:
        """Names of this lab still on the machine (network namespaces, links)."""
        names = _ip("netns", "list").stdout.split() + _ip("-o", "link").stdout.split()
        return sorted({n.rstrip(":").split("@")[0] for n in names if self.tag in n})


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05):
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {predicate}")
        time.sleep(interval)


def host_address() -> str:
    """This machine's own non-loopback IPv4 address (where NodePorts are served)."""
    words = _ip("-4", "route", "get", "192.0.2.200").stdout.split()
    return words[words.index("src") + 1]


def port_refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False




def set_pod_ready(store, lab: Lab, name: str, ready: bool, namespace: str = "team-a") -> None:
    """Record the lab pod ``name`` as Running at its lab address, Ready or not, as the kubelet would."""
    pod = store.get("Pod", namespace, name)
    pod["status"] = {"phase": "Running", "podIP": lab.ip(name), "podIPs": [{"ip": lab.ip(name)}],
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    store.update_status(pod)
