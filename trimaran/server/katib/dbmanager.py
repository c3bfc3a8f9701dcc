"""Katib's DBManager gRPC service over the store's observations: Katib's push metrics path, unchanged.

Inside a trial, ``kubeflow.katib.report_metrics({...})`` sends ``ReportObservationLog`` to
``katib-db-manager.kubeflow:6789``, and ``KatibClient.get_trial_metrics`` reads them back with
``GetObservationLog``. Both name the trial only (Katib's database has no namespace), so the
service finds the Trial by name among the namespaces the caller may use; a name in two of them is
refused rather than guessed.

Katib's service takes anyone's calls; here every call is from an identified caller
(:mod:`.callers`: a bearer token in the metadata, or, for the SDK, which sends none, the pod or
local user behind the connection), reports are taken only for a trial that still runs (not one
that has finished or never was), and deleting needs an admin token.

The port is fixed by the SDK and several Trimaran homes may run on one machine, so each home's
service listens on a loopback address of its own, derived from the home's path (the same one after a
restart, so running pods keep reaching it), or the next free one. The control plane has the home's
socket keeper (`trimaran.server.keeper`) hold that listening socket, so no pod can take the address
while the control plane restarts. Pods resolve Katib's service
names to it through their /etc/hosts (:attr:`DBManager.hosts`), and the address is reachable
from the host as well (``KatibClient().get_trial_metrics(..., db_manager_address=address)``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import re
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import grpc

from trimaran.controllers.tuning.trial import FINISHED, trial_state
from trimaran.runtime import NodeAPI
from trimaran.server.katib.callers import Callers
from trimaran.server.katib.proto import dbmanager_pb2 as pb
from trimaran.server.katib.proto import dbmanager_pb2_grpc as pb_grpc
from trimaran.server.katib.relay import Relay
from trimaran.server.observations import add_pushed_observations
from trimaran.server.rbac.access import start as start_rbac
from trimaran.server.tokens import TokenStore
from trimaran.store import NotFound, Store

__all__ = ["PORT", "SERVICE_NAMES", "DBManager", "add_pushed_observations", "bind", "bind_for_home",
           "loopback_candidates", "serve_dbmanager", "start_dbmanager", "start_dbmanager_for_home"]

log = logging.getLogger(__name__)

PORT = 6789
SERVICE_NAMES = ("katib-db-manager.kubeflow", "katib-db-manager.kubeflow.svc",
                 "katib-db-manager.kubeflow.svc.cluster.local")

# 127.1.0.1 - 127.254.255.254: clear of 127.0.0.0/16, where hosts put 127.0.0.1, 127.0.1.1 and
# resolvers (127.0.0.53), and of .0 / .255.
_SECOND, _THIRD, _FOURTH = 254, 256, 254
_SPACE = _SECOND * _THIRD * _FOURTH
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of an RFC 3339 time (Go's RFC3339Nano too: up to nine fraction digits)."""
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"time {text!r} is not RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    zone = match[8]
    offset = timedelta(0) if zone in "Zz" else (1 if zone[0] == "+" else -1) * timedelta(
        hours=int(zone[1:3]), minutes=int(zone[4:6]))
    moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    return moment.timestamp() + (float(match[7]) if match[7] else 0.0)


def format_rfc3339(timestamp: float) -> str:
    """Go's RFC3339Nano in UTC, as Katib answers: trailing zeros of the fraction dropped."""
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


_VERBS = {"get": "read the observations of", "create": "report observations for",
          "delete": "delete the observations of"}


class _Servicer(pb_grpc.DBManagerServicer):
    def __init__(self, store: Store, callers: Callers) -> None:
        self.store = store
        self.callers = callers
        # Steps are counted from what is stored: two reports of one trial must not both count.
        self._writing = threading.Lock()

    def _trial(self, name: str, verb: str, context: grpc.ServicerContext) -> dict | None:
        """The trial ``name`` in the one namespace where the caller may ``verb`` it; None when no
        namespace has it. Aborts when it is only where the caller may not, or in several."""
        caller = self.callers.identify(context)
        found = []
        for namespace in self.store.list("Namespace"):
            try:
                found.append(self.store.get("Trial", namespace["metadata"]["name"], name))
            except NotFound:
                continue
        allowed = [t for t in found if caller.may(verb, t["metadata"]["namespace"])]
        if found and not allowed:
            log.warning("Katib DBManager: refused %s to %s trial %r", caller.description, _VERBS[verb], name)
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"{caller.description} may not {_VERBS[verb]} trial {name!r}")
        if len(allowed) > 1:
            spaces = ", ".join(t["metadata"]["namespace"] for t in allowed)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"trial {name!r} exists in several namespaces ({spaces}); Katib's DBManager "
                          f"API names a trial without its namespace")
        return allowed[0] if allowed else None

    def ReportObservationLog(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        trial = self._trial(request.trial_name, "create", context)
        if trial is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"trial {request.trial_name!r} not found")
        state = trial_state(trial)
        if state in FINISHED:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"trial {request.trial_name!r} has finished ({state}): it takes no more observations")
        rows = []
        for entry in request.observation_log.metric_logs:
            if not entry.time_stamp:
                continue  # Katib skips a log without a time too
            try:
                timestamp = parse_rfc3339(entry.time_stamp)
                value = float(entry.metric.value)
            except ValueError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"metric {entry.metric.name!r}: {exc}")
            if not math.isfinite(value):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"metric {entry.metric.name!r}: value {entry.metric.value!r} is not a finite number")
            rows.append({"metric": entry.metric.name, "value": value, "step": None, "timestamp": timestamp})
        meta = trial["metadata"]
        with self._writing:
            add_pushed_observations(self.store, meta["namespace"], meta["name"], meta["uid"], rows)
        return pb.ReportObservationLogReply()

    def GetObservationLog(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            start = parse_rfc3339(request.start_time) if request.start_time else -math.inf
            end = parse_rfc3339(request.end_time) if request.end_time else math.inf
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        trial = self._trial(request.trial_name, "get", context)
        rows = [] if trial is None else self.store.list_observations(
            trial["metadata"]["namespace"], trials=[request.trial_name], metric=request.metric_name or None)
        chosen = sorted((r for r in rows if start <= r["timestamp"] <= end), key=lambda r: r["timestamp"])
        logs = [pb.MetricLog(time_stamp=format_rfc3339(r["timestamp"]),
                             metric=pb.Metric(name=r["metric"], value=repr(float(r["value"]))))
                for r in chosen]
        return pb.GetObservationLogReply(observation_log=pb.ObservationLog(metric_logs=logs))

    def DeleteObservationLog(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        trial = self._trial(request.trial_name, "delete", context)
        if trial is not None:
            with self._writing:
                self.store.delete_observations(trial["metadata"]["namespace"], request.trial_name)
        return pb.DeleteObservationLogReply()


@dataclass
class DBManager:
    """A running DBManager service: gRPC on a loopback port of its own, reached through
    :class:`~trimaran.server.katib.relay.Relay` from the address pods know (``host:port``)."""

    host: str
    port: int
    server: grpc.Server
    relay: Relay

    @property
    def address(self) -> str:
        """``host:port``, as ``db_manager_address`` takes it."""
        return f"{self.host}:{self.port}"

    @property
    def hosts(self) -> dict[str, str]:
        """Katib's service names → this address, for every pod's /etc/hosts."""
        return dict.fromkeys(SERVICE_NAMES, self.host)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving; calls in flight get ``grace`` seconds."""
        self.relay.stop()
        self.server.stop(grace).wait()


def serve_dbmanager(store: Store, listener: socket.socket, *, tokens: TokenStore, runtime: NodeAPI) -> DBManager:
    """Serve Katib's DBManager to the connections ``listener`` (a listening TCP socket) accepts,
    from callers that hold one of ``tokens`` or are ``runtime``'s pods or the home's user
    (:mod:`.callers`).

    gRPC binds the addresses it serves itself and cannot take a listening socket, so it listens on
    a port of its own on 127.0.0.1 and a relay forwards ``listener``'s connections to it: the
    address pods were given can then be one the control plane never lets go of (a socket held by
    `trimaran.server.keeper`). A process that finds the inner port and calls it directly is
    identified as any caller is.
    """
    if tokens.authorizer is None:  # a DBManager of its own; the control plane's tokens have one already
        start_rbac(store, tokens)
    callers = Callers(tokens, runtime)
    # Without SO_REUSEPORT (gRPC sets it by default), nothing else can share the inner port.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="katib-dbmanager"),
                         options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_DBManagerServicer_to_server(_Servicer(store, callers), server)
    inner = server.add_insecure_port("127.0.0.1:0")
    if not inner:
        raise OSError("cannot bind Katib's DBManager to a loopback port")
    host, port = listener.getsockname()[:2]
    relay = Relay(listener, ("127.0.0.1", inner))
    callers.server = ("127.0.0.1", inner)
    callers.relayed = (relay.origins, (host, port))
    server.start()
    relay.start()
    return DBManager(host, port, server, relay)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` of this process (without a socket keeper)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot bind Katib's DBManager to {host}:{port}: {exc.strerror}") from None
    return sock


def start_dbmanager(store: Store, host: str, port: int = PORT, *, tokens: TokenStore,
                    runtime: NodeAPI) -> DBManager:
    """Serve Katib's DBManager on ``host:port`` (``port`` 0: any free one); see :func:`serve_dbmanager`.

    Raises ``OSError`` when the address cannot be bound (another process has it).
    """
    return serve_dbmanager(store, bind(host, port), tokens=tokens, runtime=runtime)


def loopback_candidates(home: Path) -> Iterator[str]:
    """Loopback addresses for ``home``'s DBManager, best first: one derived from the home's path,
    then the ones after it, so that a restarted control plane gets the address it had."""
    digest = hashlib.sha256(str(Path(home).resolve()).encode()).digest()
    first = int.from_bytes(digest[:8], "big") % _SPACE
    for k in range(_SPACE):
        index = (first + k) % _SPACE
        yield (f"127.{1 + index // (_THIRD * _FOURTH)}.{index // _FOURTH % _THIRD}"
               f".{1 + index % _FOURTH}")


def bind_for_home(home: Path, port: int = PORT, attempts: int = 32,
                  listen: Callable[[str, int], socket.socket] = bind) -> socket.socket:
    """A listening socket for ``home``'s DBManager on its loopback address (:func:`loopback_candidates`),
    or the next free one of ``attempts``, made by ``listen(host, port)``."""
    errors = []
    for host in itertools.islice(loopback_candidates(home), attempts):
        try:
            return listen(host, port)
        except OSError as exc:
            errors.append(str(exc))
    raise OSError(f"no free loopback address for Katib's DBManager after {attempts} tries; last: {errors[-1]}")


def start_dbmanager_for_home(store: Store, home: Path, port: int = PORT, attempts: int = 32, *,
                             tokens: TokenStore, runtime: NodeAPI) -> DBManager:
    """Serve Katib's DBManager on ``home``'s loopback address (:func:`bind_for_home`; ``tokens``
    and ``runtime``: see :func:`serve_dbmanager`)."""
    return serve_dbmanager(store, bind_for_home(home, port, attempts), tokens=tokens, runtime=runtime)
