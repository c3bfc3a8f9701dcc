"""Who may call the API: bearer tokens, each limited to a role and a set of namespaces.

Two kinds of token, both opaque strings to a client:

* **User tokens** (``trimaran token create``): random, shown once, stored only as their SHA-256 in
  ``$TRIMARAN_HOME/tokens.json`` (mode 0600). The control plane makes one admin token for the
  user on first start and writes it into ``$TRIMARAN_HOME/kubeconfig``.
* **Service-account tokens**, one per namespace, handed to every pod of that namespace at
  ``/var/run/secrets/kubernetes.io/serviceaccount/token``. They are an HMAC of the namespace under
  a key kept in ``$TRIMARAN_HOME/pki/sa.key``, so they need no storage and a pod's token stays valid
  across restarts (as Kubernetes signs its service-account tokens rather than storing them).

Roles follow Kubernetes' default user-facing ClusterRoles: ``view`` reads, ``edit`` also writes
namespaced objects, ``admin`` may also write cluster-scoped objects (namespaces) and, with no
namespace limit, everything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

ROLES = ("view", "edit", "admin")
READ_VERBS = frozenset({"get", "list", "watch"})
_SA_PREFIX = "tsa"
_USER_PREFIX = "tmr"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        name: ``admin``, ``token:<id>`` or ``system:serviceaccount:<ns>:default``.
        role: ``view``, ``edit`` or ``admin``.
        namespaces: The namespaces it may touch; ``None`` for all of them.
    """

    name: str
    role: str
    namespaces: frozenset[str] | None

    def allows(self, verb: str, namespace: str | None, resource: str | None = None) -> bool:
        """Whether the caller may ``verb`` (a Kubernetes verb) in ``namespace``, on ``resource`` (a
        core plural) when given.

        ``namespace`` is ``None`` for a request across namespaces or on a cluster-scoped object;
        reading those (listing namespaces, discovery) is open to every role of an all-namespace
        token, and a namespaced token may read only its own namespaces. As Kubernetes' ``view``
        role, ``view`` does not read Secrets (they hold credentials, such as an MPI job's exec token).
        """
        if self.namespaces is not None and (namespace is None or namespace not in self.namespaces):
            return False
        if verb in READ_VERBS:
            return not (self.role == "view" and resource == "secrets")
        if self.role == "view":
            return False
        return namespace is not None or self.role == "admin"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` so that no one but this user can ever read it, replacing ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


class TokenStore:
    """The tokens of one Trimaran home; safe to share between threads.

    The control plane and ``trimaran token create`` both use it; the file is re-read when it
    changes, so a token made from the CLI works at once.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / "tokens.json"
        self._key_path = home / "pki" / "sa.key"
        self._lock = threading.Lock()
        self._loaded_mtime: float | None = None
        self._entries: dict[str, dict] = {}
        self._sa_key: bytes | None = None

    # User tokens -------------------------------------------------------------------------

    def create(self, role: str = "admin", namespaces: list[str] | None = None, name: str | None = None) -> str:
        """Make a token and return it; only its digest is stored.

        Args:
            role: ``view``, ``edit`` or ``admin``.
            namespaces: The namespaces it is limited to; ``None`` (or empty) for all.
            name: A label shown in ``trimaran token list``.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        token_id = secrets.token_hex(4)
        token = f"{_USER_PREFIX}_{token_id}_{secrets.token_urlsafe(24)}"
        with self._lock:
            self._reload()
            self._entries[token_id] = {"digest": _digest(token), "role": role, "name": name or f"token:{token_id}",
                                       "namespaces": sorted(namespaces) if namespaces else None}
            self._save()
        return token

    def list(self) -> list[dict]:
        """Every user token's id, name, role and namespaces (never the token)."""
        with self._lock:
            self._reload()
            return [{"id": k, **{f: v for f, v in e.items() if f != "digest"}} for k, e in self._entries.items()]

    def revoke(self, token_id: str) -> bool:
        """Forget a user token; whether it existed."""
        with self._lock:
            self._reload()
            existed = self._entries.pop(token_id, None) is not None
            if existed:
                self._save()
            return existed

    def _reload(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._entries, self._loaded_mtime = {}, None
            return
        if mtime != self._loaded_mtime:
            self._entries = json.loads(self.path.read_text() or "{}")
            self._loaded_mtime = mtime

    def _save(self) -> None:
        write_private(self.path, json.dumps(self._entries, indent=1).encode())
        self._loaded_mtime = self.path.stat().st_mtime_ns

    # Service-account tokens --------------------------------------------------------------

    def service_account_token(self, namespace: str) -> str:
        """The token every pod of ``namespace`` gets (stable for the life of the home)."""
        mac = hmac.new(self._service_account_key(), namespace.encode(), hashlib.sha256).hexdigest()
        return f"{_SA_PREFIX}.{namespace}.{mac}"

    def _service_account_key(self) -> bytes:
        with self._lock:
            if self._sa_key is None:
                try:
                    self._sa_key = self._key_path.read_bytes()
                except FileNotFoundError:
                    key = secrets.token_bytes(32)
                    write_private(self._key_path, key)
                    self._sa_key = self._key_path.read_bytes()
            return self._sa_key

    # Checking ----------------------------------------------------------------------------

    def authenticate(self, token: str | None) -> Principal | None:
        """The caller a bearer token names, or ``None`` for a missing or wrong one."""
        if not token:
            return None
        if token.startswith(_SA_PREFIX + "."):
            _, _, rest = token.partition(".")
            namespace, _, _ = rest.rpartition(".")
            if namespace and hmac.compare_digest(token, self.service_account_token(namespace)):
                return Principal(f"system:serviceaccount:{namespace}:default", "edit", frozenset({namespace}))
            return None
        parts = token.split("_", 2)
        if len(parts) != 3 or parts[0] != _USER_PREFIX:
            return None
        with self._lock:
            self._reload()
            entry = self._entries.get(parts[1])
        if entry is None or not hmac.compare_digest(entry["digest"], _digest(token)):
            return None
        namespaces = entry.get("namespaces")
        return Principal(entry.get("name") or f"token:{parts[1]}", entry["role"],
                         frozenset(namespaces) if namespaces else None)


__all__ = ["READ_VERBS", "ROLES", "Principal", "TokenStore", "write_private"]
