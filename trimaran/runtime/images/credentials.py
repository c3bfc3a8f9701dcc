"""Registry credentials from a pod's ``imagePullSecrets``, matched to an image as the kubelet does."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trimaran.runtime.images.reference import ImageReference

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CFG = "kubernetes.io/dockercfg"
# Docker's config files name Docker Hub by its legacy index URL.
_HUB_KEYS = {"index.docker.io", "registry-1.docker.io", "docker.io"}


@dataclass(frozen=True)
class RegistryCredential:
    """A user name and password for the registries ``pattern`` names: a host (``127.0.0.1:5000``,
    ``*.example.com``) optionally followed by a repository path prefix."""

    pattern: str
    username: str
    password: str

    @property
    def registry(self) -> str:
        return self.pattern.split("/", 1)[0]

    def matches(self, ref: ImageReference) -> bool:
        """Whether the kubelet would offer this credential for ``ref``: the host matches (``*`` is
        one DNS label) and the path, if any, is a prefix of the repository."""
        host, _, path = self.pattern.partition("/")
        if host.count(".") != ref.registry.count(".") or not fnmatch.fnmatchcase(ref.registry, host):
            return False
        return not path or ref.repository == path or ref.repository.startswith(path.rstrip("/") + "/")


def _normalise_key(key: str) -> str:
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme):]
    host, _, path = key.partition("/")
    if host in _HUB_KEYS:
        # ``https://index.docker.io/v1/`` is the whole of Docker Hub, not a repository prefix.
        return "docker.io"
    return f"{host}/{path.strip('/')}" if path.strip("/") else host


def _credential(key: str, entry: Any) -> RegistryCredential | None:
    if not isinstance(entry, dict):
        return None
    username, password = entry.get("username"), entry.get("password")
    if not (isinstance(username, str) and isinstance(password, str)) and isinstance(entry.get("auth"), str):
        try:
            username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
    if not isinstance(username, str) or not isinstance(password, str) or not username:
        return None
    return RegistryCredential(_normalise_key(key), username, password)


def credentials_from_secrets(secrets: Iterable[dict]) -> list[RegistryCredential]:
    """The credentials in ``kubernetes.io/dockerconfigjson`` (``.dockerconfigjson``) and
    ``kubernetes.io/dockercfg`` (``.dockercfg``) Secrets, as stored (``data`` base64), in order.

    Like the kubelet, a Secret of another type or with unreadable data contributes nothing: the pull
    then goes ahead without it and the registry's refusal says what is missing.
    """
    found: list[RegistryCredential] = []
    for secret in secrets:
        kind = secret.get("type")
        field = {DOCKER_CONFIG_JSON: ".dockerconfigjson", DOCKER_CFG: ".dockercfg"}.get(kind or "")
        encoded = (secret.get("data") or {}).get(field) if field else None
        if not isinstance(encoded, str):
            continue
        try:
            document = json.loads(base64.b64decode(encoded))
        except (binascii.Error, ValueError):
            continue
        auths = document.get("auths") if kind == DOCKER_CONFIG_JSON and isinstance(document, dict) else document
        if not isinstance(auths, dict):
            continue
        for key, entry in auths.items():
            credential = _credential(key, entry)
            if credential is not None:
                found.append(credential)
    return found
