"""Katib Trials: run the rendered job, collect its metrics as they appear, stop it early when the
experiment's rule says so, and record the outcome (katib.md §1.4, §1.8, §2.11).

Observations go to the store as they are parsed, so curves can be drawn and early-stopping rules
applied mid-trial. A collector rebuilt after a control-plane restart re-reads its sources and
skips the observations already stored, so nothing is counted twice.
"""

from __future__ import annotations

import copy
import logging
import posixpath
from pathlib import Path

from trimaran.api import kinds, podsecurity
from trimaran.api.labels import REPLICATED_JOB_NAME_KEY
from trimaran.api.tuning import METRICS_LOGS_ANNOTATION, TRIAL_KINDS
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import is_true, now_rfc3339, set_condition
from trimaran.controllers.pods import owned_pods, owner_reference, request_deletion, waiting_reason
from trimaran.controllers.tuning.checkpoints import CheckpointMount, checkpoint_mount, prepare_checkpoint
from trimaran.controllers.tuning.records import experiment_of, trial_records
from trimaran.controllers.tuning.tracking import Tracker, tracker_from_env
from trimaran.runtime import NodeAPI
from trimaran.store import AlreadyExists, NotFound, Store
from trimaran.tuning._labels import TRIAL_LABEL
from trimaran.tuning.early_stopping import get_early_stopper
from trimaran.tuning.metrics import CollectorSources, MetricsCollector, Observation, summarize

log = logging.getLogger(__name__)

JOB_KINDS = tuple(TRIAL_KINDS)
FINISHED = ("Succeeded", "Failed", "EarlyStopped", "MetricsUnavailable", "Killed")
POLL_SECONDS = 0.25
LOG_TAIL_LINES = 20
#: The Running condition's reason while the trial's pods cannot be scheduled or started.
PENDING_REASON = "TrialPending"


def trial_state(trial: dict) -> str:
    """The trial's terminal condition, or Running/Created."""
    status = trial.get("status") or {}
    for ctype in FINISHED:
        if is_true(status, ctype):
            return ctype
    return "Running" if is_true(status, "Running") else "Created"


class TrialReconciler(Reconciler):
    name = "trials"
    kinds = ("Trial",)
    watches = JOB_KINDS

    def __init__(self, store: Store, runtime: NodeAPI, api_url: str | None = None,
                 tracker: Tracker | None = None) -> None:
        super().__init__(store)
        self.runtime = runtime
        self.api_url = api_url
        self._collectors: dict[str, MetricsCollector] = {}  # trial uid -> collector
        # trial uid -> its job's pods as this pass listed them, which its collector reads (one list a pass)
        self._pods: dict[str, list[dict]] = {}
        self._skip: dict[str, int] = {}  # trial uid -> observations already stored before a restart
        # MLflow runs of the trials (tracking.py beside this module); a no-op without MLFLOW_TRACKING_URI.
        self.tracker = tracker if tracker is not None else tracker_from_env(store)
        # The API's Pod Security default (set by the control plane): a job from a ConfigMap
        # template, or in a namespace made stricter since, has met no admission yet.
        self.pod_security = podsecurity.Policy.default(podsecurity.BASELINE)

    def reconcile(self, key: Key) -> float | None:
        try:
            trial = self.store.get("Trial", key.namespace, key.name)
        except NotFound:
            self.tracker.deleted(key.namespace, key.name)  # tracking: end the run of a deleted trial
            return None
        if is_being_deleted(trial):
            return None
        uid = trial["metadata"]["uid"]
        status = copy.deepcopy(trial.get("status") or {})
        before = copy.deepcopy(status)
        run_spec = trial["spec"]["runSpec"]
        job = self._job(trial)
        if trial_state(trial) in FINISHED:
            return self._wind_up(trial, job)

        if not status.get("conditions"):
            set_condition(status, "Created", "True", "TrialCreated", "Trial is created")
            status["startTime"] = now_rfc3339()
        if job is None:
            refused = self._pod_security_refusal(trial, run_spec)
            if refused:
                self.store.record_event(trial, "Warning", "FailedCreate", refused)
                self._finish(trial, status, "Failed", "FailedCreate", refused)
                return self._write(trial, status, before, 0.0)
            self._create_job(trial, run_spec)
            self.tracker.start(trial)  # tracking: the trial's run
            # As Katib's pass that creates the job: the trial is Running once its job exists (its
            # pods, made next, say in a later pass if they have to wait).
            set_condition(status, "Running", "True", "TrialRunning", "Trial is running")
            return self._write(trial, status, before, POLL_SECONDS)

        job_state = _job_outcome(job, trial["spec"])
        pods = self._pods[uid] = _job_pods(self.store, job)
        if job_state is None:
            # Running as in Katib (the job exists and has not ended), but a job whose pods wait for room
            # or cannot start says why, or the trial looks as if it ran.
            waiting = waiting_reason(pods)
            if waiting:
                set_condition(status, "Running", "True", PENDING_REASON, f"Trial is pending: {waiting}")
            else:
                set_condition(status, "Running", "True", "TrialRunning", "Trial is running")

        new = self._collect(trial, final=job_state is not None)
        stop_reason = None if job_state is not None else self._early_stop_reason(trial, new)
        summary = None
        if stop_reason:
            self._finish(trial, status, "EarlyStopped", "TrialEarlyStopped", stop_reason)
            self.store.record_event(trial, "Normal", "TrialEarlyStopped", stop_reason)
            self._delete_job(job)
        elif job_state == "Succeeded":
            summary = self._summary(trial)
            objective = trial["spec"]["objective"]["objectiveMetricName"]
            if summary.get(objective, {}).get("latest", "unavailable") == "unavailable":
                message = (f"metric {objective!r} never appeared in the trial's output; last lines:\n"
                           + self._log_tail(trial))
                self._finish(trial, status, "MetricsUnavailable", "MetricsUnavailable", message)
                self.store.record_event(trial, "Warning", "MetricsUnavailable", message.splitlines()[0])
            else:
                self._finish(trial, status, "Succeeded", "TrialSucceeded", "Trial has succeeded")
        elif job_state == "Failed":
            message = _job_message(job) or "the trial's job failed"
            self.store.record_event(trial, "Warning", "TrialFailed", message)
            # The job (and its logs) go when the trial ends: keep the reason a person needs.
            message += "; last lines:\n" + self._log_tail(trial)
            self._finish(trial, status, "Failed", "TrialFailed", message)
        if trial_state({"status": status}) in FINISHED:
            summary = summary if summary is not None else self._summary(trial)
            status["observation"] = {"metrics": [{"name": name, **values} for name, values in summary.items()]}
            after = self._write(trial, status, before, 0.0)
            if after != 0.0:
                return after  # not stored (a conflict: again shortly; the trial gone: nothing more)
            return self._wind_up(trial, job)  # the outcome is stored: its job can go now
        return self._write(trial, status, before, POLL_SECONDS)

    def _wind_up(self, trial: dict, job: dict | None) -> float | None:
        """After the trial's outcome is stored: its job goes (unless retained), its collector too."""
        if job is not None and not trial["spec"].get("retainRun"):
            self._delete_job(job)
        uid = trial["metadata"]["uid"]
        self._collectors.pop(uid, None)
        self._pods.pop(uid, None)
        # Tracking: the outcome is stored; end the trial's run (again later if MLflow is down).
        return self.tracker.finish(trial, trial_state(trial))

    # -- the trial's job ------------------------------------------------------------------------
    def _job(self, trial: dict) -> dict | None:
        kind = trial["spec"]["runSpec"]["kind"]
        try:
            job = self.store.get(kind, trial["metadata"]["namespace"], trial["metadata"]["name"])
        except NotFound:
            return None
        owners = job["metadata"].get("ownerReferences") or []
        return job if any(o.get("uid") == trial["metadata"]["uid"] for o in owners) else None

    def _pod_security_refusal(self, trial: dict, run_spec: dict) -> str | None:
        """Why the namespace's enforced Pod Security level refuses the trial's job, as the API
        would word it (upstream's job controller meets the same refusal creating the pods)."""
        namespace, name = trial["metadata"]["namespace"], trial["metadata"]["name"]
        try:
            labels = self.store.get("Namespace", "", namespace)["metadata"].get("labels")
        except NotFound:
            labels = None
        level = podsecurity.policy_for(labels, self.pod_security).enforce
        try:
            info = kinds.for_object(str(run_spec.get("apiVersion")), str(run_spec.get("kind")))
        except kinds.UnknownKindError:
            return None  # the job's own creation says what is wrong with it
        detail = podsecurity.judge(level.level, info.pod_templates(run_spec) if info.pod_templates else [])
        if not detail:
            return None
        resource = f"{info.plural}.{info.group}" if info.group else info.plural
        return f'{resource} "{name}" is forbidden: violates PodSecurity "{level}": {detail}'

    def _create_job(self, trial: dict, run_spec: dict) -> None:
        job = copy.deepcopy(run_spec)
        meta = job.setdefault("metadata", {})
        meta["name"] = trial["metadata"]["name"]
        meta["namespace"] = trial["metadata"]["namespace"]
        meta["labels"] = {**(meta.get("labels") or {}), **(trial["metadata"].get("labels") or {})}
        meta["ownerReferences"] = [owner_reference(trial)]
        checkpoint = self._checkpoint(trial)
        templates = [_trainjob_pod_patch(job, trial)] if job["kind"] == "TrainJob" else _pod_templates(job)
        for template in templates:
            self._inject(trial, template, checkpoint)
        try:
            self.create_counted(job)  # its pods' progress wakes the trial, not its own creation
        except AlreadyExists:
            pass  # created by an earlier pass that crashed before recording it
        self.store.record_event(trial, "Normal", "JobCreated", f"Created {job['kind']} {meta['name']}")

    def _checkpoint(self, trial: dict) -> CheckpointMount | None:
        """A pbt trial's checkpoint directory, made ready (a copy of its parent's) before its job
        exists, so the job never starts without it."""
        experiment = experiment_of(self.store, trial)
        mount = checkpoint_mount(experiment, trial) if experiment else None
        if mount is not None and not prepare_checkpoint(self.runtime, trial["metadata"]["namespace"], mount):
            self.store.record_event(trial, "Warning", "CheckpointMissing",
                                    f"parent trial {mount.parent} left no checkpoint directory; starting empty")
        return mount

    def _inject(self, trial: dict, template: dict, checkpoint: CheckpointMount | None = None) -> None:
        """Tell the primary container which trial it is (Katib's KATIB_TRIAL_NAME, and where to push
        metrics), give a File collector's directory a volume the controller can read, and mount a
        pbt trial's checkpoint directory at ``suggestion_trial_dir`` (Katib's subPath
        ``<experiment>/<trial>`` of the experiment's volume)."""
        spec = template.setdefault("spec", {})
        primary = trial["spec"].get("primaryContainerName")
        collector = (trial["spec"].get("metricsCollector") or {})
        # What Katib's pod webhook adds: the trial's labels and its name, which KatibClient's
        # get_job_logs selects pods by; and the name of the StdOut collector's sidecar, whose log
        # (the primary container's output) the same call reads.
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **(trial["metadata"].get("labels") or {}),
                          TRIAL_LABEL: trial["metadata"]["name"]}
        if (collector.get("collector") or {}).get("kind", "StdOut") == "StdOut" and primary:
            meta["annotations"] = {**(meta.get("annotations") or {}), METRICS_LOGS_ANNOTATION: primary}
        file_dir = _collector_dir(collector)
        for container in spec.get("containers") or []:
            if container.get("name") != primary:
                continue
            env = list(container.get("env") or [])
            env += [{"name": "KATIB_TRIAL_NAME", "value": trial["metadata"]["name"]},
                    {"name": "TRIMARAN_TRIAL",
                     "value": f"{trial['metadata']['namespace']}/{trial['metadata']['name']}"}]
            if self.api_url:
                env.append({"name": "TRIMARAN_API", "value": self.api_url})
            container["env"] = env
            mounts = list(container.get("volumeMounts") or [])
            if file_dir:
                mounts.append({"name": "trimaran-metrics", "mountPath": file_dir})
            if checkpoint is not None:
                mounts.append(checkpoint.volume_mount())
            if mounts:
                container["volumeMounts"] = mounts
        if file_dir:
            spec["volumes"] = list(spec.get("volumes") or []) + [{"name": "trimaran-metrics", "emptyDir": {}}]
        if checkpoint is not None:
            spec["volumes"] = list(spec.get("volumes") or []) + [checkpoint.volume()]

    def _delete_job(self, job: dict) -> None:
        for pod in _job_pods(self.store, job):
            request_deletion(self.store, pod)
        try:
            self.store.delete(job["kind"], job["metadata"]["namespace"], job["metadata"]["name"])
        except NotFound:
            pass

    # -- metrics ------------------------------------------------------------------------------
    def _primary_pods(self, trial: dict) -> list[dict]:
        pods = self._pods.get(trial["metadata"]["uid"]) or []
        wanted = trial["spec"].get("primaryPodLabels") or {}
        chosen = [p for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
        return sorted(chosen, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def _collector(self, trial: dict) -> MetricsCollector:
        uid = trial["metadata"]["uid"]
        collector = self._collectors.get(uid)
        if collector is not None:
            return collector
        ns = trial["metadata"]["namespace"]
        primary = trial["spec"].get("primaryContainerName")

        def log_paths() -> list[Path]:
            out: list[Path] = []
            for pod in self._primary_pods(trial):
                name = pod["metadata"]["name"]
                for attempt in self.runtime.log_attempts(ns, name, primary):
                    # The files a long run's log rotated into, then the live one.
                    out.extend(self.runtime.log_files(ns, name, primary, attempt))
            return out

        spec = trial["spec"].get("metricsCollector") or {"collector": {"kind": "StdOut"}}
        file_dir = _collector_dir(spec)

        def resolve(path: str) -> Path | None:
            pods = self._primary_pods(trial)
            if not pods or not file_dir:
                return None
            host = self.runtime.volume_dir(pods[-1]["metadata"]["uid"], "trimaran-metrics")
            return host / posixpath.relpath(path, file_dir)

        objective = trial["spec"]["objective"]
        names = [objective["objectiveMetricName"], *(objective.get("additionalMetricNames") or [])]
        collector = MetricsCollector.for_spec(spec, names, CollectorSources(log_paths=log_paths,
                                                                            file_path_resolver=resolve))
        self._collectors[uid] = collector
        self._skip[uid] = len(self.store.list_observations(ns, trials=[trial["metadata"]["name"]]))
        return collector

    def _collect(self, trial: dict, final: bool) -> list:
        collector = self._collector(trial)
        found = collector.finish() if final else collector.poll()
        uid = trial["metadata"]["uid"]
        skip = self._skip.get(uid, 0)
        if skip:
            taken = min(skip, len(found))
            self._skip[uid] = skip - taken
            found = found[taken:]
        if found:
            self.store.add_observations(trial["metadata"]["namespace"], trial["metadata"]["name"], uid, [
                {"metric": o.metric, "value": o.value, "step": o.step, "timestamp": o.timestamp} for o in found])
        # Tracking: every pass, so observations pushed through the API are logged as well.
        self.tracker.observe(trial)
        return found

    def _summary(self, trial: dict) -> dict:
        objective = trial["spec"]["objective"]
        names = [objective["objectiveMetricName"], *(objective.get("additionalMetricNames") or [])]
        rows = self.store.list_observations(trial["metadata"]["namespace"], trials=[trial["metadata"]["name"]])
        observations = [Observation(r["metric"], r["value"], r["step"], r["timestamp"]) for r in rows]
        return summarize(observations, names)

    def _early_stop_reason(self, trial: dict, new: list) -> str | None:
        if not new:
            return None
        experiment = experiment_of(self.store, trial)
        rule = (experiment or {}).get("spec", {}).get("earlyStopping") if experiment else None
        if not rule or not rule.get("algorithmName"):
            return None
        settings = {s["name"]: str(s["value"]) for s in rule.get("algorithmSettings") or []}
        stopper = get_early_stopper(rule["algorithmName"], settings)
        records = trial_records(self.store, experiment)
        me = next((r for r in records if r.name == trial["metadata"]["name"]), None)
        if me is None:
            return None
        others = [r for r in records if r.name != me.name]
        objective = experiment["spec"]["objective"]
        return stopper.should_stop(me, others, objective["type"], metric_name=objective["objectiveMetricName"])

    def _log_tail(self, trial: dict) -> str:
        pods = self._primary_pods(trial)
        if not pods:
            return "(no pod ran)"
        pod = pods[-1]["metadata"]
        try:
            path = self.runtime.log_path(pod["namespace"], pod["name"], trial["spec"].get("primaryContainerName"))
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:]) or "(empty log)"

    # -- status ---------------------------------------------------------------------------------
    def _finish(self, trial: dict, status: dict, ctype: str, reason: str, message: str) -> None:
        if is_true(status, "Running"):
            set_condition(status, "Running", "False", reason, message)
        set_condition(status, ctype, "True", reason, message)
        status["completionTime"] = now_rfc3339()

    def _write(self, trial: dict, status: dict, before: dict, requeue: float) -> float | None:
        trial["status"] = status
        return self.settle_status(trial, status, before, requeue if trial_state(trial) not in FINISHED else 0.0)


#: Trial kinds whose pods belong to their children (a JobSet's Jobs), by kind, outermost first.
_POD_OWNER_KINDS = {"JobSet": ("Job",), "TrainJob": ("JobSet", "Job")}
#: Who owns the runtime patch a TrainJob trial's injection travels in (runtimePatches are keyed by manager).
TRAINJOB_PATCH_MANAGER = "katib.kubeflow.org/trial-controller"


def _job_pods(store: Store, job: dict) -> list[dict]:
    """The pods of a trial's job, through the children that own them for a kind that has some."""
    owners = [job]
    for kind in _POD_OWNER_KINDS.get(job["kind"], ()):
        owners = [child for owner in owners
                  for child in store.list(kind, job["metadata"]["namespace"], owner_uid=owner["metadata"]["uid"])]
    return [pod for owner in owners for pod in owned_pods(store, owner)]


def _pod_templates(job: dict) -> list[dict]:
    spec = job.get("spec") or {}
    if job["kind"] == "Job":
        return [spec.setdefault("template", {})]
    if job["kind"] == "JobSet":
        return [rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
                for rjob in spec.get("replicatedJobs") or []]
    out = []
    for key, value in spec.items():
        if key.endswith("ReplicaSpecs") and isinstance(value, dict):
            out += [r.setdefault("template", {}) for r in value.values()]
    return out


def _trainjob_pod_patch(job: dict, trial: dict) -> dict:
    """The pod template, inside a new runtime patch of the TrainJob ``job``, that reaches the pods
    of the trial's primary replicated job: a TrainJob's pod templates are its runtime's, so what
    Katib's pod webhook adds to them travels as a patch the TrainJob controller applies."""
    rjob = (trial["spec"].get("primaryPodLabels") or {}).get(REPLICATED_JOB_NAME_KEY, "node")
    template = {"metadata": {}, "spec": {"containers": [{"name": trial["spec"].get("primaryContainerName")}]}}
    patch = {"manager": TRAINJOB_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": rjob, "template": {"spec": {"template": template}}}]}}}}
    spec = job.setdefault("spec", {})
    spec["runtimePatches"] = [*(spec.get("runtimePatches") or []), patch]
    return template


def _collector_dir(collector: dict) -> str | None:
    kind = (collector.get("collector") or {}).get("kind", "StdOut")
    if kind not in ("File", "TensorFlowEvent"):
        return None
    path = (collector.get("source") or {}).get("fileSystemPath") or {}
    if kind == "TensorFlowEvent":
        return (path.get("path") or "/var/log/katib/tfevent/").rstrip("/")
    target = path.get("path") or "/var/log/katib/metrics.log"
    return target.rstrip("/") if path.get("kind") == "Directory" else posixpath.dirname(target)


def _job_outcome(job: dict, trial_spec: dict) -> str | None:
    """Succeeded/Failed from the job's conditions, per the trial's success/failure conditions.

    Katib writes these as GJSON queries; the default ones (and any of the same shape,
    ``status.conditions.#(type=="X")#|#(status=="True")#``) are read here.
    """
    conditions = (job.get("status") or {}).get("conditions") or []
    true = {c.get("type") for c in conditions if c.get("status") == "True"}
    success = _condition_type(trial_spec.get("successCondition")) or (
        "Complete" if job["kind"] in ("Job", "TrainJob") else "Succeeded")
    failure = _condition_type(trial_spec.get("failureCondition")) or "Failed"
    if success in true:
        return "Succeeded"
    if failure in true:
        return "Failed"
    return None


def _condition_type(query: str | None) -> str | None:
    if not query or '#(type=="' not in query:
        return None
    return query.split('#(type=="', 1)[1].split('"', 1)[0]


def _job_message(job: dict) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return cond.get("message") or cond.get("reason") or ""
    return ""


__all__ = ["PENDING_REASON", "TrialReconciler", "trial_state"]
