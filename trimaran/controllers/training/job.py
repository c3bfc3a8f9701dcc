"""The reconcile loop shared by every Kubeflow training kind (TFJob, PyTorchJob, XGBoostJob, JAXJob,
PaddleJob, MPIJob).

Follows the operator's ``ReconcileJobs`` (training-operator.md §2): one pod per replica,
run policy (restart policies, backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished,
cleanPodPolicy, suspend), then conditions and replicaStatuses from the pods' phases.

Local differences, on purpose:
- replicas address each other as ``{pod}`` / ``{pod}.{namespace}.svc`` (resolved to loopback in
  each sandbox's /etc/hosts) on a port of their own, since all replicas share one network;
- ``OnFailure``/``Always`` restarts happen in place in the kubelet (as kubelet does); ``ExitCode``
  recreations are counted on the job, so backoffLimit applies to them reliably
  (the operator's requeue-count check is known to miss them, kubeflow/trainer#2342).
"""

from __future__ import annotations

import copy
import json
import logging
import time

from trimaran.api import kinds
from trimaran.api.labels import (
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from trimaran.api.meta import pod_hostname, replica_count
from trimaran.api.quota import AdmissionRefused
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import (
    is_finished,
    is_true,
    now_rfc3339,
    seconds_since,
    set_condition,
    set_training_condition,
)
from trimaran.controllers.pods import (
    LOOPBACK,
    container_exit_code,
    expire_finished,
    is_terminating,
    new_pod,
    owned_pods,
    owner_reference,
    phase,
    request_deletion,
    restart_count,
    set_gang,
    waiting_reason,
)
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.serving.autoscaling import ResourceSampler
from trimaran.controllers.training.framework import (
    Framework,
    JobView,
    ReplicaAddress,
    ReplicaCounts,
    framework_for,
    frameworks,
)
from trimaran.runtime import NodeAPI
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

log = logging.getLogger(__name__)

PORTS_ANNOTATION = "trimaran.io/replica-ports"
# Set when the recorded ports are the operator's defaults, each at its own pod's address.
OWN_NETWORK_ANNOTATION = "trimaran.io/pod-network"
RECREATIONS_ANNOTATION = "trimaran.io/exitcode-recreations"
RETRYABLE_EXIT_MIN = 128
PREREQUISITE_POLL = 0.2


class TrainingJobReconciler(Reconciler):
    name = "training"

    def __init__(self, store: Store, ports: PortAllocator | None = None, runtime: NodeAPI | None = None) -> None:
        super().__init__(store)
        self.usage = ResourceSampler(runtime)
        self.kinds = tuple(f.kind for f in frameworks())
        self.watches = ("Pod",)
        self.ports = ports or PortAllocator()
        for kind in self.kinds:
            for job in store.list(kind):
                self.ports.reserve(_recorded_ports(job))

    # -- the loop -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> float | None:
        try:
            job = self.store.get(key.kind, key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(job):
            return None
        fw = framework_for(key.kind)
        status = copy.deepcopy(job.get("status") or {})
        before = copy.deepcopy(status)
        pods = owned_pods(self.store, job)
        requeue: float | None = None
        self._events: list[tuple[str, str, str]] = []

        if not status.get("conditions"):
            set_training_condition(status, "Created", f"{fw.kind}Created", f"{fw.kind} {key.name} is created.")
            self._event("Normal", f"{fw.kind}Created", f"{fw.kind} {key.name} is created.")

        run_policy = job["spec"].get("runPolicy") or {}
        if is_finished(status):
            requeue = self._after_finish(job, fw, status, pods, run_policy)
        elif run_policy.get("suspend"):
            self._suspend(job, fw, status, pods)
        else:
            if is_true(status, "Suspended"):
                set_condition(status, "Suspended", "False", f"{fw.kind}Resumed", f"{fw.kind} {key.name} is resumed.")
                status["startTime"] = now_rfc3339()
                self._event("Normal", f"{fw.kind}Resumed", f"{fw.kind} {key.name} is resumed.")
            beyond = self._beyond_node(job, fw)
            if beyond:
                # As a gang the node can never admit: said on the job, nothing allocated or created.
                self._event("Warning", "TooManyReplicas", beyond)
            else:
                status.setdefault("startTime", now_rfc3339())
                ported = self._ensure_ports(job, fw)
                if ported is None:
                    return 0.05
                job = ported
                try:
                    requeue = self._run(job, fw, status, pods, run_policy)
                except Conflict:
                    return 0.05
                conditions = status.get("conditions") or []
                if conditions and conditions[-1].get("type") == "Created":
                    # Not yet running: a replica pulling its image or in ImagePullBackOff says so here.
                    waiting = waiting_reason(pods)
                    set_training_condition(status, "Created", f"{fw.kind}Created",
                                           f"{fw.kind} {key.name} is created."
                                           + (f" Waiting: {waiting}" if waiting else ""))

        if status != before:
            status["lastReconcileTime"] = now_rfc3339()
            job["status"] = status
            try:
                self.write_status(job)
            except Conflict:
                return 0.05  # nothing recorded: the next pass decides again from fresh state
            except NotFound:
                return None  # deleted meanwhile (or by its own TTL): its pods are being stopped
        for etype, reason, message in self._events:
            self.store.record_event(job, etype, reason, message)
        return requeue

    def _event(self, etype: str, reason: str, message: str) -> None:
        """Queue an event; it is recorded only once the status change it reports is stored."""
        self._events.append((etype, reason, message))

    # -- phases of a job ------------------------------------------------------------------------
    def _run(self, job: dict, fw: Framework, status: dict, pods: list[dict], run_policy: dict) -> float | None:
        name = job["metadata"]["name"]
        deadline = run_policy.get("activeDeadlineSeconds")
        if deadline is not None:
            left = float(deadline) - seconds_since(status.get("startTime"))
            if left <= 0:
                self._fail(job, fw, status, pods, "DeadlineExceeded",
                           f"{fw.kind} {name} has failed because it was active longer than specified deadline")
                return self._after_finish(job, fw, status, pods, run_policy)
        specs = job["spec"].get(fw.spec_key) or {}
        live = {p["metadata"]["name"]: p for p in pods}
        recreations = int(job["metadata"].get("annotations", {}).get(RECREATIONS_ANNOTATION, "0"))
        backoff = fw.backoff_limit(_job_view(job))

        # Retryable ExitCode failures: delete the pod; it is recreated once it is gone.
        for pod in pods:
            rtype = pod["metadata"]["labels"].get(REPLICA_TYPE_LABEL, "")
            rspec = _spec_for(specs, rtype)
            if rspec is None or phase(pod) != "Failed" or is_terminating(pod):
                continue
            if rspec.get("restartPolicy") == "ExitCode":
                code = container_exit_code(pod, fw.container_name)
                if code is None or code >= RETRYABLE_EXIT_MIN:
                    if backoff is not None and recreations >= int(backoff):
                        self._fail(job, fw, status, pods, f"{fw.kind}Failed",
                                   f"{fw.kind} {name} has failed because it has reached the specified backoff limit")
                        return self._after_finish(job, fw, status, pods, run_policy)
                    recreations += 1
                    self._record_recreation(job, recreations)
                    request_deletion(self.store, pod)
                    set_training_condition(status, "Restarting", f"{fw.kind}Restarting",
                                           f"{fw.kind} {name} is restarting because {pod['metadata']['name']} "
                                           f"exited with code {code}.")
                    self._event("Warning", f"{fw.kind}Restarting",
                                            f"Pod {pod['metadata']['name']} exited with retryable code {code}; "
                                            "recreating it.")

        # Pods with OnFailure/Always restart in place; the operator's check (a): total restarts.
        if backoff is not None:
            restarts = sum(restart_count(p) for p in pods if phase(p) == "Running")
            if restarts >= int(backoff) and restarts > 0:
                self._fail(job, fw, status, pods, f"{fw.kind}Failed",
                           f"{fw.kind} {name} has failed because it has reached the specified backoff limit")
                return self._after_finish(job, fw, status, pods, run_policy)

        # A replica beyond its type's count (a scale-down) is stopped, as the operator's ReconcilePods does.
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            rtype = _canonical(specs, labels.get(REPLICA_TYPE_LABEL, ""))
            index = labels.get(REPLICA_INDEX_LABEL, "")
            if rtype and index.isdigit() and int(index) >= replica_count(specs[rtype]) \
                    and not is_terminating(pod):
                request_deletion(self.store, pod)
                self._event("Normal", "SuccessfulDeletePod", f"Deleted pod: {pod['metadata']['name']}")

        needed, ready = fw.prerequisites(_job_view(job), [p for p in pods if not is_terminating(p)])
        for obj in needed:
            obj["metadata"]["ownerReferences"] = [owner_reference(job)]
            try:
                self.store.create(obj)
            except AlreadyExists:
                pass  # made on an earlier pass
        missing = []
        for rtype, rspec in (specs.items() if ready else ()):
            if fw.holds_back(_job_view(job), rtype, [p for p in pods if not is_terminating(p)]):
                continue
            for index in range(replica_count(rspec)):
                pod_name = fw.pod_name(name, rtype, index)
                if pod_name not in live:
                    missing.append((rtype, index))
        if missing:
            addresses = self._addresses(job, fw)
            for child in fw.children(_job_view(job), addresses):
                child["metadata"]["ownerReferences"] = [owner_reference(job)]
                try:
                    self.store.create(child)
                except AlreadyExists:
                    pass  # made on an earlier pass; its content derives from the spec alone
            # Gang: on first creation the whole job is one group; a recreated pod joins alone.
            first = not pods
            group = job["metadata"]["uid"] if first else f"{job['metadata']['uid']}/{len(pods)}-{recreations}"
            size = len(missing)
            queued_at = time.time()
            made: list[dict] = []
            for rtype, index in missing:
                pod = self._build_pod(job, fw, rtype, index, addresses, group, size, queued_at)
                try:
                    made.append(self.store.create(pod))
                except AdmissionRefused:
                    # A quota or a LimitRange: a FailedCreate event on the job, and a retry of the
                    # whole gang. Its part made in this pass goes (never admitted: the gang was not
                    # whole), or it would wait for a member made later under another group.
                    for pod in made:
                        try:
                            self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
                        except NotFound:
                            pass
                    raise
                except Exception as exc:  # noqa: BLE001 - AlreadyExists while the old pod terminates
                    log.debug("create %s: %s", pod["metadata"]["name"], exc)
            pods = owned_pods(self.store, job)

        view = self._view(job, fw, pods)
        # A kind with a scale subresource reads its label selector from the replica statuses.
        scalable = kinds.for_object(job["apiVersion"], fw.kind).scale is not None
        status["replicaStatuses"] = {
            rtype: {"active": c.active, "succeeded": c.succeeded, "failed": c.failed,
                    **({"selector": _selector(job, fw, rtype)} if scalable else {})}
            for rtype, c in view.counts.items()
        }
        stuck, recheck = fw.stuck(view, [p for p in pods if not is_terminating(p)])
        if stuck:
            self._fail(job, fw, status, pods, f"{fw.kind}Failed", stuck)
            return self._after_finish(job, fw, status, pods, run_policy)
        outcome, message = fw.status(view)
        if outcome == "Succeeded":
            set_training_condition(status, "Succeeded", f"{fw.kind}Succeeded", message)
            status["completionTime"] = now_rfc3339()
            self._event("Normal", f"{fw.kind}Succeeded", message)
            return self._after_finish(job, fw, status, pods, run_policy)
        if outcome == "Failed":
            self._fail(job, fw, status, pods, f"{fw.kind}Failed", message)
            return self._after_finish(job, fw, status, pods, run_policy)
        if outcome == "Running" and all(phase(p) == "Running" for p in pods if not is_terminating(p)):
            if not is_true(status, "Running"):
                set_training_condition(status, "Running", f"{fw.kind}Running", message)
            rescale = fw.autoscale(view, [p for p in pods if not is_terminating(p)], self.usage)
            if rescale is not None:
                self._rescale(job, fw, *rescale)
        # Look again at the deadline, when the framework asks, and soon while prerequisites start.
        delays = [recheck, None if ready else PREREQUISITE_POLL, fw.autoscale_period(_job_view(job))]
        if deadline is not None:
            delays.append(max(0.05, float(deadline) - seconds_since(status.get("startTime"))))
        return min((d for d in delays if d is not None), default=None)

    def _rescale(self, job: dict, fw: Framework, replicas: int, reason: str) -> None:
        """Write the Worker count as the HorizontalPodAutoscaler writes the scale subresource; a
        conflicting write is decided again on the next pass."""
        job["spec"][fw.spec_key]["Worker"]["replicas"] = replicas
        job["metadata"] = self.store.update(job)["metadata"]
        self._event("Normal", "SuccessfulRescale", f"New size: {replicas}; reason: {reason}")

    def _fail(self, job: dict, fw: Framework, status: dict, pods: list[dict], reason: str, message: str) -> None:
        if set_training_condition(status, "Failed", reason, message):
            status["completionTime"] = now_rfc3339()
            self._event("Warning", reason, message)

    def _after_finish(self, job: dict, fw: Framework, status: dict, pods: list[dict], run_policy: dict) -> float | None:
        policy = run_policy.get("cleanPodPolicy") or "None"
        deadline_failed = any(c.get("reason") == "DeadlineExceeded" for c in status.get("conditions") or [])
        for pod in pods:
            p = phase(pod)
            if policy == "All" or (policy == "Running" and p in ("Running", "Pending")) or (
                deadline_failed and p in ("Running", "Pending")
            ):
                request_deletion(self.store, pod)
        if is_true(status, "Succeeded"):
            # Replicas still active when the job succeeded count as succeeded, as the operator reports.
            for rs in (status.get("replicaStatuses") or {}).values():
                rs["succeeded"] = rs.get("succeeded", 0) + rs.get("active", 0)
                rs["active"] = 0
        self.ports.release(_recorded_ports(job))
        expiry = expire_finished(self.store, job, status, pods)
        if not fw.finished(_job_view(job), [p for p in pods if not is_terminating(p)], self.store):
            return min(expiry or 0.5, 0.5)
        return expiry

    def _suspend(self, job: dict, fw: Framework, status: dict, pods: list[dict]) -> None:
        name = job["metadata"]["name"]
        for pod in pods:
            request_deletion(self.store, pod)
        for rs in (status.get("replicaStatuses") or {}).values():
            rs["active"] = 0
        if not is_true(status, "Suspended"):
            set_condition(status, "Suspended", "True", f"{fw.kind}Suspended", f"{fw.kind} {name} is suspended.")
            if is_true(status, "Running"):
                set_condition(status, "Running", "False", f"{fw.kind}Suspended", f"{fw.kind} {name} is suspended.")
            self._event("Normal", f"{fw.kind}Suspended", f"{fw.kind} {name} is suspended.")

    # -- building blocks ------------------------------------------------------------------------
    def _beyond_node(self, job: dict, fw: Framework) -> str | None:
        """Why this node can never run the job (each replica is a process with a loopback port of
        its own), or None."""
        specs = job["spec"].get(fw.spec_key) or {}
        total = sum(replica_count(r) for r in specs.values())
        if total <= self.ports.capacity:
            return None
        return (f"{total} replicas need {total} loopback ports and processes; this node runs at most "
                f"{self.ports.capacity} replicas at once")

    def _ensure_ports(self, job: dict, fw: Framework) -> dict | None:
        ann = job["metadata"].setdefault("annotations", {})
        specs = job["spec"].get(fw.spec_key) or {}
        recorded = json.loads(ann.get(PORTS_ANNOTATION, "{}"))
        wanted = {rtype: replica_count(r) for rtype, r in specs.items()}
        if all(len(recorded.get(rt, [])) >= n for rt, n in wanted.items()):
            return job
        networked = fw.networked(_job_view(job))
        for rtype, n in wanted.items():
            have = recorded.get(rtype, [])
            if len(have) < n:
                recorded[rtype] = have + (self.ports.for_replicas(fw.default_port, n - len(have)) if networked
                                          else self.ports.allocate(n - len(have)))
        ann[PORTS_ANNOTATION] = json.dumps(recorded, separators=(",", ":"))
        if self.ports.pod_network and networked:
            ann[OWN_NETWORK_ANNOTATION] = "true"  # the operator's ports: none of them reserved here
        try:
            return self.store.update(job)
        except Conflict:
            self.ports.release(_recorded_ports(job))
            return None

    def _addresses(self, job: dict, fw: Framework) -> dict[str, list[ReplicaAddress]]:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        recorded = json.loads(job["metadata"]["annotations"][PORTS_ANNOTATION])
        out: dict[str, list[ReplicaAddress]] = {}
        for rtype, ports in recorded.items():
            if rtype not in (job["spec"].get(fw.spec_key) or {}):
                continue
            out[rtype] = []
            for index, port in enumerate(ports):
                host = fw.pod_name(name, rtype, index)
                out[rtype].append(ReplicaAddress(host=host, fqdn=f"{host}.{ns}.svc", port=port))
        return out

    def _record_recreation(self, job: dict, count: int) -> None:
        """Count an ExitCode recreation on the job itself, before the pod is deleted, so that a
        crash between the two never loses the count. ``job`` takes the new resourceVersion."""
        job["metadata"].setdefault("annotations", {})[RECREATIONS_ANNOTATION] = str(count)
        job["metadata"] = self.store.update(job)["metadata"]

    def _build_pod(self, job: dict, fw: Framework, rtype: str, index: int,
                   addresses: dict[str, list[ReplicaAddress]], group: str, size: int, queued_at: float) -> dict:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        rspec = job["spec"][fw.spec_key][rtype]
        template = copy.deepcopy(rspec.get("template") or {})
        tmeta = template.get("metadata") or {}
        pod_name = fw.pod_name(name, rtype, index)
        labels = dict(tmeta.get("labels") or {})
        view = _job_view(job)
        labels.update({
            JOB_NAME_LABEL: name,
            OPERATOR_NAME_LABEL: fw.operator_label(view),
            REPLICA_TYPE_LABEL: rtype.lower(),
            REPLICA_INDEX_LABEL: str(index),
        })
        role = fw.job_role(view, rtype, index)
        if role:
            labels[JOB_ROLE_LABEL] = role
        spec = template.get("spec") or {}
        policy = rspec.get("restartPolicy") or fw.default_restart_policy
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        spec["hostname"] = pod_hostname(pod_name)
        own = addresses[rtype][index]
        for container in spec.get("containers") or []:
            container["env"] = list(container.get("env") or []) + fw.env(view, rtype, index, addresses, container)
            if container.get("name") == fw.container_name:
                ports = container.setdefault("ports", [])
                named = [p for p in ports if p.get("name") == fw.port_name]
                if named:
                    named[0]["containerPort"] = own.port
                else:
                    ports.append({"name": fw.port_name, "containerPort": own.port, "protocol": "TCP"})
        fw.prepare_pod(view, rtype, index, spec)
        if self.ports.pod_network and not fw.networked(view):
            spec["hostNetwork"] = True  # the framework's replicas meet on the host's network
        pod = new_pod(pod_name, ns, spec, owner=job, labels=labels, annotations=dict(tmeta.get("annotations") or {}))
        hosts = {}
        for addrs in addresses.values():
            for a in addrs:
                for host in (a.host, a.fqdn, *fw.host_aliases(view, a.host)):
                    hosts[host] = LOOPBACK
        set_gang(pod, group, size, hosts, queued_at)
        return pod

    def _view(self, job: dict, fw: Framework, pods: list[dict]) -> JobView:
        specs = job["spec"].get(fw.spec_key) or {}
        view = _job_view(job)
        for rtype, rspec in specs.items():
            view.counts[rtype] = ReplicaCounts(replicas=replica_count(rspec))
        for pod in pods:
            if is_terminating(pod):
                continue
            labels = pod["metadata"].get("labels") or {}
            rtype = _canonical(specs, labels.get(REPLICA_TYPE_LABEL, ""))
            if rtype is None:
                continue
            c = view.counts[rtype]
            p = phase(pod)
            # The operator's "active" is Running pods only: a replica waiting for admission (GPUs,
            # cores) is not active, and the framework rules read it the same way.
            if p == "Running":
                c.active += 1
            elif p == "Succeeded":
                c.succeeded += 1
                if rtype == "Worker" and labels.get(REPLICA_INDEX_LABEL) == "0":
                    view.worker0_succeeded = True
            elif p == "Failed":
                c.failed += 1
        return view


def _job_view(job: dict) -> JobView:
    meta = job["metadata"]
    return JobView(name=meta["name"], namespace=meta["namespace"], spec=job["spec"],
                   api_version=job.get("apiVersion", ""), uid=meta.get("uid", ""),
                   replica_ports=json.loads((meta.get("annotations") or {}).get(PORTS_ANNOTATION, "{}")))


def _canonical(specs: dict, lowered: str) -> str | None:
    for rtype in specs:
        if rtype.lower() == lowered:
            return rtype
    return None


def _spec_for(specs: dict, lowered: str) -> dict | None:
    rtype = _canonical(specs, lowered)
    return specs[rtype] if rtype else None


def _selector(job: dict, fw: Framework, rtype: str) -> str:
    return (f"{JOB_NAME_LABEL}={job['metadata']['name']},{OPERATOR_NAME_LABEL}={fw.operator_name},"
            f"{REPLICA_TYPE_LABEL}={rtype.lower()}")


def _recorded_ports(job: dict) -> list[int]:
    """The loopback ports the job holds (none when its replicas have pods of their own network)."""
    annotations = job.get("metadata", {}).get("annotations") or {}
    raw = annotations.get(PORTS_ANNOTATION)
    if not raw or annotations.get(OWN_NETWORK_ANNOTATION):
        return []
    return [p for ps in json.loads(raw).values() for p in ps]
