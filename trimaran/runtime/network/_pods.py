"""Each pod's network namespace and address, made and removed by the CNI plugins.

Under ``home/network/``: ``trimaran.conflist`` (the plugins, as a kubelet's ``/etc/cni/net.d``
file), ``ipam/`` (host-local's allocations), ``pods/<uid>.json`` (a pod's netns and the ADD result,
which DEL is given, as libcni caches it). A pod's netns is ``/run/netns/trm-<home digest>-<uid>``
(``ip netns add``: a bind-mounted nsfs file that outlives every process, as containerd pins its
sandboxes' namespaces), so two homes never share a name.

The pool (``TRIMARAN_POD_NETWORK_POOL`` namespaces, 2 by default, 0: none): a pod's CNI ADD and DEL
are its start's and end's largest part on the node, so namespaces wait ready (through ADD, an
address held) for the next pods. Once the home's first pod has a network, a thread keeps the pool
full; a pod takes an entry by renaming its netns (a bind mount under the pod's name, the entry's
name unmounted) and its record. A pod whose run ended with nothing of it left gives its
namespace back, address and all, instead of a CNI DEL: no IPv4 packet went in or out of it (its
shims counted), so no socket of a connection lingers in it and the machine holds no connection of
the address (conntrack) that its next pod could pass a NetworkPolicy as; and its containers were
all in user namespaces of their own, so none could change the netns. At most twice the pool's
size wait, those given back included.

An entry is named ``pool-<hex>`` where a pod's uid would be: its netns, ``pods/pool-<hex>.json``
and its IPAM allocation are found and removed by the same sweeps as a pod's (at the next start
after a crash, at ``server stop --pods``), and at stop the pool is torn down. A record names the
CNI container id its address was allocated for (``container_id``: the pod's uid, or the one of
the entry it came from), which DEL is given; a teardown of a name whose container id another
record claims (a hand-over cut short by a crash) removes only that name.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import logging
import os
import secrets
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trimaran.runtime.network._cni import CNI_VERSION, CniError, find_plugin, run_list, run_plugin
from trimaran.runtime.network._hostports import sweep_stale_hostports
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
from trimaran.runtime.timings import NODE_TIMINGS

__all__ = ["NetworkError", "PodAddress", "PodNetwork", "NETNS_DIR", "DEFAULT_CNI_PATH", "POOL_PREFIX",
           "pool_size_from_env"]

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
DEFAULT_CNI_PATH = ("/usr/lib/cni", "/opt/cni/bin")
_NETWORK_NAME = "trimaran"
# Set in each pod's netns, as containerd does: pod users are not root of the netns' user
# namespace, yet bind ports under 1024 (nginx's 80) and ping.
_SYSCTLS = {"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647"}
_REQUIRED = ("bridge", "host-local", "loopback")
POOL_PREFIX = "pool-"
_DEFAULT_POOL = 2
_MAX_POOL = 16
_MS_BIND, _MNT_DETACH = 0x1000, 2


def pool_size_from_env(env: Mapping[str, str] | None = None, name: str = "TRIMARAN_POD_NETWORK_POOL",
                       unit: str = "namespaces") -> int:
    """How many of a node's pool wait ready (0 to 16, 2 by default), from ``name``:
    ``TRIMARAN_POD_NETWORK_POOL`` (pod network namespaces) or ``TRIMARAN_SHIM_POOL`` (shims)."""
    env = os.environ if env is None else env
    text = env.get(name)
    if not text:
        return _DEFAULT_POOL
    try:
        size = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of {unit}, not {text!r}") from None
    if not 0 <= size <= _MAX_POOL:
        raise ValueError(f"{name} must be between 0 and {_MAX_POOL}, not {size}")
    return size


_libc = ctypes.CDLL(None, use_errno=True)


def _rename_netns(source: Path, target: Path) -> None:
    """Give the netns pinned at ``source`` the name ``target`` (a bind mount), then drop ``source``
    (the nsfs file of a mount cannot be renamed)."""
    fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0)
    os.close(fd)
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        target.unlink(missing_ok=True)
        raise OSError(err, f"bind {source} to {target}: {os.strerror(err)}")
    _drop_netns_name(source)


def _drop_netns_name(path: Path) -> None:
    """Unmount and remove one name of a netns, as ``ip netns delete`` does."""
    if _libc.umount2(os.fsencode(path), _MNT_DETACH) != 0 and ctypes.get_errno() not in (22, 2):  # EINVAL, ENOENT
        log.warning("cannot unmount %s: %s", path, os.strerror(ctypes.get_errno()))
    try:
        path.unlink()
    except FileNotFoundError:
        pass


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
    # What portmap left of pods whose home is gone (swept now or before): forwarded to no bridge.
    live = [ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)
            for entry in _ip_json("-4", "addr", "show", "type", "bridge") if entry.get("ifname", "").startswith("trm-")
            for info in entry.get("addr_info", [])]
    sweep_stale_hostports(_NETWORK_NAME, live)
    return swept


class PodNetwork:
    """The pod network of one home. The kubelet (through the runtime) is its only caller."""

    def __init__(self, home: Path, plan: NetworkPlan, cni_path: Sequence[str], *, ensure: bool = True,
                 pool_size: int = 0) -> None:
        """``pool_size``: how many namespaces wait ready for the next pods once one has started (0: none)."""
        self.home = Path(home)
        self.plan = plan
        self.cni_path = list(cni_path)
        self.dir = self.home / "network"
        self.netns_prefix = f"trm-{home_digest(self.home)}-"
        self._lock = threading.Lock()
        self._pod_locks: dict[str, list] = {}  # uid -> [its lock, how many hold or wait for it]
        self.conflist = self._conflist()
        self.pool_size = pool_size
        self._pool: deque[str] = deque()  # entries ready to be taken, oldest first
        self._filler: threading.Thread | None = None
        self._fill = threading.Condition(self._lock)
        self._closing = False
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
            return cls(home, reserve_plan(home), _cni_path(env), pool_size=pool_size_from_env(env))
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
            if data.get("ip") == ip and not data.get("pool"):
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
        with self._one_at_a_time(pod_uid):  # a gang's pods set up their peers too
            return self._setup(pod_uid, namespace, name, port_mappings)

    @contextmanager
    def _one_at_a_time(self, uid: str) -> Iterator[None]:
        """Hold ``uid``'s lock: its setup, release and teardown never overlap (a pod's end gives its
        netns back while its deletion tears it down)."""
        with self._lock:
            held = self._pod_locks.setdefault(uid, [threading.Lock(), 0])
            held[1] += 1
        try:
            with held[0]:
                yield
        finally:
            with self._lock:
                held[1] -= 1
                if held[1] == 0:
                    del self._pod_locks[uid]

    def _setup(self, pod_uid: str, namespace: str, name: str, port_mappings: Iterable[Mapping]) -> PodAddress:
        existing = self.address(pod_uid)
        if existing is not None:
            return existing
        netns = self.netns_path(pod_uid)
        if netns.exists() or self._record(pod_uid).exists():
            self._teardown(pod_uid)  # what a crash in an earlier setup left
        mappings = list(port_mappings)
        if not mappings and self.pool_size:  # hostPorts need portmap's ADD: such a pod makes its own
            adopted = self._adopt(pod_uid, namespace, name)
            if adopted is not None:
                return adopted
        with NODE_TIMINGS.timed("network.setup"):
            try:
                ip = self._add(pod_uid, namespace, name, mappings)
            except (CniError, OSError) as exc:
                self._teardown(pod_uid)
                raise NetworkError(f'failed to setup network for sandbox "{pod_uid}": {exc}') from None
        return PodAddress(ip=ip, netns=str(netns))

    def _add(self, uid: str, namespace: str, name: str, mappings: list[Mapping], pool: bool = False) -> str:
        """CNI ADD into a new netns named for ``uid``; its record written; the address. Raises
        ``CniError`` or ``OSError``, leaving what the caller's teardown removes."""
        netns = self.netns_path(uid)
        args = {"K8S_POD_NAMESPACE": namespace, "K8S_POD_NAME": name, "K8S_POD_INFRA_CONTAINER_ID": uid,
                "K8S_POD_UID": uid}
        created = _ip("netns", "add", netns.name, check=False)
        if created.returncode != 0:
            raise CniError(f"failed to create network namespace {netns}: {created.stderr.strip()}")
        run_plugin({"cniVersion": CNI_VERSION, "name": "cni-loopback", "type": "loopback"}, "ADD",
                   uid, str(netns), self.cni_path, args, ifname="lo")
        # portmap has nothing to do without hostPorts (and its DEL of nothing is harmless).
        conflist = self.conflist if mappings else {
            **self.conflist, "plugins": [p for p in self.conflist["plugins"] if p["type"] != "portmap"]}
        result = run_list(conflist, "ADD", uid, str(netns), self.cni_path, args,
                          runtime_config={"portMappings": mappings})
        ips = [str(ipaddress.ip_interface(entry["address"]).ip) for entry in result.get("ips") or []]
        if not ips:
            raise CniError("the CNI result has no IP address")
        # The mappings are kept for the DEL: portmap removes a pod's rules only when its DEL is given
        # them again (as the kubelet passes them on every call), and does nothing otherwise.
        self._write_record(uid, {"ip": ips[0], "netns": str(netns), "namespace": namespace, "name": name,
                                 "result": result, "container_id": uid, "hostPorts": bool(mappings),
                                 **({"portMappings": mappings} if mappings else {}),
                                 **({"pool": True} if pool else {})})
        return ips[0]

    def _write_record(self, uid: str, data: Mapping) -> None:
        tmp = self._record(uid).with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self._record(uid))

    def _read_record(self, uid: str) -> dict | None:
        try:
            return json.loads(self._record(uid).read_text())
        except (OSError, ValueError):
            return None

    # -- the pool ---------------------------------------------------------------------------------
    def _adopt(self, pod_uid: str, namespace: str, name: str) -> PodAddress | None:
        """The pod's network from a pool entry, or None when none is ready (the pool is filled
        from now on: the first pod's setup starts the filler)."""
        with self._lock:
            entry = self._pool.popleft() if self._pool else None
            self._start_filler()
            self._fill.notify()
        if entry is None:
            return None
        with NODE_TIMINGS.timed("network.adopt"):
            data = self._read_record(entry)
            source = self.netns_path(entry)
            if data is None or not source.exists():
                log.warning("pod network pool entry %s is incomplete; removing it", entry)
                self.teardown(entry)
                return None
            netns = self.netns_path(pod_uid)
            # The pod's record first, naming the entry's container id: from then on a teardown of the
            # entry's name (a sweep after a crash here) leaves the address to the pod.
            self._write_record(pod_uid, {**{k: v for k, v in data.items() if k != "pool"}, "netns": str(netns),
                                         "namespace": namespace, "name": name})
            try:
                _rename_netns(source, netns)
            except OSError as exc:
                log.warning("cannot hand pod network pool entry %s to pod %s: %s", entry, pod_uid, exc)
                self._record(pod_uid).unlink(missing_ok=True)
                self.teardown(entry)
                return None
            self._record(entry).unlink(missing_ok=True)
        return PodAddress(ip=data["ip"], netns=str(netns))

    def pooled(self) -> list[str]:
        """The addresses of the pool's entries ready for the next pods, oldest first."""
        with self._lock:
            entries = list(self._pool)
        return [str((self._read_record(entry) or {}).get("ip")) for entry in entries]

    def _start_filler(self) -> None:
        # Under self._lock.
        if self._filler is None and not self._closing:
            self._filler = threading.Thread(target=self._keep_filled, name="pod-network-pool", daemon=True)
            self._filler.start()

    def _keep_filled(self) -> None:
        while True:
            with self._lock:
                while not self._closing and len(self._pool) >= self.pool_size:
                    self._fill.wait()
                if self._closing:
                    return
            entry = f"{POOL_PREFIX}{secrets.token_hex(6)}"
            try:
                with NODE_TIMINGS.timed("pool.fill"):
                    self._add(entry, "", entry, [], pool=True)
            except (CniError, OSError) as exc:
                # The range may be exhausted: pods then make their own (and say why); the next
                # pod's setup wakes the filler again.
                log.warning("cannot make a pod network ahead: %s", exc)
                self.teardown(entry)
                with self._lock:
                    if not self._closing:
                        self._fill.wait()
                continue
            with self._lock:
                self._pool.append(entry)
                if self._closing:
                    return

    def release(self, pod_uid: str, reusable: bool) -> None:
        """The pod's run has ended for good: its netns goes back to the pool where ``reusable`` (the
        caller knows nothing of the pod is left in it or of it on the machine: no traffic, no
        process, and none of its containers could change the netns) and the pool has room, else
        it is torn down."""
        with self._lock:
            # Up to twice the pool's size: the filler keeps it full as pods take entries, and the
            # namespaces they give back must still find room, or each pod would cost an ADD and a DEL.
            room = len(self._pool) < 2 * self.pool_size and not self._closing
        with self._one_at_a_time(pod_uid):
            if not (room and reusable and self._recycle(pod_uid)):
                self._teardown(pod_uid)

    def _recycle(self, pod_uid: str) -> bool:
        data = self._read_record(pod_uid)
        source = self.netns_path(pod_uid)
        if data is None or data.get("hostPorts") or not source.exists():
            return False
        with NODE_TIMINGS.timed("network.recycle"):
            entry = f"{POOL_PREFIX}{secrets.token_hex(6)}"
            self._write_record(entry, {**data, "netns": str(self.netns_path(entry)), "namespace": "", "name": entry,
                                       "pool": True})
            try:
                _rename_netns(source, self.netns_path(entry))
            except OSError as exc:
                log.warning("cannot put the network of pod %s back in the pool: %s", pod_uid, exc)
                self._record(entry).unlink(missing_ok=True)
                return False
            self._record(pod_uid).unlink(missing_ok=True)
            with self._lock:
                self._pool.append(entry)
                self._fill.notify()
        return True

    # -- removing ---------------------------------------------------------------------------------
    def teardown(self, pod_uid: str) -> None:
        """CNI DEL (given the cached ADD result) then the netns; idempotent, and quiet about what is
        already gone (DEL must succeed when repeated). Where another record claims the container id
        this name's address was allocated for, only this name goes."""
        with self._one_at_a_time(pod_uid):
            self._teardown(pod_uid)

    def _teardown(self, pod_uid: str) -> None:
        record = self._record(pod_uid)
        data = self._read_record(pod_uid) or {}
        container_id = str(data.get("container_id") or pod_uid)
        netns = self.netns_path(pod_uid)
        if self._claimant(container_id, pod_uid) is not None:
            _drop_netns_name(netns)
            record.unlink(missing_ok=True)
            return
        ns = str(netns) if netns.exists() else None
        if not data and ns is None and container_id not in self._allocations():
            return  # nothing of it left (a pod whose netns went back to the pool): no DEL to run
        with NODE_TIMINGS.timed("network.teardown"):
            try:
                run_list(self.conflist, "DEL", container_id, ns, self.cni_path, prev_result=data.get("result"),
                         runtime_config={"portMappings": data.get("portMappings") or []})
            except CniError as exc:
                log.warning("CNI DEL of pod %s: %s", pod_uid, exc)
            if ns is not None:
                removed = _ip("netns", "delete", netns.name, check=False)
                if removed.returncode != 0 and netns.exists():
                    log.warning("cannot remove network namespace %s: %s", netns, removed.stderr.strip())
            record.unlink(missing_ok=True)

    def _records(self) -> dict[str, dict]:
        records = {}
        for path in (self.dir / "pods").glob("*.json"):
            try:
                records[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):
                records[path.stem] = {}
        return records

    def _claimant(self, container_id: str, name: str) -> str | None:
        """The name (other than ``name``) whose record holds ``container_id``'s address, if any."""
        for other, data in self._records().items():
            if other != name and data.get("container_id") == container_id:
                return other
        return None

    def known(self) -> set[str]:
        """Pod uids (and pool entries) with anything of theirs left: a record, a netns or an IPAM
        allocation (named by the record that holds its container id)."""
        records = self._records()
        holders = {str(data.get("container_id") or uid): uid for uid, data in records.items()}
        uids = set(records)
        try:
            uids |= {n[len(self.netns_prefix):] for n in os.listdir(NETNS_DIR) if n.startswith(self.netns_prefix)}
        except FileNotFoundError:
            pass
        uids |= {holders.get(container_id, container_id) for container_id in self._allocations()}
        return uids

    def _allocations(self) -> set[str]:
        """The container ids host-local holds an address for."""
        found = set()
        for entry in (self.dir / "ipam" / _NETWORK_NAME).glob("*"):
            if entry.name[0].isdigit() and entry.name.count(".") == 3:
                try:
                    found.add(entry.read_text().split()[0])
                except (OSError, IndexError):
                    continue
        return found

    def sweep(self, keep: Iterable[str]) -> list[str]:
        """Tear down the network of every pod not in ``keep`` (at control-plane start: pods the store
        no longer knows, and the pool a killed control plane left); return their uids."""
        gone = sorted(self.known() - set(keep))
        for uid in gone:
            if not uid.startswith(POOL_PREFIX):
                log.info("removing the network of orphaned pod %s", uid)
            self.teardown(uid)
        return gone

    def close(self) -> None:
        """At control-plane stop: the pool is torn down; once no pod of the home has a network, the
        bridge is removed and the range given back (pods that outlive the control plane keep both)."""
        with self._lock:
            self._closing = True
            self._fill.notify_all()
            filler = self._filler
        if filler is not None:
            filler.join()  # it may be adding an entry: that one too is in the pool then
        with self._lock:
            entries = list(self._pool)
            self._pool.clear()
        for entry in entries:
            self.teardown(entry)
        with self._lock:
            if self.known():
                return
            _ip("link", "delete", self.plan.bridge, check=False)
            delete_table(_nat_table(self.home))
            release_plan(self.plan)
