"""Cluster DNS: a real dnsmasq per home answering from its hosts file, reached from pods' network
namespaces at the kube-dns ClusterIP; supervised and never left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tests.network.netlab import Lab, wait_until
from trimaran.runtime.network import (
    ClusterDns,
    DnsService,
    ProxiedService,
    ServicePort,
    apply_table,
    delete_table,
    ensure_bridge_netfilter,
    hosts_text,
    proxy_rules,
    resolv_conf,
)
from trimaran.runtime.network._nft import table_exists

root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for dnsmasq on port 53 and network namespaces")


def _ask(server: str, name: str, kind: str = "A") -> tuple[str, set[str]]:
    answer = dns.query.udp(dns.message.make_query(name, kind), server, timeout=3)
    return dns.rcode.to_text(answer.rcode()), {r.to_text() for rrset in answer.answer for r in rrset}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


SERVICES = [
    DnsService("team-a", "web", "10.251.0.10"),
    DnsService("team-a", "workers", None, (("10.250.0.5", "trainer-0"), ("10.250.0.6", "trainer-1"),
                                           ("10.250.0.7", None))),
]


def test_hosts_text_names():
    text = hosts_text(SERVICES)
    assert "10.251.0.10\tweb.team-a.svc.cluster.local web.team-a.svc\n" in text
    assert "10.250.0.5\ttrainer-0.workers.team-a.svc.cluster.local trainer-0.workers.team-a.svc\n" in text
    assert text.count("\tworkers.team-a.svc.cluster.local") == 3


def test_resolv_conf_by_dns_policy():
    host = "nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"
    assert resolv_conf({}, "ns1", "10.96.0.10", host) == (
        "nameserver 10.96.0.10\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        "options ndots:5\n")
    assert resolv_conf({"dnsPolicy": "Default"}, "ns1", "10.96.0.10", host) == host
    assert resolv_conf({"hostNetwork": True}, "ns1", "10.96.0.10", host) == host
    assert resolv_conf({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, "ns1", "10.96.0.10",
                       host).startswith("nameserver 10.96.0.10\n")
    none = {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.2.3.4"], "searches": ["a.example"],
                                                "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}]}}
    assert resolv_conf(none, "ns1", "10.96.0.10", host) == (
        "nameserver 1.2.3.4\nsearch a.example\noptions ndots:2 rotate\n")
    merged = resolv_conf({"dnsConfig": {"nameservers": ["1.2.3.4"], "options": [{"name": "ndots", "value": "1"}]}},
                         "ns1", "10.96.0.10", host)
    assert merged.startswith("nameserver 10.96.0.10\nnameserver 1.2.3.4\n") and "options ndots:1\n" in merged


@root
def test_cluster_dns_answers_from_host_and_pods(tmp_path):
    lab = Lab()
    table = f"trimaran-test-{lab.tag}"
    server = ClusterDns(tmp_path / "dns", lab.gateway)
    try:
        ensure_bridge_netfilter()
        lab.add_pod("client")
        dns_ip = lab.service_ip(10)
        # kube-dns: the ClusterIP DNATed to the gateway, where dnsmasq listens.
        apply_table(table, proxy_rules([ProxiedService("kube-system", "kube-dns", dns_ip, (
            ServicePort(53, "UDP", endpoints=((lab.gateway, 53),)),
            ServicePort(53, "TCP", endpoints=((lab.gateway, 53),))))], bridge=lab.bridge, pod_cidr=lab.pod_cidr))
        server.start()
        server.update(hosts_text([*SERVICES, DnsService("kube-system", "kube-dns", dns_ip)]))
        wait_until(lambda: _ask_ok(lab.gateway, "web.team-a.svc.cluster.local"))

        assert _ask(lab.gateway, "web.team-a.svc.cluster.local") == ("NOERROR", {"10.251.0.10"})
        assert _ask(lab.gateway, "web.team-a.svc") == ("NOERROR", {"10.251.0.10"})
        assert _ask(lab.gateway, "workers.team-a.svc.cluster.local") == (
            "NOERROR", {"10.250.0.5", "10.250.0.6", "10.250.0.7"})
        assert _ask(lab.gateway, "trainer-1.workers.team-a.svc.cluster.local") == ("NOERROR", {"10.250.0.6"})
        assert _ask(lab.gateway, "nothing.team-a.svc.cluster.local")[0] == "NXDOMAIN"
        assert _ask(lab.gateway, "example.com")[0] != "NOERROR"  # nothing goes upstream

        # From a pod, at the kube-dns ClusterIP, through its resolv.conf's search path (getaddrinfo
        # with the pod's resolv.conf bound over /etc/resolv.conf by `ip netns exec`).
        etc = Path("/etc/netns") / lab.pods["client"][0]
        etc.mkdir(parents=True)
        try:
            (etc / "resolv.conf").write_text(resolv_conf({}, "team-a", dns_ip, ""))
            code = "import socket,sys; print(socket.gethostbyname(sys.argv[1]))"
            for name, ip in (("web", "10.251.0.10"), ("web.team-a", "10.251.0.10"),
                             ("trainer-0.workers", "10.250.0.5")):
                out = lab.exec("client", [sys.executable, "-c", code, name], capture_output=True, text=True)
                assert out.stdout.strip() == ip, (name, out.stderr)
        finally:
            (etc / "resolv.conf").unlink()
            etc.rmdir()

        # Records change: dnsmasq rereads them on SIGHUP.
        server.update(hosts_text([DnsService("team-a", "web", "10.251.0.11")]))
        wait_until(lambda: _ask(lab.gateway, "web.team-a.svc.cluster.local")[1] == {"10.251.0.11"})

        # It dies: the supervisor starts it again.
        pid = server.pid
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: server.pid not in (None, pid), timeout=30)
        wait_until(lambda: _ask_ok(lab.gateway, "web.team-a.svc.cluster.local"), timeout=30)
        pid = server.pid
    finally:
        server.stop()
        delete_table(table)
        lab.close()
    assert not _alive(pid)
    assert not table_exists(table)
    assert lab.leftovers() == []


def _answers(server: str) -> bool:
    try:
        return _ask(server, "nothing.cluster.local")[0] == "NXDOMAIN"
    except (dns.exception.Timeout, OSError):
        return False


def _ask_ok(server: str, name: str) -> bool:
    try:
        return _ask(server, name)[0] == "NOERROR"
    except dns.exception.Timeout:
        return False
    except OSError:
        return False


@root
def test_dnsmasq_dies_with_its_control_plane(tmp_path):
    """The process that supervises dnsmasq is killed outright (SIGKILL, no clean-up): dnsmasq goes too."""
    lab = Lab()
    try:
        code = textwrap.dedent(f"""
            import sys, threading
            from trimaran.runtime.network import ClusterDns
            s = ClusterDns({str(tmp_path)!r}, {lab.gateway!r}); s.start()
            print(s.pid, flush=True); threading.Event().wait()
        """)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).parents[2])
        pid = int(proc.stdout.readline())
        # Killed once dnsmasq is fully up (it has set its credentials by then: that once undid the
        # parent-death signal).
        wait_until(lambda: _answers(lab.gateway), timeout=20)
        assert _alive(pid)
        proc.kill()
        proc.wait()
        wait_until(lambda: not _alive(pid), timeout=10)
    finally:
        lab.close()
    assert lab.leftovers() == []


def test_what_is_not_a_name_or_an_address_stays_out_of_the_hosts_file():
    text = hosts_text([DnsService("team-a", "web", "10.0.0.1\n6.6.6.6 evil"),
                       DnsService("team-a", "x\ny", "10.0.0.2"),
                       DnsService("team-a", "hl", None, (("10.0.0.3", "ok"), ("10.0.0.4", "bad name"), ("x", None)))])
    assert text == ("10.0.0.3\thl.team-a.svc.cluster.local hl.team-a.svc\n"
                    "10.0.0.3\tok.hl.team-a.svc.cluster.local ok.hl.team-a.svc\n"
                    "10.0.0.4\thl.team-a.svc.cluster.local hl.team-a.svc\n")


def test_without_dnsmasq_the_control_plane_goes_on_and_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without dnsmasq-base
    server = ClusterDns(tmp_path / "dns", "10.250.0.1")
    server.start()
    assert server.pid is None
    assert "dnsmasq (Debian's dnsmasq-base)" in caplog.text
    server.update(hosts_text(SERVICES))  # records are still kept, for a later start
    server.stop()
