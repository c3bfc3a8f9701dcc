"""``$TRIMARAN_HOME/kubeconfig``: how kubectl, the Kubernetes clients, the Kubeflow SDKs and
``trimaran`` itself find and authenticate to the control plane.

Written by the control plane on every start (its port may change), mode 0600, context ``trimaran``
with the user's admin token; the token is made on first start and kept across restarts. It is
written as JSON, which every kubeconfig reader takes (YAML is a superset of JSON): reading it then
needs no YAML parser, whose import is a tenth of a ``trimaran get``. Other kubeconfigs are YAML.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from trimaran.server.tokens import TokenStore

__all__ = ["CONTEXT", "Endpoint", "ensure_user_token", "kubeconfig_path", "read_endpoint", "write_kubeconfig"]

CONTEXT = "trimaran"
FILE = "kubeconfig"


def kubeconfig_path(home: Path) -> Path:
    return home / FILE


def _load(text: str) -> dict:
    """A kubeconfig's content: JSON (ours) or YAML (any other)."""
    try:
        config = json.loads(text)
    except ValueError:
        import yaml

        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"not a kubeconfig: {exc}") from None
    return config if isinstance(config, dict) else {}


def _existing_token(path: Path) -> str | None:
    try:
        config = _load(path.read_text())
    except (OSError, ValueError):
        return None
    for user in config.get("users") or []:
        if user.get("name") == CONTEXT:
            return (user.get("user") or {}).get("token")
    return None


def ensure_user_token(home: Path, tokens: TokenStore) -> str:
    """The admin token of the home's user: the kubeconfig's, while it is still valid, else a new one."""
    token = _existing_token(kubeconfig_path(home))
    if token and tokens.authenticate(token) is not None:
        return token
    from trimaran.server.tokens import MASTERS

    # In system:masters, as a cluster's first administrator is: allowed everything, whatever RBAC says.
    return tokens.create(None, None, name="admin", groups=[MASTERS])


def write_kubeconfig(home: Path, server: str, token: str, ca_pem: bytes | None) -> Path:
    cluster: dict = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
    }
    # Imported here: the CLI reads kubeconfigs on every call and never writes one.
    from trimaran.server.tokens import write_private

    path = kubeconfig_path(home)
    write_private(path, json.dumps(config, indent=2).encode() + b"\n")
    return path


class Endpoint(NamedTuple):
    """Where a kubeconfig context points: the server, its token, the CA to trust, the namespace."""

    server: str
    token: str | None
    ca_pem: bytes | None
    namespace: str | None
    insecure: bool = False


def read_endpoint(path: Path, context: str | None = None) -> Endpoint:
    """The endpoint of ``context`` (the current one by default) in the kubeconfig at ``path``.

    ``KUBECONFIG`` may list several files (``:``-separated): the first that defines the context wins,
    as kubectl merges them.

    Raises:
        LookupError: the context, its cluster or its user is missing.
    """
    configs = []
    for part in str(path).split(os.pathsep):
        if part:
            try:
                configs.append(_load(Path(part).expanduser().read_text()))
            except FileNotFoundError:
                continue
    if not configs:
        raise LookupError(f"no kubeconfig at {path}")
    name = context or next((c.get("current-context") for c in configs if c.get("current-context")), None)
    if not name:
        raise LookupError(f"{path} names no current context; pass --context")

    def find(section: str, wanted: str) -> dict:
        for config in configs:
            for entry in config.get(section) or []:
                if entry.get("name") == wanted:
                    return entry.get(section[:-1]) or {}
        raise LookupError(f'{section[:-1]} "{wanted}" is not in {path}')

    ctx = find("contexts", name)
    cluster = find("clusters", ctx.get("cluster", ""))
    user = find("users", ctx["user"]) if ctx.get("user") else {}
    ca: bytes | None = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        ca = Path(cluster["certificate-authority"]).expanduser().read_bytes()
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).expanduser().read_text().strip()
    return Endpoint(cluster["server"], token, ca, ctx.get("namespace"), bool(cluster.get("insecure-skip-tls-verify")))
