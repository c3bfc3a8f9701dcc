"""The control plane's listening sockets, held by the home's socket keeper, and the addresses pods were given.

Each pod is given two addresses of the control plane when it starts (``KUBERNETES_SERVICE_HOST``/
``PORT`` and Katib's ``katib-db-manager.kubeflow:6789`` in its /etc/hosts) and keeps them for its
whole life, across restarts of the control plane. So the sockets are held by the socket keeper
(`trimaran.server.keeper`), which outlives the control plane, and each incarnation takes the ones it
holds. When the keeper was gone (``trimaran server stop``, a crash) the addresses are bound again;
when another process took one meanwhile, the control plane moves elsewhere and stops every pod that
was given the lost address (:func:`stop_pods_given`), with an event that says why: a pod reaches the
real control plane or nothing, never the process that took its address.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

from trimaran.runtime import NodeAPI
from trimaran.server.katib.dbmanager import PORT as KATIB_PORT
from trimaran.server.katib.dbmanager import loopback_candidates
from trimaran.server.keeper import SocketKeeper
from trimaran.store import Store

__all__ = ["ADDRESSES_FILE", "Listeners", "take_listeners", "stop_pods_given"]

log = logging.getLogger(__name__)

# What pods were last given, and where the API was: {"api": [host, port], "pods": [...], "katib": [...]}.
ADDRESSES_FILE = "addresses.json"
_KATIB_ATTEMPTS = 32
_WHAT = {"pods": "the API", "katib": "Katib's DB manager"}


@dataclass
class Listeners:
    """The control plane's listening sockets (duplicates of the keeper's)."""

    api: socket.socket  # where users reach the API (``--host``/``--port``)
    pods: socket.socket  # where pods reach it: 127.0.0.1 or the pod network's gateway (``api`` when the same)
    katib: socket.socket  # Katib's DB manager, ``127.x.y.z:6789`` or ``gateway:6789``
    # Addresses pods were given before that this control plane does not serve: "the API at 127.0.0.1:N".
    lost: list[str] = field(default_factory=list)
    # Names the keeper holds that this control plane does not use: dropped once no pod was given them.
    stale: list[str] = field(default_factory=list)

    def given(self) -> dict[str, list]:
        return {name: list(getattr(self, name).getsockname()[:2]) for name in ("api", "pods", "katib")}


def _unique(items: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item


def _read_given(home: Path) -> dict[str, tuple[str, int]]:
    try:
        data = json.loads((home / ADDRESSES_FILE).read_text())
        return {name: (str(value[0]), int(value[1])) for name, value in data.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}


def record_given(home: Path, listeners: Listeners) -> None:
    """Remember what pods are given from now on (call once the pods given something else are stopped)."""
    path = home / ADDRESSES_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(listeners.given(), fh)
    os.replace(tmp, path)


def take_listeners(keeper: SocketKeeper, home: Path, host: str, port: int, pod_host: str = "127.0.0.1",
                   pod_spares: Iterable[str] = ()) -> Listeners:
    """The sockets of this control plane: those the keeper holds where they still fit ``host`` and
    ``port`` (0: any), else new ones bound by the keeper, at the addresses pods were given when free.
    ``pod_host`` is where pods reach the API and Katib's DB manager: loopback when they share the
    host's network, the bridge's gateway on the pod network (:mod:`trimaran.runtime.network`), whose
    ``pod_spares`` are where Katib's DB manager goes when another process holds the gateway's 6789.

    Raises:
        OSError: ``port`` was asked for and another process has it.
    """
    host = "127.0.0.1" if host == "localhost" else host
    given = _read_given(home)
    held = keeper.held()

    def keep(name: str, host: str, port: int) -> socket.socket:
        sock = held.pop(name, None)
        if sock is not None:
            bound_host, bound_port = sock.getsockname()[:2]
            if bound_host == host and port in (0, bound_port):
                return sock
            sock.close()
        was = given.get(name)
        preferred = port or (was[1] if was and was[0] == host else 0)
        try:
            return keeper.listen(name, host, preferred)
        except OSError:
            if port or not preferred:
                raise
            log.warning("%s:%d, the address %s had, is taken by another process: listening on another port",
                        host, preferred, name)
            return keeper.listen(name, host, 0)

    api = keep("api", host, port)
    pods = api if host == pod_host else keep("pods", pod_host, 0)
    katib = held.pop("katib", None)
    if katib is not None and katib.getsockname()[0].startswith("127.") == (pod_host != "127.0.0.1"):
        katib.close()  # the pod network was turned on or off: pods now reach Katib elsewhere
        katib = None
    if katib is None:
        was = given.get("katib")
        candidates: Iterable[str]
        if pod_host != "127.0.0.1":
            # Where it was if not loopback, the home's own gateway (no other home's DB manager is
            # there), else the home's spare pod addresses.
            kept = [was[0]] if was and not was[0].startswith("127.") else []
            candidates = chain(kept, [pod_host], islice(pod_spares, _KATIB_ATTEMPTS))
        else:
            candidates = ([was[0]] if was else []) + list(islice(loopback_candidates(home), _KATIB_ATTEMPTS))
        tried = 0
        for candidate in _unique(candidates):
            tried += 1
            try:
                katib = keeper.listen("katib", candidate, KATIB_PORT)
                break
            except OSError as exc:
                log.warning("Katib's DB manager cannot listen on %s:%d: %s", candidate, KATIB_PORT, exc)
        else:
            raise OSError(f"no free address for Katib's DB manager after {tried} tries")
    for sock in held.values():
        sock.close()
    listeners = Listeners(api=api, pods=pods, katib=katib, stale=sorted(held))
    for name, label in _WHAT.items():
        was, now = given.get(name), getattr(listeners, name).getsockname()[:2]
        if was is not None and was != tuple(now):
            listeners.lost.append(f"{label} at {was[0]}:{was[1]}")
    return listeners


def stop_pods_given(store: Store, runtime: NodeAPI, lost: list[str], grace_seconds: float = 5.0) -> int:
    """Stop every running pod of ``runtime`` (each was given the addresses in ``lost``, which another
    process may now hold), with a Warning event on each; return how many. Call before the kubelet
    starts: it then sees them ended, and restarts them per their restartPolicy with the new addresses."""
    uids = runtime.running_pods()
    if not uids:
        return 0
    reason = (f"the control plane no longer listens on {' and '.join(lost)}, the address it was given "
              f"(another process took it while the control plane was down); the pod is stopped rather than "
              f"left to reach that process, and restarts per its restartPolicy with the control plane's new address")
    log.warning("stopping %d running pod(s): %s", len(uids), reason)
    pods = {p["metadata"]["uid"]: p for p in store.list("Pod")}
    for uid in uids:
        if uid in pods:
            store.record_event(pods[uid], "Warning", "ControlPlaneAddressLost", f"Stopping pod: {reason}")
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(uids)))) as pool:
        list(pool.map(lambda uid: runtime.stop_pod(uid, grace_seconds=grace_seconds), uids))
    return len(uids)
