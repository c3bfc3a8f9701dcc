"""KFP's v2beta1 REST API (``/apis/v2beta1/...``), what ``kfp.Client`` calls, at the control plane's own
address and behind its tokens: pipelines and versions, experiments, runs, recurring runs.

Nothing is stored here beyond the kinds of ``trimaran.api.pipelines``: a request becomes a
``Pipeline``, ``PipelineVersion``, ``PipelineExperiment``, ``Run`` or ``RecurringRun`` written through
the same validation and store calls as the Kubernetes API (so ``kubectl get runs``, watches and the
garbage collector see them), and an answer is such an object in KFP's JSON (`views`). KFP's ids are
the objects' uids. The server is single-user as KFP counts (``multi_user: false``): a request may
name a namespace (``namespace`` on uploads, experiments and lists); one that does not lands in
``default``, or in the token's namespace when the token is limited to one.
"""

from __future__ import annotations

import asyncio
import io
import re
import tarfile
import zipfile
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import yaml
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from trimaran.api import ManifestError, kinds, validate
from trimaran.api.pipelines import KFP_API_VERSION, TRIMARAN_API_VERSION
from trimaran.controllers.gc import request_delete
from trimaran.server.kfp.errors import KfpError, error_response
from trimaran.server.kfp.listing import page
from trimaran.server.kfp.views import (
    Refs,
    experiment_view,
    pipeline_view,
    recurring_run_view,
    run_view,
    version_view,
)
from trimaran.server.tokens import Principal
from trimaran.store import AlreadyExists, Conflict, NotFound, Store

__all__ = ["kfp_routes"]

PREFIX = "/apis/v2beta1"
MAX_UPLOAD_BYTES = 32 * 1024 * 1024
DEFAULT_EXPERIMENT = "default"  # made on demand, displayed "Default", as KFP does
_UPDATE_TRIES = 5
_PLURAL = {"Pipeline": "pipelines", "PipelineVersion": "pipeline versions", "PipelineExperiment": "experiments",
           "Run": "runs", "RecurringRun": "recurring runs"}


def _slug(text: str, limit: int = 63) -> str:
    """A Kubernetes name made from a display name ("My pipeline" → "my-pipeline")."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _integral_parameters(spec: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """kfp.Client sends numbers as protobuf doubles: 3.0 for an integer input becomes 3."""
    declared = ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
    coerced = dict(parameters)
    for name, value in parameters.items():
        kind = (declared.get(name) or {}).get("parameterType")
        if kind == "NUMBER_INTEGER" and isinstance(value, float) and value.is_integer():
            coerced[name] = int(value)
    return coerced


def _split_package(data: bytes, filename: str) -> tuple[Any, dict[str, Any] | None]:
    """A package as kfp.Client uploads it (YAML, or a .tar.gz/.zip holding one): the pipeline spec and
    the kfp-kubernetes platform document, if any."""
    lowered = filename.lower()
    try:
        if lowered.endswith((".tar.gz", ".tgz")):
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith((".yaml", ".yml", ".json"))]
                if not members:
                    raise KfpError.invalid("uploadfile: the archive holds no pipeline YAML")
                chosen = next((m for m in members if m.name.endswith("pipeline.yaml")), members[0])
                data = tar.extractfile(chosen).read()  # type: ignore[union-attr]
        elif lowered.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = [n for n in archive.namelist() if n.endswith((".yaml", ".yml", ".json"))]
                if not names:
                    raise KfpError.invalid("uploadfile: the archive holds no pipeline YAML")
                data = archive.read(next((n for n in names if n.endswith("pipeline.yaml")), names[0]))
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise KfpError.invalid(f"uploadfile: not a readable archive: {exc}") from None
    try:
        documents = [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as exc:
        raise KfpError.invalid(f"uploadfile: not YAML: {exc}") from None
    if not documents:
        raise KfpError.invalid("uploadfile: empty")
    platform: dict[str, Any] | None = None
    for extra in documents[1:]:
        if not isinstance(extra, dict):
            raise KfpError.invalid("uploadfile: a document after the pipeline spec must be the platforms document")
        platform = {**(platform or {}), **extra}
    return documents[0], platform


def _unwrap(pipeline_spec: Any) -> tuple[Any, dict[str, Any] | None]:
    """kfp.Client sends ``{pipeline_spec, platform_spec}`` when a package has a platform document."""
    if isinstance(pipeline_spec, dict) and "pipeline_spec" in pipeline_spec and "root" not in pipeline_spec:
        return pipeline_spec["pipeline_spec"], pipeline_spec.get("platform_spec") or None
    return pipeline_spec, None


class _Api:
    """The handlers: each takes the caller, the query and the body, and runs off the event loop."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # Access ------------------------------------------------------------------------------

    @staticmethod
    def allow(principal: Principal, verb: str, kind: str, namespace: str | None) -> None:
        info = kinds.lookup(kind)
        if not principal.allows(verb, namespace, info.plural, info.group):
            raise KfpError.forbidden(principal.name, verb, _PLURAL[kind], namespace)

    @staticmethod
    def home_namespace(principal: Principal, requested: str | None) -> str:
        if requested:
            return requested
        if principal.namespaces is not None and len(principal.namespaces) == 1:
            return next(iter(principal.namespaces))
        return "default"

    def visible(self, principal: Principal, kind: str, requested: str | None) -> list[dict[str, Any]]:
        """Every object of ``kind`` the caller may list, in ``requested`` only when given."""
        if requested:
            self.allow(principal, "list", kind, requested)
            return self.store.list(kind, requested)
        info = kinds.lookup(kind)
        if principal.allows("list", None, info.plural, info.group):
            return self.store.list(kind)
        return [obj for obj in self.store.list(kind)
                if principal.allows("list", obj["metadata"]["namespace"], info.plural, info.group)]

    def find(self, principal: Principal, kind: str, uid: str, verb: str = "get") -> dict[str, Any]:
        """The object whose uid is KFP's id ``uid``."""
        label = _PLURAL[kind][:-1]
        for obj in self.visible(principal, kind, None):
            if obj["metadata"].get("uid") == uid:
                self.allow(principal, verb, kind, obj["metadata"]["namespace"])
                return obj
        raise KfpError.not_found(label, uid)

    # Writes ------------------------------------------------------------------------------

    def create(self, principal: Principal, obj: dict[str, Any]) -> dict[str, Any]:
        """Validate ``obj`` as the Kubernetes API does and store it."""
        kind, namespace = obj["kind"], obj["metadata"]["namespace"]
        self.allow(principal, "create", kind, namespace)
        try:
            admitted = validate(obj).object
        except ManifestError as exc:
            raise KfpError.invalid("; ".join(str(e) for e in exc.field_errors) or str(exc), exc.field_errors) from None
        if obj["metadata"].get("ownerReferences"):
            admitted["metadata"]["ownerReferences"] = obj["metadata"]["ownerReferences"]
        info = kinds.lookup(kind)
        if info.references is not None:
            refused = info.references(admitted, self._stored_or_none)
            if refused:
                raise KfpError.invalid("; ".join(str(e) for e in refused), refused)
        self.store.ensure_namespace(namespace)
        try:
            return self.store.create(admitted)
        except AlreadyExists:
            shown = (obj.get("spec") or {}).get("displayName") or obj["metadata"].get("name")
            raise KfpError.exists(f'{_PLURAL[kind][:-1]} "{shown}" already exists in namespace "{namespace}"') from None

    def _stored_or_none(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.store.get(kind, namespace, name)
        except NotFound:
            return None

    def change_spec(self, obj: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``change`` to the stored object's spec, again on a concurrent write."""
        meta = obj["metadata"]
        for _ in range(_UPDATE_TRIES):
            current = self.store.get(obj["kind"], meta["namespace"], meta["name"])
            change(current["spec"])
            try:
                return self.store.update(current)
            except Conflict:
                continue
        raise KfpError(409, 10, f"{obj['kind']} {meta['name']}: too many concurrent writes")

    def delete(self, obj: dict[str, Any]) -> None:
        try:
            request_delete(self.store, obj, "Background", None, False)
        except NotFound:
            pass  # gone meanwhile: what the caller asked for

    # Health ------------------------------------------------------------------------------

    def healthz(self, principal: Principal, params: Any) -> dict[str, Any]:
        return {"multi_user": False, "pipeline_store": "kubernetes"}

    # Pipelines -----------------------------------------------------------------------------

    def _pipeline_object(self, namespace: str, name: str, display: str | None, description: str | None
                         ) -> dict[str, Any]:
        slug = _slug(name)
        if not slug:
            raise KfpError.invalid(f'name: "{name}" has no letter or digit to make a name of')
        spec = {k: v for k, v in (("displayName", display or name), ("description", description)) if v}
        return {"apiVersion": KFP_API_VERSION, "kind": "Pipeline",
                "metadata": {"name": slug, "namespace": namespace}, "spec": spec}

    def _version_object(self, pipeline: dict[str, Any], name: str, description: str | None, spec: Any,
                        platform: dict[str, Any] | None, code_source_url: str | None = None) -> dict[str, Any]:
        meta = pipeline["metadata"]
        slug = _slug(name)
        if not slug:
            raise KfpError.invalid(f'name: "{name}" has no letter or digit to make a name of')
        if slug != meta["name"] and not slug.startswith(meta["name"] + "-"):
            # Versions share their namespace with every pipeline's: "v1" of two pipelines must not clash.
            slug = f"{meta['name']}-{slug}"[:253]
        if isinstance(spec, dict) and spec.get("pipelineInfo") is None and "pipeline_spec" in spec:
            spec, platform = _unwrap(spec)
        version_spec: dict[str, Any] = {"pipelineName": meta["name"], "displayName": name, "pipelineSpec": spec}
        if platform:
            version_spec["platformSpec"] = platform
        if description:
            version_spec["description"] = description
        if code_source_url:
            version_spec["codeSourceURL"] = code_source_url
        owner = {"apiVersion": KFP_API_VERSION, "kind": "Pipeline", "name": meta["name"], "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        return {"apiVersion": KFP_API_VERSION, "kind": "PipelineVersion",
                "metadata": {"name": slug, "namespace": meta["namespace"], "ownerReferences": [owner]},
                "spec": version_spec}

    def _create_pipeline_with_version(self, principal: Principal, pipeline: dict[str, Any],
                                      version: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """A pipeline and its first version, or neither: a version refused takes the pipeline back."""
        self.allow(principal, "create", "Pipeline", pipeline["metadata"]["namespace"])
        # The version is checked before anything is stored, so a bad spec leaves nothing behind.
        try:
            validate(version({**pipeline, "metadata": {**pipeline["metadata"], "uid": "-"}}))
        except ManifestError as exc:
            raise KfpError.invalid("; ".join(str(e) for e in exc.field_errors) or str(exc), exc.field_errors) from None
        stored = self.create(principal, pipeline)
        try:
            self.create(principal, version(stored))
        except KfpError:
            self.store.delete("Pipeline", stored["metadata"]["namespace"], stored["metadata"]["name"])
            raise
        return stored

    def upload_pipeline(self, principal: Principal, params: Any, body: tuple[bytes, str]) -> dict[str, Any]:
        spec, platform = _split_package(*body)
        name = params.get("name") or params.get("display_name") or \
            ((spec.get("pipelineInfo") or {}).get("name") if isinstance(spec, dict) else None)
        if not name:
            raise KfpError.invalid("name: required (the query's name, or the spec's pipelineInfo.name)")
        namespace = self.home_namespace(principal, params.get("namespace"))
        pipeline = self._pipeline_object(namespace, name, params.get("display_name"), params.get("description"))
        stored = self._create_pipeline_with_version(
            principal, pipeline,
            lambda p: self._version_object(p, p["metadata"]["name"], params.get("description"), spec, platform))
        return pipeline_view(stored)

    def upload_version(self, principal: Principal, params: Any, body: tuple[bytes, str]) -> dict[str, Any]:
        spec, platform = _split_package(*body)
        if not params.get("pipelineid"):
            raise KfpError.invalid("pipelineid: required")
        pipeline = self.find(principal, "Pipeline", params["pipelineid"])
        name = params.get("name") or params.get("display_name")
        if not name:
            raise KfpError.invalid("name: required")
        version = self.create(principal, self._version_object(pipeline, name, params.get("description"), spec,
                                                                platform))
        return version_view(version, Refs(self.store))

    def create_pipeline(self, principal: Principal, params: Any, body: Any) -> dict[str, Any]:
        name = body.get("name") or body.get("display_name")
        if not name:
            raise KfpError.invalid("pipeline.display_name: required")
        namespace = self.home_namespace(principal, body.get("namespace"))
        obj = self._pipeline_object(namespace, name, body.get("display_name"), body.get("description"))
        return pipeline_view(self.create(principal, obj))

    def create_pipeline_and_version(self, principal: Principal, params: Any, body: Any) -> dict[str, Any]:
        pipeline_in, version_in = body.get("pipeline") or {}, body.get("pipeline_version") or {}
        name = pipeline_in.get("name") or pipeline_in.get("display_name")
        if not name:
            raise KfpError.invalid("pipeline.display_name: required")
        namespace = self.home_namespace(principal, pipeline_in.get("namespace"))
        pipeline = self._pipeline_object(namespace, name, pipeline_in.get("display_name"),
                                         pipeline_in.get("description"))
        spec, platform = _unwrap(version_in.get("pipeline_spec"))
        stored = self._create_pipeline_with_version(
            principal, pipeline,
            lambda p: self._version_object(p, version_in.get("display_name") or p["metadata"]["name"],
                                           version_in.get("description"), spec, platform,
                                           version_in.get("code_source_url")))
        return pipeline_view(stored)

    def list_pipelines(self, principal: Principal, params: Any) -> dict[str, Any]:
        items = [pipeline_view(p) for p in self.visible(principal, "Pipeline", params.get("namespace"))]
        return page(items, params, "pipelines", "pipeline_id")

    def get_pipeline(self, principal: Principal, params: Any, pipeline_id: str) -> dict[str, Any]:
        return pipeline_view(self.find(principal, "Pipeline", pipeline_id))

    def get_pipeline_by_name(self, principal: Principal, params: Any, name: str) -> dict[str, Any]:
        namespace = self.home_namespace(principal, params.get("namespace"))
        self.allow(principal, "get", "Pipeline", namespace)
        for pipeline in self.store.list("Pipeline", namespace):
            if name in (pipeline["metadata"]["name"], (pipeline.get("spec") or {}).get("displayName")):
                return pipeline_view(pipeline)
        raise KfpError.not_found("pipeline named", f'"{name}" in namespace "{namespace}"')

    def _versions_of(self, pipeline: dict[str, Any]) -> list[dict[str, Any]]:
        meta = pipeline["metadata"]
        return [v for v in self.store.list("PipelineVersion", meta["namespace"], owner_uid=meta["uid"])
                if v["spec"].get("pipelineName") == meta["name"]]

    def delete_pipeline(self, principal: Principal, params: Any, pipeline_id: str) -> dict[str, Any]:
        pipeline = self.find(principal, "Pipeline", pipeline_id, "delete")
        versions = self._versions_of(pipeline)
        if versions and str(params.get("cascade", "")).lower() != "true":
            raise KfpError.precondition(f'pipeline {pipeline_id} has {len(versions)} version(s): delete them first, '
                                        "or delete with cascade=true")
        self.delete(pipeline)  # its versions are its dependents: the garbage collector removes them
        return {}

    def create_version(self, principal: Principal, params: Any, body: Any, pipeline_id: str) -> dict[str, Any]:
        pipeline = self.find(principal, "Pipeline", pipeline_id)
        name = body.get("name") or body.get("display_name")
        if not name:
            raise KfpError.invalid("pipeline_version.display_name: required")
        spec, platform = _unwrap(body.get("pipeline_spec"))
        version = self.create(principal, self._version_object(pipeline, name, body.get("description"), spec,
                                                                platform, body.get("code_source_url")))
        return version_view(version, Refs(self.store))

    def list_versions(self, principal: Principal, params: Any, pipeline_id: str) -> dict[str, Any]:
        pipeline = self.find(principal, "Pipeline", pipeline_id, "list")
        refs = Refs(self.store)
        items = [version_view(v, refs) for v in self._versions_of(pipeline)]
        return page(items, params, "pipeline_versions", "pipeline_version_id")

    def _version(self, principal: Principal, pipeline_id: str, version_id: str, verb: str) -> dict[str, Any]:
        pipeline = self.find(principal, "Pipeline", pipeline_id, verb)
        for version in self._versions_of(pipeline):
            if version["metadata"]["uid"] == version_id:
                return version
        raise KfpError.not_found("pipeline version", f"{version_id} of pipeline {pipeline_id}")

    def get_version(self, principal: Principal, params: Any, pipeline_id: str, version_id: str) -> dict[str, Any]:
        return version_view(self._version(principal, pipeline_id, version_id, "get"), Refs(self.store))

    def delete_version(self, principal: Principal, params: Any, pipeline_id: str, version_id: str
                       ) -> dict[str, Any]:
        self.delete(self._version(principal, pipeline_id, version_id, "delete"))
        return {}

    # Experiments -----------------------------------------------------------------------------

    def _experiment_object(self, namespace: str, name: str, display: str, description: str | None
                           ) -> dict[str, Any]:
        spec = {"displayName": display, **({"description": description} if description else {})}
        return {"apiVersion": TRIMARAN_API_VERSION, "kind": "PipelineExperiment",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    def default_experiment(self, principal: Principal, namespace: str) -> dict[str, Any]:
        existing = self._stored_or_none("PipelineExperiment", namespace, DEFAULT_EXPERIMENT)
        if existing is not None:
            return existing
        try:
            return self.create(principal, self._experiment_object(namespace, DEFAULT_EXPERIMENT, "Default", None))
        except KfpError as exc:
            if exc.http != 409:
                raise
            return self.store.get("PipelineExperiment", namespace, DEFAULT_EXPERIMENT)  # made meanwhile

    def create_experiment(self, principal: Principal, params: Any, body: Any) -> dict[str, Any]:
        display = body.get("display_name")
        if not display:
            raise KfpError.invalid("experiment.display_name: required")
        name = _slug(display)
        if not name:
            raise KfpError.invalid(f'experiment.display_name: "{display}" has no letter or digit to make a name of')
        namespace = self.home_namespace(principal, body.get("namespace"))
        obj = self._experiment_object(namespace, name, display, body.get("description"))
        return experiment_view(self.create(principal, obj))

    def get_experiment(self, principal: Principal, params: Any, experiment_id: str) -> dict[str, Any]:
        return experiment_view(self.find(principal, "PipelineExperiment", experiment_id))

    def list_experiments(self, principal: Principal, params: Any) -> dict[str, Any]:
        items = [experiment_view(e) for e in self.visible(principal, "PipelineExperiment", params.get("namespace"))]
        return page(items, params, "experiments", "experiment_id")

    def delete_experiment(self, principal: Principal, params: Any, experiment_id: str) -> dict[str, Any]:
        self.delete(self.find(principal, "PipelineExperiment", experiment_id, "delete"))
        return {}

    def archive_experiment(self, principal: Principal, experiment_id: str, archived: bool) -> dict[str, Any]:
        experiment = self.find(principal, "PipelineExperiment", experiment_id, "update")
        self.change_spec(experiment, lambda spec: spec.update(archived=archived))
        if archived:  # as KFP: archiving an experiment archives its runs
            meta = experiment["metadata"]
            for run in self.store.list("Run", meta["namespace"]):
                if run["spec"].get("experiment") == meta["name"] and not run["spec"].get("archived"):
                    self.change_spec(run, lambda spec: spec.update(archived=True))
        return {}

    # Runs ----------------------------------------------------------------------------------

    def _template(self, principal: Principal, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The namespace and spec shared by a run and a recurring run, from KFP's request."""
        if body.get("experiment_id"):
            experiment = self.find(principal, "PipelineExperiment", body["experiment_id"])
            namespace = experiment["metadata"]["namespace"]
        else:
            namespace = self.home_namespace(principal, body.get("namespace"))
            experiment = self.default_experiment(principal, namespace)
        spec: dict[str, Any] = {"experiment": experiment["metadata"]["name"]}
        for ours, theirs in (("displayName", "display_name"), ("description", "description"),
                             ("serviceAccountName", "service_account")):
            if body.get(theirs):
                spec[ours] = body[theirs]
        runtime_config = body.get("runtime_config") or {}
        parameters = runtime_config.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise KfpError.invalid("runtime_config.parameters: must be an object")
        if runtime_config.get("pipeline_root"):
            spec["pipelineRoot"] = runtime_config["pipeline_root"]
        pipeline_spec = None
        if body.get("pipeline_spec") is not None:
            pipeline_spec, platform = _unwrap(body["pipeline_spec"])
            spec["pipelineSpec"] = pipeline_spec
            if platform:
                spec["platformSpec"] = platform
        reference = body.get("pipeline_version_reference") or {}
        version_id = reference.get("pipeline_version_id") or body.get("pipeline_version_id")
        if reference.get("pipeline_id") or version_id:
            if pipeline_spec is not None:
                raise KfpError.invalid("pipeline_spec and pipeline_version_reference: give one of them")
            spec["pipelineVersionRef"], pipeline_spec = self._reference(principal, namespace,
                                                                        reference.get("pipeline_id"), version_id)
        if isinstance(pipeline_spec, dict):
            parameters = _integral_parameters(pipeline_spec, parameters)
        spec["parameters"] = parameters
        return namespace, spec

    def _reference(self, principal: Principal, namespace: str, pipeline_id: str | None, version_id: str | None
                   ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        if version_id:
            version = self.find(principal, "PipelineVersion", version_id)
            if version["metadata"]["namespace"] != namespace:
                raise KfpError.invalid(f"pipeline_version_reference: version {version_id} is in namespace "
                                       f'"{version["metadata"]["namespace"]}", the run\'s experiment in "{namespace}"')
            pipeline_name = version["spec"]["pipelineName"]
            if pipeline_id and self.find(principal, "Pipeline", pipeline_id)["metadata"]["name"] != pipeline_name:
                raise KfpError.invalid(f"pipeline_version_reference: version {version_id} is not one of pipeline "
                                       f"{pipeline_id}")
            return {"pipeline": pipeline_name, "version": version["metadata"]["name"]}, version["spec"]["pipelineSpec"]
        pipeline = self.find(principal, "Pipeline", pipeline_id or "")
        return {"pipeline": pipeline["metadata"]["name"]}, None

    def create_run(self, principal: Principal, params: Any, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise KfpError.invalid("the body must be a run object")
        namespace, spec = self._template(principal, body)
        prefix = _slug(spec.get("displayName") or "", 24) or "run"
        obj = {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run",
               "metadata": {"generateName": prefix + "-", "namespace": namespace}, "spec": spec}
        return run_view(self.create(principal, obj), Refs(self.store))

    def get_run(self, principal: Principal, params: Any, run_id: str) -> dict[str, Any]:
        return run_view(self.find(principal, "Run", run_id), Refs(self.store))

    def list_runs(self, principal: Principal, params: Any) -> dict[str, Any]:
        runs = self.visible(principal, "Run", params.get("namespace"))
        if params.get("experiment_id"):
            experiment = self.find(principal, "PipelineExperiment", params["experiment_id"], "list")
            meta = experiment["metadata"]
            runs = [r for r in runs if r["metadata"]["namespace"] == meta["namespace"]
                    and r["spec"].get("experiment") == meta["name"]]
        refs = Refs(self.store)
        return page([run_view(r, refs) for r in runs], params, "runs", "run_id")

    def delete_run(self, principal: Principal, params: Any, run_id: str) -> dict[str, Any]:
        self.delete(self.find(principal, "Run", run_id, "delete"))
        return {}

    def run_action(self, principal: Principal, run_id: str, action: str) -> dict[str, Any]:
        run = self.find(principal, "Run", run_id, "update")
        state = (run.get("status") or {}).get("state")
        if action == "terminate":
            # A finished run keeps its state: the controller reads terminate only while it runs.
            self.change_spec(run, lambda spec: spec.update(terminate=True))
        elif action == "retry":
            if state not in ("FAILED", "CANCELED"):
                raise KfpError.precondition(f"run {run_id} is {state or 'PENDING'}: only a failed or terminated "
                                            "run can be retried")
            self.change_spec(run, lambda spec: spec.update(retry=(spec.get("retry") or 0) + 1, terminate=False))
        else:
            self.change_spec(run, lambda spec: spec.update(archived=action == "archive"))
        return {}

    # Recurring runs --------------------------------------------------------------------------

    def create_recurring_run(self, principal: Principal, params: Any, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise KfpError.invalid("the body must be a recurring run object")
        namespace, spec = self._template(principal, body)
        trigger_in = body.get("trigger") or {}
        trigger: dict[str, Any] = {}
        cron, periodic = trigger_in.get("cron_schedule"), trigger_in.get("periodic_schedule")
        if cron:
            trigger["cronSchedule"] = {"cron": cron.get("cron") or "", **_window(cron)}
        if periodic:
            try:
                interval = int(periodic.get("interval_second") or 0)
            except (TypeError, ValueError):
                raise KfpError.invalid("trigger.periodic_schedule.interval_second: must be an integer") from None
            trigger["periodicSchedule"] = {"intervalSecond": interval, **_window(periodic)}
        spec["trigger"] = trigger
        if body.get("max_concurrency") not in (None, "", "0", 0):
            try:
                spec["maxConcurrency"] = int(body["max_concurrency"])
            except (TypeError, ValueError):
                raise KfpError.invalid("max_concurrency: must be an integer") from None
        if body.get("no_catchup") is not None:
            spec["noCatchup"] = bool(body["no_catchup"])
        mode = body.get("mode")
        if mode in ("ENABLE", "DISABLE"):
            spec["mode"] = mode
        elif mode not in (None, "", "MODE_UNSPECIFIED"):
            raise KfpError.invalid(f'mode: "{mode}" is not ENABLE or DISABLE')
        prefix = _slug(spec.get("displayName") or "", 24) or "recurring-run"
        obj = {"apiVersion": TRIMARAN_API_VERSION, "kind": "RecurringRun",
               "metadata": {"generateName": prefix + "-", "namespace": namespace}, "spec": spec}
        return recurring_run_view(self.create(principal, obj), Refs(self.store))

    def get_recurring_run(self, principal: Principal, params: Any, ident: str) -> dict[str, Any]:
        return recurring_run_view(self.find(principal, "RecurringRun", ident), Refs(self.store))

    def list_recurring_runs(self, principal: Principal, params: Any) -> dict[str, Any]:
        items = self.visible(principal, "RecurringRun", params.get("namespace"))
        if params.get("experiment_id"):
            experiment = self.find(principal, "PipelineExperiment", params["experiment_id"], "list")
            items = [r for r in items if r["metadata"]["namespace"] == experiment["metadata"]["namespace"]
                     and r["spec"].get("experiment") == experiment["metadata"]["name"]]
        refs = Refs(self.store)
        # "recurringRuns": the one list KFP's gateway writes in camelCase (kfp_server_api reads that).
        return page([recurring_run_view(r, refs) for r in items], params, "recurringRuns", "recurring_run_id")

    def delete_recurring_run(self, principal: Principal, params: Any, ident: str) -> dict[str, Any]:
        self.delete(self.find(principal, "RecurringRun", ident, "delete"))
        return {}

    def recurring_run_mode(self, principal: Principal, ident: str, mode: str) -> dict[str, Any]:
        recurring = self.find(principal, "RecurringRun", ident, "update")
        self.change_spec(recurring, lambda spec: spec.update(mode=mode))
        return {}


def _window(schedule: dict[str, Any]) -> dict[str, Any]:
    return {ours: schedule[theirs] for ours, theirs in (("startTime", "start_time"), ("endTime", "end_time"))
            if schedule.get(theirs)}


def _principal(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if principal is None:  # the middleware answers first; a route never sees a caller without a token
        raise KfpError(401, 16, "a bearer token is required")
    return principal


def kfp_routes(store: Store) -> list[BaseRoute]:
    """The ``/apis/v2beta1`` routes, to mount before the Kubernetes API's ``/apis/{group}``."""
    api = _Api(store)

    def endpoint(handler: Callable[..., Any], reads: str = "none", status: int = 200
                 ) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            try:
                principal = _principal(request)
                body: Any = None
                if reads == "json":
                    raw = await request.body()
                    try:
                        body = orjson.loads(raw) if raw.strip() else {}
                    except orjson.JSONDecodeError as exc:
                        raise KfpError.invalid(f"the body is not JSON: {exc}") from None
                elif reads == "upload":
                    body = await _upload(request)
                args = [principal, request.query_params]
                if reads != "none":
                    args.append(body)
                args += list(request.path_params.values())
                return _json(await asyncio.to_thread(handler, *args), status)
            except KfpError as exc:
                return error_response(exc)
        return serve

    def action(handlers: dict[str, Callable[[Principal, str], dict[str, Any]]],
               plain: Callable[..., Any]) -> Callable[[Request], Awaitable[Response]]:
        """``/things/{id}`` (``plain``) and ``/things/{id}:verb`` (``handlers[verb]``), one path."""
        plain_endpoint = endpoint(plain)

        async def serve(request: Request) -> Response:
            ident, _, verb = request.path_params["ident"].partition(":")
            if not verb:
                return await plain_endpoint(request)
            try:
                if request.method != "POST" or verb not in handlers:
                    raise KfpError(404, 5, f"no method {request.method} {request.url.path}")
                result = await asyncio.to_thread(handlers[verb], _principal(request), ident)
                return _json(result)
            except KfpError as exc:
                return error_response(exc)
        return serve

    def by_method(**handlers: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            handler = handlers.get(request.method.lower())
            if handler is None:
                return error_response(KfpError(405, 12, f"{request.method} is not allowed on {request.url.path}"))
            return await handler(request)
        return serve

    async def unknown(request: Request) -> Response:
        return error_response(KfpError(404, 5, f"no such path: {request.url.path}"))

    run_actions = {"terminate": lambda p, i: api.run_action(p, i, "terminate"),
                   "retry": lambda p, i: api.run_action(p, i, "retry"),
                   "archive": lambda p, i: api.run_action(p, i, "archive"),
                   "unarchive": lambda p, i: api.run_action(p, i, "unarchive")}
    experiment_actions = {"archive": lambda p, i: api.archive_experiment(p, i, True),
                          "unarchive": lambda p, i: api.archive_experiment(p, i, False)}
    recurring_actions = {"enable": lambda p, i: api.recurring_run_mode(p, i, "ENABLE"),
                         "disable": lambda p, i: api.recurring_run_mode(p, i, "DISABLE")}
    methods = ["GET", "POST", "DELETE"]
    return [
        Route(f"{PREFIX}/healthz", endpoint(api.healthz), methods=["GET"]),
        Route(f"{PREFIX}/pipelines/upload", endpoint(api.upload_pipeline, "upload"), methods=["POST"]),
        Route(f"{PREFIX}/pipelines/upload_version", endpoint(api.upload_version, "upload"), methods=["POST"]),
        Route(f"{PREFIX}/pipelines/create", endpoint(api.create_pipeline_and_version, "json"), methods=["POST"]),
        Route(f"{PREFIX}/pipelines/names/{{name}}", endpoint(api.get_pipeline_by_name), methods=["GET"]),
        Route(f"{PREFIX}/pipelines", by_method(get=endpoint(api.list_pipelines),
                                               post=endpoint(api.create_pipeline, "json")), methods=methods),
        Route(f"{PREFIX}/pipelines/{{ident}}", by_method(get=endpoint(api.get_pipeline),
                                                         delete=endpoint(api.delete_pipeline)), methods=methods),
        Route(f"{PREFIX}/pipelines/{{ident}}/versions",
              by_method(get=endpoint(api.list_versions), post=endpoint(api.create_version, "json")),
              methods=methods),
        Route(f"{PREFIX}/pipelines/{{ident}}/versions/{{version}}",
              by_method(get=endpoint(api.get_version), delete=endpoint(api.delete_version)), methods=methods),
        Route(f"{PREFIX}/experiments", by_method(get=endpoint(api.list_experiments),
                                                 post=endpoint(api.create_experiment, "json")), methods=methods),
        Route(f"{PREFIX}/experiments/{{ident}}",
              by_method(get=action(experiment_actions, api.get_experiment),
                        post=action(experiment_actions, api.get_experiment),
                        delete=endpoint(api.delete_experiment)), methods=methods),
        Route(f"{PREFIX}/runs", by_method(get=endpoint(api.list_runs), post=endpoint(api.create_run, "json")),
              methods=methods),
        Route(f"{PREFIX}/runs/{{ident}}", by_method(get=action(run_actions, api.get_run),
                                                    post=action(run_actions, api.get_run),
                                                    delete=endpoint(api.delete_run)), methods=methods),
        Route(f"{PREFIX}/recurringruns", by_method(get=endpoint(api.list_recurring_runs),
                                                   post=endpoint(api.create_recurring_run, "json")),
              methods=methods),
        Route(f"{PREFIX}/recurringruns/{{ident}}",
              by_method(get=action(recurring_actions, api.get_recurring_run),
                        post=action(recurring_actions, api.get_recurring_run),
                        delete=endpoint(api.delete_recurring_run)), methods=methods),
        Route(f"{PREFIX}/{{rest:path}}", unknown, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        Route(PREFIX, unknown, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]


async def _upload(request: Request) -> tuple[bytes, str]:
    """The ``uploadfile`` of a multipart upload: its bytes and file name."""
    try:
        form = await request.form(max_files=1, max_fields=16)
    except Exception as exc:  # python-multipart's and starlette's parse errors have no common base
        raise KfpError.invalid(f"the body is not a multipart form: {exc}") from None
    upload = form.get("uploadfile")
    if not isinstance(upload, UploadFile):
        raise KfpError.invalid("uploadfile: required (a multipart file field)")
    data = await upload.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise KfpError.invalid(f"uploadfile: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB")
    return data, upload.filename or ""
