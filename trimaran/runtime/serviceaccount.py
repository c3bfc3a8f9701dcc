"""In-cluster access to the control plane, as the kubelet and the service-account admission give it.

Every pod sees the ``kubernetes`` service in its environment (``KUBERNETES_SERVICE_HOST`` …) and,
unless its spec sets ``automountServiceAccountToken: false``, the files ``token``, ``namespace``
and ``ca.crt`` at :data:`MOUNT_PATH`, so ``kubernetes.config.load_incluster_config()`` and
Kubeflow's SDKs (which read the namespace file) work inside a pod as they do on a cluster.
The control plane hands the runtime a :class:`ServiceAccountAccess` once it knows its address.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MOUNT_PATH", "API_SERVICE_NAMES", "ServiceAccountAccess", "automounts_token", "write_service_account"]

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# What the API server's service answers to through cluster DNS, from any namespace.
API_SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class ServiceAccountAccess:
    """Where pods reach the API and what they present to it.

    ``token_for(namespace, name)`` is the token the pods of that namespace running as
    ServiceAccount ``name`` get;
    ``ca_cert`` signed the certificate the API serves on ``api_host:api_port``.
    """

    api_host: str
    api_port: int
    ca_cert: Path
    token_for: Callable[[str, str], str]

    def env(self) -> dict[str, str]:
        """The variables the kubelet sets for the ``kubernetes`` service (port name ``https``)."""
        host, port = self.api_host, str(self.api_port)
        url = f"tcp://{host}:{port}"
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": url,
            f"KUBERNETES_PORT_{port}_TCP": url,
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
        }

    def hosts(self) -> dict[str, str]:
        """/etc/hosts entries that stand in for cluster DNS of the API service."""
        return dict.fromkeys(API_SERVICE_NAMES, self.api_host)


def automounts_token(pod_spec: Mapping[str, object]) -> bool:
    """Whether the pod gets the service-account files (the default, as on a cluster)."""
    return pod_spec.get("automountServiceAccountToken") is not False


def write_service_account(access: ServiceAccountAccess, namespace: str, directory: Path,
                          account: str = "default") -> Path:
    """Write the pod's ``token`` (its ServiceAccount ``account``'s, 0600), ``namespace`` and
    ``ca.crt`` (0644) into ``directory`` (which must be the pod's own, so no other pod can read
    the token) and return it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    contents = {
        "token": (access.token_for(namespace, account).encode(), 0o600),
        "namespace": (namespace.encode(), 0o644),
        "ca.crt": (access.ca_cert.read_bytes(), 0o644),
    }
    for name, (data, mode) in contents.items():
        # Created with its mode, so the token is never readable by others, not even for an instant.
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(directory / name, mode)
    return directory
