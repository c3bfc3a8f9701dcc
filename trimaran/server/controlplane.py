"""The control plane process: store, node, controllers and the HTTP API in one process."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import faulthandler
import gc
import logging
import os
import resource
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy.exc

from trimaran.api.apps import set_pod_network
from trimaran.api.podsecurity import Policy
from trimaran.controllers.apiservices import APIServiceReconciler
from trimaran.controllers.base import ControllerManager
from trimaran.controllers.batch import BatchJobReconciler
from trimaran.controllers.gc import GarbageCollector
from trimaran.controllers.jobset import JobSetReconciler
from trimaran.controllers.kubelet import SCHEDULE_KEY, Kubelet
from trimaran.controllers.node import NodeController
from trimaran.controllers.pipelines.recurring import RecurringRunReconciler
from trimaran.controllers.pipelines.run import RunReconciler
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.quota import ResourceQuotaReconciler
from trimaran.controllers.serving import (
    InferenceGraphReconciler,
    InferenceServiceReconciler,
    SeldonDeploymentReconciler,
)
from trimaran.controllers.trainer import TrainJobReconciler, install_builtin_runtimes
from trimaran.controllers.training import TrainingJobReconciler
from trimaran.controllers.tuning import ExperimentReconciler, TrialReconciler
from trimaran.controllers.volumes import ClaimReconciler
from trimaran.controllers.workloads import (
    DaemonSetReconciler,
    DeploymentReconciler,
    HorizontalPodAutoscalerReconciler,
    ReplicationControllerReconciler,
    ServiceReconciler,
    StatefulSetReconciler,
)
from trimaran.controllers.workloads.cronjob import CronJobReconciler
from trimaran.controllers.workloads.ingress import IngressReconciler
from trimaran.controllers.workloads.network import ClusterNetwork, NetworkPolicyReconciler, ensure_system_services
from trimaran.controllers.workloads.pdb import PodDisruptionBudgetReconciler
from trimaran.runtime import LocalRuntime, Node
from trimaran.runtime.local import shim_pool_size_from_env
from trimaran.runtime.network import PodNetwork
from trimaran.runtime.serviceaccount import ServiceAccountAccess
from trimaran.server.daemon import HomeLock, HomeLocked, clear_server_info, home_dir, lock_home, write_server_info
from trimaran.server.kube.apiservices import local_apiservices
from trimaran.server.rbac.access import start as start_rbac
from trimaran.server.rbac.aggregation import ClusterRoleAggregator
from trimaran.server.tokens import TokenStore
from trimaran.store import Store, open_store

if TYPE_CHECKING:
    from trimaran.server.katib import DBManager
from trimaran.store._objects import now_rfc3339

log = logging.getLogger(__name__)


@dataclass
class ControlPlane:
    store: Store
    manager: ControllerManager
    kubelet: Kubelet
    trials: TrialReconciler
    home: Path
    lock: HomeLock
    dbmanager: DBManager | None = None  # Katib's gRPC push path, started by serve()
    # The Pod Security level enforced in namespaces without a pod-security.kubernetes.io/enforce label.
    pod_security: str = "baseline"
    trainjobs: TrainJobReconciler | None = None
    cluster_network: ClusterNetwork | None = None  # Services, DNS, NetworkPolicy on the pod network

    def stop(self) -> None:
        self.manager.stop()
        self.kubelet.shutdown()
        self.kubelet.runtime.close()  # the shims started ahead; pods' own run on
        if self.cluster_network is not None:
            self.cluster_network.stop()  # cluster DNS goes with the control plane; the rules stay for the pods
        if self.dbmanager is not None:
            self.dbmanager.stop()

    def release(self) -> None:
        """Let another control plane have the home (after :meth:`stop`)."""
        if self.kubelet.runtime.network is not None:
            if self.cluster_network is not None and not self.kubelet.runtime.network.known():
                self.cluster_network.remove()  # the range goes back: no rule may outlive it
            self.kubelet.runtime.network.close()
        self.lock.release()

    @property
    def pod_host(self) -> str:
        """Where pods reach the control plane: loopback, or the pod network's gateway."""
        network = self.kubelet.runtime.network
        return network.plan.gateway if network is not None else "127.0.0.1"

    def runtime_service_account(self, pod_port: int, ca_cert: Path, tokens: TokenStore) -> None:
        """Hand pods the in-cluster API: ``KUBERNETES_SERVICE_*`` and their namespace's token. On the
        pod network that is the ``kubernetes`` Service's ClusterIP on 443, as on a cluster (its
        rule forwards to the API's listener on the gateway); else the pods' listener itself."""
        host, port = self.pod_host, pod_port
        if self.cluster_network is not None:
            host, port = self.cluster_network.plan.api_ip, 443
        self.kubelet.runtime.service_account = ServiceAccountAccess(host, port, ca_cert, tokens.service_account_token)


def build_control_plane(home: Path | None = None) -> ControlPlane:
    """The control plane of ``home``, which it holds until :meth:`ControlPlane.release` or exit.

    Raises:
        HomeLocked: another control plane holds ``home``.
    """
    home = home or home_dir()
    lock = lock_home(home)  # before the store opens: two sets of controllers must never share it
    try:
        return _build(home, lock)
    except BaseException:
        lock.release()
        raise


def _build(home: Path, lock: HomeLock) -> ControlPlane:
    store = open_store(home / "trimaran.db")
    store.ensure_namespace("default")
    install_builtin_runtimes(store)
    node = Node.from_env(storage=home)
    runtime = LocalRuntime(home, node=node, shim_pool=shim_pool_size_from_env())
    runtime.network = PodNetwork.from_env(home)
    set_pod_network(runtime.network is not None)
    kubelet = Kubelet(store, runtime, node)
    host_network_reason = None if runtime.network else PodNetwork.unavailable()
    node_controller = NodeController(store, node, on_change=lambda: kubelet.wake(SCHEDULE_KEY),
                                     host_network_reason=host_network_reason)
    kubelet.node_changed = node_controller.changed
    trials = TrialReconciler(store, runtime)
    # One allocator: training replicas and serving replicas share loopback (training replicas keep
    # their operators' ports on the pod network).
    ports = PortAllocator(pod_network=runtime.network is not None)
    # Services, cluster DNS and NetworkPolicy over the pod network (kube-proxy, CoreDNS, a policy agent).
    cluster_network = ClusterNetwork(home, runtime.network.plan) if runtime.network is not None else None
    services = ServiceReconciler(store, runtime, cluster_network, home=home)
    kubelet.namespace_hosts = services.hosts_for
    trainjobs = TrainJobReconciler(store, ports)
    manager = ControllerManager(store, [
        TrainingJobReconciler(store, ports, runtime), BatchJobReconciler(store),
        JobSetReconciler(store, pod_network=runtime.network is not None),
        trainjobs, ClaimReconciler(store, runtime),
        ExperimentReconciler(store), trials, InferenceServiceReconciler(
            store, home, ports, runtime, gateway=runtime.network.plan.gateway if runtime.network else "127.0.0.1"),
        SeldonDeploymentReconciler(store, home), InferenceGraphReconciler(store), kubelet, node_controller,
        DeploymentReconciler(store, ports), ReplicationControllerReconciler(store), DaemonSetReconciler(store, node),
        StatefulSetReconciler(store),
        services, HorizontalPodAutoscalerReconciler(store, runtime),
        RecurringRunReconciler(store), RunReconciler(store, home, runtime, kubelet.image_policy),
        GarbageCollector(store), NetworkPolicyReconciler(store, cluster_network, host_network_reason),
        CronJobReconciler(store), PodDisruptionBudgetReconciler(store), ClusterRoleAggregator(store),
        IngressReconciler(store, home, ports, runtime.network.plan.gateway if runtime.network else "127.0.0.1"),
        APIServiceReconciler(store, local_apiservices()),
        ResourceQuotaReconciler(store)])  # and the store's admission of new objects (controllers/quota.py)
    return ControlPlane(store=store, manager=manager, kubelet=kubelet, trials=trials, home=home, lock=lock,
                        trainjobs=trainjobs, cluster_network=cluster_network)




def _raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (every watch is a
    connection: 1,024, a common default, is too few); return the connections to serve at most."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):
            log.warning("could not raise the open files limit from %d", soft)
    # The rest: the store, pods' log files, the shims' pipes.
    return max(256, soft - 1024)


def serve(host: str = "127.0.0.1", port: int = 0, home: Path | None = None, pod_security: str = "baseline") -> None:
    """Run the control plane in the foreground until SIGTERM/SIGINT.

    The API is served over HTTPS with the home's own CA (kubectl and client-go send a token only
    over TLS, and the Kubernetes clients insist on it inside a pod) at ``host:port``; pods reach it
    on loopback, through a second listener when ``host`` is not loopback. Every request needs a
    bearer token; the user's is written to ``$TRIMARAN_HOME/kubeconfig``. ``pod_security`` is the
    Pod Security level of namespaces that set none.
    """
    import uvicorn

    from trimaran.server.app import create_app
    from trimaran.server.connections import GuardedHttpProtocol
    from trimaran.server.katib.dbmanager import serve_dbmanager
    from trimaran.server.keeper import SocketKeeper
    from trimaran.server.kube import WatchHub
    from trimaran.server.kube.watch import MAX_STREAMS_PER_CLIENT, Streams
    from trimaran.server.kubeconfig import ensure_user_token, write_kubeconfig
    from trimaran.server.listeners import record_given, stop_pods_given, take_listeners
    from trimaran.server.memory import MemoryReturner, limit_malloc_arenas
    from trimaran.server.monitoring import write_prometheus_config
    from trimaran.server.tls import ensure_pki

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # SIGUSR1 writes every thread's stack to the log (stderr): what a start that does not answer is
    # doing (daemon.start_server asks for it before it gives up).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    limit_malloc_arenas()  # before the threads: see server/memory.py
    try:
        plane = build_control_plane(home)
    except HomeLocked as exc:
        raise SystemExit(f"trimaran server: {exc}") from None
    except (sqlite3.DatabaseError, sqlalchemy.exc.DatabaseError) as exc:
        # The one line `trimaran server start` shows (daemon.start_server): the cause and the way out.
        db = (home or home_dir()) / "trimaran.db"
        cause = getattr(exc, "orig", None) or exc
        raise SystemExit(f"trimaran server: the store {db} cannot be read: {cause}. Move it aside to start with "
                         f"an empty store (mv {db} {db}.broken, with its -wal and -shm files if any), or "
                         f"restore it from a backup") from None
    home = plane.home
    plane.pod_security = pod_security
    tokens = TokenStore(home)
    start_rbac(plane.store, tokens)  # every request authorised by RBAC; the bootstrap policy; tokens' bindings
    network = plane.kubelet.runtime.network
    pki = ensure_pki(home, host, extra_ips=[network.plan.gateway, network.plan.api_ip] if network else [])
    # The listening sockets are the home's socket keeper's, which outlives this process: pods keep
    # reaching this control plane's successor at the addresses they were given, and nothing else can
    # listen there meanwhile (trimaran.server.keeper).
    keeper = SocketKeeper.ensure(home)
    try:
        listeners = take_listeners(keeper, home, host, port, plane.pod_host,
                                   network.spare_addresses() if network else ())
    except OSError as exc:
        raise SystemExit(f"trimaran server: cannot listen: {exc}") from None
    if listeners.lost:
        stop_pods_given(plane.store, plane.kubelet.runtime, listeners.lost)
    record_given(home, listeners)
    for name in listeners.stale:
        keeper.drop(name)
    keeper.close()
    sockets = [listeners.api] if listeners.pods is listeners.api else [listeners.api, listeners.pods]
    bound_port = sockets[0].getsockname()[1]
    pod_port = listeners.pods.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"https://{shown}:{bound_port}"
    connections = _raise_open_files_limit()
    per_client = int(os.environ.get("TRIMARAN_MAX_STREAMS_PER_CLIENT") or MAX_STREAMS_PER_CLIENT)
    hub = WatchHub(plane.store, Streams(per_client))
    app = create_app(plane, tokens, hub, server_address=lambda: f"{shown}:{bound_port}", started=now_rfc3339())

    def stop_serving() -> None:
        # Open watches end first: uvicorn's graceful stop waits for every response to finish.
        hub.stop()
        for server in servers:
            server.should_exit = True

    class Server(uvicorn.Server):
        # uvicorn installs this as the SIGTERM/SIGINT handler while it serves (over ours).
        def handle_exit(self, sig: int, frame: object) -> None:
            super().handle_exit(sig, frame)  # type: ignore[arg-type]
            stop_serving()

    # limit_concurrency: past it uvicorn answers 503 rather than take connections it has no file for.
    servers = [Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                     ssl_certfile=str(pki.cert), ssl_keyfile=str(pki.key),
                                     http=GuardedHttpProtocol, limit_concurrency=connections))
               for _ in sockets]

    def on_signal(signum, frame):  # noqa: ANN001 - signal handler signature
        stop_serving()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    write_kubeconfig(home, url, ensure_user_token(home, tokens), pki.ca_pem())
    write_prometheus_config(home, url, tokens, pki.ca_pem())
    plane.trials.api_url = f"https://{plane.pod_host}:{pod_port}"
    plane.trials.pod_security = Policy.default(pod_security)
    if plane.trainjobs is not None:
        plane.trainjobs.pod_security = Policy.default(pod_security)
    plane.runtime_service_account(pod_port, pki.ca_cert, tokens)
    if plane.cluster_network is not None:  # `kubernetes` at api_ip:443 → the gateway's pod_port; kube-dns
        ensure_system_services(plane.store, plane.cluster_network, pod_port)
    # Katib's SDK pushes metrics to its DB manager's gRPC API (report_metrics); before the
    # controllers start, so the first pods already resolve its name.
    plane.dbmanager = serve_dbmanager(plane.store, listeners.katib, tokens=tokens, runtime=plane.kubelet.runtime)
    # No pod's hostPort may take an address this control plane serves (a hostPort DNATs every
    # connection to its port, whatever listens there).
    plane.kubelet.node.reserve_host_ports({("TCP", *sock.getsockname()[:2]) for sock in (*sockets, listeners.katib)})
    plane.kubelet.runtime.service_hosts.update(plane.dbmanager.hosts)

    # asyncio gives every TLS connection a 256 KiB read buffer up front: 1,000 idle watches held
    # a quarter of a gigabyte. Requests are small, and a large body is read in more pieces.
    asyncio.sslproto.SSLProtocol.max_size = 32 * 1024

    returner = MemoryReturner(plane.store)

    async def run() -> None:
        hub.start(asyncio.get_running_loop())
        # What is loaded now lives as long as the process: out of the collector's sight, so that a
        # full collection (with many open watches) does not stall the event loop for long.
        gc.collect()
        gc.freeze()
        plane.manager.start()
        returner.start()
        write_server_info(home, url=url, pid=os.getpid(), pod_port=pod_port,
                          katib_db_manager=plane.dbmanager.address if plane.dbmanager else None)
        log.info("control plane listening on %s (pods: %s:%s; home %s)", url, plane.pod_host, pod_port, home)
        try:
            await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in zip(servers, sockets, strict=True)))
        finally:
            hub.stop()
            returner.stop()

    try:
        asyncio.run(run())
    finally:
        plane.stop()
        clear_server_info(home, os.getpid())
        plane.release()
