"""Who calls Katib's DBManager, and what each caller may do.

Katib's SDK (``report_metrics``, ``KatibClient.get_trial_metrics``) sends no credentials, and every
pod shares this machine's network, so a call is identified in one of two ways:

* a bearer token in the gRPC metadata (``authorization: Bearer TOKEN``), checked by the API's
  :class:`~trimaran.server.tokens.TokenStore`: a user token or a pod's service-account token,
  with its role and namespaces;
* without one, by the process at the other end of the TCP connection (for a connection the relay
  forwarded, :mod:`.relay`, the caller's connection to the relay), asked of the kernel: the
  connection's socket (sock_diag), the processes holding it (``/proc/PID/fd``; all must be the same
  caller, as a socket can be handed over), and the pod each belongs to
  (:meth:`NodeAPI.pod_of_process`). A process of one of this home's
  pods acts for its namespace; a process outside every pod (the control plane's pid namespace)
  of the home's user or root acts as that user, who can read the admin kubeconfig anyway. Anything
  else (another local user, a pod of another home) is unauthenticated.

What a caller may do is in :meth:`Caller.may`.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass

import grpc

from trimaran.runtime import NodeAPI
from trimaran.server.rbac.policy import OBSERVATIONS
from trimaran.server.tokens import Principal, TokenStore

__all__ = ["Caller", "Callers"]

log = logging.getLogger(__name__)

_CACHED_CONNECTIONS = 256
# sock_diag(7): a netlink header, then inet_diag_msg, whose inode follows family..retrans (4 bytes),
# the socket id (48), expires, rqueue, wqueue and uid (16).
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_HEADER = 16
_DIAG_INODE = _NLMSG_HEADER + 4 + 48 + 16


@dataclass(frozen=True)
class Caller:
    """An identified caller: exactly one of ``principal`` (a token), ``namespace`` (a pod of it),
    or ``owner`` (a process of the home's user outside every pod)."""

    description: str
    principal: Principal | None = None
    namespace: str | None = None
    owner: bool = False

    def may(self, verb: str, namespace: str) -> bool:
        """Whether this caller may ``verb`` (``get``, ``create`` or ``delete``) the observations of
        a trial in ``namespace``. Deleting takes an admin token, as nothing but an administrator
        deletes Katib's records; a pod reads and reports for its own namespace; the home's user
        without a token only reads (as with ``kubectl port-forward`` to Katib's service)."""
        if self.principal is not None:
            # Reading and reporting are those of the trial; deleting, of its observation log (admin's).
            resource = OBSERVATIONS if verb == "delete" else "trials"
            return self.principal.allows("update" if verb == "create" else verb, namespace, resource, "kubeflow.org")
        if self.namespace is not None:
            return verb in ("get", "create") and namespace == self.namespace
        return self.owner and verb == "get"


@dataclass(frozen=True)
class _Connection:
    inode: int
    pid: int
    fd: int
    caller: Caller | None


class Callers:
    """Identifies the callers of the gRPC server listening at ``server``."""

    def __init__(self, tokens: TokenStore, runtime: NodeAPI) -> None:
        self.tokens = tokens
        self.runtime = runtime
        self.server: tuple[str, int] | None = None  # set once the server is bound
        # Connections forwarded by a relay (:mod:`.relay`): its ends' addresses → the callers'
        # addresses, and the address the callers connected to.
        self.relayed: tuple[dict[tuple[str, int], tuple[str, int]], tuple[str, int]] | None = None
        # A gRPC channel keeps its connection: the process behind it is looked up once.
        self._by_peer: OrderedDict[str, _Connection] = OrderedDict()
        self._lock = threading.Lock()

    def identify(self, context: grpc.ServicerContext) -> Caller:
        """The caller of the call in ``context``; aborts it with UNAUTHENTICATED when there is none."""
        metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        header = metadata.get("authorization")
        if header is not None:
            scheme, _, token = header.strip().partition(" ")
            principal = self.tokens.authenticate(token.strip()) if scheme.lower() == "bearer" else None
            if principal is None:
                log.warning("Katib DBManager: refused a call from %s: invalid bearer token", context.peer())
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token in 'authorization'")
            return Caller(principal.name, principal=principal)
        caller = self._by_connection(context.peer())
        if caller is None:
            log.warning("Katib DBManager: refused a call from %s: no token, and not a process of this "
                        "home's pods or of its user", context.peer())
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "Katib's DBManager here takes calls from this home's pods, or with a bearer token "
                          "(gRPC metadata 'authorization: Bearer TOKEN'; see 'trimaran token create')")
        return caller

    def _by_connection(self, peer: str) -> Caller | None:
        family, _, address = peer.partition(":")
        host, _, port = address.rpartition(":")
        if family != "ipv4" or self.server is None or not port.isdigit():
            return None
        client, server = (host, int(port)), self.server
        if self.relayed is not None and client in self.relayed[0]:
            client, server = self.relayed[0][client], self.relayed[1]
            peer = f"ipv4:{client[0]}:{client[1]}>{server[0]}:{server[1]}"
        # On the pod network a pod's connection comes from its own address.
        owner = self.runtime.pod_at_address(client[0])
        if owner is not None:
            return Caller(f"pod {owner[0]}/{owner[1]}", namespace=owner[0])
        with self._lock:
            known = self._by_peer.get(peer)
        # Still the same socket in the same process: then the peer's address is still its.
        if known is not None and _holds(known.pid, known.fd, known.inode):
            return known.caller
        inode = _connection_inode(client, server)
        holders = [] if inode is None else _socket_holders(inode)
        if not holders:
            return None
        # A socket can be handed to another process (SCM_RIGHTS): every holder must be the same caller.
        found = [self._classify(pid) for pid, _ in holders]
        same = all(c is not None for c in found) and len({(c.namespace, c.owner) for c in found}) == 1
        if not same:
            log.warning("Katib DBManager: connection %s is held by processes of different callers: %s",
                        peer, ", ".join(c.description if c else f"process {pid} (unknown)"
                                        for c, (pid, _) in zip(found, holders, strict=True)))
        caller = found[0] if same else None
        with self._lock:
            self._by_peer[peer] = _Connection(inode, *holders[0], caller)
            self._by_peer.move_to_end(peer)
            while len(self._by_peer) > _CACHED_CONNECTIONS:
                self._by_peer.popitem(last=False)
        return caller

    def _classify(self, pid: int) -> Caller | None:
        pod = self.runtime.pod_of_process(pid)
        if pod is not None:
            identity = self.runtime.pod_identity(pod)
            if identity is None:
                return None
            namespace, name = identity
            return Caller(f"pod {namespace}/{name}", namespace=namespace)
        try:
            same_pid_namespace = os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
                uids = next(line for line in status if line.startswith("Uid:")).split()[1:3]
        except (OSError, StopIteration):
            return None
        if same_pid_namespace and {int(u) for u in uids} <= {os.geteuid(), 0}:
            return Caller(f"process {pid} (uid {uids[1]})", owner=True)
        return None


def _connection_inode(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The inode of the client's socket of the TCP connection ``client`` → ``server``, asked of
    the kernel's sock_diag (one exact lookup; reading /proc/net/tcp walks every socket)."""
    cookie_none = 0xFFFFFFFF
    sockid = (struct.pack("!HH", client[1], server[1]) + socket.inet_aton(client[0]) + bytes(12)
              + socket.inet_aton(server[0]) + bytes(12) + struct.pack("=III", 0, cookie_none, cookie_none))
    request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    header = struct.pack("=IHHII", _NLMSG_HEADER + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.send(header + request)
            answer = diag.recv(65536)
    except OSError as exc:
        log.warning("Katib DBManager: sock_diag lookup failed: %s", exc)
        return None
    if len(answer) < _DIAG_INODE + 4 or struct.unpack_from("=H", answer, 4)[0] != _SOCK_DIAG_BY_FAMILY:
        return None  # an error message: no such connection (the caller has gone)
    return struct.unpack_from("=I", answer, _DIAG_INODE)[0]


def _holds(pid: int, fd: int, inode: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]"
    except OSError:
        return False


def _socket_holders(inode: int) -> list[tuple[int, int]]:
    """``(pid, fd)`` of each process holding the socket ``inode``."""
    target = f"socket:[{inode}]"
    holders = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") == target:
                    holders.append((int(name), int(fd)))
                    break
            except OSError:
                continue
    return holders
