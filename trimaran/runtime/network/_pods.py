"""Each pod's network namespace and address, made and removed by the CNI plugins.

Under ``home/network/``: ``trimaran.conflist`` (the plugins, as a kubelet's ``/etc/cni/net.d``
file), ``ipam/`` (host-local's allocations), ``pods/<uid>.json`` (a pod's netns and the ADD result,
which DEL is given, as libcni caches it). A pod's netns is ``/run/netns/trm-<home digest>-<uid>``
(``ip netns add``: a bind-mounted nsfs file that outlives every process, as containerd pins its
sandboxes' namespaces), so two homes never share a name.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trimaran.runtime.network._cni import CNI_VERSION, CniError, find_plugin, run_list, run_plugin
from trimaran.runtime.network._nft import abandoned_tables, apply_table, delete_table, table_name
from trimaran.runtime.network._plan import (
    PLAN_FILE,
    NetworkPlan,
    hold_abandoned,
    home_digest,
    release_plan,
    reserve_plan,
    slot_of,
)

__all__ = ["NetworkError", "PodAddress", "PodNetwork", "NETNS_DIR", "DEFAULT_CNI_PATH"]

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
DEFAULT_CNI_PATH = ("/usr/lib/cni", "/opt/cni/bin")
_NETWORK_NAME = "trimaran"
# Set in each pod's netns, as containerd does: pod users are not root of the netns' user
# namespace, yet bind ports under 1024 (nginx's 80) and ping.
_SYSCTLS = {"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647"}
_REQUIRED = ("bridge", "host-local", "loopback")


_SPARES = 32


def _spares(plan: NetworkPlan) -> list[str]:
    top = int(ipaddress.ip_network(plan.pod_cidr).broadcast_address) - 1
    return [str(ipaddress.ip_address(top - i)) for i in range(_SPARES)]


def _range_end(plan: NetworkPlan) -> str:
    return str(ipaddress.ip_address(int(ipaddress.ip_network(plan.pod_cidr).broadcast_address) - 1 - _SPARES))


class NetworkError(RuntimeError):
    """The pod's network could not be set up; the message is the CRI's (``failed to setup network
    for sandbox "<id>": plugin type="bridge" failed (add): ...``). Nothing of it is left behind."""


@dataclass(frozen=True)
class PodAddress:
    ip: str
    netns: str | None  # None: the host's network (hostNetwork)


def _mode(env: Mapping[str, str]) -> str:
    return (env.get("TRIMARAN_POD_NETWORK") or "auto").lower()


def _cni_path(env: Mapping[str, str]) -> list[str]:
    return [p for p in (env.get("TRIMARAN_CNI_PATH") or "").split(":") if p] or list(DEFAULT_CNI_PATH)


def _nat_table(home: Path) -> str:
    return f"trimaran-nat-{home_digest(home)}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _ip_json(*args: str) -> list[dict]:
    try:
        return json.loads(_ip("-j", *args, check=False).stdout or "[]")
    except ValueError:
        return []


def sweep_abandoned(own_bridge: str) -> list[str]:
    """Remove the pod networks of homes that are gone with everything they ran, and return their
    bridges: a control plane killed with its whole session (never stopped) leaves its bridge, its
    pods' network namespaces and its nft tables, and once its home is deleted no restart of it
    will ever remove them. Another home's bridge is abandoned when no control plane holds its
    slot (`hold_abandoned`, held meanwhile so that none takes it) and no process is in any of its
    pods' network namespaces: pods that outlive their control plane keep theirs."""
    swept = []
    netns_names = [entry.get("name", "") for entry in _ip_json("netns", "list")]
    for link in _ip_json("link", "show", "type", "bridge"):
        bridge = link.get("ifname", "")
        if not bridge.startswith("trm-") or bridge == own_bridge:
            continue
        gateways = [info.get("local") for entry in _ip_json("-4", "addr", "show", "dev", bridge)
                    for info in entry.get("addr_info", [])]
        slots = [slot for slot in map(slot_of, gateways) if slot is not None]
        if not slots:
            continue
        digest = bridge.removeprefix("trm-")
        pods = [name for name in netns_names if name.startswith(f"trm-{digest}-")]
        with hold_abandoned(slots[0]) as free:
            if not free or any(_ip("netns", "pids", name, check=False).stdout.strip() for name in pods):
                continue
            log.info("removing the pod network of a home gone with its pods: bridge %s, %d netns",
                     bridge, len(pods))
            for name in pods:
                _ip("netns", "delete", name, check=False)
            _ip("link", "delete", bridge, check=False)
            for table in abandoned_tables(digest):
                delete_table(table)
            swept.append(bridge)
    return swept


class PodNetwork:
    """The pod network of one home. The kubelet (through the runtime) is its only caller."""

    def __init__(self, home: Path, plan: NetworkPlan, cni_path: Sequence[str], *, ensure: bool = True) -> None:
        self.home = Path(home)
        self.plan = plan
        self.cni_path = list(cni_path)
        self.dir = self.home / "network"
        self.netns_prefix = f"trm-{home_digest(self.home)}-"
        self._lock = threading.Lock()
        self._setting_up: dict[str, threading.Lock] = {}
        self.conflist = self._conflist()
        if ensure:
            (self.dir / "pods").mkdir(parents=True, exist_ok=True)
            conf_path = self.dir / f"{_NETWORK_NAME}.conflist"
            conf_path.write_text(json.dumps(self.conflist, indent=1) + "\n")
            sweep_abandoned(plan.bridge)
            self._ensure_bridge()

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_env(cls, home: Path, env: Mapping[str, str] | None = None) -> PodNetwork | None:
        """The home's pod network, or None where pods keep the host's network (``unavailable`` says
        why). ``TRIMARAN_POD_NETWORK=on`` raises ``NetworkError`` instead of falling back."""
        env = os.environ if env is None else env
        reason = cls.unavailable(env)
        if reason is None:
            return cls(home, reserve_plan(home), _cni_path(env))
        if _mode(env) == "on":
            raise NetworkError(f"TRIMARAN_POD_NETWORK=on, but {reason}")
        log.info("pods share the host's network: %s", reason)
        return None

    @staticmethod
    def unavailable(env: Mapping[str, str] | None = None) -> str | None:
        """Why pods keep the host's network, in words (None: they get a pod network):
        ``TRIMARAN_POD_NETWORK=off``, or (``auto``, the default, and ``on``) what the pod network
        needs and this machine lacks: root (an ordinary user's control plane cannot make bridges,
        network namespaces or nftables rules on the host), ``ip``, ``nft``, ``iptables`` or the CNI
        plugins (``TRIMARAN_CNI_PATH``, else /usr/lib/cni and /opt/cni/bin)."""
        env = os.environ if env is None else env
        if _mode(env) in ("off", "0", "false", "no"):
            return "TRIMARAN_POD_NETWORK=off"
        cni_path = _cni_path(env)
        missing = [f"the CNI plugin {p!r} (in {':'.join(cni_path)})" for p in _REQUIRED if not find_plugin(p, cni_path)]
        missing += [tool for tool in ("ip", "nft", "iptables") if shutil.which(tool) is None]
        if os.geteuid() != 0:
            missing.insert(0, "root (the control plane runs as an ordinary user)")
        return f"the pod network needs {', '.join(missing)}" if missing else None

    @classmethod
    def remove_home(cls, home: Path, env: Mapping[str, str] | None = None) -> bool:
        """Remove every pod network of ``home`` and its bridge (its control plane stopped, its pods'
        processes too: ``trimaran server stop --pods``); False when the home has none."""
        env = os.environ if env is None else env
        try:
            data = json.loads((Path(home) / PLAN_FILE).read_text())
            plan = NetworkPlan(**{k: data[k] for k in NetworkPlan.__dataclass_fields__})
        except (OSError, ValueError, TypeError, KeyError):
            return False
        network = cls(home, plan, _cni_path(env), ensure=False)
        network.sweep(())
        _ip("link", "delete", plan.bridge, check=False)
        delete_table(table_name(str(home)))  # its Services and NetworkPolicies (_proxy, _policy)
        delete_table(_nat_table(Path(home)))
        return True

    def _conflist(self) -> dict:
        plan = self.plan
        return {
            "cniVersion": CNI_VERSION,
            "name": _NETWORK_NAME,
            "plugins": [
                # Egress NAT is one rule for the whole range (`_ensure_bridge`), not the bridge plugin's
                # ipMasq, whose iptables chain per pod cost ~12 ms to add and ~45 ms to remove.
                {"type": "bridge", "bridge": plan.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(self.dir / "ipam"),
                          "ranges": [[{"subnet": plan.pod_cidr, "gateway": plan.gateway,
                                       "rangeEnd": _range_end(plan)}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
                {"type": "firewall", "backend": "iptables"},
                {"type": "tuning", "sysctl": dict(_SYSCTLS)},
            ],
        }

    def spare_addresses(self) -> Iterator[str]:
        """Addresses of the pod range host-local never hands out (its top :data:`_SPARES`), each put
        on the bridge as it is yielded: where the control plane serves pods when the gateway's port
        is taken (Katib's DB manager has a fixed port)."""
        for ip in _spares(self.plan):
            _ip("addr", "replace", f"{ip}/32", "dev", self.plan.bridge, check=False)
            yield ip

    def _ensure_bridge(self) -> None:
        """The bridge with the gateway address, before any pod: the control plane listens there."""
        plan = self.plan
        if _ip("link", "show", plan.bridge, check=False).returncode != 0:
            _ip("link", "add", plan.bridge, "type", "bridge", check=False)  # a racing ADD may have made it
        _ip("addr", "replace", f"{plan.gateway}/{plan.prefix_len}", "dev", plan.bridge)
        _ip("link", "set", plan.bridge, "up")
        # What leaves the range for elsewhere is masqueraded, as the bridge plugin's ipMasq does
        # (multicast excepted); traffic to this machine's own addresses keeps the pod's address.
        apply_table(_nat_table(self.home), (
            "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
            f"\t\tip saddr {plan.pod_cidr} ip daddr != {plan.pod_cidr} ip daddr != 224.0.0.0/4 masquerade\n\t}}\n"),
            comment=f"trimaran pod egress {plan.pod_cidr}")

    # -- pods -------------------------------------------------------------------------------------
    def _record(self, uid: str) -> Path:
        return self.dir / "pods" / f"{uid}.json"

    def netns_path(self, uid: str) -> Path:
        return NETNS_DIR / f"{self.netns_prefix}{uid}"

    def address(self, uid: str) -> PodAddress | None:
        """The pod's address as set up, or None."""
        try:
            data = json.loads(self._record(uid).read_text())
        except (OSError, ValueError):
            return None
        if not Path(data["netns"]).exists():
            return None
        return PodAddress(ip=data["ip"], netns=data["netns"])

    def pod_at(self, ip: str) -> tuple[str, str] | None:
        """``(namespace, name)`` of the pod that has ``ip`` now, or None. A pod cannot take another's
        address: its users are not root of its netns's user namespace."""
        if ip == self.plan.gateway:
            return None
        for record in (self.dir / "pods").glob("*.json"):
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            if data.get("ip") == ip:
                return str(data["namespace"]), str(data["name"])
        return None

    def setup(self, pod_uid: str, namespace: str, name: str, host_network: bool = False,
              port_mappings: Iterable[Mapping] = ()) -> PodAddress:
        """The pod's address: its own netns and IP, made now or kept from an earlier run of the pod
        (a restart keeps its address), or the host's for ``host_network``.

        Raises:
            NetworkError: a plugin is missing or failed, the range is exhausted; nothing is left.
        """
        if host_network:
            return PodAddress(ip=self.plan.gateway, netns=None)
        with self._lock:
            uid_lock = self._setting_up.setdefault(pod_uid, threading.Lock())
        try:
            with uid_lock:  # a gang's pods set up their peers too: one setup of a pod at a time
                return self._setup(pod_uid, namespace, name, port_mappings)
        finally:
            with self._lock:
                self._setting_up.pop(pod_uid, None)

    def _setup(self, pod_uid: str, namespace: str, name: str, port_mappings: Iterable[Mapping]) -> PodAddress:
        existing = self.address(pod_uid)
        if existing is not None:
            return existing
        netns = self.netns_path(pod_uid)
        if netns.exists() or self._record(pod_uid).exists():
            self.teardown(pod_uid)  # what a crash in an earlier setup left
        args = {"K8S_POD_NAMESPACE": namespace, "K8S_POD_NAME": name, "K8S_POD_INFRA_CONTAINER_ID": pod_uid,
                "K8S_POD_UID": pod_uid}
        try:
            created = _ip("netns", "add", netns.name, check=False)
            if created.returncode != 0:
                raise CniError(f"failed to create network namespace {netns}: {created.stderr.strip()}")
            run_plugin({"cniVersion": CNI_VERSION, "name": "cni-loopback", "type": "loopback"}, "ADD",
                       pod_uid, str(netns), self.cni_path, args, ifname="lo")
            mappings = list(port_mappings)
            # portmap has nothing to do without hostPorts (and its DEL of nothing is harmless).
            conflist = self.conflist if mappings else {
                **self.conflist, "plugins": [p for p in self.conflist["plugins"] if p["type"] != "portmap"]}
            result = run_list(conflist, "ADD", pod_uid, str(netns), self.cni_path, args,
                              runtime_config={"portMappings": mappings})
            ips = [str(ipaddress.ip_interface(entry["address"]).ip) for entry in result.get("ips") or []]
            if not ips:
                raise CniError("the CNI result has no IP address")
            tmp = self._record(pod_uid).with_suffix(".tmp")
            tmp.write_text(json.dumps({"ip": ips[0], "netns": str(netns), "namespace": namespace, "name": name,
                                       "result": result}))
            os.replace(tmp, self._record(pod_uid))
        except (CniError, OSError) as exc:
            self.teardown(pod_uid)
            raise NetworkError(f'failed to setup network for sandbox "{pod_uid}": {exc}') from None
        return PodAddress(ip=ips[0], netns=str(netns))

    def teardown(self, pod_uid: str) -> None:
        """CNI DEL (given the cached ADD result) then the netns; idempotent, and quiet about what is
        already gone (DEL must succeed when repeated)."""
        record = self._record(pod_uid)
        try:
            cached = json.loads(record.read_text()).get("result")
        except (OSError, ValueError):
            cached = None
        netns = self.netns_path(pod_uid)
        ns = str(netns) if netns.exists() else None
        try:
            run_list(self.conflist, "DEL", pod_uid, ns, self.cni_path, prev_result=cached)
        except CniError as exc:
            log.warning("CNI DEL of pod %s: %s", pod_uid, exc)
        if ns is not None:
            removed = _ip("netns", "delete", netns.name, check=False)
            if removed.returncode != 0 and netns.exists():
                log.warning("cannot remove network namespace %s: %s", netns, removed.stderr.strip())
        record.unlink(missing_ok=True)

    def known(self) -> set[str]:
        """Pod uids with anything of theirs left: a record, a netns or an IPAM allocation."""
        uids = {p.stem for p in (self.dir / "pods").glob("*.json")}
        try:
            uids |= {n[len(self.netns_prefix):] for n in os.listdir(NETNS_DIR) if n.startswith(self.netns_prefix)}
        except FileNotFoundError:
            pass
        for entry in (self.dir / "ipam" / _NETWORK_NAME).glob("*"):
            if entry.name[0].isdigit() and entry.name.count(".") == 3:
                try:
                    uids.add(entry.read_text().split()[0])
                except (OSError, IndexError):
                    pass
        return uids

    def sweep(self, keep: Iterable[str]) -> list[str]:
        """Tear down the network of every pod not in ``keep`` (at control-plane start: pods the store
        no longer knows); return their uids."""
        gone = sorted(self.known() - set(keep))
        for uid in gone:
            log.info("removing the network of orphaned pod %s", uid)
            self.teardown(uid)
        return gone

    def close(self) -> None:
        """At control-plane stop: once no pod of the home has a network, remove the bridge and give
        the range back (pods that outlive the control plane keep both)."""
        with self._lock:
            if self.known():
                return
            _ip("link", "delete", self.plan.bridge, check=False)
            delete_table(_nat_table(self.home))
            release_plan(self.plan)
