"""KServe ``serving.kserve.io/v1beta1`` InferenceService, defaulted and validated as KServe's webhook does.

The predictor is either the generic ``model`` form (``modelFormat`` picks the runtime) or one of
the framework shortcuts (``sklearn``, ``xgboost``, ``lightgbm``, ``tensorflow``, ``pytorch``,
``onnx``), or custom ``containers``; exactly one. A shortcut is served exactly like ``model``
with ``modelFormat.name`` set to the shortcut's name (`Predictor.model_view`).

Where a model may live (``storageUri``). Local ones are read in place by the model server:

- ``pvc://<claim>/<path>``: ``$TRIMARAN_HOME/volumes/<namespace>/<claim>/<path>``, the local
  volume a training Job wrote to; ``<path>`` may not leave the claim (no ``..``);
- ``file:///abs/path`` or ``/abs/path``: a directory on this machine, which must lie under one of
  the allowed roots (`model_roots`: ``$TRIMARAN_MODEL_ROOTS``, ``os.pathsep``-separated, else the
  user's home, the system temp directory and ``$TRIMARAN_HOME``);
- ``relative/path``: ``$TRIMARAN_HOME/models/relative/path`` (no ``..``);
- ``s3://``, ``gs://``, ``http(s)://``, ``hf://`` and MLflow's ``models:/`` and ``runs:/`` (resolved by
  the tracking server of ``MLFLOW_TRACKING_URI`` in the model's env) are downloaded by the controller into a
  cache (`trimaran.serving.storage`) and the cached directory is mounted like a local path; the
  other KServe schemes (``hdfs://``, ``oci://``, Azure, ...) are refused with the supported list;
- KServe's ``storage: {key, path, parameters}`` instead of a URI: an S3 bucket named by an entry of
  the namespace's ``storage-config`` Secret (`trimaran.serving.storage.resolve_storage_spec`).

Lexical rules are checked here (at admission); the root check needs the control plane's
environment and the file system, and a download needs the network, so the controller does those
(`resolve_storage_uri`, the download) and reports a failure in the InferenceService's status.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field

from trimaran.api.core import Container, EnvVar, PodSpec, ResourceRequirements
from trimaran.api.durations import parse_duration
from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, NonNegInt32, NonNegInt64, Resource

__all__ = [
    "API_VERSION",
    "AUTOSCALING_PREFIX",
    "DEPLOYMENT_MODE_ANNOTATION",
    "FRAMEWORK_SHORTCUTS",
    "InferenceService",
    "InferenceServiceSpec",
    "ModelFormat",
    "ModelSpec",
    "PredictorSpec",
    "StorageLocation",
    "StorageUriError",
    "TransformerSpec",
    "model_roots",
    "parse_duration",
    "parse_storage_uri",
    "requested_mode",
    "resolve_storage_uri",
]

GROUP = "serving.kserve.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
AUTOSCALING_PREFIX = "autoscaling.knative.dev/"
SERVING_PREFIX = "serving.kserve.io/"
DEFAULT_MIN_REPLICAS = 1
DEPLOYMENT_MODE_ANNOTATION = SERVING_PREFIX + "deploymentMode"
#: KServe's deployment modes by every name it accepts (the legacy ones first named them).
_MODES = {"Standard": "Standard", "RawDeployment": "Standard", "Knative": "Knative", "Serverless": "Knative",
          "ModelMesh": "ModelMesh"}
#: The shortcuts the local model server serves, by their key under ``predictor``.
FRAMEWORK_SHORTCUTS = ("sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "onnx")
#: Shortcuts KServe has whose runtimes do not exist here.
UNAVAILABLE_SHORTCUTS = ("triton", "huggingface", "pmml", "paddle")
_PREDICTOR_KEYS = ("model", *FRAMEWORK_SHORTCUTS, *UNAVAILABLE_SHORTCUTS, "containers")
# KServe's schemes that no download here handles.
_UNSUPPORTED_SCHEMES = ("hdfs", "webhdfs", "oci", "oci+native", "oci+fetch", "modelscope", "azure", "abfs", "wasb",
                        "wasbs")
# KServe's name rule for an InferenceService (its webhook's regex), stricter than DNS-1123.
_ISVC_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_ISVC_NAME_MAX = 63 - len("-predictor-00001")
_SCALE_METRICS = ("concurrency", "rps", "cpu", "memory")
_KNOWN_AUTOSCALING = {
    "class": ("kpa.autoscaling.knative.dev", "hpa.autoscaling.knative.dev"),
    "metric": _SCALE_METRICS,
}
_FLOAT_AUTOSCALING = ("target", "target-utilization-percentage", "panic-window-percentage",
                      "panic-threshold-percentage", "max-scale-up-rate", "max-scale-down-rate",
                      "target-burst-capacity")
_INT_AUTOSCALING = ("min-scale", "max-scale", "initial-scale")
_DURATION_AUTOSCALING = ("window", "scale-to-zero-grace-period", "scale-to-zero-pod-retention-period",
                         "scale-down-delay")
# --- storage ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageLocation:
    """Where a storageUri points: a claim (``pvc``), a path under ``$TRIMARAN_HOME/models``
    (``relative``), an absolute path (``path``), or a source to download (``remote``: ``path`` is
    the URI); ``path`` is relative for the first two."""

    kind: Literal["pvc", "relative", "path", "remote"]
    path: str
    claim: str = ""


class StorageUriError(ValueError):
    """A storageUri that cannot be served from this machine; the message says what to do."""


def parse_storage_uri(uri: str) -> StorageLocation:
    """The lexical part of resolving a storageUri (no file system access). Raises StorageUriError."""
    scheme, sep, rest = uri.partition("://")
    if not sep and uri.lower().startswith(("models:/", "runs:/")):  # MLflow's URIs have one slash
        scheme, sep = uri.partition(":")[0], ":/"
    if not sep:
        if not uri:
            raise StorageUriError("must not be empty")
        if uri.startswith("/"):
            return StorageLocation("path", _normal_absolute(uri))
        return StorageLocation("relative", _inside(uri, "the path"))
    scheme = scheme.lower()
    if scheme == "pvc":
        claim, _, sub = rest.partition("/")
        if not claim:
            raise StorageUriError("pvc:// needs a claim name: pvc://<claim>/<path>")
        if "/" in claim or claim in (".", ".."):
            raise StorageUriError(f"invalid claim name {claim!r}")
        return StorageLocation("pvc", _inside(sub, "the path inside the claim", allow_empty=True), claim=claim)
    if scheme == "file":
        if not rest.startswith("/"):
            raise StorageUriError("file:// needs an absolute path: file:///abs/path")
        return StorageLocation("path", _normal_absolute(rest))
    from trimaran.serving.storage import SCHEMES, InvalidStorageUri, storage_for

    if scheme in SCHEMES:
        try:
            storage_for(uri)
        except InvalidStorageUri as exc:
            raise StorageUriError(str(exc)) from None
        return StorageLocation("remote", uri)
    supported = ", ".join(f"{s}://" for s in SCHEMES)
    if scheme in _UNSUPPORTED_SCHEMES:
        raise StorageUriError(f"{scheme}:// is not supported locally; use {supported}, pvc://<claim>/<path>, "
                              "file:///abs/path or a local path")
    raise StorageUriError(f"Cannot recognize storage type for {uri}; use {supported}, pvc://<claim>/<path>, "
                          "file:///abs/path, an absolute path or a path relative to $TRIMARAN_HOME/models")


def _check_storage_spec(path: str, spec: "ModelSpec") -> list[FieldError]:
    """KServe's ``storage:`` form (a key of the ``storage-config`` Secret and a path in its bucket)."""
    errs: list[FieldError] = []
    storage = spec.storage or {}
    where = join_path(path, "storage")
    if spec.storage_uri:
        errs.append(FieldError.forbidden(join_path(path, "storageUri"), "cannot co-exist with storage"))
    if not isinstance(storage.get("path"), str) or not storage["path"]:
        errs.append(FieldError.required(join_path(where, "path"), "the path of the model in the storage"))
    else:
        try:
            _inside(storage["path"], "the path")
        except StorageUriError as exc:
            errs.append(FieldError.invalid(join_path(where, "path"), storage["path"], str(exc)))
    params = storage.get("parameters")
    if params is not None and not isinstance(params, dict):
        errs.append(FieldError.invalid(join_path(where, "parameters"), str(params), "must be a map of strings"))
    elif params and params.get("type", "s3") != "s3":
        errs.append(FieldError.not_supported(join_path(where, "parameters", "type"), str(params["type"]), ["s3"]))
    return errs


def _inside(path: str, what: str, allow_empty: bool = False) -> str:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise StorageUriError(f"{what} {path!r} must stay inside its root (no '..', not absolute)")
    if not pure.parts and not allow_empty:
        raise StorageUriError(f"{what} must not be empty")
    return str(pure) if pure.parts else ""


def _normal_absolute(path: str) -> str:
    if ".." in PurePosixPath(path).parts:
        raise StorageUriError(f"{path!r} must not contain '..'")
    return str(PurePosixPath(path))


def model_roots(home: Path) -> list[Path]:
    """Directories an absolute storageUri may point into (see the module docstring)."""
    import tempfile  # here, not at the top: `import trimaran.api` stays cheap for the CLI

    configured = os.environ.get("TRIMARAN_MODEL_ROOTS")
    if configured:
        return [Path(p).resolve() for p in configured.split(os.pathsep) if p]
    return [Path.home().resolve(), Path(tempfile.gettempdir()).resolve(), home.resolve()]


def resolve_storage_uri(uri: str, home: Path, namespace: str) -> Path:
    """The host directory a storageUri names, symlinks resolved and checked against its root.

    Raises StorageUriError when the URI is not local or leaves its root.
    """
    loc = parse_storage_uri(uri)
    if loc.kind == "remote":
        raise StorageUriError(f"{uri} is downloaded, not resolved to a local directory")
    if loc.kind == "pvc":
        roots = [(home / "volumes" / namespace / loc.claim).resolve()]
        target = roots[0] / loc.path
    elif loc.kind == "relative":
        roots = [(home / "models").resolve()]
        target = roots[0] / loc.path
    else:
        roots = model_roots(home)
        target = Path(loc.path)
    resolved = target.resolve()
    if not any(resolved == root or root in resolved.parents for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise StorageUriError(f"{resolved} is outside the allowed model roots ({allowed}); "
                              "set TRIMARAN_MODEL_ROOTS on the control plane to allow it")
    return resolved


# --- spec ---------------------------------------------------------------------------------------


class ModelFormat(ApiModel):
    """The model's format (``sklearn``, ``onnx``, ...) and optional version, which pick the runtime."""

    name: str
    version: str | None = None


class Batcher(ApiModel):
    """Server-side request batching: up to ``maxBatchSize`` requests, waiting at most ``maxLatency`` ms."""

    max_batch_size: NonNegInt32 | None = None
    max_latency: NonNegInt32 | None = None
    timeout: NonNegInt32 | None = None


class LoggerSpec(ApiModel):
    """``logger``: inference requests and/or responses sent as CloudEvents to ``url`` (an http:// sink)."""

    url: str | None = None
    mode: Literal["all", "request", "response"] | None = None
    metadata_headers: list[str] | None = None
    metadata_annotations: list[str] | None = None
    storage: dict[str, Any] | None = None

    def check(self, path: str) -> list[FieldError]:
        return check_logger_url(join_path(path, "url"), self.url)


def check_logger_url(path: str, url: str | None) -> list[FieldError]:
    """A payload logger's sink (KServe's and Seldon's ``logger.url``)."""
    if not url:
        # KServe and Seldon fall back to the cluster's default broker; none runs here, so nothing would be logged.
        return [FieldError.required(path, "no default broker runs locally: name the sink")]
    if not re.match(r"^http://[^/?#\s]+", url):
        return [FieldError.invalid(path, url, "must be an http:// URL with a host")]
    return []


class ModelSpec(ApiModel):
    """A model to serve (``predictor.model``, and each framework shortcut): where it is, how to
    talk to it, and the serving container's overrides (``args``, ``env``, ``resources``)."""

    model_format: ModelFormat | None = None  # set for ``model``; implied by a shortcut's key
    runtime: str | None = None
    runtime_version: str | None = None
    protocol_version: Literal["v1", "v2", "grpc-v1", "grpc-v2"] | None = None
    storage_uri: str | None = None
    storage: dict[str, Any] | None = None
    name: str | None = None
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    resources: ResourceRequirements | None = None
    ports: list[dict[str, Any]] | None = None
    readiness_probe: dict[str, Any] | None = None
    liveness_probe: dict[str, Any] | None = None
    working_dir: str | None = None


class ComponentExtensionSpec(ApiModel):
    """Scaling, concurrency, timeout, canary and batching knobs of a component."""

    min_replicas: NonNegInt32 | None = None
    max_replicas: NonNegInt32 | None = None
    scale_target: NonNegInt32 | None = None
    scale_metric: Literal["concurrency", "rps", "cpu", "memory"] | None = None
    scale_metric_type: Literal["Utilization", "AverageValue"] | None = None
    auto_scaling: dict[str, Any] | None = None
    container_concurrency: NonNegInt64 | None = None
    timeout: NonNegInt64 | None = None
    canary_traffic_percent: NonNegInt64 | None = None
    batcher: Batcher | None = None
    logger: LoggerSpec | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    deployment_strategy: dict[str, Any] | None = None

    def check_extension(self, path: str) -> list[FieldError]:
        """KServe's ``validateReplicas``, ``validateContainerConcurrency`` and canary range."""
        errs: list[FieldError] = []
        lo = DEFAULT_MIN_REPLICAS if self.min_replicas is None else self.min_replicas
        if self.max_replicas and self.max_replicas < lo:
            errs.append(FieldError.invalid(join_path(path, "maxReplicas"), self.max_replicas,
                                           f"MinReplicas ({lo}) cannot be greater than MaxReplicas"))
        if self.container_concurrency is not None and self.container_concurrency > 1000:
            errs.append(FieldError.invalid(join_path(path, "containerConcurrency"), self.container_concurrency,
                                           "must be between 0 and 1000, inclusive"))
        if self.canary_traffic_percent is not None and self.canary_traffic_percent > 100:
            errs.append(FieldError.invalid(join_path(path, "canaryTrafficPercent"), self.canary_traffic_percent,
                                           "must be between 0 and 100, inclusive"))
        if self.batcher is not None and self.batcher.max_batch_size == 0:
            errs.append(FieldError.invalid(join_path(path, "batcher", "maxBatchSize"), 0, "must be at least 1"))
        if self.logger is not None:
            errs.extend(self.logger.check(join_path(path, "logger")))
        if self.scale_metric in ("cpu", "memory") and self.min_replicas == 0:
            errs.append(FieldError.invalid(join_path(path, "minReplicas"), 0,
                                           f"scaleMetric {self.scale_metric} (HPA) cannot scale to zero"))
        return errs


class _ComponentPod(ComponentExtensionSpec, PodSpec):
    """A component: the extension knobs plus an inline PodSpec (``containers`` optional)."""

    containers: list[Container] | None = None  # type: ignore[assignment]

    def check_containers(self, path: str) -> list[FieldError]:
        """Container names, ports, env and resources of custom containers."""
        volume_names = {v.name for v in self.volumes or []}
        errs: list[FieldError] = []
        for i, container in enumerate(self.containers or []):
            errs.extend(container.check(join_path(path, "containers", i), volume_names, require_image=False))
        return errs


class PredictorSpec(_ComponentPod):
    """``spec.predictor``: exactly one of ``model``, a framework shortcut, or ``containers``."""

    name: str | None = None
    model: ModelSpec | None = None
    sklearn: ModelSpec | None = None
    xgboost: ModelSpec | None = None
    lightgbm: ModelSpec | None = None
    tensorflow: ModelSpec | None = None
    pytorch: ModelSpec | None = None
    onnx: ModelSpec | None = None
    triton: ModelSpec | None = None
    huggingface: ModelSpec | None = None
    pmml: ModelSpec | None = None
    paddle: ModelSpec | None = None
    storage_uris: list[dict[str, Any]] | None = None
    worker_spec: dict[str, Any] | None = None

    def implementations(self) -> list[str]:
        """The predictor keys that are set (exactly one is valid)."""
        return [k for k in _PREDICTOR_KEYS if getattr(self, k) is not None and (k != "containers" or self.containers)]

    def model_view(self) -> ModelSpec | None:
        """The model to serve with its format set (a shortcut becomes ``modelFormat.name``), or None
        for custom containers."""
        for key in ("model", *FRAMEWORK_SHORTCUTS):
            spec = getattr(self, key)
            if spec is not None:
                if key == "model":
                    return spec
                view = spec.model_copy(deep=True)
                view.model_format = ModelFormat(name=key)
                return view
        return None

    def check(self, path: str) -> list[FieldError]:
        """One implementation, a local storageUri, and the component rules."""
        errs = self.check_extension(path)
        chosen = self.implementations()
        one_of = "exactly one of [" + ", ".join(_PREDICTOR_KEYS) + "] must be specified in PredictorSpec"
        if not chosen:
            errs.append(FieldError.required(path, one_of))
        elif len(chosen) > 1:
            errs.append(FieldError.forbidden(path, f"{one_of}, got {', '.join(chosen)}"))
        for key in chosen:
            p = join_path(path, key)
            if key in UNAVAILABLE_SHORTCUTS:
                errs.append(FieldError.forbidden(
                    p, f"the {key} runtime is not available locally; serve the model with predictor.model and a "
                       f"modelFormat the local server loads ({', '.join(FRAMEWORK_SHORTCUTS)})"))
            elif key == "containers":
                errs.extend(self.check_containers(path))
            else:
                spec = getattr(self, key)
                if key == "model" and spec.model_format is None:
                    errs.append(FieldError.required(join_path(p, "modelFormat")))
                if key == "model" and spec.model_format is not None and not spec.model_format.name:
                    errs.append(FieldError.required(join_path(p, "modelFormat", "name")))
                if spec.storage is not None:
                    errs.extend(_check_storage_spec(p, spec))
                elif not spec.storage_uri:
                    errs.append(FieldError.required(join_path(p, "storageUri"),
                                                    "the local model server needs a model directory"))
                else:
                    try:
                        parse_storage_uri(spec.storage_uri)
                    except StorageUriError as exc:
                        errs.append(FieldError.invalid(join_path(p, "storageUri"), spec.storage_uri, str(exc)))
                if spec.resources is not None:
                    errs.extend(spec.resources.check(join_path(p, "resources")))
        if self.storage_uris:
            errs.append(FieldError.forbidden(join_path(path, "storageUris"),
                                             "multiple storage URIs are not supported locally; use storageUri"))
        if self.worker_spec:
            errs.append(FieldError.forbidden(join_path(path, "workerSpec"), "multi-node serving is not supported"))
        return errs


class TransformerSpec(_ComponentPod):
    """``spec.transformer``: custom containers that pre/post-process and call the predictor."""

    def check(self, path: str) -> list[FieldError]:
        """Containers are required; the component rules apply."""
        errs = self.check_extension(path)
        if not self.containers:
            errs.append(FieldError.required(join_path(path, "containers"),
                                            "a transformer is a custom container"))
        return errs + self.check_containers(path)


class InferenceServiceSpec(ApiModel):
    """``predictor`` (required), ``transformer``; ``explainer`` and ``canary`` are not served locally."""

    predictor: PredictorSpec
    transformer: TransformerSpec | None = None
    explainer: dict[str, Any] | None = None
    canary: list[dict[str, Any]] | None = None


class InferenceService(Resource):
    """serving.kserve.io/v1beta1 InferenceService: a model behind one URL, autoscaled, with canaries.

    ``status`` is the controller's (KServe's shape: url, address, conditions, components,
    modelStatus); it is kept as given.
    """

    spec: InferenceServiceSpec
    status: dict[str, Any] | None = Field(default=None)

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """KServe's webhook: lowercase, starts with a letter, and short enough for revision names."""
        errs = []
        if not _ISVC_NAME.fullmatch(name):
            errs.append("The InferenceService name must consist of lower case alphanumeric characters or '-', "
                        "and must start with alphabetical character. (e.g. \"my-name\" or \"abc-123\", regex used "
                        "for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
        if len(name) > _ISVC_NAME_MAX:
            errs.append(f"must be no more than {_ISVC_NAME_MAX} characters")
        return errs

    def set_defaults(self) -> None:
        """KServe's defaults: minReplicas 1 and protocol v1 on each component."""
        for component in (self.spec.predictor, self.spec.transformer):
            if component is not None and component.min_replicas is None:
                component.min_replicas = DEFAULT_MIN_REPLICAS
        for key in ("model", *FRAMEWORK_SHORTCUTS):
            spec = getattr(self.spec.predictor, key)
            if spec is not None and spec.protocol_version is None:
                spec.protocol_version = "v1"

    def admission_warnings(self) -> list[str]:
        """What the chosen deployment mode ignores, said instead of silently dropped (upstream drops it)."""
        mode = requested_mode(self.metadata.annotations)
        raw = (self.metadata.annotations or {}).get(DEPLOYMENT_MODE_ANNOTATION)
        if mode == "ModelMesh":
            return [f"{DEPLOYMENT_MODE_ANNOTATION} ModelMesh: there is no ModelMesh here; Trimaran serves this "
                    "InferenceService in Knative mode (revisions, Knative's autoscaler unless the HPA class is "
                    "chosen, canaryTrafficPercent honoured)"]
        if mode != "Standard":
            return []
        warnings = []
        for path, component in (("spec.predictor", self.spec.predictor), ("spec.transformer", self.spec.transformer)):
            if component is None:
                continue
            if component.canary_traffic_percent is not None:
                warnings.append(f"{path}.canaryTrafficPercent: ignored in {raw} mode (one Deployment per "
                                "component, no revisions to split traffic between)")
            if component.min_replicas == 0:
                warnings.append(f"{path}.minReplicas: 0 is treated as 1 in {raw} mode (a HorizontalPodAutoscaler "
                                "cannot scale to zero)")
        return warnings

    @classmethod
    def update_errors(cls, old: dict, new: dict) -> list[FieldError]:
        """KServe's webhook refuses changing the deployment mode of an existing InferenceService. The
        mode it was created in is its annotation's (or, without one, the one its status records);
        legacy names count as their new ones (upstream compares the strings, so ``RawDeployment``
        and ``Standard`` would differ there)."""
        after = (new["metadata"].get("annotations") or {}).get(DEPLOYMENT_MODE_ANNOTATION)
        if after is None:
            return []
        before_raw = (old["metadata"].get("annotations") or {}).get(DEPLOYMENT_MODE_ANNOTATION) \
            or (old.get("status") or {}).get("deploymentMode")
        if before_raw is None or _MODES.get(before_raw, before_raw) == _MODES.get(after, after):
            return []
        return [FieldError.forbidden(join_path("metadata.annotations", DEPLOYMENT_MODE_ANNOTATION),
                                     f"update rejected: deploymentMode cannot be changed from '{before_raw}' "
                                     f"to '{after}'")]

    def check(self) -> list[FieldError]:
        """Metadata, annotations (autoscaling values), predictor and transformer."""
        errs = super().check()
        errs.extend(_check_annotations(self.metadata.annotations or {}))
        mode = (self.metadata.annotations or {}).get(DEPLOYMENT_MODE_ANNOTATION)
        if mode is not None and mode not in _MODES:
            errs.append(FieldError.not_supported(join_path("metadata.annotations", DEPLOYMENT_MODE_ANNOTATION),
                                                 mode, list(_MODES)))
        errs.extend(self.spec.predictor.check("spec.predictor"))
        if self.spec.transformer is not None:
            errs.extend(self.spec.transformer.check("spec.transformer"))
        if self.spec.explainer is not None:
            errs.append(FieldError.forbidden("spec.explainer", "explainers are not supported locally"))
        if self.spec.canary:
            errs.append(FieldError.forbidden(
                "spec.canary", "the canary list is not supported locally; use predictor.canaryTrafficPercent"))
        return errs


def requested_mode(annotations: dict[str, str] | None) -> str | None:
    """The deployment mode the annotation asks for, by its current name (``Standard``, ``Knative``,
    ``ModelMesh``); None without the annotation (or with a value the API refuses)."""
    return _MODES.get((annotations or {}).get(DEPLOYMENT_MODE_ANNOTATION) or "")


def _check_annotations(annotations: dict[str, str]) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, value in annotations.items():
        if not key.startswith(AUTOSCALING_PREFIX):
            continue
        name = key[len(AUTOSCALING_PREFIX):]
        path = join_path("metadata.annotations", key)
        if name in _KNOWN_AUTOSCALING and value not in _KNOWN_AUTOSCALING[name]:
            errs.append(FieldError.not_supported(path, value, _KNOWN_AUTOSCALING[name]))
        elif name in _FLOAT_AUTOSCALING or name in _INT_AUTOSCALING:
            try:
                number = float(value) if name in _FLOAT_AUTOSCALING else int(value)
            except ValueError:
                errs.append(FieldError.invalid(path, value, "must be a number"))
                continue
            if name in _INT_AUTOSCALING and number < 0:
                errs.append(FieldError.invalid(path, value, "must be greater than or equal to 0"))
            if name == "panic-window-percentage" and not 1 <= number <= 100:
                errs.append(FieldError.invalid(path, value, "must be in [1, 100]"))
            if name in ("target", "target-utilization-percentage") and number <= 0:
                errs.append(FieldError.invalid(path, value, "must be greater than 0"))
        elif name in _DURATION_AUTOSCALING:
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                errs.append(FieldError.invalid(path, value, str(exc)))
                continue
            if name == "window" and not 6 <= seconds <= 3600:
                errs.append(FieldError.invalid(path, value, "must be between 6s and 1h"))
    return errs
