"""TrainJob (Trainer v2): a TrainJob and its runtime become one JobSet named like the TrainJob.

The runtime's JobSet template is copied, the TrainJob's ``runtimePatches`` are merged into it
(in order), and the replicatedJob labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
trainer`` gets the TrainJob's trainer: its ``node`` container takes the image, command, args,
env and resources, and ``numNodes`` becomes the node Job's parallelism and completions (so pods
are ``<job>-node-0-<i>``, reachable as ``<job>-node-0-<i>.<job>``). Each framework's plugin adds
upstream's environment (torch ``PET_*``, jax ``JAX_*``, xgboost ``DMLC_*``, MPI ``OMPI_MCA_*``
with the ``<job>-mpi-hostfile`` ConfigMap).

With the pod network on, every TrainJob uses upstream's 29500 at its own pods' addresses. Without it,
one deviation: upstream's fixed port 29500 would collide between jobs on one host (every pod
shares its network), so each TrainJob gets a port of its own from the machine-wide allocator,
recorded on it (``trimaran.io/trainer-port``) and used in ``PET_MASTER_PORT``,
``JAX_COORDINATOR_ADDRESS`` and ``DMLC_TRACKER_PORT``.

A dataset or model ``initializer`` whose runtime has no such step gets one: a replicatedJob
``dataset-initializer``/``model-initializer`` that fetches the ``storageUri`` (``hf://``,
``s3://``, ``gs://``, ``http(s)://``) with `trimaran.serving.storage` into the shared workspace
claim (``/workspace/dataset``, ``/workspace/model``) before the nodes start (``dependsOn``
Complete).

Status follows the JobSet: its Completed/Failed condition becomes Complete/Failed with the
JobSet's reason and message, ``jobsStatus`` is its ``replicatedJobsStatus``; ``suspend`` and
``activeDeadlineSeconds`` (Failed, ``DeadlineExceeded``, the JobSet deleted) are the TrainJob's.
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any

from trimaran.api import ManifestError, kinds, podsecurity, validate
from trimaran.api.jobset import API_VERSION as JOBSET_API_VERSION
from trimaran.api.labels import TRAINJOB_NAME_LABEL
from trimaran.api.quantity import parse_quantity
from trimaran.api.trainer import (
    ANCESTOR_LABEL,
    CONTROLLER_NAME,
    DATASET_INITIALIZER,
    LAUNCHER,
    MODEL_INITIALIZER,
    NODE,
    TRAINER_STEP,
    MLPolicy,
    runtime_of,
)
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import get_condition, is_true, seconds_since, set_condition
from trimaran.controllers.gc import request_delete
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.ports import PortAllocator
from trimaran.controllers.trainer import mpi
from trimaran.runtime.gpus import is_gpu_resource
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

PORT_ANNOTATION = "trimaran.io/trainer-port"
# Upstream's trainer port (constants.ContainerTrainerPort): torchrun's rendezvous, and the JAX
# coordinator's and XGBoost tracker's port, on the pod network.
TORCHRUN_PORT = 29500
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
WORKSPACE_VOLUME = "initializer"
WORKSPACE_PATH = "/workspace"
_WORKSPACE_SIZE = "20Gi"
_PORTED = ("torch", "jax", "xgboost")
_SUSPENDED = ("Suspended", "TrainJob is suspended")
_RESUMED = ("Resumed", "TrainJob is resumed")
_DEADLINE = ("DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds")


class TrainJobReconciler(Reconciler):
    name = "trainjob"
    kinds = ("TrainJob",)
    watches = ("JobSet",)

    def __init__(self, store: Store, ports: PortAllocator | None = None) -> None:
        super().__init__(store)
        self.ports = ports or PortAllocator()
        # The level enforced where a namespace has no label of its own (the server's --pod-security).
        self.pod_security = podsecurity.Policy.default(podsecurity.BASELINE)
        self._held: dict[Key, int] = {}
        for job in store.list("TrainJob"):
            port = _recorded_port(job)
            if port is not None and not _finished(job.get("status") or {}):
                self.ports.reserve([port])
                self._held[Key("TrainJob", job["metadata"]["namespace"], job["metadata"]["name"])] = port

    def reconcile(self, key: Key) -> float | None:
        try:
            job = self.store.get("TrainJob", key.namespace, key.name)
        except NotFound:
            self._release(key)
            return None
        if is_being_deleted(job):
            self._release(key)
            return None
        spec = job["spec"]
        if spec.get("managedBy", CONTROLLER_NAME) != CONTROLLER_NAME:
            return None  # MultiKueue (or another controller) runs it
        status = copy.deepcopy(job.get("status") or {})
        before = copy.deepcopy(status)
        jobset = self._jobset(job)
        requeue: float | None = None

        if _finished(status):
            self._release(key)
        else:
            requeue = self._step(key, job, status, jobset)

        return self.settle_status(job, status, before, requeue)

    def _step(self, key: Key, job: dict, status: dict, jobset: dict | None) -> float | None:
        spec = job["spec"]
        suspend = bool(spec.get("suspend"))
        if suspend and not is_true(status, "Suspended"):
            set_condition(status, "Suspended", "True", *_SUSPENDED)
            self.store.record_event(job, "Normal", *_SUSPENDED)
        elif not suspend and is_true(status, "Suspended"):
            set_condition(status, "Suspended", "False", *_RESUMED)
            self.store.record_event(job, "Normal", *_RESUMED)

        left = self._deadline_left(job, status)
        if left is not None and left <= 0:
            set_condition(status, "Failed", "True", *_DEADLINE)
            self.store.record_event(job, "Warning", *_DEADLINE)
            if jobset is not None:
                self._delete(jobset)
            self._release(key)
            return None

        if jobset is None:
            created = self._create_jobset(key, job, suspend)
            if isinstance(created, str):
                # Nothing would change on a retry: the TrainJob fails at once (a cluster's pods would be
                # refused one by one).
                set_condition(status, "Failed", "True", "FailedCreate", created)
                self.store.record_event(job, "Warning", "FailedCreate", created)
                self._release(key)
                return None
            return left if created else 0.05
        if suspend and jobset["spec"].get("suspend"):
            self._refresh_suspended(job, jobset)
        elif bool(jobset["spec"].get("suspend")) != suspend:
            fresh = copy.deepcopy(jobset)
            fresh["spec"]["suspend"] = suspend
            try:
                self.store.update(fresh)
            except (NotFound, Conflict):
                return 0.05
        js_status = jobset.get("status") or {}
        if js_status.get("replicatedJobsStatus") is not None:
            status["jobsStatus"] = copy.deepcopy(js_status["replicatedJobsStatus"])
        for theirs, ours in (("Completed", "Complete"), ("Failed", "Failed")):
            cond = get_condition(js_status, theirs)
            if cond and cond.get("status") == "True":
                set_condition(status, ours, "True", cond.get("reason") or theirs, cond.get("message") or "")
                self.store.record_event(job, "Normal" if ours == "Complete" else "Warning",
                                        cond.get("reason") or ours, cond.get("message") or "")
                self._release(key)
                return None
        return left

    # -- the JobSet --------------------------------------------------------------------------------
    def _jobset(self, job: dict) -> dict | None:
        try:
            jobset = self.store.get("JobSet", job["metadata"]["namespace"], job["metadata"]["name"])
        except NotFound:
            return None
        owners = [o.get("uid") for o in jobset["metadata"].get("ownerReferences") or []]
        if job["metadata"]["uid"] not in owners:
            raise RuntimeError(f"JobSet {jobset['metadata']['name']} exists and is not this TrainJob's")
        return jobset

    def _create_jobset(self, key: Key, job: dict, suspend: bool) -> bool | str:
        """Build and create the JobSet; False when the TrainJob changed under us (retry), or why it
        cannot be made (its pods refused by the namespace's Pod Security level, an invalid JobSet)."""
        runtime = runtime_of(job, self._lookup)
        if runtime is None:
            ref = job["spec"]["runtimeRef"]
            raise RuntimeError(f"{ref.get('kind')} {ref['name']} not found: it must exist for the TrainJob to run")
        policy = MLPolicy.model_validate(runtime["spec"].get("mlPolicy") or {})
        port = None
        if policy.framework() in _PORTED:
            port = self._port(key, job)
            if port is None:
                return False
        jobset, children = build_jobset(job, runtime, port, suspend)
        try:
            jobset = validate(jobset).object
        except ManifestError as exc:
            return "the runtime and the TrainJob make an invalid JobSet: " + "; ".join(exc.problems)
        refused = self._pod_security_refusal(jobset)
        if refused:
            return refused
        if self.ports.pod_network and policy.framework() == "mpi":
            # The launcher execs into nodes through abstract Unix sockets (runtime/podexec.py) and
            # ranks talk TCP over loopback: MPI's pods stay on the host's network, as without the pod
            # network. Set by the controller after the namespace's Pod Security check, which judges
            # what the user asked for.
            for rjob in jobset["spec"]["replicatedJobs"]:
                rjob["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
        for child in children:
            try:
                self.store.create(validate(child).object)
            except AlreadyExists:
                pass
        try:
            self.store.create(jobset)
        except AlreadyExists:
            return True
        self.store.record_event(job, "Normal", "SuccessfulCreate", f"Created JobSet {jobset['metadata']['name']}")
        return True

    def _refresh_suspended(self, job: dict, jobset: dict) -> None:
        """While both are suspended the TrainJob's patches may change (Kueue's, before it admits the
        job): the JobSet takes them before it resumes, as upstream applies the JobSet again."""
        runtime = runtime_of(job, self._lookup)
        if runtime is None:
            return
        wanted, _ = build_jobset(job, runtime, _recorded_port(job), True)
        try:
            wanted = validate(wanted).object
        except ManifestError as exc:
            self.store.record_event(job, "Warning", "FailedUpdate", "; ".join(exc.problems))
            return
        if wanted["spec"]["replicatedJobs"] == jobset["spec"]["replicatedJobs"]:
            return
        refused = self._pod_security_refusal(wanted)
        if refused:
            self.store.record_event(job, "Warning", "FailedUpdate", refused)
            return
        fresh = copy.deepcopy(jobset)
        fresh["spec"]["replicatedJobs"] = wanted["spec"]["replicatedJobs"]
        try:
            self.store.update(fresh)
        except (NotFound, Conflict):
            pass  # the JobSet's change wakes this TrainJob again

    def _pod_security_refusal(self, jobset: dict) -> str | None:
        """Why the namespace's enforced level refuses the JobSet's pods (the runtime's templates
        with the TrainJob's patches, which no admission judged together), in the API's words."""
        namespace, name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
        labels = (self._lookup("Namespace", "", namespace) or {}).get("metadata", {}).get("labels")
        level = podsecurity.policy_for(labels, self.pod_security).enforce
        info = kinds.for_object(JOBSET_API_VERSION, "JobSet")
        detail = podsecurity.judge(level.level, info.pod_templates(jobset) if info.pod_templates else [])
        if not detail:
            return None
        return f'jobsets.{info.group} "{name}" is forbidden: violates PodSecurity "{level}": {detail}'

    def _lookup(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(kind, namespace, name)
        except NotFound:
            return None

    def _port(self, key: Key, job: dict) -> int | None:
        if self.ports.pod_network:
            return TORCHRUN_PORT  # each node at its own pod's address, as upstream
        recorded = _recorded_port(job)
        if recorded is not None:
            if key not in self._held:
                self.ports.reserve([recorded])
                self._held[key] = recorded
            return recorded
        [port] = self.ports.allocate(1)
        fresh = copy.deepcopy(job)
        fresh["metadata"].setdefault("annotations", {})[PORT_ANNOTATION] = str(port)
        try:
            self.store.update(fresh)
        except (NotFound, Conflict):
            self.ports.release([port])
            return None
        self._held[key] = port
        return None  # the next pass (woken by this update) reads it back and creates the JobSet

    def _release(self, key: Key) -> None:
        port = self._held.pop(key, None)
        if port is not None:
            self.ports.release([port])

    def _deadline_left(self, job: dict, status: dict) -> float | None:
        """Seconds until activeDeadlineSeconds, counted from the start or the last resume."""
        deadline = job["spec"].get("activeDeadlineSeconds")
        if deadline is None or job["spec"].get("suspend"):
            return None
        resumed = get_condition(status, "Suspended")
        start = resumed.get("lastTransitionTime") if resumed else job["metadata"].get("creationTimestamp")
        return float(deadline) - seconds_since(start)

    def _delete(self, obj: dict) -> None:
        try:
            request_delete(self.store, obj, propagation="Foreground")
        except (NotFound, Conflict):
            pass


def _recorded_port(job: dict) -> int | None:
    raw = (job["metadata"].get("annotations") or {}).get(PORT_ANNOTATION)
    return int(raw) if raw and raw.isdigit() else None


def _finished(status: dict) -> bool:
    return is_true(status, "Complete") or is_true(status, "Failed")


# --- building the JobSet --------------------------------------------------------------------------

def build_jobset(job: dict, runtime: dict, port: int | None, suspend: bool) -> tuple[dict, list[dict]]:
    """The JobSet for ``job`` on ``runtime``, and the objects it needs first (MPI's hostfile)."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    spec = job["spec"]
    template = copy.deepcopy(runtime["spec"]["template"])
    for patch in spec.get("runtimePatches") or []:
        _apply_patch(template, (patch.get("trainingRuntimeSpec") or {}).get("template") or {})
    policy = MLPolicy.model_validate(runtime["spec"].get("mlPolicy") or {})
    trainer = spec.get("trainer") or {}
    num_nodes = int(trainer.get("numNodes") or policy.num_nodes or 1)
    framework = policy.framework()
    js_spec = template["spec"]
    js_spec.setdefault("replicatedJobs", [])
    _add_initializers(job, js_spec)
    rjobs = js_spec["replicatedJobs"]
    children: list[dict] = []
    for rjob in rjobs:
        step = ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        pod = rjob["template"]["spec"]["template"]
        pod_labels = pod.setdefault("metadata", {}).setdefault("labels", {})
        pod_labels[TRAINJOB_NAME_LABEL] = name
        if step:
            pod_labels[ANCESTOR_LABEL] = step
        if step in (DATASET_INITIALIZER, MODEL_INITIALIZER):
            _apply_initializer(spec, step, pod)
        if rjob["name"] == NODE:
            # A launcher that is a node takes one of them, but upstream keeps at least one node.
            nodes = max(num_nodes - 1, 1) if framework == "mpi" and _launcher_is_node(policy, rjobs) else num_nodes
            rjob["template"]["spec"]["parallelism"] = rjob["template"]["spec"]["completions"] = nodes
        node = _container(pod, NODE)
        if node is None:
            continue
        if step == TRAINER_STEP:
            _apply_trainer(trainer, node)
        elif framework == "mpi" and rjob["name"] == NODE:
            # orted runs with the node's environment: the trainer's variables and resources go there too.
            _apply_trainer({k: v for k, v in trainer.items() if k in ("env", "resourcesPerNode")}, node)
        else:
            continue
        if rjob["name"] != NODE or framework not in _PORTED:
            continue
        env = _framework_env(framework, name, num_nodes, port, trainer, policy, node)
        node["env"] = [*(node.get("env") or []), *env]
        if framework == "torch" and policy.torch and policy.torch.env_injection:
            for target in policy.torch.env_injection.targets or []:
                if target.job_name == rjob["name"]:
                    for other in pod["spec"].get("containers") or []:
                        if other["name"] in (target.container_names or []):
                            other["env"] = [*(other.get("env") or []), *copy.deepcopy(env)]
    if framework == "mpi":
        children += mpi.prepare(job, policy, template, trainer)
    labels = {**((template.get("metadata") or {}).get("labels") or {}), TRAINJOB_NAME_LABEL: name}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    js_spec["suspend"] = suspend
    js_spec.pop("managedBy", None)
    jobset = {"apiVersion": JOBSET_API_VERSION, "kind": "JobSet",
              "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations,
                           "ownerReferences": [owner_reference(job)]},
              "spec": js_spec}
    for child in children:
        child["metadata"]["ownerReferences"] = [owner_reference(job)]
    return jobset, children


def _launcher_is_node(policy: MLPolicy, rjobs: list[dict]) -> bool:
    return bool(policy.mpi and policy.mpi.run_launcher_as_node) and any(r["name"] == LAUNCHER for r in rjobs)


def _container(pod: dict, name: str) -> dict | None:
    return next((c for c in pod["spec"].get("containers") or [] if c.get("name") == name), None)


def _merge_named(base: list[dict] | None, patch: list[dict] | None) -> list[dict]:
    """Merge lists keyed by ``name`` (env, volumes, volumeMounts...): patch items replace or append."""
    out = [copy.deepcopy(item) for item in base or []]
    for item in patch or []:
        at = next((i for i, have in enumerate(out) if have.get("name") == item.get("name")), None)
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = copy.deepcopy(item)
    return out


def _merge_meta(target: dict, patch: dict | None) -> None:
    for field in ("labels", "annotations"):
        if (patch or {}).get(field):
            target[field] = {**(target.get(field) or {}), **patch[field]}


def _apply_patch(template: dict, patch: dict) -> None:
    """One runtime patch, as the CRD's list-map keys say: replicatedJobs and containers by name."""
    _merge_meta(template.setdefault("metadata", {}), patch.get("metadata"))
    rjobs = {r["name"]: r for r in template.get("spec", {}).get("replicatedJobs") or []}
    for rjob_patch in (patch.get("spec") or {}).get("replicatedJobs") or []:
        rjob = rjobs.get(rjob_patch["name"])
        if rjob is None:
            continue
        job_patch = rjob_patch.get("template") or {}
        _merge_meta(rjob["template"].setdefault("metadata", {}), job_patch.get("metadata"))
        pod_patch = (job_patch.get("spec") or {}).get("template") or {}
        pod = rjob["template"]["spec"]["template"]
        _merge_meta(pod.setdefault("metadata", {}), pod_patch.get("metadata"))
        pod_spec, spec_patch = pod["spec"], pod_patch.get("spec") or {}
        for field in ("containers", "initContainers"):
            for c_patch in spec_patch.get(field) or []:
                target = next((c for c in pod_spec.get(field) or [] if c.get("name") == c_patch["name"]), None)
                if target is None:
                    continue
                for key in ("env", "volumeMounts"):
                    if key in c_patch:
                        target[key] = _merge_named(target.get(key), c_patch[key])
                if "envFrom" in c_patch:
                    target["envFrom"] = [*(target.get("envFrom") or []), *c_patch["envFrom"]]
                if "securityContext" in c_patch:
                    target["securityContext"] = c_patch["securityContext"]
        for key in ("volumes", "imagePullSecrets", "schedulingGates"):
            if key in spec_patch:
                pod_spec[key] = _merge_named(pod_spec.get(key), spec_patch[key])
        if "nodeSelector" in spec_patch:
            pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **spec_patch["nodeSelector"]}
        if "tolerations" in spec_patch:
            pod_spec["tolerations"] = [*(pod_spec.get("tolerations") or []), *spec_patch["tolerations"]]
        for key in ("affinity", "securityContext", "serviceAccountName", "terminationGracePeriodSeconds"):
            if key in spec_patch:
                pod_spec[key] = spec_patch[key]


def _apply_trainer(trainer: dict, node: dict) -> None:
    for field in ("image", "command", "args"):
        if trainer.get(field) is not None:
            node[field] = copy.deepcopy(trainer[field])
    if trainer.get("env"):
        node["env"] = _merge_named(node.get("env"), trainer["env"])
    if trainer.get("resourcesPerNode"):
        node["resources"] = copy.deepcopy(trainer["resourcesPerNode"])


def _index_env(name: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}


def _framework_env(framework: str | None, job: str, num_nodes: int, port: int | None, trainer: dict,
                   policy: MLPolicy, node: dict) -> list[dict]:
    """The plugin's variables for the trainer container (torch.go, jax.go, xgboost.go)."""
    master = f"{job}-{NODE}-0-0.{job}"
    if framework == "torch":
        return [{"name": "PET_NNODES", "value": str(num_nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": _torch_procs(trainer, policy, node)},
                _index_env("PET_NODE_RANK"),
                {"name": "PET_MASTER_ADDR", "value": master},
                {"name": "PET_MASTER_PORT", "value": str(port)}]
    if framework == "jax":
        return [{"name": "JAX_NUM_PROCESSES", "value": str(num_nodes)},
                _index_env("JAX_PROCESS_ID"),
                {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{master}:{port}"},
                {"name": "JAX_COORDINATOR_PORT", "value": str(port)},
                {"name": "JAX_DISTRIBUTED_BACKEND", "value": "gloo"}]
    if framework == "xgboost":
        # One worker per GPU, else one per node.
        workers = num_nodes * max(1, _gpus(_resources(node)))
        return [{"name": "DMLC_TRACKER_URI", "value": master},
                {"name": "DMLC_TRACKER_PORT", "value": str(port)},
                _index_env("DMLC_TASK_ID"),
                {"name": "DMLC_NUM_WORKER", "value": str(workers)}]
    return []


def _resources(node: dict) -> dict:
    """The node's limits, else its requests (as upstream's plugins read them)."""
    resources = node.get("resources") or {}
    return resources.get("limits") or resources.get("requests") or {}


def _gpus(resources: dict) -> int:
    return sum(int(parse_quantity(str(v))) for k, v in resources.items() if is_gpu_resource(k))


def _torch_procs(trainer: dict, policy: MLPolicy, node: dict) -> str:
    """``PET_NPROC_PER_NODE``: the TrainJob's, else the runtime's, else auto; auto and cpu without
    a GPU become the node's CPU limit (else request) rounded up, as upstream's torch plugin decides,
    and 1 without either (upstream leaves torchrun's auto there, which starts a process per CPU of
    the host: every node here shares one host)."""
    value = trainer.get("numProcPerNode")
    if value is None and policy.torch is not None:
        value = policy.torch.num_proc_per_node
    value = "auto" if value is None else value
    if isinstance(value, int):
        return str(value)
    resources = _resources(node)
    if value in ("auto", "cpu") and not _gpus(resources):
        cpu = resources.get("cpu")
        return str(max(1, math.ceil(parse_quantity(str(cpu))))) if cpu is not None else "1"
    return value


# --- initializers ---------------------------------------------------------------------------------

def _add_initializers(job: dict, js_spec: dict) -> None:
    """A dataset/model step the runtime lacks: a replicatedJob fetching into the workspace claim,
    which every trainer node mounts at /workspace and waits for (dependsOn Complete)."""
    initializer = job["spec"].get("initializer") or {}
    rjobs = js_spec["replicatedJobs"]
    steps = {((r["template"].get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL) for r in rjobs}
    added = []
    for step, what in ((DATASET_INITIALIZER, "dataset"), (MODEL_INITIALIZER, "model")):
        if not (initializer.get(what) or {}).get("storageUri") or step in steps:
            continue
        added.append({
            "name": step, "replicas": 1, "groupName": "default",
            "template": {"metadata": {"labels": {ANCESTOR_LABEL: step}}, "spec": {
                "backoffLimit": 0, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": step, "image": "trimaran/initializer",
                    "command": [sys.executable, "-m", "trimaran.controllers.trainer.initializer", what],
                    "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_PATH}]}]}}}}})
    if not added:
        return
    for rjob in rjobs:
        labels = (rjob["template"].get("metadata") or {}).get("labels") or {}
        if (labels.get(ANCESTOR_LABEL) == TRAINER_STEP or rjob["name"] in (NODE, LAUNCHER)) \
                and not rjob.get("dependsOn"):
            rjob["dependsOn"] = [{"name": added[-1]["name"], "status": "Complete"}]
            for container in rjob["template"]["spec"]["template"]["spec"].get("containers") or []:
                if container["name"] in (NODE, LAUNCHER):
                    mounts = container.setdefault("volumeMounts", [])
                    if not any(m.get("name") == WORKSPACE_VOLUME for m in mounts):
                        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_PATH})
    if len(added) == 2:
        added[1]["dependsOn"] = [{"name": added[0]["name"], "status": "Complete"}]
    js_spec["replicatedJobs"] = added + rjobs
    claims = {t["metadata"]["name"] for p in js_spec.get("volumeClaimPolicies") or [] for t in p.get("templates") or []}
    if WORKSPACE_VOLUME not in claims:
        js_spec.setdefault("volumeClaimPolicies", []).append({"templates": [{
            "metadata": {"name": WORKSPACE_VOLUME},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": _WORKSPACE_SIZE}}}}]})


def _apply_initializer(spec: dict, step: str, pod: dict) -> None:
    """The step's source on its container: ``STORAGE_URI``, the user's env, the secret's keys."""
    source = (spec.get("initializer") or {}).get("dataset" if step == DATASET_INITIALIZER else "model") or {}
    container = _container(pod, step)
    if container is None or not source:
        return
    env: list[dict[str, Any]] = []
    if source.get("storageUri"):
        env.append({"name": "STORAGE_URI", "value": source["storageUri"]})
    container["env"] = _merge_named(_merge_named(container.get("env"), env), source.get("env"))
    secret = (source.get("secretRef") or {}).get("name")
    if secret:
        container["envFrom"] = [*(container.get("envFrom") or []), {"secretRef": {"name": secret}}]
