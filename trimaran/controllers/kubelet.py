"""The node agent: pods in the store become processes on this machine.

Scheduling is gang admission by priority, then in FIFO order: the pods of one group (a training
job's replicas) start together or not at all, and a group that does not fit holds back the groups
behind it until resources free up, unless it could never fit this node at all; meanwhile it
preempts pods of lower priority that would make room (unless its class says ``Never``).

Restarts in place (``restartPolicy`` Always/OnFailure) happen here, as kubelet does them, with a
short exponential back-off. Each pod runs under a shim process that outlives the control plane:
after a restart, pods still running are re-adopted, pods that ended meanwhile are handled as if
their exit had just been seen (so they restart per their policy), and processes whose pods are
gone from the store are stopped.

Which path a container takes: one without ``command`` runs its image; otherwise the node's image
policy decides (``host``: a host process, the default; ``image``: its image), set by
``trimaran server start --image-policy`` (``TRIMARAN_IMAGE_POLICY``) and per pod by the
annotation ``trimaran.io/image-policy``. Images are pulled off the reconcile thread while the pod
waits in ``ContainerCreating``, with the kubelet's events (``Pulling``, ``Pulled``, ``Failed``,
``BackOff``) and waiting reasons (``ErrImagePull``, then ``ImagePullBackOff`` with a back-off of
``TRIMARAN_IMAGE_PULL_BACKOFF`` seconds (10) doubling to 300, ``ErrImageNeverPull``,
``InvalidImageName``). The admitted pod keeps its resources meanwhile, as a bound pod does.

Local storage, as the kubelet's eviction manager keeps it (every ``TRIMARAN_EVICTION_INTERVAL``
seconds, 2): the node's Node object reports ``DiskPressure`` while the home's filesystem is below
its hard eviction threshold (``runtime/node.py``), and its ``disk-pressure`` taint keeps new pods
Pending meanwhile; under pressure the pod using the most local storage (those beyond their
``ephemeral-storage`` request first) is evicted, one per pass. A pod whose emptyDir exceeds its
``sizeLimit``, or whose writable layers, logs and emptyDirs exceed its containers'
``limits.ephemeral-storage``, is evicted at once. Eviction is the kubelet's: processes killed
without a grace period, phase ``Failed``, reason ``Evicted`` with the kubelet's message, a
``DisruptionTarget`` condition, an ``Evicted`` event; the pod's writable layers and emptyDirs are
removed (its logs stay until the pod is deleted) and it is not restarted in place.

A pod with object-storage CSI volumes gets KServe's ``storage-initializer`` init container when it is
admitted (written into its spec, so ``kubectl get pod`` and ``describe`` show it): the download and
unpacking run inside the pod's sandbox as its user, into the pod's own volume, never here. Init
containers' states are reported as the kubelet does (``Init:0/1``, ``Init:Error``,
``Init:CrashLoopBackOff``, their termination messages); a failed one restarts the pod with back-off
unless its ``restartPolicy`` is ``Never``.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from trimaran.api.meta import pod_hostname
from trimaran.api.quantity import format_memory
from trimaran.controllers.base import Key, Reconciler, key_of
from trimaran.controllers.conditions import now_rfc3339, set_condition
from trimaran.controllers.pods import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    HOSTS_ANNOTATION,
    LOOPBACK,
    QUEUED_ANNOTATION,
    is_terminating,
    phase,
    request_deletion,
)
from trimaran.controllers.probes import Prober, apply_probe_state
from trimaran.runtime import (
    ConfigError,
    ImageRun,
    LocalRuntime,
    Node,
    PodNotFound,
    PodProcessStatus,
    Resources,
    SandboxUnavailable,
    VolumeError,
    pod_requests,
)
from trimaran.runtime.images import (
    Image,
    ImagePullError,
    ImageReference,
    ImageStore,
    InvalidImageName,
    RegistryConfig,
    credentials_from_secrets,
    parse_reference,
)
from trimaran.runtime.local import port_mappings
from trimaran.runtime.network import NetworkError
from trimaran.runtime.node import StorageUsage, disk_pressure_message, ephemeral_storage_violation, pod_host_ports
from trimaran.runtime.qos import qos_class
from trimaran.runtime.volumes import STORAGE_INITIALIZER, storage_volume_uris
from trimaran.serving.storage import credential_env, initializer_container
from trimaran.store import Conflict, DiskFull, NotFound, Store
from trimaran.store.base import WatchEvent

log = logging.getLogger(__name__)

SCHEDULE_KEY = Key("Pod", "", "")
# The eviction manager's pass and the Node object's report (not a key any watch event makes).
HOUSEKEEPING_KEY = Key("Node", "", "")
HOUSEKEEPING_SECONDS = float(os.environ.get("TRIMARAN_EVICTION_INTERVAL", "2"))
# Pods this process started wake the kubelet when their shim exits; polling is the fallback
# for pods adopted after a restart.
POLL_SECONDS = 0.5
BACKOFF_BASE = float(os.environ.get("TRIMARAN_RESTART_BACKOFF", "1.0"))
BACKOFF_CAP = 30.0
IMAGE_POLICY_ANNOTATION = "trimaran.io/image-policy"
IMAGE_POLICIES = ("host", "image")
IMAGE_PULL_BACKOFF_BASE = float(os.environ.get("TRIMARAN_IMAGE_PULL_BACKOFF", "10"))
IMAGE_PULL_BACKOFF_CAP = 300.0


def default_pull_policy(image: str) -> str:
    """The API server's default ``imagePullPolicy``: Always for ``:latest`` or no tag (a digest
    pins the content: IfNotPresent), IfNotPresent for any other tag."""
    name = image.split("@", 1)[0]
    if "@" in image:
        return "IfNotPresent"
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else None
    return "Always" if tag in (None, "latest") else "IfNotPresent"


def runs_image(pod: dict, container: dict, node_policy: str) -> bool:
    """Whether the container runs its image rather than a host process. Raises ``ConfigError``
    for an annotation that names no policy."""
    if not container.get("image"):
        return False
    if not container.get("command"):
        return True
    annotations = pod["metadata"].get("annotations") or {}
    policy = annotations.get(IMAGE_POLICY_ANNOTATION, node_policy)
    if policy not in IMAGE_POLICIES:
        raise ConfigError(f"metadata.annotations[{IMAGE_POLICY_ANNOTATION}]: must be one of "
                          f"{', '.join(IMAGE_POLICIES)}, not {policy!r}")
    return policy == "image"



def _restart_delay(restarts: int) -> float:
    """The kubelet's back-off before restart number ``restarts`` (of app or init containers): none
    for the first, then doubling from the base up to the cap."""
    return 0.0 if restarts == 1 else min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (restarts - 2))

@dataclass
class _Preparing:
    """An admitted pod whose images are being pulled (or waiting to be again), before its first
    start or a restart in place (``attempt`` > 0)."""

    gpu_env: dict[str, str]
    gpus: list[str]
    key: Key
    attempt: int = 0
    images: dict[str, ImageRun] = field(default_factory=dict)
    pull: Future | None = None
    failures: int = 0
    failed: dict[str, tuple[str, str]] = field(default_factory=dict)
    retry_at: float = 0.0
    reported_backoff: bool = False


class Kubelet(Reconciler):
    name = "kubelet"
    kinds = ("Pod",)

    def __init__(self, store: Store, runtime: LocalRuntime, node: Node, image_policy: str | None = None) -> None:
        """``image_policy`` (``host`` or ``image``; default ``TRIMARAN_IMAGE_POLICY``, else host)
        decides the path of containers that set a command."""
        super().__init__(store)
        self.runtime = runtime
        self.node = node
        self.image_policy = image_policy or os.environ.get("TRIMARAN_IMAGE_POLICY") or "host"
        if self.image_policy not in IMAGE_POLICIES:
            raise ValueError(f"image policy must be one of {', '.join(IMAGE_POLICIES)}, not {self.image_policy!r}")
        insecure = [r for r in os.environ.get("TRIMARAN_INSECURE_REGISTRIES", "").split(",") if r]
        self.images = ImageStore(runtime.home / "images", insecure_registries=insecure,
                                 registries=RegistryConfig.for_home(runtime.home))
        self._preparing: dict[str, _Preparing] = {}  # pod uid -> its pulls
        self._puller = ThreadPoolExecutor(max_workers=3, thread_name_prefix="image-pull")
        self._lock = threading.RLock()
        self._started: dict[str, Key] = {}  # pod uid -> key, for pods whose processes we own
        self._restart_at: dict[str, float] = {}
        self._stopping: set[str] = set()
        self._stopper = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pod-stop")
        self.prober = Prober(store, runtime, lambda key: self.wake(key))
        # Called when a node condition changed (controllers/node.py reports it), set by the control plane.
        self.node_changed: Callable[[], None] = lambda: None
        # Names every pod of a namespace resolves beside its own gang's (the Services'), set by the control plane.
        self.namespace_hosts: Callable[[str], dict[str, str]] = lambda namespace: {}
        self._adopt()

    # -- start-up ---------------------------------------------------------------------------------
    def _adopt(self) -> None:
        pods = self.store.list("Pod")
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        for uid in self.runtime.known_pods():
            if uid not in by_uid:
                log.info("stopping orphaned pod process %s", uid)
                self.runtime.stop_pod(uid, grace_seconds=2.0)
                self.runtime.remove_pod(uid)
        for uid in self.runtime.sweep_cgroups():
            log.info("removed the cgroups of pod %s, which no longer runs", uid)
        if self.runtime.network is not None:
            # Networks of pods the store no longer knows (deleted while the control plane was down,
            # or a setup cut short): their netns, veth and IP go.
            self.runtime.network.sweep(by_uid)
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if phase(pod) == "Running":
                alloc = (pod.get("status") or {}).get("allocation") or {}
                self.node.restore(uid, pod_requests(pod), alloc.get("gpus") or [],
                                  host_ports=pod_host_ports(pod.get("spec") or {}))
                self._started[uid] = key_of(pod)
                self.prober.watch(pod)

    def initial_keys(self):
        yield from super().initial_keys()
        yield SCHEDULE_KEY
        yield HOUSEKEEPING_KEY

    def keys_for_event(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        # Admission looks again when a pod may start (made, or changed while pending) or a share of
        # the node may have come back (a pod ended, going or gone); a running pod's own transitions
        # (Running, Ready) change neither.
        if event.type == "MODIFIED" and phase(obj) == "Running" and not is_terminating(obj):
            return [key_of(obj)]
        return [key_of(obj), SCHEDULE_KEY]

    # -- the loop -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        if key == SCHEDULE_KEY:
            self._schedule()
            return None
        if key == HOUSEKEEPING_KEY:
            try:
                return self._housekeeping()
            except DiskFull as exc:  # its events and status writes: the next pass tries again
                log.warning("kubelet housekeeping: %s", exc)
                return HOUSEKEEPING_SECONDS
        try:
            pod = self.store.get("Pod", key.namespace, key.name)
        except NotFound:
            self._forget(key)
            return None
        uid = pod["metadata"]["uid"]
        if is_terminating(pod):
            self._terminate(pod)
            return None
        if self._owner_gone(pod):
            request_deletion(self.store, pod)
            return None
        if uid in self._preparing:
            return self._sync_preparing(pod)
        if phase(pod) != "Running" or uid not in self._started:
            return None
        return self._sync_running(pod)

    def _owner_gone(self, pod: dict) -> bool:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("controller"):
                try:
                    owner = self.store.get(ref["kind"], pod["metadata"]["namespace"], ref["name"])
                except NotFound:
                    return True
                return owner["metadata"]["uid"] != ref.get("uid")
        return False

    def _forget(self, key: Key) -> None:
        with self._lock:
            for uid, prep in list(self._preparing.items()):
                if prep.key == key:
                    del self._preparing[uid]
                    self.node.release(uid)
            for uid, k in list(self._started.items()):
                if k == key and uid not in self._stopping:
                    self._stopping.add(uid)
                    self._stopper.submit(self._stop_and_release, uid, None)

    # -- scheduling -----------------------------------------------------------------------------
    def _schedule(self) -> None:
        # Decoded once, not at every pass (a pass per pod event reads them all); the pending ones
        # copied, as admission writes to them.
        everything = self.store.list("Pod", shared=True)
        pending = [copy.deepcopy(p) for p in everything
                   if phase(p) == "Pending" and not is_terminating(p)
                   and p["metadata"]["uid"] not in self._started and p["metadata"]["uid"] not in self._preparing]
        groups: dict[str, list[dict]] = {}
        for pod in pending:
            ann = pod["metadata"].get("annotations") or {}
            groups.setdefault(ann.get(GANG_ANNOTATION) or pod["metadata"]["uid"], []).append(pod)
        # The scheduling queue's order: higher priority first, then first come (FIFO).
        ordered = sorted(groups.items(), key=lambda kv: (-_gang_priority(kv[1]), min(_queued_at(p) for p in kv[1])))
        for group, pods in ordered:
            size = int((pods[0]["metadata"].get("annotations") or {}).get(GANG_SIZE_ANNOTATION, "1"))
            if len(pods) < size:
                continue  # the rest of the gang is still being created
            reason = next((r for r in (self.node.check_constraints(p.get("spec") or {}) for p in pods) if r), None)
            if reason:
                self._unschedulable(pods, reason)
                continue
            admission = self.node.admit(group, pods)
            if isinstance(admission, str):
                self._unschedulable(pods, admission)
                if self._could_ever_fit(pods):
                    self._preempt(pods, everything)
                    break  # later groups wait behind this one
                continue
            for pod in pods:
                uid = pod["metadata"]["uid"]
                self._prepare(pod, admission.env(uid), admission.allocations[uid].gpu_ids)

    def _preempt(self, pods: list[dict], everything: list[dict]) -> None:
        """PreemptLowerPriority, as the scheduler's DefaultPreemption on this one node: the fewest
        lower-priority pods whose room lets the gang in get the ``DisruptionTarget`` condition
        (``PreemptionByScheduler``) and a graceful delete, and the gang's pods ``nominatedNodeName``
        while they wait for them to go. Nothing more is preempted while lower-priority pods are
        still terminating (upstream's podEligibleToPreemptOthers); ``preemptionPolicy: Never``
        preempts nothing."""
        if any((p.get("spec") or {}).get("preemptionPolicy") == "Never" for p in pods):
            return
        priority = _gang_priority(pods)
        holding = [p for p in everything if self.node.allocation(p["metadata"]["uid"]) is not None
                   and _priority(p) < priority]
        if not holding or any(is_terminating(p) for p in holding):
            return
        victims = self.node.preemption_victims(pods, [(p["metadata"]["uid"], _priority(p)) for p in holding
                                                      if not is_terminating(p)])
        if not victims:
            return
        by_uid = {p["metadata"]["uid"]: p for p in holding}
        preemptor = pods[0]
        scheduler = (preemptor.get("spec") or {}).get("schedulerName") or "default-scheduler"
        for uid in victims:
            victim = copy.deepcopy(by_uid[uid])
            status = dict(victim.get("status") or {})
            set_condition(status, "DisruptionTarget", "True", "PreemptionByScheduler",
                          f"{scheduler}: preempting to accommodate a higher priority pod")
            victim["status"] = status
            try:
                self.store.update_status(victim)
            except (Conflict, NotFound):
                continue  # changed or gone meanwhile: the next pass looks again
            self.store.record_event(victim, "Normal", "Preempted",
                                    f"Preempted by pod {preemptor['metadata']['uid']} on node {self.node.name}")
            request_deletion(self.store, victim)
        for pod in pods:
            try:
                fresh = self.store.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
                fresh.setdefault("status", {})["nominatedNodeName"] = self.node.name
                self.store.update_status(fresh)
            except (Conflict, NotFound):
                pass

    def _could_ever_fit(self, pods: list[dict]) -> bool:
        total = Resources()
        for pod in pods:
            total = total + pod_requests(pod)
        cap = self.node.capacity
        storage_fits = self.node.storage is None or total.ephemeral_storage <= cap.ephemeral_storage
        return total.cpu <= cap.cpu and total.memory <= cap.memory and storage_fits and all(
            n <= cap.gpus.get(name, 0) for name, n in total.gpus.items())

    def _unschedulable(self, pods: list[dict], reason: str) -> None:
        message = f"0/1 nodes are available: {reason}" if not reason.startswith("0/1") else reason
        for pod in pods:
            status = dict(pod.get("status") or {})
            if set_condition(status, "PodScheduled", "False", "Unschedulable", message):
                pod["status"] = status
                try:
                    self.store.update_status(pod)
                except (Conflict, NotFound):
                    pass
        owner = self._owner(pods[0])
        self.store.record_event(owner or pods[0], "Warning", "FailedScheduling", message)

    def _owner(self, pod: dict) -> dict | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            try:
                return self.store.get(ref["kind"], pod["metadata"]["namespace"], ref["name"])
            except NotFound:
                return None
        return None

    # -- running pods ---------------------------------------------------------------------------
    def _start(self, pod: dict, gpu_env: dict[str, str], gpus: list[str], attempt: int,
               images: dict[str, ImageRun]) -> None:
        uid = pod["metadata"]["uid"]
        hosts = {**self.namespace_hosts(pod["metadata"]["namespace"]),
                 **self._gang_hosts(pod)}
        try:
            env = {**gpu_env, "TRIMARAN_HOME": str(self.runtime.home), "TRIMARAN_POD_UID": uid}
            key = key_of(pod)
            address = self.runtime.start_pod(pod, attempt=attempt, env_extra=env, hosts=hosts, lookup=self._lookup,
                                             on_exit=lambda: self.wake(key), images=images)
        except NetworkError as exc:
            # As the kubelet words a failed RunPodSandbox; nothing of the pod's network is left.
            self.node.release(uid)
            message = f"Failed to create pod sandbox: rpc error: code = Unknown desc = {exc}"
            self._set_waiting(pod, "FailedCreatePodSandBox", message, failed=True)
            self.store.record_event(pod, "Warning", "FailedCreatePodSandBox", message)
            return
        except (ConfigError, SandboxUnavailable, VolumeError) as exc:
            self.node.release(uid)
            reason = "SandboxUnavailable" if isinstance(exc, SandboxUnavailable) else "CreateContainerConfigError"
            self._set_waiting(pod, reason, str(exc), failed=isinstance(exc, SandboxUnavailable))
            self.store.record_event(self._owner(pod) or pod, "Warning", reason, f"{pod['metadata']['name']}: {exc}")
            return
        with self._lock:
            self._started[uid] = key_of(pod)
        now = now_rfc3339()
        status = dict(pod.get("status") or {})
        set_condition(status, "PodScheduled", "True", "", "")
        prior = {cs["name"]: cs for cs in status.get("containerStatuses") or []}
        # On the pod network the node's address is its bridge's gateway, where pods reach it.
        network = self.runtime.network
        pod_ip = address.ip if address is not None else LOOPBACK
        host_ip = network.plan.gateway if network is not None else LOOPBACK
        status.update(phase="Running", podIP=pod_ip, podIPs=[{"ip": pod_ip}], hostIP=host_ip,
                      hostIPs=[{"ip": host_ip}], startTime=status.get("startTime") or now,
                      allocation={"gpus": gpus, "env": gpu_env})
        inits = pod["spec"].get("initContainers") or []
        initializing = {"state": {"waiting": {"reason": "PodInitializing"}}, "started": False, "ready": False}
        status["containerStatuses"] = [
            {"name": c["name"], **_image_fields(c, images.get(c["name"])),
             "restartCount": prior.get(c["name"], {}).get("restartCount", 0),
             **(initializing if inits else {
                 "state": {"running": {"startedAt": now}},
                 **dict(zip(("started", "ready"), self.prober.initial(c), strict=True))}),
             **({"lastState": prior[c["name"]]["lastState"]} if prior.get(c["name"], {}).get("lastState") else {})}
            for c in pod["spec"].get("containers") or []
        ]
        if inits:
            prior_init = {cs["name"]: cs for cs in status.get("initContainerStatuses") or []}
            status["initContainerStatuses"] = [
                {"name": c["name"], **_image_fields(c, images.get(c["name"])), **initializing,
                 "restartCount": prior_init.get(c["name"], {}).get("restartCount", 0),
                 **({"lastState": prior_init[c["name"]]["lastState"]}
                    if prior_init.get(c["name"], {}).get("lastState") else {})}
                for c in inits
            ]
        status["qosClass"] = qos_class(pod)  # as kube-apiserver sets it; the pod's cgroup sits under it
        _set_readiness(status)
        pod["status"] = status
        self._write_status(pod)
        self.prober.watch(pod)
        self.store.record_event(pod, "Normal", "Started", f"Started pod {pod['metadata']['name']} (attempt {attempt})")

    def _gang_hosts(self, pod: dict) -> dict[str, str]:
        """The /etc/hosts entries the pod's controller asked for (its replicas' names). On the pod
        network each name of a pod of the namespace is that pod's IP: the pods named get their
        networks now (set up once, kept by their own start), so every replica's file has every
        peer's address."""
        hosts = json.loads((pod["metadata"].get("annotations") or {}).get(HOSTS_ANNOTATION, "{}"))
        network = self.runtime.network
        if network is None or not hosts:
            return hosts
        wanted = {name.split(".")[0] for name, ip in hosts.items() if ip == LOOPBACK}
        peers = []
        for peer in self.store.list("Pod", pod["metadata"]["namespace"], shared=True):
            meta = peer["metadata"]
            names = {meta["name"], pod_hostname(str(peer["spec"].get("hostname") or meta["name"]))}
            if names & wanted and not is_terminating(peer) and not peer["spec"].get("hostNetwork"):
                peers.append((peer, names))

        def set_up(peer: dict) -> str | None:
            meta = peer["metadata"]
            try:
                # With its hostPorts: the network made here is the one its own start keeps.
                return network.setup(meta["uid"], meta["namespace"], meta["name"],
                                     port_mappings=port_mappings(peer["spec"])).ip
            except NetworkError:
                return None  # that pod's own start says why
        if len(peers) <= 1:  # the pod alone (a trial's, a Job's): no threads to start for it
            found = [set_up(peer) for peer, _ in peers]
        else:  # at once: each setup is a few plugin processes, mostly waiting
            with ThreadPoolExecutor(max_workers=min(8, len(peers)), thread_name_prefix="pod-network") as pool:
                found = list(pool.map(set_up, [peer for peer, _ in peers]))
        ips = {name: ip for (_, names), ip in zip(peers, found, strict=True) if ip for name in names}
        return {name: ips.get(name.split(".")[0], ip) if ip == LOOPBACK else ip for name, ip in hosts.items()}

    # -- images ---------------------------------------------------------------------------------
    def _wanted_images(self, pod: dict) -> dict[str, tuple[str, ImageReference, str]]:
        """The containers that run their image: name -> (image as written, reference, pull policy).
        Raises ``ConfigError`` (a bad policy annotation) or ``InvalidImageName``."""
        wanted = {}
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if not runs_image(pod, container, self.image_policy):
                continue
            image = container["image"]
            try:
                ref = parse_reference(image)
            except InvalidImageName as exc:
                raise InvalidImageName(f'Failed to apply default image tag "{image}": {exc}') from None
            wanted[container["name"]] = (image, ref, container.get("imagePullPolicy") or default_pull_policy(image))
        return wanted

    def _pull_credentials(self, pod: dict) -> list:
        """From the pod's ``imagePullSecrets`` and its ServiceAccount's, read at each attempt (a
        Secret fixed meanwhile counts at the next retry)."""
        namespace = pod["metadata"]["namespace"]
        spec = pod.get("spec") or {}
        names = [ref.get("name") for ref in spec.get("imagePullSecrets") or []]
        account = self._lookup("ServiceAccount", namespace, spec.get("serviceAccountName") or "default")
        names += [ref.get("name") for ref in (account or {}).get("imagePullSecrets") or []]
        secrets = [s for name in dict.fromkeys(n for n in names if n) if (s := self._lookup("Secret", namespace, name))]
        return credentials_from_secrets(secrets)

    def _needs_or_report(self, pod: dict) -> tuple[dict, dict[str, str]] | None:
        """``_wanted_images`` and the storage volumes' URIs, or None once the pod's waiting reason
        and events say why not (its allocation is released)."""
        try:
            return self._wanted_images(pod), storage_volume_uris(pod)
        except (ConfigError, InvalidImageName, VolumeError) as exc:
            with self._lock:
                self._started.pop(pod["metadata"]["uid"], None)
            self.node.release(pod["metadata"]["uid"])
            reason = "InvalidImageName" if isinstance(exc, InvalidImageName) else "CreateContainerConfigError"
            self._set_waiting(pod, reason, str(exc), failed=False)
            self.store.record_event(pod, "Warning", "InspectFailed" if reason == "InvalidImageName" else reason,
                                    str(exc))
            if reason == "InvalidImageName":
                self.store.record_event(pod, "Warning", "Failed", "Error: InvalidImageName")
            return None

    def _prepare(self, pod: dict, gpu_env: dict[str, str], gpus: list[str]) -> None:
        """Start an admitted pod, once the images its containers run are on this node."""
        uid = pod["metadata"]["uid"]
        if not self._bind(pod):
            self.node.release(uid)  # the pod changed meanwhile: admitted again on the next pass
            return
        needs = self._needs_or_report(pod)
        if needs is None:
            return
        wanted, uris = needs
        if uris and not self._add_storage_initializer(pod, uris):
            self.node.release(uid)  # the pod changed meanwhile: admitted again on the next pass
            return
        if not wanted:
            self._start(pod, gpu_env, gpus, attempt=0, images={})
            return
        prep = _Preparing(gpu_env=gpu_env, gpus=gpus, key=key_of(pod))
        with self._lock:
            self._preparing[uid] = prep
        status = {"phase": "Pending", **(pod.get("status") or {})}
        set_condition(status, "PodScheduled", "True", "", "")
        status["containerStatuses"] = [
            {"name": c["name"], **_image_fields(c), "restartCount": 0, "ready": False, "started": False,
             "state": {"waiting": {"reason": "ContainerCreating"}}}
            for c in pod["spec"].get("containers") or []
        ]
        _set_readiness(status)
        pod["status"] = status
        self._write_status(pod)
        self._submit_pull(pod, prep, wanted)

    def _bind(self, pod: dict) -> bool:
        """Bind an admitted pod to this node (``spec.nodeName``), as the scheduler's binding does, so
        that ``kubectl get pods -o wide``, ``describe node`` and ``drain`` find it; False when the
        pod changed or went meanwhile."""
        for _ in range(5):  # a write meanwhile (a label, an annotation): bind the fresh pod
            if pod["spec"].get("nodeName") == self.node.name:
                return True
            pod["spec"]["nodeName"] = self.node.name
            try:
                pod.update(self.store.update(pod))
                return True
            except Conflict:
                try:
                    fresh = self.store.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
                except NotFound:
                    return False
                if fresh["metadata"]["uid"] != pod["metadata"]["uid"] or is_terminating(fresh):
                    return False
                pod.clear()
                pod.update(fresh)
            except NotFound:
                return False
        return False

    def _add_storage_initializer(self, pod: dict, uris: dict[str, str]) -> bool:
        """Give a pod with object-storage CSI volumes its ``storage-initializer`` init container
        (first, before the user's), which downloads each volume's URI into it inside the pod's
        sandbox, with the env KServe's webhook gives it from the ServiceAccount's Secrets. Written
        into the stored pod, as an admission webhook would, so what runs is what ``kubectl`` shows;
        False when the pod changed meanwhile."""
        spec = pod["spec"]
        if any(c.get("name") == STORAGE_INITIALIZER for c in spec.get("initContainers") or []):
            return True
        env, origin = credential_env(self._lookup, pod["metadata"]["namespace"],
                                     spec.get("serviceAccountName") or "default")
        sources = [(uri, name, f"/mnt/storage/{name}") for name, uri in uris.items()]
        spec["initContainers"] = [initializer_container(sources, env, origin), *(spec.get("initContainers") or [])]
        try:
            pod.update(self.store.update(pod))
        except (Conflict, NotFound):
            return False
        self.store.record_event(pod, "Normal", "StorageInitializer",
                                f"Added init container {STORAGE_INITIALIZER} to download "
                                f"{', '.join(f'volume {n!r} from {u}' for n, u in uris.items())} in the pod")
        return True

    def _submit_pull(self, pod: dict, prep: _Preparing, wanted: dict) -> None:
        credentials = self._pull_credentials(pod)
        prep.pull = self._puller.submit(self._pull_images, pod, wanted, credentials)
        prep.pull.add_done_callback(lambda _future: self.wake(prep.key))

    def _pull_images(self, pod: dict, wanted: dict, credentials: list) -> dict[str, ImageRun | tuple[str, str]]:
        """In a pull thread: each container's image, or (reason, message) where it cannot be had."""
        results: dict[str, ImageRun | tuple[str, str]] = {}
        for name, (image, ref, policy) in wanted.items():
            try:
                found = self._image_for(pod, image, ref, policy, credentials)
            except ImagePullError as exc:
                self.store.record_event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {exc}')
                self.store.record_event(pod, "Warning", "Failed", "Error: ErrImagePull")
                results[name] = ("ErrImagePull", str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - skopeo missing, cache unwritable: the pod says why
                log.exception("pulling %s", image)
                message = f'failed to pull image "{image}": {exc}'
                self.store.record_event(pod, "Warning", "Failed", message)
                results[name] = ("ErrImagePull", message)
                continue
            if found is None:
                message = f'Container image "{image}" is not present with pull policy of Never'
                self.store.record_event(pod, "Warning", "ErrImageNeverPull", message)
                results[name] = ("ErrImageNeverPull", message)
                continue
            results[name] = _image_run(found, ref)
        return results

    def _image_for(self, pod: dict, image: str, ref: ImageReference, policy: str, credentials: list) -> Image | None:
        present = self.images.lookup(ref)
        if policy != "Always" and (present is not None or policy == "Never"):
            if present is not None:
                self.store.record_event(pod, "Normal", "Pulled",
                                        f'Container image "{image}" already present on machine')
            return present
        self.store.record_event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
        started = time.monotonic()
        pulled = self.images.pull(ref, credentials=credentials)
        took = time.monotonic() - started
        if present is not None and present.digest == pulled.digest:
            # The tag still names what is here: the store downloaded nothing.
            self.store.record_event(pod, "Normal", "Pulled", f'Container image "{image}" already present on '
                                    f"machine (its tag still names {pulled.digest})")
            return pulled
        self.store.record_event(pod, "Normal", "Pulled",
                                f'Successfully pulled image "{image}" in {took:.3g}s ({took:.3g}s including '
                                f"waiting). Image size: {pulled.size} bytes.")
        return pulled

    def _sync_preparing(self, pod: dict) -> float | None:
        uid = pod["metadata"]["uid"]
        prep = self._preparing[uid]
        if prep.pull is not None:
            if not prep.pull.done():
                return None  # its end wakes this pod
            pull, prep.pull = prep.pull, None
            try:
                results = pull.result()
            except Exception as exc:  # noqa: BLE001 - a failure of ours is still the pod's reason to wait
                log.exception("pulling the images of pod %s", uid)
                results = {name: ("ErrImagePull", str(exc)) for name in self._wanted_images(pod)}
            failed = {name: r for name, r in results.items() if isinstance(r, tuple)}
            if not failed:
                with self._lock:
                    self._preparing.pop(uid, None)
                self._start(pod, prep.gpu_env, prep.gpus, attempt=prep.attempt, images=results)  # type: ignore[arg-type]
                return None
            prep.failures += 1
            delay = min(IMAGE_PULL_BACKOFF_CAP, IMAGE_PULL_BACKOFF_BASE * 2 ** (prep.failures - 1))
            prep.retry_at = time.monotonic() + delay
            prep.failed = failed
            prep.reported_backoff = False
            self._set_containers_waiting(pod, failed)
            # The pull's own reason shows for a moment, then the back-off's.
            return min(delay, 1.0)
        now = time.monotonic()
        if now < prep.retry_at:
            if not prep.reported_backoff:
                prep.reported_backoff = True
                waiting = {}
                for name, (reason, message) in prep.failed.items():
                    if reason == "ErrImagePull":
                        image = _container(pod, name).get("image")
                        waiting[name] = ("ImagePullBackOff",
                                         f'Back-off pulling image "{image}": ErrImagePull: {message}')
                        self.store.record_event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
                    else:
                        waiting[name] = (reason, message)
                self._set_containers_waiting(pod, waiting)
            return prep.retry_at - now
        try:
            wanted = self._wanted_images(pod)
        except (ConfigError, InvalidImageName):
            return None  # a pod's spec does not change; it was valid when admitted
        self._submit_pull(pod, prep, wanted)
        return None

    def _set_containers_waiting(self, pod: dict, waiting: dict[str, tuple[str, str]]) -> None:
        status = dict(pod.get("status") or {})
        prior = {cs["name"]: cs for cs in status.get("containerStatuses") or []}
        status["containerStatuses"] = [
            {"name": c["name"], **_image_fields(c), "restartCount": prior.get(c["name"], {}).get("restartCount", 0),
             "ready": False, "started": False,
             "state": {"waiting": {"reason": waiting[c["name"]][0], "message": waiting[c["name"]][1]}
                       if c["name"] in waiting else {"reason": "ContainerCreating"}},
             **({"lastState": prior[c["name"]]["lastState"]} if prior.get(c["name"], {}).get("lastState") else {})}
            for c in pod["spec"].get("containers") or []
        ]
        init_waiting = [(name, w) for name, w in waiting.items()
                        if name not in {c["name"] for c in pod["spec"].get("containers") or []}]
        if init_waiting:
            # An init container's image holds up every container: say so on the first.
            name, (reason, message) = init_waiting[0]
            status["containerStatuses"][0]["state"] = {"waiting": {"reason": reason, "message": f"{name}: {message}"}}
        _set_readiness(status)
        pod["status"] = status
        self._write_status(pod)

    def _lookup(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(kind, namespace, name)
        except NotFound:
            return None

    def _sync_running(self, pod: dict) -> float | None:
        uid = pod["metadata"]["uid"]
        due = self._restart_at.get(uid)
        if due is not None:
            if time.monotonic() < due:
                return due - time.monotonic()
            del self._restart_at[uid]
            return self._restart(pod)
        try:
            state = self.runtime.pod_status(uid)
        except PodNotFound:
            state = None
        if state is not None and pod["spec"].get("initContainers"):
            initializing = self._sync_init(pod, state)
            if initializing == "failed":
                return self._init_failed(pod)
            if initializing == "running":
                return POLL_SECONDS
        if state is not None and any(c.state != "terminated" for c in state.containers.values()):
            if apply_probe_state(pod["status"], self.prober.state(uid)):
                _set_readiness(pod["status"])
                self._write_status(pod)
            return POLL_SECONDS
        self.prober.forget(uid)
        statuses = []
        failed = False
        for cs in pod["status"].get("containerStatuses") or []:
            proc = state.containers.get(cs["name"]) if state else None
            term = proc.to_k8s()["terminated"] if proc else {
                "exitCode": 137, "reason": "ShimLost", "finishedAt": now_rfc3339(),
                "message": "the pod's processes vanished while the control plane was down"}
            failed |= term["exitCode"] != 0
            statuses.append({**cs, "state": {"terminated": term}, "ready": False})
            if term.get("reason") == "ShimLost":
                # Killed from outside: without an event the restart below would look routine.
                self.store.record_event(pod, "Warning", "ShimLost",
                                        f"container {cs['name']}: {term.get('message')}")
        policy = pod["spec"].get("restartPolicy") or "Always"
        status = pod["status"]
        if policy == "Always" or (policy == "OnFailure" and failed):
            restarts = _runs(status) + 1
            delay = _restart_delay(restarts)
            status["containerStatuses"] = [
                {**cs, "restartCount": restarts, "lastState": cs["state"],
                 "state": {"waiting": {"reason": "CrashLoopBackOff",
                                       "message": f"back-off {delay:.1f}s restarting failed container"}}}
                for cs in statuses
            ]
            _set_readiness(status)
            self._write_status(pod)
            self.store.record_event(pod, "Warning", "BackOff",
                                    f"Restarting container of pod {pod['metadata']['name']} "
                                    f"(restart {restarts}, exit code {statuses[0]['state']['terminated']['exitCode']})")
            self._restart_at[uid] = time.monotonic() + delay
            return delay
        status["containerStatuses"] = statuses
        status["phase"] = "Failed" if failed else "Succeeded"
        reasons = {s["state"]["terminated"].get("reason") for s in statuses}
        if "OOMKilled" in reasons:
            status["reason"] = "OOMKilled"
        self._finished(pod)
        return None

    def _finished(self, pod: dict) -> None:
        """The pod's run has ended for good: its final status written, its share of the node freed."""
        _set_readiness(pod["status"])
        self._write_status(pod)
        self.node.release(pod["metadata"]["uid"])
        if self.runtime.network is not None:
            # The sandbox is stopped for good (the kubelet's StopPodSandbox): its IP goes back to
            # the range, or with its netns to the pool for the next pod; status.podIP keeps saying
            # what it was. Off the reconcile loop (CNI DEL runs a process per plugin), as pod stops are.
            self._stopper.submit(self.runtime.release_network, pod["metadata"]["uid"])
        with self._lock:
            self._started.pop(pod["metadata"]["uid"], None)

    def _sync_init(self, pod: dict, state: PodProcessStatus) -> str:
        """Report the init containers' states (and the app containers' once they start); ``running``
        while one is still to finish, ``failed`` when one failed and the run has ended, else ``done``."""
        status = pod["status"]
        before = json.dumps([status.get("initContainerStatuses"), status.get("containerStatuses")], sort_keys=True)
        prior = {cs["name"]: cs for cs in status.get("initContainerStatuses") or []}
        verdict = "done"
        statuses = []
        for container in pod["spec"]["initContainers"]:
            name = container["name"]
            cs = dict(prior.get(name) or {"name": name, **_image_fields(container), "restartCount": 0})
            proc = state.init_containers.get(name) if verdict == "done" else None
            if proc is None or proc.state == "waiting":
                cs.update(state={"waiting": {"reason": "PodInitializing"}}, started=False, ready=False)
                verdict = "running" if verdict == "done" else verdict
            else:
                cs.update(state=proc.to_k8s(), started=proc.state == "running",
                          ready=proc.state == "terminated" and proc.exit_code == 0)
                if proc.state == "running":
                    verdict = "running"
                elif proc.exit_code != 0:
                    verdict = "running" if state.shim_alive else "failed"
            statuses.append(cs)
        status["initContainerStatuses"] = statuses
        if verdict == "done":
            specs = {c["name"]: c for c in pod["spec"].get("containers") or []}
            for cs in status.get("containerStatuses") or []:
                proc = state.containers.get(cs["name"])
                if (cs.get("state") or {}).get("waiting", {}).get("reason") == "PodInitializing" and proc is not None \
                        and proc.state != "waiting":
                    cs["state"] = proc.to_k8s()
                    cs.update(zip(("started", "ready"), self.prober.initial(specs.get(cs["name"], {})), strict=True))
        _set_readiness(status)
        if json.dumps([status.get("initContainerStatuses"), status.get("containerStatuses")], sort_keys=True) != before:
            self._write_status(pod)
        return verdict

    def _init_failed(self, pod: dict) -> float | None:
        """An init container failed and its run ended: the pod starts again after a back-off, as
        the kubelet restarts it (``Init:CrashLoopBackOff``), or fails under ``restartPolicy: Never``."""
        uid = pod["metadata"]["uid"]
        self.prober.forget(uid)
        status = pod["status"]
        failed = next(cs for cs in status["initContainerStatuses"]
                      if (cs["state"].get("terminated") or {}).get("exitCode", 0) != 0)
        term = failed["state"]["terminated"]
        if (pod["spec"].get("restartPolicy") or "Always") == "Never":
            status["phase"] = "Failed"
            self._finished(pod)
            return None
        restarts = _runs(status) + 1
        delay = _restart_delay(restarts)
        failed.update(restartCount=restarts, lastState=failed["state"], state={"waiting": {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {delay:.1f}s restarting failed container={failed['name']} "
                       f"pod={pod['metadata']['name']}"}})
        _set_readiness(status)
        self._write_status(pod)
        self.store.record_event(pod, "Warning", "BackOff",
                                f"Back-off restarting failed init container {failed['name']} (exit code "
                                f"{term.get('exitCode')}): {term.get('message') or term.get('reason')}")
        self._restart_at[uid] = time.monotonic() + delay
        return delay

    def _restart(self, pod: dict) -> float | None:
        """Start the pod's containers again in place; as kubelet does at each container start, their
        images go through the pull policy again (a tag moved under ``Always`` gives the new image,
        an image gone from the store since the control plane restarted is pulled again)."""
        uid = pod["metadata"]["uid"]
        alloc = (pod.get("status") or {}).get("allocation") or {}
        attempt = _runs(pod["status"])
        gpu_env, gpus = alloc.get("env") or {}, alloc.get("gpus") or []
        needs = self._needs_or_report(pod)
        if needs is None:
            return None
        wanted, _ = needs
        if not wanted:
            self._start(pod, gpu_env, gpus, attempt=attempt, images={})
            return POLL_SECONDS
        prep = _Preparing(gpu_env=gpu_env, gpus=gpus, key=key_of(pod), attempt=attempt)
        with self._lock:
            self._preparing[uid] = prep
        self._submit_pull(pod, prep, wanted)
        return None

    def _set_waiting(self, pod: dict, reason: str, message: str, failed: bool) -> None:
        status = dict(pod.get("status") or {})
        status["containerStatuses"] = [
            {"name": c["name"], **_image_fields(c), "restartCount": 0, "ready": False,
             "state": {"waiting": {"reason": reason, "message": message}}}
            for c in pod["spec"].get("containers") or []
        ]
        if failed:
            status["phase"] = "Failed"
            status["reason"] = reason
            status["message"] = message
        _set_readiness(status)
        pod["status"] = status
        self._write_status(pod)

    def _write_status(self, pod: dict) -> None:
        for _ in range(5):
            try:
                pod.update(self.store.update_status(pod))
                return
            except Conflict:
                fresh = self.store.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
                fresh["status"] = pod["status"]
                pod.clear()
                pod.update(fresh)
            except NotFound:
                return

    # -- local storage: the eviction manager and the Node object ------------------------------
    def _housekeeping(self) -> float:
        if self.node.observe_disk():
            self.node_changed()
            reason = "NodeHasDiskPressure" if self.node.disk_pressure else "NodeHasNoDiskPressure"
            self.store.record_event(self.node.reference(), "Normal", reason,
                                    f"Node {self.node.name} status is now: {reason}")
            if not self.node.disk_pressure:
                self.wake(SCHEDULE_KEY)  # pods held back by the taint may start now
        with self._lock:
            running = {uid: key for uid, key in self._started.items() if uid not in self._stopping}
        pods = [p for p in self.store.list("Pod", shared=True)
                if p["metadata"]["uid"] in running and phase(p) == "Running" and not is_terminating(p)]
        measured: list[tuple[dict, StorageUsage]] = []
        for pod in pods:
            if not self.node.disk_pressure and not _limits_storage(pod):
                continue  # nothing to hold it to: not worth walking its files
            usage = self.runtime.storage_usage(pod)
            violation = ephemeral_storage_violation(pod, usage)
            if violation is not None:
                self._evict(pod, violation)
                return HOUSEKEEPING_SECONDS  # one eviction per pass, as the kubelet: then look again
            measured.append((pod, usage))
        signal = self.node.disk_signal() if self.node.disk_pressure else None
        if signal is not None and measured:
            # The kubelet's ranking for disk: pods beyond their request first, then by usage.
            pod, usage = max(measured, key=lambda m: (m[1].total > pod_requests(m[0]).ephemeral_storage, m[1].total))
            threshold, floor, available = signal
            self._evict(pod, disk_pressure_message(pod, usage, format_memory(floor), format_memory(available)))
        return HOUSEKEEPING_SECONDS

    def _evict(self, pod: dict, message: str) -> None:
        """Evict as the kubelet does: kill the pod's processes at once, fail it with reason Evicted,
        free its writable layers and emptyDirs. Its logs stay (kubectl logs still reads them)."""
        uid = pod["metadata"]["uid"]
        log.warning("evicting pod %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], message)
        try:
            self.runtime.stop_pod(uid, grace_seconds=0)
            state = self.runtime.pod_status(uid)
        except PodNotFound:
            state = None
        except RuntimeError:
            log.exception("stopping evicted pod %s", uid)
            state = None
        self.prober.forget(uid)
        with self._lock:
            self._started.pop(uid, None)
            self._restart_at.pop(uid, None)
        self.node.release(uid)
        try:
            pod = self.store.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        except NotFound:
            return
        status = pod["status"]
        statuses = []
        for cs in status.get("containerStatuses") or []:
            proc = state.containers.get(cs["name"]) if state else None
            term = proc.to_k8s().get("terminated") if proc else None
            statuses.append({**cs, "ready": False, "started": False, "state": {"terminated": term or {
                "exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": now_rfc3339(),
                "message": "The container could not be located when the pod was terminated"}}})
        status.update(phase="Failed", reason="Evicted", message=message, containerStatuses=statuses)
        set_condition(status, "DisruptionTarget", "True", "TerminationByKubelet", message)
        _set_readiness(status)
        self._write_status(pod)
        self.store.record_event(pod, "Warning", "Evicted", message)
        # Its space back now: the kubelet removes a terminated pod's volumes and containers.
        self.runtime.remove_pod(uid)

    # -- deletion -------------------------------------------------------------------------------
    def _terminate(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            if uid in self._stopping:
                return
            self._stopping.add(uid)
        grace = float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 5))
        self._stopper.submit(self._stop_and_release, uid, pod, grace)

    def _stop_and_release(self, uid: str, pod: dict | None, grace: float = 5.0) -> None:
        try:
            self.runtime.stop_pod(uid, grace_seconds=min(grace, 30.0))
            self.runtime.remove_pod(uid)
        except Exception:  # noqa: BLE001 - keep deleting the object even if cleanup failed
            log.exception("stopping pod %s", uid)
        self.node.release(uid)
        self.prober.forget(uid)
        with self._lock:
            self._started.pop(uid, None)
            self._restart_at.pop(uid, None)
            self._preparing.pop(uid, None)
            self._stopping.discard(uid)
        if pod is not None:
            # Logs go with the pod object, as on a cluster; a recreated pod of the same name starts clean.
            self.runtime.delete_logs(pod["metadata"]["namespace"], pod["metadata"]["name"])
            try:
                self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
                self.store.delete_events_for("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
            except NotFound:
                pass

    def shutdown(self) -> None:
        """Stop watching; pods keep running under their shims and are re-adopted on the next start."""
        self._puller.shutdown(wait=False, cancel_futures=True)
        self._stopper.shutdown(wait=True)


def _limits_storage(pod: dict) -> bool:
    """Whether the pod sets a local storage limit the eviction manager must hold it to."""
    spec = pod.get("spec") or {}
    return any("ephemeral-storage" in ((c.get("resources") or {}).get("limits") or {})
               for c in spec.get("containers") or []) or any(
        (v.get("emptyDir") or {}).get("sizeLimit") and (v.get("emptyDir") or {}).get("medium") != "Memory"
        for v in spec.get("volumes") or [] if "emptyDir" in v)


def _priority(pod: dict) -> int:
    """``spec.priority``, which the Priority admission plugin set (0 for pods from before it)."""
    return int((pod.get("spec") or {}).get("priority") or 0)


def _gang_priority(pods: list[dict]) -> int:
    return max(_priority(p) for p in pods)


def _queued_at(pod: dict) -> tuple[float, str]:
    ann = pod["metadata"].get("annotations") or {}
    return float(ann.get(QUEUED_ANNOTATION, "inf")), pod["metadata"].get("creationTimestamp", "")


def _image_fields(container: dict, image: ImageRun | None = None) -> dict[str, str]:
    """``image`` and ``imageID``, which Kubernetes' typed clients require of a container status:
    for a container that runs its image, the reference and ``registry/repository@digest`` as the
    kubelet reports them; a host process has no image digest to report."""
    if image is not None:
        return {"image": image.reference, "imageID": image.image_id}
    return {"image": container.get("image") or "", "imageID": ""}


def _image_run(image: Image, ref: ImageReference) -> ImageRun:
    return ImageRun(reference=image.reference, image_id=f"{ref.name}@{image.digest}", rootfs=image.rootfs,
                    entrypoint=tuple(image.config.entrypoint), cmd=tuple(image.config.cmd),
                    env=tuple(image.config.env), working_dir=image.config.working_dir, user=image.config.user)


def _container(pod: dict, name: str) -> dict:
    spec = pod.get("spec") or {}
    return next(c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                if c.get("name") == name)


def _runs(status: dict) -> int:
    """How many times the pod has been started again: its run's number (init containers' restarts
    count too, so every run has a number of its own)."""
    return max((cs.get("restartCount", 0) for cs in [*(status.get("initContainerStatuses") or []),
                                                     *(status.get("containerStatuses") or [])]), default=0)


def _set_readiness(status: dict) -> None:
    """The kubelet's pod conditions beside PodScheduled: Initialized (once every init container
    completed), ContainersReady and Ready from the containers' readiness, so ``kubectl wait
    --for=condition=Ready`` works; a finished pod is not ready, with the kubelet's reason ``PodCompleted``."""
    pending = [cs["name"] for cs in status.get("initContainerStatuses") or [] if not cs.get("ready")]
    if pending:
        set_condition(status, "Initialized", "False", "ContainersNotInitialized",
                      f"containers with incomplete status: [{' '.join(pending)}]")
    else:
        set_condition(status, "Initialized", "True", "", "")
    unready = [cs["name"] for cs in status.get("containerStatuses") or [] if not cs.get("ready")]
    if not unready:
        ready, reason, message = "True", "", ""
    elif status.get("phase") in ("Succeeded", "Failed"):
        ready, reason, message = "False", "PodCompleted", ""
    else:
        ready, reason = "False", "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(unready)}]"
    set_condition(status, "ContainersReady", ready, reason, message)
    set_condition(status, "Ready", ready, reason, message)
