"""Who may call the API: bearer tokens, each limited to a role and a set of namespaces.

Two kinds of token, both opaque strings to a client:

* **User tokens** (``trimaran token create``): random, shown once, stored only as their SHA-256 in
  ``$TRIMARAN_HOME/tokens.json`` (mode 0600). The control plane makes one admin token for the
  user on first start and writes it into ``$TRIMARAN_HOME/kubeconfig``.
* **Service-account tokens**, one per namespace, handed to every pod of that namespace at
  ``/var/run/secrets/kubernetes.io/serviceaccount/token``. They are an HMAC of the namespace under
  a key kept in ``$TRIMARAN_HOME/pki/sa.key``, so they need no storage and a pod's token stays valid
  across restarts (as Kubernetes signs its service-account tokens rather than storing them).

A token names a user and its groups; what the user may do is RBAC's (``trimaran.server.rbac``):
a token made with ``--role view|edit|admin`` gets bindings to the default ClusterRole of that
name, a RoleBinding in each of its namespaces or, without namespaces, a ClusterRoleBinding
(``admin`` everywhere is ``cluster-admin``), made by the control plane when it sees the token. The
kubeconfig's token is in ``system:masters``. A pod's token is its ServiceAccount's (``default``
unless the pod names another); a namespace's ServiceAccounts may edit it once one of its pods used
its token (a RoleBinding the control plane makes then); ``TokenRequest`` mints tokens of any
ServiceAccount (``trimaran.server.rbac.serviceaccounts``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trimaran.server.rbac.authorizer import Attributes

ROLES = ("view", "edit", "admin")
AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"
_SA_PREFIX = "tsa"
_USER_PREFIX = "tmr"


class Authorizer(Protocol):
    """What decides a Principal's requests (``trimaran.server.rbac.Authorizer``)."""

    def allows(self, user: Any, attrs: Any) -> bool: ...


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        name: The user name: ``admin``, ``token:<id>``, a token's ``--user``, or
            ``system:serviceaccount:<ns>:<name>``.
        groups: Its groups, ``system:authenticated`` among them.
        role: The role a ``--role`` token was made with (``view``, ``edit``, ``admin``), else None.
        namespaces: Where that role was given; ``None`` for all namespaces. A ServiceAccount's:
            its own namespace (where a client of it works by default, as KFP's API takes it).
        token_id: The user token's id, when it is one.
    """

    name: str
    groups: tuple[str, ...] = (AUTHENTICATED,)
    role: str | None = None
    namespaces: frozenset[str] | None = None
    token_id: str | None = None
    authorizer: Authorizer | None = field(default=None, compare=False, repr=False)

    def allows(self, verb: str, namespace: str | None, resource: str, group: str = "", name: str = "") -> bool:
        """Whether the caller may ``verb`` ``resource`` (a plural, ``pods/exec`` for a
        subresource) of API ``group`` in ``namespace`` (``None``: at the cluster scope), by RBAC."""
        if self.authorizer is None:
            raise RuntimeError("this token store has no authorizer (trimaran.server.rbac.start)")
        plural, _, sub = resource.partition("/")
        return self.authorizer.allows(self, Attributes(verb, group, plural, sub, namespace or "", name))

    def may_get_path(self, path: str) -> bool:
        """Whether the caller may GET a non-resource URL (``/metrics``)."""
        if self.authorizer is None:
            raise RuntimeError("this token store has no authorizer (trimaran.server.rbac.start)")
        return self.authorizer.allows(self, Attributes("get", path=path))


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
        # Set by the control plane (trimaran.server.rbac.start): what decides requests, and what
        # to do when the tokens change, or a user token or a namespace's pod token is used (keep
        # their bindings).
        self.authorizer: Authorizer | None = None
        self.on_change: Callable[[dict[str, dict]], None] | None = None
        self.on_user_token: Callable[[str, dict], None] | None = None
        self.on_service_account: Callable[[str], None] | None = None
        # Whether ServiceAccount (namespace, name, uid) still exists: a TokenRequest token dies with it.
        self.account_exists: Callable[[str, str, str], bool] | None = None

    # User tokens -------------------------------------------------------------------------

    def create(self, role: str | None = "admin", namespaces: list[str] | None = None, name: str | None = None,
               user: str | None = None, groups: list[str] | None = None) -> str:
        """Make a token and return it; only its digest is stored.

        Args:
            role: ``view``, ``edit`` or ``admin``: the default ClusterRole the control plane binds
                the token's user to; None for none (RBAC objects made by hand grant what it may do).
            namespaces: Where ``role`` holds; ``None`` (or empty) for all.
            name: A label shown in ``trimaran token list``.
            user: The user it authenticates as; its name (or ``token:<id>``) when not given.
            groups: Groups the user is in (beyond ``system:authenticated``).
        """
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        token_id = secrets.token_hex(4)
        token = f"{_USER_PREFIX}_{token_id}_{secrets.token_urlsafe(24)}"
        with self._lock:
            self._reload()
            self._entries[token_id] = {"digest": _digest(token), "role": role, "name": name or f"token:{token_id}",
                                       "namespaces": sorted(namespaces) if namespaces else None,
                                       "user": user or name or f"token:{token_id}", "groups": sorted(groups or [])}
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
            self._changed()

    def _save(self) -> None:
        write_private(self.path, json.dumps(self._entries, indent=1).encode())
        self._loaded_mtime = self.path.stat().st_mtime_ns
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(dict(self._entries))

    # Service-account tokens --------------------------------------------------------------

    def entries(self) -> dict[str, dict]:
        """Every user token's entry by id (digests included): for the control plane's bindings."""
        with self._lock:
            self._reload()
            return dict(self._entries)

    def service_account_token(self, namespace: str, name: str = "default") -> str:
        """The token the pods of ``namespace`` running as ServiceAccount ``name`` get (stable for the
        life of the home): ``tsa.NS.MAC`` for ``default``, ``tsa.NS.NAME.MAC`` for another."""
        if name == "default":  # the form pods had before tokens named their ServiceAccount
            mac = hmac.new(self._service_account_key(), namespace.encode(), hashlib.sha256).hexdigest()
            return f"{_SA_PREFIX}.{namespace}.{mac}"
        mac = hmac.new(self._service_account_key(), f"{namespace}/{name}".encode(), hashlib.sha256).hexdigest()
        return f"{_SA_PREFIX}.{namespace}.{name}.{mac}"

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

    def sign(self, payload: bytes) -> bytes:
        """An HMAC-SHA256 of ``payload`` under the home's service-account key (TokenRequest's JWTs)."""
        return hmac.new(self._service_account_key(), payload, hashlib.sha256).digest()

    def authenticate(self, token: str | None) -> Principal | None:
        """The caller a bearer token names, or ``None`` for a missing or wrong one."""
        if not token:
            return None
        if token.startswith(_SA_PREFIX + "."):
            # A namespace has no dots; a ServiceAccount's name may.
            namespace, _, rest = token[len(_SA_PREFIX) + 1:].partition(".")
            name = rest.rpartition(".")[0] or "default"
            if namespace and hmac.compare_digest(token, self.service_account_token(namespace, name)):
                if self.on_service_account is not None:
                    self.on_service_account(namespace)
                return self._principal(f"system:serviceaccount:{namespace}:{name}", service_account_groups(namespace),
                                       namespaces=frozenset({namespace}))
            return None
        if token.startswith(_JWT_PREFIX):
            claims = verify_jwt(token, self.sign)
            if claims is None:
                return None
            namespace = claims["kubernetes.io"]["namespace"]
            account = claims["kubernetes.io"]["serviceaccount"]
            if self.account_exists is not None and not self.account_exists(namespace, account["name"],
                                                                            account["uid"]):
                return None
            return self._principal(claims["sub"], service_account_groups(namespace), namespaces=frozenset({namespace}))
        parts = token.split("_", 2)
        if len(parts) != 3 or parts[0] != _USER_PREFIX:
            return None
        with self._lock:
            self._reload()
            entry = self._entries.get(parts[1])
        if entry is None or not hmac.compare_digest(entry["digest"], _digest(token)):
            return None
        if self.on_user_token is not None:
            self.on_user_token(parts[1], entry)
        namespaces = entry.get("namespaces")
        user = entry.get("user") or entry.get("name") or f"token:{parts[1]}"
        return self._principal(user, tuple(entry.get("groups") or ()), entry.get("role"),
                               frozenset(namespaces) if namespaces else None, parts[1])

    def _principal(self, user: str, groups: Iterable[str], role: str | None = None,
                   namespaces: frozenset[str] | None = None, token_id: str | None = None) -> Principal:
        # Every authenticated user is in system:authenticated, as kube-apiserver adds it.
        return Principal(user, (*dict.fromkeys(groups), AUTHENTICATED), role, namespaces, token_id, self.authorizer)


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_JWT_HEADER = _b64(b'{"alg":"HS256","typ":"JWT"}')
_JWT_PREFIX = _JWT_HEADER + "."


def make_jwt(claims: dict[str, Any], sign: Callable[[bytes], bytes]) -> str:
    """A JWT (HS256) of ``claims``: a service account's token, as TokenRequest returns it."""
    body = f"{_JWT_HEADER}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
    return f"{body}.{_b64(sign(body.encode()))}"


def verify_jwt(token: str, sign: Callable[[bytes], bytes]) -> dict[str, Any] | None:
    """The claims of a JWT made by `make_jwt`, or None when its signature is wrong or it has expired."""
    body, _, signature = token.rpartition(".")
    try:
        if not hmac.compare_digest(_unb64(signature), sign(body.encode())):
            return None
        claims = json.loads(_unb64(body.partition(".")[2]))
    except (ValueError, binascii.Error):
        return None
    now = time.time()
    if not isinstance(claims, dict) or not claims.get("exp", 0) > now >= claims.get("nbf", 0):
        return None
    return claims


__all__ = ["AUTHENTICATED", "MASTERS", "ROLES", "Principal", "TokenStore", "make_jwt", "service_account_groups",
           "verify_jwt", "write_private"]
