"""The subset of core/v1 that pods need: PodSpec and its parts, Pod, ConfigMap, Secret, Namespace.

Fields Trimaran reads are modelled and checked; fields Kubernetes knows but Trimaran ignores
(probes, lifecycle hooks, DNS settings, cloud volume types, ...) are declared free-form so that
real manifests load without "unknown field" warnings and keep those fields.
"""

# Annotations are evaluated eagerly (no `from __future__ import annotations`): pydantic would
# otherwise compile every annotation string at import, about a sixth of `import trimaran.api`.

import base64
import binascii
import posixpath
import re
from decimal import InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator

from trimaran.api.errors import FieldError, invalid_value, join_path
from trimaran.api.meta import (
    ApiModel,
    Condition,
    Int32,
    NonNegInt32,
    NonNegInt64,
    ObjectMeta,
    Resource,
    check_labels,
    check_qualified_name,
    check_selector_values,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_valid_label_value,
)
from trimaran.api.podsecurity import label_errors
from trimaran.api.quantity import number_text, parse_cpu, parse_memory, parse_quantity

__all__ = [
    "Affinity",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Container",
    "ContainerPort",
    "ContainerState",
    "ContainerStatus",
    "EnvVar",
    "EnvVarSource",
    "Namespace",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "Quantity",
    "ResourceRequirements",
    "Secret",
    "ServiceAccount",
    "Toleration",
    "Volume",
    "VolumeMount",
    "is_extended_resource",
    "parse_cpu",
    "parse_memory",
    "parse_quantity",
]

# --- quantities -------------------------------------------------------------------------------


def _validate_quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise invalid_value('must be a quantity: a string such as "500m" or "4Gi", or a number')
    try:
        text = value if isinstance(value, str) else number_text(value)
        parse_quantity(text)
    except (ValueError, InvalidOperation) as exc:
        raise invalid_value(str(exc)) from None
    return text


#: A quantity field: accepts a string or a number (``cpu: 2``), stored as its string form.
Quantity = Annotated[str, PlainValidator(_validate_quantity)]


def is_extended_resource(name: str) -> bool:
    """Resources outside kubernetes.io (``nvidia.com/gpu``): whole units, requests equal limits."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


# --- resources --------------------------------------------------------------------------------


class ResourceRequirements(ApiModel):
    """``resources``: amounts requested (for placement) and limits (for enforcement)."""

    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None
    claims: list[Any] | None = None

    def effective_requests(self) -> dict[str, str]:
        """Requests with limits filling the gaps, as Kubernetes defaults a pod's requests."""
        return {**(self.limits or {}), **(self.requests or {})}

    def check(self, path: str) -> list[FieldError]:
        """Resource names, non-negative amounts, whole extended resources, requests ≤ limits."""
        errs: list[FieldError] = []
        limits, requests = self.limits or {}, self.requests or {}
        for section, amounts in (("limits", limits), ("requests", requests)):
            for name, amount in amounts.items():
                p = join_path(path, section, name)
                errs.extend(check_qualified_name(p, name))
                value = parse_quantity(amount)
                if value < 0:
                    errs.append(FieldError.invalid(p, amount, "must be greater than or equal to 0"))
                if is_extended_resource(name) and value != value.to_integral_value():
                    errs.append(FieldError.invalid(p, amount, "must be an integer"))
        for name, amount in requests.items():
            if name not in limits:
                if is_extended_resource(name):
                    errs.append(FieldError.required(
                        join_path(path, "limits"), f"Limit must be set for non overcommitable resources ({name})"))
                continue
            req, lim = parse_quantity(amount), parse_quantity(limits[name])
            if is_extended_resource(name) and req != lim:
                errs.append(FieldError.invalid(
                    join_path(path, "requests", name), amount, f"must be equal to {name} limit of {limits[name]}"))
            elif req > lim:
                errs.append(FieldError.invalid(
                    join_path(path, "requests", name), amount,
                    f"must be less than or equal to {name} limit of {limits[name]}"))
        return errs


# --- environment ------------------------------------------------------------------------------

_FIELD_REF_PATHS = (
    "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations",
    "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs",
)
_FIELD_REF_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['([^']*)'\]")
_RESOURCE_REFS = (
    "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    "requests.cpu", "requests.memory", "requests.ephemeral-storage",
)
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MAX = 253


def is_config_key(key: str) -> list[str]:
    """A key of ConfigMap/Secret data (it becomes a file name in volumes)."""
    errs = []
    if len(key) > _CONFIG_KEY_MAX:
        errs.append(f"must be no more than {_CONFIG_KEY_MAX} characters")
    if not _CONFIG_KEY.fullmatch(key):
        errs.append(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
            "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
    if key in (".", "..") or key.startswith(".."):
        errs.append("must not be '.' or '..' and must not start with '..'")
    return errs


def _env_name_errors(name: str) -> list[str]:
    # Kubernetes (1.30+) accepts any printable ASCII but '=' in variable names.
    if name and all(" " <= c <= "~" and c != "=" for c in name):
        return []
    return ["a valid environment variable name must consist only of printable ASCII characters other than '='"]


class ObjectFieldSelector(ApiModel):
    """``fieldRef``: a field of the pod, e.g. ``metadata.name`` or ``status.podIP``."""

    api_version: str | None = None
    field_path: str


class ResourceFieldSelector(ApiModel):
    """``resourceFieldRef``: a container's request or limit, divided by ``divisor``."""

    container_name: str | None = None
    resource: str
    divisor: Quantity | None = None


class ConfigMapKeySelector(ApiModel):
    """``configMapKeyRef``: one key of a ConfigMap in the pod's namespace."""

    name: str | None = None
    key: str
    optional: bool | None = None


class SecretKeySelector(ApiModel):
    """``secretKeyRef``: one key of a Secret in the pod's namespace."""

    name: str | None = None
    key: str
    optional: bool | None = None


class EnvVarSource(ApiModel):
    """``valueFrom``: exactly one source."""

    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    secret_key_ref: SecretKeySelector | None = None
    file_key_ref: dict[str, Any] | None = None

    def check(self, path: str) -> list[FieldError]:
        """One source, pointing at something that can exist."""
        errs: list[FieldError] = []
        given = [k for k in ("field_ref", "resource_field_ref", "config_map_key_ref", "secret_key_ref", "file_key_ref")
                 if getattr(self, k) is not None]
        if not given:
            errs.append(FieldError.invalid(
                path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
        elif len(given) > 1:
            errs.append(FieldError.invalid(path, "", "may not have more than one field specified at a time"))
        if self.field_ref is not None:
            fp = self.field_ref.field_path
            if fp not in _FIELD_REF_PATHS and not _FIELD_REF_SUBSCRIPT.fullmatch(fp):
                errs.append(FieldError.not_supported(join_path(path, "fieldRef", "fieldPath"), fp, _FIELD_REF_PATHS))
        if self.resource_field_ref is not None:
            res = self.resource_field_ref.resource
            if res not in _RESOURCE_REFS and not res.split(".", 1)[-1].startswith("hugepages-"):
                errs.append(FieldError.not_supported(
                    join_path(path, "resourceFieldRef", "resource"), res, _RESOURCE_REFS))
        for attr, alias in (("config_map_key_ref", "configMapKeyRef"), ("secret_key_ref", "secretKeyRef")):
            ref = getattr(self, attr)
            if ref is not None:
                p = join_path(path, alias, "key")
                errs.extend(FieldError.invalid(p, ref.key, m) for m in is_config_key(ref.key))
        return errs


class EnvVar(ApiModel):
    """One environment variable: a literal ``value`` or a ``valueFrom`` source."""

    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None

    def check(self, path: str) -> list[FieldError]:
        """A valid name, and not both a value and a source."""
        errs: list[FieldError] = []
        if not self.name:
            errs.append(FieldError.required(join_path(path, "name")))
        else:
            errs.extend(FieldError.invalid(join_path(path, "name"), self.name, m) for m in _env_name_errors(self.name))
        errs.extend(_check_no_nul(join_path(path, "value"), self.value))
        if self.value_from is not None:
            if self.value:
                errs.append(FieldError.invalid(
                    join_path(path, "valueFrom"), "", "may not be specified when `value` is not empty"))
            errs.extend(self.value_from.check(join_path(path, "valueFrom")))
        return errs


class LocalObjectReference(ApiModel):
    """A ConfigMap or Secret named in ``envFrom``."""

    name: str | None = None
    optional: bool | None = None


class EnvFromSource(ApiModel):
    """``envFrom``: every key of a ConfigMap or Secret becomes a variable (with ``prefix``)."""

    prefix: str | None = None
    config_map_ref: LocalObjectReference | None = None
    secret_ref: LocalObjectReference | None = None

    def check(self, path: str) -> list[FieldError]:
        """Exactly one of configMapRef and secretRef."""
        if (self.config_map_ref is None) == (self.secret_ref is None):
            detail = ("may not have more than one field specified at a time" if self.config_map_ref is not None
                      else "must specify one of: `configMapRef` or `secretRef`")
            return [FieldError.invalid(path, "", detail)]
        return []


# --- containers -------------------------------------------------------------------------------

_PORT_NAME_MAX = 15
_PORT_NAME_CHARS = re.compile(r"[-a-z0-9]+")


def is_valid_port_name(name: str) -> list[str]:
    """IANA service name rules, which Kubernetes applies to port names."""
    errs = []
    if len(name) > _PORT_NAME_MAX:
        errs.append(f"must be no more than {_PORT_NAME_MAX} characters")
    if not _PORT_NAME_CHARS.fullmatch(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search(r"[a-z]", name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def _check_port_number(path: str, port: int) -> list[FieldError]:
    if 1 <= port <= 65535:
        return []
    return [FieldError.invalid(path, port, "must be between 1 and 65535, inclusive")]


class ContainerPort(ApiModel):
    """A port the container listens on. Protocol defaults to TCP (the CRD schema's default)."""

    name: str | None = None
    container_port: int
    host_port: int | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str | None = Field(default=None, alias="hostIP")


class VolumeMount(ApiModel):
    """Where a pod volume appears inside the container."""

    name: str
    mount_path: str
    read_only: bool | None = None
    sub_path: str | None = None
    sub_path_expr: str | None = None
    mount_propagation: str | None = None
    recursive_read_only: str | None = None


def _check_no_backsteps(path: str, value: str) -> list[FieldError]:
    if ".." in value.split("/"):
        return [FieldError.invalid(path, value, "must not contain '..'")]
    return []


def _check_relative_path(path: str, value: str) -> list[FieldError]:
    errs = []
    if posixpath.isabs(value):
        errs.append(FieldError.invalid(path, value, "must be a relative path"))
    return errs + _check_no_backsteps(path, value)


# Linux's MAX_ARG_STRLEN: the most bytes one argument or one NAME=VALUE environment string may hold,
# its terminating NUL included. Past it execve fails (E2BIG) on every start of the container.
MAX_EXEC_STRING = 32 * 4096
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_MODEL_KEYS = ("model", "sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "onnx", "triton",
               "huggingface", "pmml", "paddle")


def start_errors(spec: dict[str, Any], spec_path: str) -> list[FieldError]:
    """What would make every start of a pod of ``spec`` (a pod spec as stored, at ``spec_path``) fail
    on this node, which Kubernetes' validation leaves to the runtime: an argument or environment
    string longer than execve takes, a volume mounted over the container's root."""
    errs: list[FieldError] = []
    for field in _CONTAINER_LISTS:
        for i, container in enumerate(spec.get(field) or []):
            if not isinstance(container, dict):
                continue
            # An InferenceService's model server is a container the kind registry makes of its model field.
            model = next((key for key in _MODEL_KEYS if isinstance(spec.get(key), dict)
                          and container == {**spec[key], "name": container.get("name")}), None)
            path = join_path(spec_path, model) if model else join_path(spec_path, field, i)
            errs.extend(_container_start_errors(container, path))
    return errs


def _container_start_errors(container: dict[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for field in ("command", "args"):
        for i, arg in enumerate(container.get(field) or []):
            if isinstance(arg, str) and len(arg.encode()) >= MAX_EXEC_STRING:
                errs.append(FieldError.too_long(join_path(path, field, i), MAX_EXEC_STRING - 1,
                                                "the most Linux takes in one argument"))
    for i, env in enumerate(container.get("env") or []):
        if isinstance(env, dict) and isinstance(env.get("value"), str):
            size = len(f"{env.get('name', '')}={env['value']}".encode())
            if size >= MAX_EXEC_STRING:
                errs.append(FieldError.too_long(join_path(path, "env", i, "value"), MAX_EXEC_STRING - 1,
                                                "with its name (NAME=VALUE), the most Linux takes in one "
                                                "environment string; put larger values in a ConfigMap volume"))
    for i, mount in enumerate(container.get("volumeMounts") or []):
        mount_path = mount.get("mountPath") if isinstance(mount, dict) else None
        if isinstance(mount_path, str) and mount_path.startswith("/") and posixpath.normpath(mount_path) in ("/", "//"):
            errs.append(FieldError.invalid(join_path(path, "volumeMounts", i, "mountPath"), mount_path,
                                           'must not be "/": a volume cannot replace the container\'s root '
                                           "filesystem"))
    return errs


def _check_no_nul(path: str, value: str | None) -> list[FieldError]:
    # A NUL cannot cross execve or a path: the pod would be accepted and could never start.
    if value is not None and "\0" in value:
        return [FieldError.invalid(path, value, "must not contain a NUL byte")]
    return []


class Container(ApiModel):
    """A container: here, one process tree started from ``command``/``args`` in a sandbox."""

    name: str
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    working_dir: str | None = None
    ports: list[ContainerPort] | None = None
    env_from: list[EnvFromSource] | None = None
    env: list[EnvVar] | None = None
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    security_context: dict[str, Any] | None = None
    liveness_probe: dict[str, Any] | None = None
    readiness_probe: dict[str, Any] | None = None
    startup_probe: dict[str, Any] | None = None
    lifecycle: dict[str, Any] | None = None
    termination_message_path: str | None = None
    termination_message_policy: Literal["File", "FallbackToLogsOnError"] | None = None
    stdin: bool | None = None
    stdin_once: bool | None = None
    tty: bool | None = None
    restart_policy: str | None = None
    restart_policy_rules: list[Any] | None = None
    resize_policy: list[Any] | None = None
    volume_devices: list[Any] | None = None

    def check(self, path: str, volume_names: set[str], *, require_image: bool) -> list[FieldError]:
        """Name, image, ports, env, resources and mounts of one container."""
        errs: list[FieldError] = []
        if not self.name:
            errs.append(FieldError.required(join_path(path, "name")))
        else:
            errs.extend(FieldError.invalid(join_path(path, "name"), self.name, m) for m in is_dns1123_label(self.name))
        if require_image and not self.image:
            errs.append(FieldError.required(join_path(path, "image")))
        port_names: set[str] = set()
        for i, port in enumerate(self.ports or []):
            p = join_path(path, "ports", i)
            errs.extend(_check_port_number(join_path(p, "containerPort"), port.container_port))
            if port.host_port is not None and port.host_port != 0:
                errs.extend(_check_port_number(join_path(p, "hostPort"), port.host_port))
            if port.name:
                errs.extend(FieldError.invalid(join_path(p, "name"), port.name, m)
                            for m in is_valid_port_name(port.name))
                if port.name in port_names:
                    errs.append(FieldError.duplicate(join_path(p, "name"), port.name))
                port_names.add(port.name)
        for field in ("command", "args"):
            for i, arg in enumerate(getattr(self, field) or []):
                errs.extend(_check_no_nul(join_path(path, field, i), arg))
        errs.extend(_check_no_nul(join_path(path, "workingDir"), self.working_dir))
        for i, env in enumerate(self.env or []):
            errs.extend(env.check(join_path(path, "env", i)))
        for i, source in enumerate(self.env_from or []):
            errs.extend(source.check(join_path(path, "envFrom", i)))
        if self.resources is not None:
            errs.extend(self.resources.check(join_path(path, "resources")))
        mount_paths: set[str] = set()
        for i, mount in enumerate(self.volume_mounts or []):
            p = join_path(path, "volumeMounts", i)
            if mount.name not in volume_names:
                errs.append(FieldError.not_found(join_path(p, "name"), mount.name))
            if not mount.mount_path:
                errs.append(FieldError.required(join_path(p, "mountPath")))
            elif not posixpath.isabs(mount.mount_path):
                # Kubernetes leaves this to the runtime, which refuses it when the pod starts.
                errs.append(FieldError.invalid(join_path(p, "mountPath"), mount.mount_path, "must be an absolute path"))
            elif mount.mount_path in mount_paths:
                errs.append(FieldError.invalid(join_path(p, "mountPath"), mount.mount_path, "must be unique"))
            mount_paths.add(mount.mount_path)
            errs.extend(_check_no_nul(join_path(p, "mountPath"), mount.mount_path))
            if mount.sub_path:
                errs.extend(_check_relative_path(join_path(p, "subPath"), mount.sub_path))
            if mount.sub_path_expr:
                errs.extend(_check_relative_path(join_path(p, "subPathExpr"), mount.sub_path_expr))
        return errs


# --- volumes ----------------------------------------------------------------------------------

_MAX_MODE = 0o777


def _check_mode(path: str, mode: int | None) -> list[FieldError]:
    if mode is None or 0 <= mode <= _MAX_MODE:
        return []
    return [FieldError.invalid(path, mode, "must be a number between 0 and 0777 (octal), both inclusive")]


class KeyToPath(ApiModel):
    """Projects one key of a ConfigMap/Secret to a file path inside the volume."""

    key: str
    path: str
    mode: int | None = None

    def check(self, path: str) -> list[FieldError]:
        """A non-empty key, a relative path, a valid file mode."""
        errs: list[FieldError] = []
        if not self.key:
            errs.append(FieldError.required(join_path(path, "key")))
        if not self.path:
            errs.append(FieldError.required(join_path(path, "path")))
        else:
            errs.extend(_check_relative_path(join_path(path, "path"), self.path))
        return errs + _check_mode(join_path(path, "mode"), self.mode)


class EmptyDirVolumeSource(ApiModel):
    """A scratch directory that lives as long as the pod; ``medium: Memory`` means tmpfs."""

    medium: str | None = None
    size_limit: Quantity | None = None


class HostPathVolumeSource(ApiModel):
    """A directory (or file) of the host."""

    path: str
    type: Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                  "BlockDevice"] | None = None


class PersistentVolumeClaimVolumeSource(ApiModel):
    """A named claim; locally, a persistent directory per claim name."""

    claim_name: str
    read_only: bool | None = None


class ConfigMapVolumeSource(ApiModel):
    """Keys of a ConfigMap as files."""

    name: str | None = None
    items: list[KeyToPath] | None = None
    default_mode: int | None = None
    optional: bool | None = None


class SecretVolumeSource(ApiModel):
    """Keys of a Secret as files."""

    secret_name: str | None = None
    items: list[KeyToPath] | None = None
    default_mode: int | None = None
    optional: bool | None = None


#: CSI drivers of object storage that the kubelet serves itself (fetching what they name, see
#: ``runtime/volumes.py``), each with the volume attribute it cannot do without.
STORAGE_DRIVER = "storage.trimaran.io"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
STORAGE_DRIVER_ATTRIBUTES = {STORAGE_DRIVER: "uri", GCSFUSE_DRIVER: "bucketName"}


class Volume(ApiModel):
    """A named volume of the pod, with exactly one source.

    emptyDir, hostPath, persistentVolumeClaim, configMap and secret are modelled; the other
    Kubernetes volume types are accepted as given (the runtime decides whether it can serve them).
    """

    name: str
    empty_dir: EmptyDirVolumeSource | None = None
    host_path: HostPathVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    azure_disk: dict[str, Any] | None = None
    azure_file: dict[str, Any] | None = None
    cephfs: dict[str, Any] | None = None
    cinder: dict[str, Any] | None = None
    csi: dict[str, Any] | None = None
    downward_api: dict[str, Any] | None = Field(default=None, alias="downwardAPI")
    ephemeral: dict[str, Any] | None = None
    fc: dict[str, Any] | None = None
    flex_volume: dict[str, Any] | None = None
    flocker: dict[str, Any] | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    git_repo: dict[str, Any] | None = None
    glusterfs: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    iscsi: dict[str, Any] | None = None
    nfs: dict[str, Any] | None = None
    photon_persistent_disk: dict[str, Any] | None = None
    portworx_volume: dict[str, Any] | None = None
    projected: dict[str, Any] | None = None
    quobyte: dict[str, Any] | None = None
    rbd: dict[str, Any] | None = None
    scale_io: dict[str, Any] | None = Field(default=None, alias="scaleIO")
    storageos: dict[str, Any] | None = None
    vsphere_volume: dict[str, Any] | None = None

    def source_types(self) -> list[str]:
        """The camelCase names of the sources given (a valid volume has exactly one)."""
        return [info.alias or name for name, info in type(self).model_fields.items()
                if name != "name" and getattr(self, name) is not None]

    def check(self, path: str) -> list[FieldError]:
        """Name, one source, and the modelled sources' own rules."""
        errs: list[FieldError] = []
        if not self.name:
            errs.append(FieldError.required(join_path(path, "name")))
        else:
            errs.extend(FieldError.invalid(join_path(path, "name"), self.name, m) for m in is_dns1123_label(self.name))
        sources = self.source_types()
        if not sources:
            errs.append(FieldError.required(path, "must specify a volume type"))
        elif len(sources) > 1:
            errs.append(FieldError.forbidden(join_path(path, sources[1]), "may not specify more than 1 volume type"))
        if self.empty_dir is not None and self.empty_dir.medium not in (None, "", "Memory", "HugePages") \
                and not self.empty_dir.medium.startswith("HugePages-"):
            errs.append(FieldError.not_supported(join_path(path, "emptyDir", "medium"), self.empty_dir.medium,
                                                 ("", "Memory", "HugePages")))
        if self.host_path is not None:
            p = join_path(path, "hostPath", "path")
            if not self.host_path.path:
                errs.append(FieldError.required(p))
            errs.extend(_check_no_backsteps(p, self.host_path.path) + _check_no_nul(p, self.host_path.path))
        if self.persistent_volume_claim is not None:
            p = join_path(path, "persistentVolumeClaim", "claimName")
            claim = self.persistent_volume_claim.claim_name
            if not claim:
                errs.append(FieldError.required(p))
            else:
                # The claim names a directory of the node: only a claim name can be one.
                errs.extend(FieldError.invalid(p, claim, m) for m in is_dns1123_subdomain(claim))
        for alias, source in (("configMap", self.config_map), ("secret", self.secret)):
            if source is None:
                continue
            p = join_path(path, alias)
            errs.extend(_check_mode(join_path(p, "defaultMode"), source.default_mode))
            for i, item in enumerate(source.items or []):
                errs.extend(item.check(join_path(p, "items", i)))
        if self.secret is not None and not self.secret.secret_name:
            errs.append(FieldError.required(join_path(path, "secret", "secretName")))
        if self.csi is not None:
            driver = self.csi.get("driver")
            attribute = STORAGE_DRIVER_ATTRIBUTES.get(driver or "")
            if not driver:
                errs.append(FieldError.required(join_path(path, "csi", "driver")))
            elif attribute and not (self.csi.get("volumeAttributes") or {}).get(attribute):
                errs.append(FieldError.required(join_path(path, "csi", "volumeAttributes", attribute),
                                                f"driver {driver} fetches what it names"))
        return errs


# --- scheduling -------------------------------------------------------------------------------


class NodeSelectorRequirement(ApiModel):
    """``key operator values`` against node labels."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None

    def check(self, path: str, *, label_key: bool = True) -> list[FieldError]:
        """Values present exactly as the operator needs; Gt/Lt take one integer."""
        errs: list[FieldError] = []
        if label_key:
            errs.extend(check_qualified_name(join_path(path, "key"), self.key))
        return errs + check_selector_values(join_path(path, "values"), self.operator, self.values)


class NodeSelectorTerm(ApiModel):
    """All expressions of a term must match (terms are ORed)."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None

    def check(self, path: str) -> list[FieldError]:
        """Each requirement's rules."""
        errs: list[FieldError] = []
        for i, req in enumerate(self.match_expressions or []):
            errs.extend(req.check(join_path(path, "matchExpressions", i)))
        for i, req in enumerate(self.match_fields or []):
            errs.extend(req.check(join_path(path, "matchFields", i), label_key=False))
        return errs


class NodeSelector(ApiModel):
    """Terms ORed together; a node must match one."""

    node_selector_terms: list[NodeSelectorTerm]

    def check(self, path: str) -> list[FieldError]:
        """At least one term, each valid."""
        if not self.node_selector_terms:
            return [FieldError.required(
                join_path(path, "nodeSelectorTerms"), "must have at least one node selector term")]
        errs: list[FieldError] = []
        for i, term in enumerate(self.node_selector_terms):
            errs.extend(term.check(join_path(path, "nodeSelectorTerms", i)))
        return errs


class PreferredSchedulingTerm(ApiModel):
    """A soft preference with a weight of 1 to 100."""

    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(ApiModel):
    """Hard (required) and soft (preferred) rules on node labels."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = None

    def check(self, path: str) -> list[FieldError]:
        """The required selector and each weighted preference."""
        errs: list[FieldError] = []
        if self.required_during_scheduling_ignored_during_execution is not None:
            errs.extend(self.required_during_scheduling_ignored_during_execution.check(
                join_path(path, "requiredDuringSchedulingIgnoredDuringExecution")))
        for i, term in enumerate(self.preferred_during_scheduling_ignored_during_execution or []):
            p = join_path(path, "preferredDuringSchedulingIgnoredDuringExecution", i)
            if not 1 <= term.weight <= 100:
                errs.append(FieldError.invalid(join_path(p, "weight"), term.weight, "must be in the range 1-100"))
            errs.extend(term.preference.check(join_path(p, "preference")))
        return errs


class Affinity(ApiModel):
    """Node affinity is modelled (one node, but its labels count); pod (anti-)affinity is kept as given."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: dict[str, Any] | None = None
    pod_anti_affinity: dict[str, Any] | None = None


class Toleration(ApiModel):
    """Lets a pod run on a node with a matching taint."""

    key: str | None = None
    operator: Literal["", "Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def check(self, path: str) -> list[FieldError]:
        """Kubernetes' toleration rules."""
        errs: list[FieldError] = []
        if self.key:
            errs.extend(check_qualified_name(join_path(path, "key"), self.key))
        elif self.operator != "Exists":
            errs.append(FieldError.invalid(
                join_path(path, "operator"), self.operator or "",
                'operator must be Exists when `key` is empty, which means "match all values and all keys"'))
        if self.operator == "Exists" and self.value:
            errs.append(FieldError.invalid(join_path(path, "operator"), self.value,
                                           "value must be empty when `operator` is 'Exists'"))
        elif self.value:
            errs.extend(FieldError.invalid(join_path(path, "value"), self.value, m)
                        for m in is_valid_label_value(self.value))
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            errs.append(FieldError.invalid(join_path(path, "effect"), self.effect or "",
                                           "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        return errs


# --- pod spec ---------------------------------------------------------------------------------


class PodSpec(ApiModel):
    """What to run and where: containers, volumes, placement rules, restart policy."""

    containers: list[Container]
    init_containers: list[Container] | None = None
    volumes: list[Volume] | None = None
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    hostname: str | None = None
    subdomain: str | None = None
    scheduler_name: str | None = None
    priority_class_name: str | None = None
    priority: Int32 | None = None
    termination_grace_period_seconds: NonNegInt64 | None = None
    active_deadline_seconds: int | None = None
    service_account_name: str | None = None
    service_account: str | None = None
    automount_service_account_token: bool | None = None
    security_context: dict[str, Any] | None = None
    node_name: str | None = None
    host_network: bool | None = None
    host_pid: bool | None = Field(default=None, alias="hostPID")
    host_ipc: bool | None = Field(default=None, alias="hostIPC")
    host_users: bool | None = None
    share_process_namespace: bool | None = None
    dns_policy: str | None = None
    dns_config: dict[str, Any] | None = None
    host_aliases: list[Any] | None = None
    hostname_override: str | None = None
    set_hostname_as_fqdn: bool | None = Field(default=None, alias="setHostnameAsFQDN")
    image_pull_secrets: list[Any] | None = None
    enable_service_links: bool | None = None
    preemption_policy: str | None = None
    overhead: dict[str, Any] | None = None
    runtime_class_name: str | None = None
    topology_spread_constraints: list[Any] | None = None
    readiness_gates: list[Any] | None = None
    os: dict[str, Any] | None = None
    scheduling_gates: list[Any] | None = None
    scheduling_group: Any = None
    resource_claims: list[Any] | None = None
    resources: ResourceRequirements | None = None
    ephemeral_containers: list[Any] | None = None

    def all_containers(self) -> list[Container]:
        """Init containers, then containers (the order they start in)."""
        return [*(self.init_containers or []), *self.containers]

    def check(self, path: str, *, require_image: bool = True) -> list[FieldError]:
        """Everything Kubernetes checks in a pod spec that matters to a local run.

        `require_image`: Kubernetes requires images of Pods but not of pod templates.
        """
        errs: list[FieldError] = []
        volume_names: set[str] = set()
        for i, volume in enumerate(self.volumes or []):
            p = join_path(path, "volumes", i)
            errs.extend(volume.check(p))
            if volume.name in volume_names:
                errs.append(FieldError.duplicate(join_path(p, "name"), volume.name))
            volume_names.add(volume.name)
        if not self.containers:
            errs.append(FieldError.required(join_path(path, "containers")))
        container_names: set[str] = set()
        for field, containers in (("initContainers", self.init_containers or []), ("containers", self.containers)):
            for i, container in enumerate(containers):
                p = join_path(path, field, i)
                errs.extend(container.check(p, volume_names, require_image=require_image))
                if container.name and container.name in container_names:
                    errs.append(FieldError.duplicate(join_path(p, "name"), container.name))
                container_names.add(container.name)
        errs.extend(check_labels(join_path(path, "nodeSelector"), self.node_selector))
        if self.affinity is not None and self.affinity.node_affinity is not None:
            errs.extend(self.affinity.node_affinity.check(join_path(path, "affinity", "nodeAffinity")))
        for i, toleration in enumerate(self.tolerations or []):
            errs.extend(toleration.check(join_path(path, "tolerations", i)))
        for field, value, rule in (
            ("hostname", self.hostname, is_dns1123_label),
            ("subdomain", self.subdomain, is_dns1123_label),
            ("priorityClassName", self.priority_class_name, is_dns1123_subdomain),
            ("serviceAccountName", self.service_account_name, is_dns1123_subdomain),
        ):
            if value:
                errs.extend(FieldError.invalid(join_path(path, field), value, m) for m in rule(value))
        if self.active_deadline_seconds is not None and not 1 <= self.active_deadline_seconds <= 2**31 - 1:
            errs.append(FieldError.invalid(join_path(path, "activeDeadlineSeconds"), self.active_deadline_seconds,
                                           "must be between 1 and 2147483647, inclusive"))
        if self.resources is not None:
            errs.extend(self.resources.check(join_path(path, "resources")))
        return errs


class PodTemplateSpec(ApiModel):
    """A pod to stamp out: labels/annotations plus a spec."""

    metadata: ObjectMeta | None = None
    spec: PodSpec

    def check(self, path: str, *, require_image: bool = False) -> list[FieldError]:
        """Template metadata (no name needed) and the pod spec."""
        errs = self.metadata.check(join_path(path, "metadata"), None) if self.metadata is not None else []
        return errs + self.spec.check(join_path(path, "spec"), require_image=require_image)


# --- pod status -------------------------------------------------------------------------------


class ContainerStateRunning(ApiModel):
    """The container's process is running."""

    started_at: str | None = None


class ContainerStateTerminated(ApiModel):
    """The container's process exited (``signal`` set when a signal ended it)."""

    exit_code: Int32
    signal: Int32 | None = None
    reason: str | None = None
    message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    container_id: str | None = Field(default=None, alias="containerID")


class ContainerStateWaiting(ApiModel):
    """The container has not started (or waits to restart)."""

    reason: str | None = None
    message: str | None = None


class ContainerState(ApiModel):
    """One of running, terminated, waiting."""

    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None
    waiting: ContainerStateWaiting | None = None


class ContainerStatus(ApiModel):
    """A container's current and previous state and its restart count."""

    name: str
    state: ContainerState | None = None
    last_state: ContainerState | None = None
    ready: bool | None = None
    started: bool | None = None
    restart_count: NonNegInt32 | None = None
    image: str | None = None
    image_id: str | None = Field(default=None, alias="imageID")
    container_id: str | None = Field(default=None, alias="containerID")


class PodStatus(ApiModel):
    """What the node agent reports about a pod."""

    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] | None = None
    conditions: list[Condition] | None = None
    message: str | None = None
    reason: str | None = None
    host_ip: str | None = Field(default=None, alias="hostIP")
    host_ips: list[Any] | None = Field(default=None, alias="hostIPs")
    pod_ip: str | None = Field(default=None, alias="podIP")
    pod_ips: list[Any] | None = Field(default=None, alias="podIPs")
    start_time: str | None = None
    container_statuses: list[ContainerStatus] | None = None
    init_container_statuses: list[ContainerStatus] | None = None
    ephemeral_container_statuses: list[Any] | None = None
    qos_class: str | None = None
    nominated_node_name: str | None = None


# --- kinds ------------------------------------------------------------------------------------

DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 30


class Pod(Resource):
    """core/v1 Pod."""

    spec: PodSpec
    status: PodStatus | None = None

    def set_defaults(self) -> None:
        """Kubernetes' pod defaults: restartPolicy Always, 30 s grace, requests from limits; a new
        pod is Pending, as kube-apiserver's create strategy stores it."""
        if self.status is None or self.status.phase is None:
            self.status = (self.status or PodStatus()).model_copy(update={"phase": "Pending"})
        if self.spec.restart_policy is None:
            self.spec.restart_policy = "Always"
        if self.spec.termination_grace_period_seconds is None:
            self.spec.termination_grace_period_seconds = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
        for container in self.spec.all_containers():
            if container.resources is not None and container.resources.limits:
                container.resources.requests = container.resources.effective_requests()

    def check(self) -> list[FieldError]:
        """Metadata and spec, images required."""
        return super().check() + self.spec.check("spec", require_image=True)


_CONFIG_MAX_BYTES = 1024 * 1024


def _check_config_keys(path: str, keys: list[str]) -> list[FieldError]:
    return [FieldError.invalid(path, k, m) for k in keys for m in is_config_key(k)]


def _check_base64(path: str, data: dict[str, str]) -> list[FieldError]:
    errs = []
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            errs.append(FieldError.invalid(join_path(path, key), value, "must be base64-encoded"))
    return errs


class ConfigMap(Resource):
    """core/v1 ConfigMap: text in ``data``, base64 in ``binaryData``."""

    data: dict[str, str] | None = None
    binary_data: dict[str, str] | None = None
    immutable: bool | None = None

    def check(self) -> list[FieldError]:
        """Key syntax, no key in both maps, base64 binary data, at most 1 MiB."""
        data, binary = self.data or {}, self.binary_data or {}
        errs = super().check()
        errs += _check_config_keys("data", list(data)) + _check_config_keys("binaryData", list(binary))
        errs += [FieldError.invalid(join_path("data", k), k, "duplicate of key present in binaryData")
                 for k in data if k in binary]
        errs += _check_base64("binaryData", binary)
        size = sum(len(k) + len(v.encode()) for k, v in data.items()) + sum(len(k) + len(v) for k, v in binary.items())
        if size > _CONFIG_MAX_BYTES:
            errs.append(FieldError.forbidden("data", f"may not have more than {_CONFIG_MAX_BYTES} bytes in total"))
        return errs


class Secret(Resource):
    """core/v1 Secret. ``stringData`` is folded into ``data`` (base64) on write, as Kubernetes does."""

    data: dict[str, str] | None = None
    string_data: dict[str, str] | None = None
    type: str | None = None
    immutable: bool | None = None

    def set_defaults(self) -> None:
        """Type Opaque; stringData merged into data (its keys win) and dropped."""
        if not self.type:
            self.type = "Opaque"
        if self.string_data:
            data = dict(self.data or {})
            for key, value in self.string_data.items():
                data[key] = base64.b64encode(value.encode()).decode()
            self.data = data
        self.string_data = None

    def check(self) -> list[FieldError]:
        """Key syntax and base64 values."""
        data = self.data or {}
        return super().check() + _check_config_keys("data", list(data)) + _check_base64("data", data)


class PersistentVolumeClaimSpec(ApiModel):
    """What a claim asks for. Locally every claim is a directory, so only the name binds it."""

    access_modes: list[str] | None = None
    resources: ResourceRequirements | None = None
    storage_class_name: str | None = None
    volume_mode: str | None = None
    volume_name: str | None = None
    selector: dict[str, Any] | None = None
    data_source: dict[str, Any] | None = None


class PersistentVolumeClaimStatus(ApiModel):
    """Pending until the volume exists, then Bound."""

    phase: Literal["Pending", "Bound", "Lost"] | None = None
    access_modes: list[str] | None = None
    capacity: dict[str, str] | None = None


class PersistentVolumeClaim(Resource):
    """core/v1 PersistentVolumeClaim: a named local volume under ``$TRIMARAN_HOME/volumes``."""

    spec: PersistentVolumeClaimSpec | None = None
    status: PersistentVolumeClaimStatus | None = None


class NamespaceSpec(ApiModel):
    """Finalizers that must finish before the namespace goes away."""

    finalizers: list[str] | None = None


class NamespaceStatus(ApiModel):
    """Active, or Terminating while its objects are deleted."""

    phase: Literal["Active", "Terminating"] | None = None
    conditions: list[Condition] | None = None


class Node(Resource):
    """core/v1 Node (cluster-scoped): this machine as the kubelet reports it (capacity and
    allocatable, conditions such as DiskPressure, its taints). Written by the kubelet."""

    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class ServiceAccount(Resource):
    """core/v1 ServiceAccount: the Secrets it names are where KServe's storage initializer finds
    storage credentials (``secrets``), and pull secrets for its pods (``imagePullSecrets``)."""

    secrets: list[dict[str, Any]] | None = None
    image_pull_secrets: list[LocalObjectReference] | None = None
    automount_service_account_token: bool | None = None


class Namespace(Resource):
    """core/v1 Namespace (cluster-scoped; its name is a DNS-1123 label)."""

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """Namespace names are DNS-1123 labels."""
        return is_dns1123_label(name)

    spec: NamespaceSpec | None = None
    status: NamespaceStatus | None = None

    def check(self) -> list[FieldError]:
        """Metadata, and valid Pod Security levels and versions in its labels."""
        return super().check() + label_errors(self.metadata.labels)

    def set_defaults(self) -> None:
        """A new namespace is Active."""
        if self.status is None:
            self.status = NamespaceStatus(phase="Active")
        elif self.status.phase is None:
            self.status.phase = "Active"
