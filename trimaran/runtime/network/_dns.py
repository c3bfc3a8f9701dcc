"""Cluster DNS for one home: a dnsmasq answering the cluster's names from a hosts file.

What CoreDNS's ``kubernetes`` plugin answers, a dnsmasq (Debian's ``dnsmasq-base``) answers here
from a hosts file that `DnsRecord`s render (`hosts_text`): ``NAME.NS.svc.cluster.local`` (and
``NAME.NS.svc``) is the ClusterIP, or every ready pod IP for a headless Service; a pod with
``hostname`` and ``subdomain`` naming a headless Service is ``HOSTNAME.SUBDOMAIN.NS.svc.cluster.local``.
Any other ``cluster.local`` name is NXDOMAIN (``--local``), and nothing is forwarded off this
machine (``--no-resolv``, no upstream). It listens only on the home's gateway address
(``--bind-dynamic``: it takes the address when the bridge gets it), port 53; pods reach it at the
kube-dns ClusterIP through the Services' DNAT.

`ClusterDns` supervises the process: started by `start`, restarted when it dies, reloaded with
SIGHUP when the records change, killed by `stop`; and it gets SIGKILL from the kernel when the
thread that started it ends (``PR_SET_PDEATHSIG``), so a control plane killed outright leaves no
dnsmasq behind.

`resolv_conf` is the pod's /etc/resolv.conf as the kubelet writes it for its ``dnsPolicy``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trimaran.runtime.network._proxy import ipv4

__all__ = ["ClusterDns", "DnsService", "hosts_text", "resolv_conf"]

log = logging.getLogger(__name__)

DOMAIN = "cluster.local"
_PR_SET_PDEATHSIG = 1
_MAX_NAMESERVERS, _MAX_SEARCH = 3, 32
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


@dataclass(frozen=True)
class DnsService:
    namespace: str
    name: str
    cluster_ip: str | None  # None: headless
    endpoints: tuple[tuple[str, str | None], ...] = ()  # ready (pod ip, hostname when the pod names this subdomain)


def hosts_text(services: Iterable[DnsService], domain: str = DOMAIN) -> str:
    """The hosts file dnsmasq answers from (one address per line, its names after it)."""
    lines: list[str] = []
    for svc in sorted(services, key=lambda s: (s.namespace, s.name)):
        if not (_NAME.fullmatch(svc.name) and _NAME.fullmatch(svc.namespace)):
            continue  # a line of the hosts file is written from these: nothing but a name goes in
        fqdn = f"{svc.name}.{svc.namespace}.svc.{domain}"
        short = f"{svc.name}.{svc.namespace}.svc"
        if svc.cluster_ip:
            if ipv4(svc.cluster_ip):
                lines.append(f"{svc.cluster_ip}\t{fqdn} {short}")
            continue
        for ip, hostname in sorted(set(svc.endpoints), key=lambda e: (e[0], e[1] or "")):
            if not ipv4(ip):
                continue
            lines.append(f"{ip}\t{fqdn} {short}")
            if hostname and _NAME.fullmatch(hostname):
                lines.append(f"{ip}\t{hostname}.{fqdn} {hostname}.{short}")
    return "".join(line + "\n" for line in lines)


def resolv_conf(pod_spec: dict, namespace: str, dns_ip: str, host_resolv: str, domain: str = DOMAIN) -> str:
    """The pod's resolv.conf for ``spec.dnsPolicy`` (ClusterFirst by default; a hostNetwork pod's
    ClusterFirst is Default unless it says ClusterFirstWithHostNet; None: ``dnsConfig`` only), with
    ``spec.dnsConfig`` merged in as the kubelet does (nameservers and searches appended, options
    overriding by name)."""
    policy = pod_spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and pod_spec.get("hostNetwork"):
        policy = "Default"
    host_servers, host_search, host_options = _parse(host_resolv)
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        servers = [dns_ip]
        search = [f"{namespace}.svc.{domain}", f"svc.{domain}", domain, *host_search]
        options = {"ndots": "5"}
    elif policy == "Default":
        servers, search, options = host_servers, host_search, host_options
    else:  # None
        servers, search, options = [], [], {}
    config = pod_spec.get("dnsConfig") or {}
    servers = _unique([*servers, *(config.get("nameservers") or [])])[:_MAX_NAMESERVERS]
    search = _unique([*search, *(config.get("searches") or [])])[:_MAX_SEARCH]
    for option in config.get("options") or []:
        options[option["name"]] = option.get("value")
    lines = [f"nameserver {s}" for s in servers]
    if search:
        lines.append("search " + " ".join(search))
    if options:
        lines.append("options " + " ".join(k if v is None else f"{k}:{v}" for k, v in options.items()))
    return "".join(line + "\n" for line in lines)


def _parse(text: str) -> tuple[list[str], list[str], dict[str, str | None]]:
    servers: list[str] = []
    search: list[str] = []
    options: dict[str, str | None] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "nameserver" and len(words) > 1:
            servers.append(words[1])
        elif words[0] in ("search", "domain"):
            search = words[1:]
        elif words[0] == "options":
            for word in words[1:]:
                name, _, value = word.partition(":")
                options[name] = value or None
    return servers, search, options


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# Looked up here, not in the forked child of a threaded process (a dlopen lock could be held there).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ClusterDns:
    """A supervised dnsmasq for one home, on ``listen`` port ``port``."""

    def __init__(self, state_dir: Path, listen: str, port: int = 53, domain: str = DOMAIN) -> None:
        self.state_dir = Path(state_dir)
        self.hosts = self.state_dir / "hosts"
        self.listen, self.port, self.domain = listen, port, domain
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = 0

    def argv(self) -> list[str]:
        # --user/--group root: dnsmasq would otherwise switch to group "dip", and the kernel clears
        # PR_SET_PDEATHSIG on a change of credentials, so a killed control plane would leave it.
        return ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                f"--addn-hosts={self.hosts}", f"--listen-address={self.listen}", "--bind-dynamic",
                f"--port={self.port}", f"--local=/{self.domain}/", "--domain-needed", "--bogus-priv",
                "--pid-file=", "--user=root", "--group=root", "--log-facility=-", "--quiet-dhcp"]

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if not self.hosts.exists():
            self._write("")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._supervise, name="cluster-dns", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def update(self, text: str) -> None:
        """New records: rewrite the hosts file (whole, by rename) and have dnsmasq reread it."""
        if self.hosts.exists() and self.hosts.read_text() == text:
            return
        self._write(text)
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _write(self, text: str) -> None:
        tmp = self.hosts.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.hosts)

    def _supervise(self) -> None:
        """Run dnsmasq until `stop`, starting it again (with a growing pause) when it exits. This
        thread lives exactly as long as the service, which is what PR_SET_PDEATHSIG watches."""
        delay = 0.2
        while not self._stopping.is_set():
            with self._lock:
                if self._stopping.is_set():
                    break
                try:
                    self._proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
                except OSError as exc:
                    log.error("cluster DNS cannot start: dnsmasq (Debian's dnsmasq-base): %s; pods resolve no "
                              "cluster names", exc)
                    self._started.set()
                    return
            self._started.set()
            _, err = self._proc.communicate()
            if self._stopping.is_set():
                break
            self.restarts += 1
            log.warning("cluster DNS (dnsmasq) exited %s: %s; starting it again", self._proc.returncode,
                        err.decode(errors="replace").strip()[-500:])
            self._stopping.wait(delay)
            delay = min(delay * 2, 5.0)
