"""Stored objects in KFP's v2beta1 JSON (snake_case, as its grpc-gateway writes them), the shapes
``kfp_server_api`` decodes. Ids are the objects' uids; ``Refs`` finds the uids of what an object
names (its experiment, pipeline, version, recurring run)."""

from __future__ import annotations

from typing import Any

from trimaran.store import NotFound, Store

__all__ = ["Refs", "experiment_view", "pipeline_view", "recurring_run_view", "run_view", "version_view",
           "with_platform"]


class Refs:
    """Names to uids within one request, each looked up once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._uids: dict[tuple[str, str, str], str | None] = {}

    def uid(self, kind: str, namespace: str, name: str | None) -> str | None:
        if not name:
            return None
        key = (kind, namespace, name)
        if key not in self._uids:
            try:
                self._uids[key] = self.store.get(kind, namespace, name)["metadata"]["uid"]
            except NotFound:
                self._uids[key] = None
        return self._uids[key]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["metadata"]


def _storage_state(archived: bool | None) -> str:
    return "ARCHIVED" if archived else "AVAILABLE"


def with_platform(pipeline_spec: dict[str, Any] | None, platform_spec: dict[str, Any] | None) -> Any:
    """A pipeline as KFP returns it: the IR, or both documents when there is a platform spec."""
    if pipeline_spec is None or not platform_spec:
        return pipeline_spec
    return {"pipeline_spec": pipeline_spec, "platform_spec": platform_spec}


def pipeline_view(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec = _meta(obj), obj.get("spec") or {}
    return {"pipeline_id": meta["uid"], "name": meta["name"], "display_name": spec.get("displayName") or meta["name"],
            "description": spec.get("description") or "", "created_at": meta.get("creationTimestamp"),
            "namespace": meta["namespace"]}


def version_view(obj: dict[str, Any], refs: Refs, with_spec: bool = True) -> dict[str, Any]:
    meta, spec = _meta(obj), obj["spec"]
    view = {"pipeline_id": refs.uid("Pipeline", meta["namespace"], spec["pipelineName"]),
            "pipeline_version_id": meta["uid"], "name": meta["name"],
            "display_name": spec.get("displayName") or meta["name"], "description": spec.get("description") or "",
            "created_at": meta.get("creationTimestamp"), "code_source_url": spec.get("codeSourceURL") or "",
            "namespace": meta["namespace"]}
    if with_spec:
        view["pipeline_spec"] = with_platform(spec.get("pipelineSpec"), spec.get("platformSpec"))
    return view


def experiment_view(obj: dict[str, Any], last_run_created_at: str | None = None) -> dict[str, Any]:
    meta, spec = _meta(obj), obj.get("spec") or {}
    view = {"experiment_id": meta["uid"], "name": meta["name"],
            "display_name": spec.get("displayName") or meta["name"], "description": spec.get("description") or "",
            "created_at": meta.get("creationTimestamp"), "namespace": meta["namespace"],
            "storage_state": _storage_state(spec.get("archived"))}
    if last_run_created_at:
        view["last_run_created_at"] = last_run_created_at
    return view


def _template_view(spec: dict[str, Any], namespace: str, refs: Refs) -> dict[str, Any]:
    """What a run and a recurring run share: the pipeline, its parameters, experiment, account."""
    view: dict[str, Any] = {
        "display_name": spec.get("displayName") or "", "description": spec.get("description") or "",
        "experiment_id": refs.uid("PipelineExperiment", namespace, spec.get("experiment")),
        "runtime_config": {"parameters": spec.get("parameters") or {},
                           **({"pipeline_root": spec["pipelineRoot"]} if spec.get("pipelineRoot") else {})},
        "service_account": spec.get("serviceAccountName") or "", "namespace": namespace}
    if spec.get("pipelineSpec") is not None:
        view["pipeline_spec"] = with_platform(spec["pipelineSpec"], spec.get("platformSpec"))
    ref = spec.get("pipelineVersionRef")
    if ref:
        version_id = refs.uid("PipelineVersion", namespace, ref.get("version"))
        view["pipeline_version_reference"] = {"pipeline_id": refs.uid("Pipeline", namespace, ref["pipeline"]),
                                              "pipeline_version_id": version_id}
        view["pipeline_version_id"] = version_id
    return view


def _task_state(state: str | None) -> str:
    # KFP reports a cache hit as SKIPPED (its execution is the cached one); we keep CACHED apart in
    # our own field, `cached_from`.
    return "SKIPPED" if state == "CACHED" else (state or "PENDING")


def _io(io: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """KFP's ``{name: {artifact_ids}}`` (our ids are the artifacts' URIs), the artifacts themselves
    and the parameters."""
    io = io or {}
    artifacts = io.get("artifacts") or {}
    ids = {name: {"artifact_ids": [a.get("uri") for a in refs]} for name, refs in artifacts.items()}
    return ids, artifacts, io.get("parameters") or {}


def _task_view(run_uid: str, task: dict[str, Any], children: list[dict[str, Any]], created: str | None
               ) -> dict[str, Any]:
    inputs, input_artifacts, input_parameters = _io(task.get("inputs"))
    outputs, output_artifacts, output_parameters = _io(task.get("outputs"))
    state = _task_state(task.get("state"))
    view: dict[str, Any] = {
        "run_id": run_uid, "task_id": task["id"], "display_name": task.get("name") or task["id"],
        "create_time": task.get("startedAt") or created, "start_time": task.get("startedAt"),
        "end_time": task.get("finishedAt"), "state": state, "pod_name": task.get("podName") or "",
        "parent_task_id": task.get("parent") or "", "inputs": inputs, "outputs": outputs,
        "child_tasks": [{"task_id": c["id"], "pod_name": c.get("podName") or ""} for c in children],
        # Ours beside KFP's: what the ids stand for, the parameters, and how the task ran.
        "type": task.get("type") or "container", "component": task.get("component"),
        "input_parameters": input_parameters, "output_parameters": output_parameters,
        "input_artifacts": input_artifacts, "output_artifacts": output_artifacts,
        "attempts": task.get("attempts"), "iteration": task.get("iteration"),
        "cached_from": task.get("cachedFrom"), "cache_key": task.get("cacheKey"),
        "original_state": task.get("state") or "PENDING"}
    if task.get("podName"):
        view["executor_detail"] = {"main_job": task["podName"]}
    if task.get("message"):
        view["error"] = {"code": 2 if state == "FAILED" else 0, "message": task["message"]}
    return view


def run_view(obj: dict[str, Any], refs: Refs, details: bool = True) -> dict[str, Any]:
    meta, spec, status = _meta(obj), obj["spec"], obj.get("status") or {}
    state = status.get("state") or "PENDING"
    view = _template_view(spec, meta["namespace"], refs)
    view.update({
        "run_id": meta["uid"], "name": meta["name"], "display_name": spec.get("displayName") or meta["name"],
        "storage_state": _storage_state(spec.get("archived")), "created_at": meta.get("creationTimestamp"),
        "scheduled_at": status.get("startedAt") or meta.get("creationTimestamp"), "state": state,
        "recurring_run_id": refs.uid("RecurringRun", meta["namespace"], spec.get("recurringRun")) or ""})
    if status.get("finishedAt"):
        view["finished_at"] = status["finishedAt"]
    if status.get("pipelineRoot"):
        view["runtime_config"]["pipeline_root"] = status["pipelineRoot"]
    if status.get("message"):
        view["error"] = {"code": 2 if state == "FAILED" else 0, "message": status["message"]}
    if details:
        tasks = status.get("tasks") or []
        children: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            if task.get("parent"):
                children.setdefault(task["parent"], []).append(task)
        view["run_details"] = {"task_details": [
            _task_view(meta["uid"], t, children.get(t["id"], []), meta.get("creationTimestamp")) for t in tasks]}
    return view


def recurring_run_view(obj: dict[str, Any], refs: Refs) -> dict[str, Any]:
    meta, spec, status = _meta(obj), obj["spec"], obj.get("status") or {}
    trigger = spec.get("trigger") or {}
    kfp_trigger: dict[str, Any] = {}
    if trigger.get("cronSchedule"):
        cron = trigger["cronSchedule"]
        kfp_trigger["cron_schedule"] = {"cron": cron["cron"], "start_time": cron.get("startTime"),
                                        "end_time": cron.get("endTime")}
    if trigger.get("periodicSchedule"):
        periodic = trigger["periodicSchedule"]
        kfp_trigger["periodic_schedule"] = {"interval_second": str(periodic["intervalSecond"]),
                                            "start_time": periodic.get("startTime"),
                                            "end_time": periodic.get("endTime")}
    view = _template_view(spec, meta["namespace"], refs)
    mode = spec.get("mode") or "ENABLE"
    view.update({
        "recurring_run_id": meta["uid"], "name": meta["name"],
        "display_name": spec.get("displayName") or meta["name"], "trigger": kfp_trigger,
        "max_concurrency": str(spec.get("maxConcurrency") or 1), "no_catchup": bool(spec.get("noCatchup")),
        "mode": mode, "status": "ENABLED" if mode == "ENABLE" else "DISABLED",
        "created_at": meta.get("creationTimestamp"), "updated_at": status.get("lastRunTime")
        or meta.get("creationTimestamp"), "next_run_time": status.get("nextRunTime"),
        "runs_created": status.get("runsCreated") or 0})
    return view
