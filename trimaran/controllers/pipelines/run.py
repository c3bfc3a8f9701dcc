"""The Run controller: a KFP v2 pipeline run as pods (Argo's and KFP's driver/launcher, locally).

Each pass reads the Run, its IR (inline or its PipelineVersion) and its pods, turns finished pods
into task facts (outputs read from the executor's files, failures with their last log lines,
retries with back-off), asks :func:`trimaran.pipelines.dag.plan` what comes next and starts it:
cache hits and importers at once (then plans again, so a fully cached run ends in one pass),
container tasks as one pod per attempt. Pod names are derived from the task, its retry generation
and attempt, so a pass repeated after a crash adopts the pod it created before instead of starting
another.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from trimaran.api.pipelines import FINISHED_RUN_STATES, FINISHED_TASK_STATES, RUN_LABEL, TASK_LABEL
from trimaran.controllers.base import Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import now_rfc3339, seconds_since, set_condition
from trimaran.controllers.kubelet import runs_image
from trimaran.controllers.pods import (
    LOOPBACK,
    new_pod,
    phase,
    request_deletion,
    set_gang,
    waiting_reason,
)
from trimaran.pipelines import cache, dag, kubernetes, placeholders, roots
from trimaran.runtime import ConfigError, NodeAPI
from trimaran.store import AlreadyExists, NotFound, Store

__all__ = ["RunReconciler", "kfp_runtime_dir"]

_LOG_LINES = 20
_CONTAINER = "main"
# The packages KFP's lightweight-component preamble installs, which the kfp runtime directory holds.
_RUNTIME_PACKAGES = {"kfp", "typing-extensions"}
_PIP_INSTALL = re.compile(r"pip install ([^&\n]*)")
# pip's options that take a value which the compiler writes for pip_index_urls and pip_trusted_hosts.
_PIP_INDEX_OPTIONS = ("--index-url", "-i", "--extra-index-url", "--trusted-host")
# Where a pod that runs its image finds the kfp runtime, the control plane's pip and the local wheels
# for packages_to_install (read-only mounts; an image has none of them).
_IMAGE_KFP_RUNTIME = "/opt/trimaran/kfp-runtime"
_IMAGE_PIP = "/opt/trimaran/pip"
_IMAGE_WHEELS = "/opt/trimaran/wheels"


def kfp_runtime_dir() -> Path:
    """Where the ``kfp`` package for lightweight components' pods is (``pip install --no-deps
    --target``; scripts/bootstrap.sh puts it beside the control plane's interpreter)."""
    configured = os.environ.get("TRIMARAN_KFP_RUNTIME")
    if configured:
        return Path(configured)
    return Path(sys.prefix) / "share" / "trimaran" / "kfp-runtime"


@dataclass
class _PipStage:
    """A lightweight component's ``pip install`` stage: its packages_to_install (as written, markers
    kept, kfp's own left out) and the index options of its pip_index_urls and pip_trusted_hosts."""

    packages: list[str]
    index_options: list[str]


class _TaskError(Exception):
    """A task that cannot start: it fails with this message (the run goes on to its exit handler)."""


class RunReconciler(Reconciler):
    name = "pipelines"
    kinds = ("Run",)
    watches = ("Pod",)

    def __init__(self, store: Store, home: Path, runtime: NodeAPI, image_policy: str = "host") -> None:
        """``image_policy``: the kubelet's node policy, which says whether a step runs its image
        (and so needs the kfp runtime mounted) or is a host process."""
        super().__init__(store)
        self.home = Path(home)
        self.runtime = runtime
        self.image_policy = image_policy

    @property
    def wheels_dir(self) -> Path:
        """The local wheels ``packages_to_install`` is installed from in a step that runs its image."""
        return self.home / "pipelines" / "wheels"

    # -- the pass ----------------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        try:
            run = self.store.get("Run", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(run):
            return None
        status = copy.deepcopy(run.get("status") or {})
        before = copy.deepcopy(status)
        return self.settle_status(run, status, before, self._drive(run, status))

    def _drive(self, run: dict, status: dict) -> float | None:
        spec = run["spec"]
        retry = int(spec.get("retry") or 0)
        if status.get("state") in FINISHED_RUN_STATES:
            if retry <= int(status.get("observedRetry") or 0) or status["state"] == "SUCCEEDED":
                status["observedRetry"] = max(retry, int(status.get("observedRetry") or 0))
                return None
            self._retry(run, status)
        status.setdefault("observedRetry", retry)
        try:
            pipeline_spec, platform = self._pipeline(run)
            root = self._pipeline_root(run)
        except _TaskError as exc:
            return self._finish(run, status, "FAILED", str(exc))
        status["pipelineRoot"] = str(root)
        status.setdefault("startedAt", now_rfc3339())
        if status.get("state") is None:
            self.store.record_event(run, "Normal", "Started", "Run started")
        terminating = bool(spec.get("terminate"))
        facts = {t["id"]: t for t in status.get("tasks") or [] if t.get("type") in dag.LEAF_TYPES
                 and (t.get("podName") or t.get("attempts") or t.get("state") in FINISHED_TASK_STATES)}
        pods = {p["metadata"]["name"]: p for p in self.store.list("Pod", run["metadata"]["namespace"],
                                                                  owner_uid=run["metadata"]["uid"])}
        requeue = self._observe(run, pipeline_spec, root, facts, pods, terminating)
        parameters = spec.get("parameters") or {}
        for _ in range(10_000):  # each round settles at least one task; the bound only guards a bug
            planned = dag.plan(pipeline_spec, parameters, facts, run_name=run["metadata"]["name"],
                               terminating=terminating)
            settled, wait = self._start(run, int(status["observedRetry"]), root, planned.ready, facts, pods,
                                        platform)
            if wait is not None:
                requeue = wait if requeue is None else min(requeue, wait)
            if not settled:
                break
        status["tasks"] = planned.tasks
        live = [p for p in pods.values() if phase(p) in ("Pending", "Running")
                and not p["metadata"].get("deletionTimestamp")]
        if terminating and planned.state not in FINISHED_RUN_STATES:
            status["state"] = "CANCELING"
        elif planned.state in FINISHED_RUN_STATES:
            if terminating and any(phase(p) in ("Pending", "Running") for p in pods.values()):
                status["state"] = "CANCELING"
                return 0.5
            failed = [t for t in planned.tasks if t["state"] == "FAILED" and t["type"] in dag.LEAF_TYPES]
            message = _failure(failed[0]) if failed else None
            return self._finish(run, status, planned.state, message)
        else:
            status["state"] = "RUNNING" if planned.state == "RUNNING" or live else "PENDING"
        return requeue

    def _finish(self, run: dict, status: dict, state: str, message: str | None) -> None:
        if status.get("state") != state:
            kind = "Normal" if state == "SUCCEEDED" else "Warning"
            self.store.record_event(run, kind, state.capitalize(), message or f"Run {state.lower()}")
        status["state"] = state
        status.setdefault("finishedAt", now_rfc3339())
        status["message"] = message
        if message is None:
            status.pop("message")
        set_condition(status, "Succeeded", "True" if state == "SUCCEEDED" else "False", state.capitalize(),
                      message or "")
        return None

    def _retry(self, run: dict, status: dict) -> None:
        """``spec.retry`` raised: failed and canceled steps (and what waited on them) run again."""
        status["observedRetry"] = int(run["spec"].get("retry") or 0)
        kept = []
        for task in status.get("tasks") or []:
            if task.get("type") in dag.LEAF_TYPES and task.get("state") in ("FAILED", "CANCELED"):
                continue
            kept.append(task)
        status["tasks"] = kept
        for field in ("finishedAt", "message", "conditions"):
            status.pop(field, None)
        status["state"] = "RUNNING"
        self.store.record_event(run, "Normal", "Retried", f"Retry {status['observedRetry']}: failed steps run again")

    # -- facts from pods ---------------------------------------------------------------------

    def _observe(self, run: dict, spec: dict, root: Path, facts: dict[str, dict], pods: dict[str, dict],
                 terminating: bool) -> float | None:
        requeue = None
        for task in facts.values():
            if task.get("state") in FINISHED_TASK_STATES or not task.get("podName"):
                continue
            pod = pods.get(task["podName"])
            if terminating:
                if pod is not None:
                    request_deletion(self.store, pod)
                self._end(task, "CANCELED", "the run was terminated")
                continue
            if pod is None:
                self._end(task, "FAILED", f"pod {task['podName']} was deleted")
                continue
            current = phase(pod)
            if current == "Pending" and waiting_reason([pod]):
                task["message"] = waiting_reason([pod])  # e.g. no free GPU for its accelerator
            elif current == "Running":
                task["state"] = "RUNNING"
            elif current == "Succeeded":
                self._succeeded(run, spec, root, task)
            elif current == "Failed":
                wait = self._failed(run, task, pod, _retry_policy(spec, task))
                if wait is not None:
                    requeue = wait if requeue is None else min(requeue, wait)
        return requeue

    def _succeeded(self, run: dict, spec: dict, root: Path, task: dict) -> None:
        component = (spec.get("components") or {}).get(task.get("component") or "") or {}
        executor_input = self._executor_input(component, task, root)
        try:
            parameters, artifacts = placeholders.read_outputs(component, executor_input)
        except Exception as exc:  # the step wrote outputs that do not fit its component
            self._end(task, "FAILED", f"its outputs cannot be read: {exc}")
            return
        # A step may point an output at another URI (KFP's launcher takes it), but only under an
        # allowed root: the steps reading it get that path mounted.
        for name, refs in artifacts.items():
            for ref in refs:
                try:
                    self._allowed_path(ref["uri"], "uri")
                except _TaskError as exc:
                    self._end(task, "FAILED", f"output artifact {name!r}: {exc}")
                    return
        task["outputs"] = {"parameters": parameters, "artifacts": artifacts}
        self._end(task, "SUCCEEDED", None)
        if task.get("cacheKey"):
            self._cache_put(run, task)

    def _failed(self, run: dict, task: dict, pod: dict, policy: dict) -> float | None:
        lines = self._log_tail(pod)
        reason = _termination(pod)
        message = (f"{reason}; last log lines:\n{lines}" if lines else reason)
        attempts = int(task.get("attempts") or 1)
        if attempts <= int(policy.get("maxRetryCount") or 0):
            # Held PENDING without a pod: the next plan offers it again, after the back-off.
            task["state"] = "PENDING"
            task["message"] = f"attempt {attempts} failed: {message}"
            task["finishedAt"] = now_rfc3339()
            task.pop("podName", None)
            return _backoff(policy, attempts)
        self._end(task, "FAILED", message)
        return None

    def _end(self, task: dict, state: str, message: str | None) -> None:
        task["state"] = state
        task["finishedAt"] = now_rfc3339()
        if message is not None:
            task["message"] = message
        else:
            task.pop("message", None)

    def _log_tail(self, pod: dict) -> str:
        try:
            path = self.runtime.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"], _CONTAINER)
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip("\n").splitlines()[-_LOG_LINES:])

    # -- starting tasks ----------------------------------------------------------------------

    def _start(self, run: dict, generation: int, root: Path, ready: list[dag.Ready], facts: dict[str, dict],
               pods: dict[str, dict], platform: dict) -> tuple[bool, float | None]:
        """Start what is ready: whether anything started or settled (plan again), and when a back-off ends."""
        settled = False
        wait: float | None = None
        for task in ready:
            fact = facts.setdefault(task.id, {"id": task.id, "name": task.name, "type": "container",
                                              "component": task.component_name})
            fact["inputs"] = task.inputs
            if "importer" in task.executor:
                fact["type"] = "importer"
                self._import(run, root, task, fact)
                settled = True
                continue
            left = _backoff_left(fact, task.retry_policy or {})
            if left > 0:
                wait = left if wait is None else min(wait, left)
                continue
            try:
                if self._cached(run, task, fact):
                    settled = True
                    continue
                self._create_pod(run, generation, root, task, fact, pods, platform.get(task.executor_label) or {})
                settled = True
            except (_TaskError, placeholders.PlaceholderError) as exc:  # it can never start: it fails
                fact.setdefault("startedAt", now_rfc3339())
                self._end(fact, "FAILED", str(exc))
                settled = True
        return settled, wait

    def _import(self, run: dict, root: Path, task: dag.Ready, fact: dict) -> None:
        """The importer's artifact: its URI (a local path under an allowed root) and its metadata with
        the placeholders the compiler writes for pipeline values resolved. ``reimport`` makes it a new
        artifact on every import (KFP records another one; here it carries this import's id, so the
        steps reading it are not served from the cache); without it, an import of the same URI and
        metadata is the artifact an earlier run imported."""
        importer = task.executor["importer"]
        source = importer.get("artifactUri") or {}
        uri = source.get("constant")
        if uri is None and "runtimeParameter" in source:
            uri = task.inputs["parameters"].get(source["runtimeParameter"])
        if uri is None:
            uri = task.inputs["parameters"].get("uri")
        fact["startedAt"] = fact.get("startedAt") or now_rfc3339()
        try:
            path = self._allowed_path(str(uri), "the importer's artifactUri")
            if not path.exists():
                raise _TaskError(f"the importer's artifactUri {uri!r} does not exist")
            uri = str(path)
            document = self._executor_input(task.component, fact, root)
            metadata = placeholders.resolve_metadata(importer.get("metadata") or {}, document,
                                                     self._context(run, root, task))
        except (_TaskError, placeholders.PlaceholderError) as exc:
            self._end(fact, "FAILED", str(exc))
            return
        title = (importer.get("typeSchema") or {}).get("schemaTitle") or "system.Artifact"
        artifact = {"name": "artifact", "uri": uri, "type": title, "metadata": metadata}
        if importer.get("reimport"):
            artifact["importId"] = f"{run['metadata']['uid']}/{task.id}"
        fact["outputs"] = {"parameters": {}, "artifacts": {"artifact": [artifact]}}
        self._end(fact, "SUCCEEDED", None)

    def _cached(self, run: dict, task: dag.Ready, fact: dict) -> bool:
        if not (task.enable_cache and run["spec"].get("enableCaching", True)):
            fact.pop("cacheKey", None)
            return False
        executor = task.executor.get("container") or {}
        # KFP's driver takes a task's own cacheKey as its fingerprint: tasks naming the same key share
        # outputs whatever their inputs, which is how a user pins a step to a known result.
        key = task.custom_cache_key or cache.cache_key(task.component, executor, task.inputs["parameters"],
                                                       task.inputs["artifacts"])
        fact["cacheKey"] = key
        entry = self._cache_get(run, key)
        if entry is None:
            return False
        fact["outputs"] = entry["outputs"]
        fact["cachedFrom"] = f"{entry['run']}/{entry['task']}"
        now = now_rfc3339()
        fact["startedAt"] = now
        self._end(fact, "CACHED", None)
        fact["finishedAt"] = now
        return True

    def _cache_dir(self, run: dict) -> Path:
        return self.home / "pipelines" / "cache" / run["metadata"]["namespace"]

    def _cache_get(self, run: dict, key: str) -> dict | None:
        try:
            entry = json.loads((self._cache_dir(run) / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        if any(not Path(uri).exists() for uri in entry.get("files", _artifact_uris(entry))):
            return None  # its artifacts were removed: run again
        return entry

    def _cache_put(self, run: dict, task: dict) -> None:
        directory = self._cache_dir(run)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{task['cacheKey']}.json"
        temporary = path.with_suffix(".tmp")
        # The artifacts the step wrote as files or directories (a Metrics is metadata alone), which
        # a hit needs still there.
        files = [uri for uri in _artifact_uris(task) if Path(uri).exists()]
        temporary.write_text(json.dumps({"run": run["metadata"]["name"], "task": task["id"],
                                         "outputs": task["outputs"], "files": files}))
        temporary.replace(path)

    def _executor_input(self, component: dict, task: dict, root: Path) -> dict:
        inputs = task.get("inputs") or {}
        base = root / task["id"].replace(".", "/")
        return placeholders.executor_input(component, parameters=inputs.get("parameters") or {},
                                           artifacts=inputs.get("artifacts") or {},
                                           outputs_dir=str(base / ".kfp"), artifacts_uri=str(base))

    def _context(self, run: dict, root: Path, task: dag.Ready) -> dict[str, str]:
        """The run's and task's own facts, for dsl.PIPELINE_*_PLACEHOLDER."""
        meta = run["metadata"]
        return {"pipeline_job_name": meta["name"], "pipeline_job_resource_name": meta["name"],
                "pipeline_job_uuid": meta["uid"], "pipeline_job_create_time_utc": meta.get("creationTimestamp", ""),
                "pipeline_task_name": task.name, "pipeline_task_uuid": f"{meta['uid']}-{task.id}",
                "pipeline_root": str(root)}

    def _create_pod(self, run: dict, generation: int, root: Path, task: dag.Ready, fact: dict,
                    pods: dict[str, dict], platform: dict) -> None:
        attempt = int(fact.get("attempts") or 0) + 1
        name = _pod_name(run, task.id, generation, attempt)
        if name not in pods:
            pod, pip_stage = self._build_pod(run, root, task, fact, name)
            try:
                kubernetes.apply_config(pod, platform, task.inputs["parameters"])
            except kubernetes.PlatformError as exc:  # affinity, a name not given, ...: the step fails saying so
                raise _TaskError(str(exc)) from None
            if pip_stage is not None:
                self._provide_kfp_runtime(pod, pip_stage)
            try:
                pods[name] = self.store.create(pod)
                self.store.record_event(run, "Normal", "TaskStarted", f"task {task.id}: pod {name}")
            except AlreadyExists:
                pods[name] = self.store.get("Pod", run["metadata"]["namespace"], name)
        fact["podName"] = name
        fact["attempts"] = attempt
        fact["state"] = "RUNNING" if phase(pods[name]) == "Running" else "PENDING"
        fact["startedAt"] = fact.get("startedAt") or now_rfc3339()
        fact.pop("finishedAt", None)

    def _build_pod(self, run: dict, root: Path, task: dag.Ready, fact: dict,
                   name: str) -> tuple[dict, _PipStage | None]:
        """The step's pod, and its ``pip install`` stage when it is a lightweight component (taken
        out of its command: :meth:`_provide_kfp_runtime` puts kfp and its packages in place)."""
        container_spec = task.executor.get("container")
        if not container_spec:
            raise _TaskError(f"executor {task.executor_label} has neither a container nor an importer")
        executor_input = self._executor_input(task.component, fact, root)
        meta = run["metadata"]
        context = self._context(run, root, task)
        command = placeholders.resolve_args(list(container_spec.get("command") or []), executor_input, context)
        args = placeholders.resolve_args(list(container_spec.get("args") or []), executor_input, context)
        env = [{"name": e["name"], "value": str(e.get("value", ""))} for e in container_spec.get("env") or []]
        pip_stage = _pip_stage(command)
        if pip_stage is not None:
            command = ["sh", "-c", 'exec "$0" "$@"', *command[3:]]
        self._pod_dirs(root, f'{task.id.replace(".", "/")}/.kfp')
        container: dict[str, Any] = {
            "name": _CONTAINER, "image": container_spec.get("image") or "python:3.11",
            "env": env, "resources": _resources(container_spec.get("resources") or {}),
            "volumeMounts": [],
        }
        if command:
            container["command"] = command
        if args:
            container["args"] = args
        pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], "volumes": []}
        # The namespace's runs directory, read-write: this run's outputs, and the outputs of earlier
        # runs that cache hits handed on. Input artifacts from elsewhere (an importer's path, another
        # pipeline root) are mounted read-only where they are.
        shared = root.parent
        sources = {str(shared): False}
        for refs in (fact.get("inputs") or {}).get("artifacts", {}).values():
            for ref in refs:
                path = Path(ref["uri"])
                if shared not in path.parents:
                    sources.setdefault(str(path if path.is_dir() else path.parent), True)
        for i, (source, read_only) in enumerate(sources.items()):
            pod_spec["volumes"].append({"name": f"artifacts-{i}", "hostPath": {"path": source}})
            container["volumeMounts"].append({"name": f"artifacts-{i}", "mountPath": source, "readOnly": read_only})
        if run["spec"].get("serviceAccountName"):
            pod_spec["serviceAccountName"] = run["spec"]["serviceAccountName"]
        pod = new_pod(name, meta["namespace"], pod_spec, owner=run,
                      labels={RUN_LABEL: meta["name"], TASK_LABEL: _label_value(task.id)},
                      annotations={"pipelines.trimaran.io/task-id": task.id})
        set_gang(pod, name, 1, {name: LOOPBACK})
        return pod, pip_stage

    def _provide_kfp_runtime(self, pod: dict, pip_stage: _PipStage) -> None:
        """What KFP's ``pip install`` stage gives a lightweight component, without a network: kfp
        (the kfp runtime directory: kfp alone, pure Python, as KFP installs it with ``--no-deps``) and
        packages_to_install. A host process gets the runtime on PYTHONPATH and must already import
        the packages; a step that runs its image gets the runtime mounted read-only, and pip (the
        image's, else the control plane's, mounted too) installs the packages into the image's Python from the local
        wheels (``$TRIMARAN_HOME/pipelines/wheels``) and the indexes the component names (an index on
        loopback is reachable: pods share the host's network), skipping those the image already has."""
        packages = pip_stage.packages
        runtime = kfp_runtime_dir()
        if not (runtime / "kfp").is_dir():
            raise _TaskError(f"the kfp runtime for lightweight components is missing at {runtime}: run "
                             f"`pip install kfp==2.17.3 --no-deps --target {runtime}` (scripts/bootstrap.sh does) "
                             "or point TRIMARAN_KFP_RUNTIME at such a directory")
        container = pod["spec"]["containers"][0]
        try:
            in_image = runs_image(pod, container, self.image_policy)
        except ConfigError as exc:
            raise _TaskError(str(exc)) from None
        if not in_image:
            _check_host_packages(packages)
            container["env"].append({"name": "PYTHONPATH", "value": str(runtime)})
            return
        image = container["image"]
        mounts = [("kfp-runtime", runtime, _IMAGE_KFP_RUNTIME)]
        no_python = (f"trimaran: image {image} has no python3: a lightweight component runs kfp in its image "
                     "with python3 (Python 3.9 or later)")
        old_python = f"trimaran: image {image} has $(python3 -V 2>&1): kfp needs Python 3.9 or later"
        script = [f"command -v python3 >/dev/null 2>&1 || {{ echo {shlex.quote(no_python)} >&2; exit 127; }}",
                  "python3 -I -S -c 'import sys; sys.exit(sys.version_info < (3, 9))' || "
                  f'{{ echo "{old_python}" >&2; exit 1; }}',
                  f"export PYTHONPATH={_IMAGE_KFP_RUNTIME}${{PYTHONPATH:+:$PYTHONPATH}}"]
        if packages:
            pip = importlib.util.find_spec("pip")
            if pip is None or not pip.submodule_search_locations:
                raise _TaskError("packages_to_install needs pip in the control plane's interpreter "
                                 f"({sys.executable}), which a step that runs its image borrows")
            self.wheels_dir.mkdir(parents=True, exist_ok=True)
            mounts += [("kfp-pip", Path(pip.submodule_search_locations[0]), f"{_IMAGE_PIP}/pip"),
                       ("kfp-wheels", self.wheels_dir, _IMAGE_WHEELS)]
            words = " ".join(map(shlex.quote, packages))
            indexes = " ".join(map(shlex.quote, pip_stage.index_options)) or "--no-index"
            where = f"the local wheels in {self.wheels_dir}"
            if pip_stage.index_options:
                where += " or the indexes it names"
            why = (f"trimaran: packages_to_install ({', '.join(packages)}) cannot be installed in image {image} "
                   f"from {where} (a pipeline downloads nothing else): put their wheels there, e.g. "
                   f"pip download --dest {self.wheels_dir} {words}")
            # The image's own pip when it has one (as KFP's preamble uses), else the control plane's.
            script.append(f"pip_path={_IMAGE_PIP}; python3 -c 'import pip' 2>/dev/null && pip_path=")
            script.append("PYTHONPATH=$pip_path PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 "
                          "PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --no-warn-script-location "
                          f"{indexes} --find-links {_IMAGE_WHEELS} {words} "
                          f"|| {{ echo {shlex.quote(why)} >&2; exit 1; }}")
        container["command"] = ["sh", "-c", "\n".join([*script, 'exec "$0" "$@"']), *container["command"][3:]]
        for volume, source, target in mounts:
            pod["spec"]["volumes"].append({"name": volume, "hostPath": {"path": str(source)}})
            container["volumeMounts"].append({"name": volume, "mountPath": target, "readOnly": True})

    # -- where the pipeline and its artifacts are --------------------------------------------

    def _pipeline(self, run: dict) -> tuple[dict, dict]:
        """The run's IR and its kfp-kubernetes settings by executor label."""
        spec = run["spec"]
        if spec.get("pipelineSpec"):
            return spec["pipelineSpec"], _platform_executors(spec.get("platformSpec"))
        ref = spec.get("pipelineVersionRef") or {}
        namespace = run["metadata"]["namespace"]
        if ref.get("version"):
            try:
                version = self.store.get("PipelineVersion", namespace, ref["version"])["spec"]
            except NotFound:
                raise _TaskError(f"pipeline version {ref['version']} not found") from None
            return version["pipelineSpec"], _platform_executors(version.get("platformSpec"))
        versions = [v for v in self.store.list("PipelineVersion", namespace)
                    if v["spec"].get("pipelineName") == ref.get("pipeline")]
        if not versions:
            raise _TaskError(f"pipeline {ref.get('pipeline')} has no version")
        newest = max(versions, key=lambda v: (v["metadata"].get("creationTimestamp") or "",
                                              int(v["metadata"].get("resourceVersion") or 0)))
        return newest["spec"]["pipelineSpec"], _platform_executors(newest["spec"].get("platformSpec"))

    def _allowed_path(self, uri: str, what: str) -> Path:
        error = roots.local_path_error(uri, self.home)
        if error:
            raise _TaskError(f"{what} {uri!r} {error}")
        return roots.resolve(uri)

    def _pipeline_root(self, run: dict) -> Path:
        meta = run["metadata"]
        configured = run["spec"].get("pipelineRoot")
        base = (self._allowed_path(configured, "spec.pipelineRoot") if configured
                else self.home / "pipelines" / "runs")
        root = base / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"
        try:
            self.runtime.make_pod_writable(root)
        except OSError as exc:
            raise _TaskError(f"the pipeline root {root} cannot be made: {exc.strerror}") from None
        return root

    def _pod_dirs(self, root: Path, relative: str) -> None:
        """``root/relative`` and the directories on its way, made for the task's pod to write in."""
        path = root
        for part in relative.split("/"):
            path = path / part
            self.runtime.make_pod_writable(path)


def _artifact_uris(task: dict) -> list[str]:
    """The URIs of a task's (or a cache entry's) output artifacts."""
    return [ref["uri"] for refs in ((task.get("outputs") or {}).get("artifacts") or {}).values() for ref in refs]


def _failure(task: dict) -> str:
    """The run's message: the failed step (its id too where a loop or nested pipeline repeats its
    name) and why, with its last log lines."""
    where = task["name"] if task["id"] == task["name"] else f"{task['name']} ({task['id']})"
    return f"task {where} failed: {task.get('message') or 'no reason given'}"


def _platform_executors(document: dict | None) -> dict:
    """kfp-kubernetes' settings per executor label, from its ``platforms`` document (whole, or the
    mapping under ``platforms``)."""
    platforms = (document or {}).get("platforms", document or {})
    return ((platforms.get("kubernetes") or {}).get("deploymentSpec") or {}).get("executors") or {}


def _pod_name(run: dict, task_id: str, generation: int, attempt: int) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", task_id.lower()).strip("-")
    digest = hashlib.sha256(f"{run['metadata']['uid']}/{task_id}/{generation}/{attempt}".encode()).hexdigest()[:6]
    return f"{run['metadata']['name'][:30]}-{slug[:24]}-{digest}".replace("--", "-")


def _label_value(task_id: str) -> str:
    """A task id as a label value (63 characters at most): long nested ids end in a hash."""
    if len(task_id) <= 63:
        return task_id
    return task_id[:50].rstrip(".-_") + "-" + hashlib.sha256(task_id.encode()).hexdigest()[:10]


def _retry_policy(spec: dict, task: dict) -> dict:
    """The retryPolicy of the IR task a status entry is (found by its component and name)."""
    dags = [spec.get("root") or {}, *(spec.get("components") or {}).values()]
    for component in dags:
        for key, candidate in ((component.get("dag") or {}).get("tasks") or {}).items():
            if ((candidate.get("componentRef") or {}).get("name") == task.get("component")
                    and (candidate.get("taskInfo") or {}).get("name", key) == task.get("name")):
                return candidate.get("retryPolicy") or {}
    return {}


def _termination(pod: dict) -> str:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return f"exit code {term.get('exitCode')}" + (f" ({term['reason']})" if term.get("reason") else "")
    return (pod.get("status") or {}).get("message") or "the pod failed"


def _seconds(duration: Any) -> float:
    if isinstance(duration, (int, float)):
        return float(duration)
    text = str(duration or "0s").strip()
    return float(text[:-1]) if text.endswith("s") else float(text or 0)


def _backoff(policy: dict, attempts: int) -> float:
    """KFP's retry back-off: backoffDuration × backoffFactor^(failures − 1), at most backoffMaxDuration."""
    first = _seconds(policy.get("backoffDuration"))
    factor = float(policy.get("backoffFactor") or 2.0)
    ceiling = _seconds(policy.get("backoffMaxDuration") or "3600s")
    return min(first * factor ** max(attempts - 1, 0), ceiling)


def _backoff_left(fact: dict, policy: dict) -> float:
    if not fact.get("attempts") or not fact.get("finishedAt") or fact.get("podName"):
        return 0.0
    return _backoff(policy, int(fact["attempts"])) - seconds_since(fact["finishedAt"])


def _resources(spec: dict) -> dict:
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    for field, target, key in (("CpuLimit", limits, "cpu"), ("CpuRequest", requests, "cpu"),
                               ("MemoryLimit", limits, "memory"), ("MemoryRequest", requests, "memory")):
        text = spec.get("resource" + field)
        number = spec.get(field[0].lower() + field[1:])
        if text:
            target[key] = str(text)
        elif number:
            target[key] = str(number) if key == "cpu" else f"{number}G"
    accelerator = spec.get("accelerator") or {}
    kind = accelerator.get("resourceType") or accelerator.get("type")
    count = accelerator.get("resourceCount") or accelerator.get("count")
    if kind and count:
        limits[kind] = str(count)
    out = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _pip_stage(command: list[str]) -> _PipStage | None:
    """A lightweight component's ``pip install`` stage, read from its command (None when it has none)."""
    if len(command) < 3 or command[:2] != ["sh", "-c"] or "pip install" not in command[2]:
        return None
    stage = _PipStage(packages=[], index_options=[])
    for group in _PIP_INSTALL.findall(command[2]):
        options: list[str] = []  # each pip install of the stage names the same indexes
        words = iter(shlex.split(group))
        for word in words:
            option, _, value = word.partition("=")
            if option in _PIP_INDEX_OPTIONS:
                options += [option, value or next(words, "")]
            elif not word.startswith("-"):
                try:
                    requirement = Requirement(word)
                except InvalidRequirement:
                    continue
                if requirement.name.lower().replace("_", "-") not in _RUNTIME_PACKAGES:
                    stage.packages.append(word)
        stage.index_options = stage.index_options or options
    return stage


def _check_host_packages(packages: list[str]) -> None:
    """A host process's packages_to_install must already be importable by its interpreter (the
    control plane's): nothing is installed into the host's Python."""
    missing = []
    for word in packages:
        requirement = Requirement(word)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(word)
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            missing.append(f"{word} (have {version})")
    if missing:
        raise _TaskError(f"packages_to_install not available to the pod's interpreter ({sys.executable}): "
                         f"{', '.join(missing)}; install them there, or run the step in its image "
                         "(--image-policy image) with their wheels in $TRIMARAN_HOME/pipelines/wheels "
                         "(pipelines do not download packages while they run)")

