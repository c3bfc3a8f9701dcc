"""Container environment as the kubelet builds it: ``envFrom``, ``env`` with ``valueFrom``,
and ``$(VAR)`` expansion in values, ``command`` and ``args``.

ConfigMaps and Secrets are read through a ``lookup(kind, namespace, name)`` callback so that
this module does not depend on the store. A missing reference that is not ``optional``
raises :class:`ConfigError` with the kubelet's wording; the pod then shows
``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from trimaran.api.quantity import QuantityError, parse_quantity
from trimaran.runtime.node import host_cpu_count, host_memory_bytes

__all__ = [
    "ConfigError",
    "Lookup",
    "expand",
    "resolve_env",
    "expand_command",
    "config_data",
]

Lookup = Callable[[str, str, str], "Mapping[str, object] | None"]
"""``lookup(kind, namespace, name)`` → the ConfigMap/Secret object dict, or ``None``."""

_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


class ConfigError(Exception):
    """A container's configuration cannot be resolved (CreateContainerConfigError)."""


def expand(text: str, mapping: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (a port of k8s.io/kubernetes third_party expansion).

    ``$(VAR)`` becomes the value of VAR when defined and stays as written when not;
    ``$$`` is an escaped ``$`` (so ``$$(VAR)`` yields the literal ``$(VAR)``); any other
    ``$`` is kept.
    """
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    length = len(text)
    while cursor < length:
        if text[cursor] == "$" and cursor + 1 < length:
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1:]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")  # incomplete reference: keep it
                    advance = 1
                else:
                    name = rest[1:close]
                    out.append(mapping[name] if name in mapping else f"$({name})")
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def config_data(
    kind: str, obj: Mapping[str, object], *, include_binary: bool = True
) -> dict[str, bytes]:
    """The key → bytes content of a ConfigMap (``data``, plus ``binaryData`` when
    ``include_binary``; environment variables never see ``binaryData``) or of a Secret
    (base64 ``data``, with ``stringData`` taking precedence as the API server applies it)."""
    out: dict[str, bytes] = {}
    if kind == "ConfigMap":
        if include_binary:
            for key, value in (obj.get("binaryData") or {}).items():  # type: ignore[union-attr]
                out[key] = _b64(value, kind, obj, key)
        for key, value in (obj.get("data") or {}).items():  # type: ignore[union-attr]
            out[key] = str(value).encode()
        return out
    for key, value in (obj.get("data") or {}).items():  # type: ignore[union-attr]
        out[key] = _b64(value, kind, obj, key)
    for key, value in (obj.get("stringData") or {}).items():  # type: ignore[union-attr]
        out[key] = str(value).encode()
    return out


def _b64(value: object, kind: str, obj: Mapping[str, object], key: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        meta = obj.get("metadata") or {}
        raise ConfigError(
            f"{kind} {meta.get('namespace', '')}/{meta.get('name', '')}: "  # type: ignore[union-attr]
            f"key {key!r} is not valid base64"
        ) from None


def _valid_env_name(name: str) -> bool:
    # Kubernetes' relaxed rule (1.30+): printable ASCII, no "=".
    return bool(name) and "=" not in name and all(" " <= ch <= "~" for ch in name)


class _Resolver:
    def __init__(
        self,
        pod: Mapping[str, object],
        lookup: Lookup,
        node_cpu: float | None,
        node_memory: int | None,
        node_name: str | None,
    ) -> None:
        self.pod = pod
        self.meta: Mapping[str, object] = pod.get("metadata") or {}  # type: ignore[assignment]
        self.spec: Mapping[str, object] = pod.get("spec") or {}  # type: ignore[assignment]
        self.status: Mapping[str, object] = pod.get("status") or {}  # type: ignore[assignment]
        self.namespace = str(self.meta.get("namespace") or "default")
        self.lookup = lookup
        self.node_cpu = node_cpu
        self.node_memory = node_memory
        self.node_name = node_name
        self._cache: dict[tuple[str, str], dict[str, bytes] | None] = {}

    def source(self, kind: str, name: str) -> dict[str, bytes] | None:
        key = (kind, name)
        if key not in self._cache:
            obj = self.lookup(kind, self.namespace, name)
            self._cache[key] = (
                None if obj is None else config_data(kind, obj, include_binary=False)
            )
        return self._cache[key]

    def key_ref(self, kind: str, ref: Mapping[str, object]) -> str | None:
        name = str(ref.get("name") or "")
        key = str(ref.get("key") or "")
        optional = bool(ref.get("optional"))
        data = self.source(kind, name)
        if data is None:
            if optional:
                return None
            raise ConfigError(f'{kind.lower()} "{name}" not found')
        if key not in data:
            if optional:
                return None
            raise ConfigError(f"couldn't find key {key} in {kind} {self.namespace}/{name}")
        return os.fsdecode(data[key])

    def field_ref(self, ref: Mapping[str, object]) -> str:
        path = str(ref.get("fieldPath") or "")
        simple = {
            "metadata.name": self.meta.get("name"),
            "metadata.namespace": self.namespace,
            "metadata.uid": self.meta.get("uid"),
            "spec.nodeName": self.spec.get("nodeName") or self.node_name,
            "spec.serviceAccountName": self.spec.get("serviceAccountName") or "default",
            "status.podIP": self.status.get("podIP") or "127.0.0.1",
            "status.hostIP": self.status.get("hostIP") or "127.0.0.1",
        }
        if path in simple:
            return str(simple[path] or "")
        if path == "status.podIPs":
            ips = self.status.get("podIPs") or [{"ip": self.status.get("podIP") or "127.0.0.1"}]
            return ",".join(str(i.get("ip")) for i in ips)  # type: ignore[union-attr]
        if path == "status.hostIPs":
            ips = self.status.get("hostIPs") or [{"ip": self.status.get("hostIP") or "127.0.0.1"}]
            return ",".join(str(i.get("ip")) for i in ips)  # type: ignore[union-attr]
        match = _FIELD_MAP.match(path)
        if match:
            values = self.meta.get(match[1]) or {}
            return str(values.get(match[2], ""))  # type: ignore[union-attr]
        raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")

    def resource_field_ref(self, ref: Mapping[str, object], container: Mapping[str, object]) -> str:
        target = container
        wanted = ref.get("containerName")
        if wanted:
            matches = [c for c in self.spec.get("containers") or [] if c.get("name") == wanted]  # type: ignore[union-attr]
            matches += [c for c in self.spec.get("initContainers") or [] if c.get("name") == wanted]  # type: ignore[union-attr]
            if not matches:
                raise ConfigError(f"resourceFieldRef: container {wanted!r} not found in the pod")
            target = matches[0]
        resource = str(ref.get("resource") or "")
        kind, _, name = resource.partition(".")
        if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
            raise ConfigError(f"unsupported resourceFieldRef resource {resource!r}")
        resources = target.get("resources") or {}
        limits = resources.get("limits") or {}  # type: ignore[union-attr]
        requests = resources.get("requests") or {}  # type: ignore[union-attr]
        raw = (requests.get(name, limits.get(name)) if kind == "requests" else limits.get(name))
        try:
            divisor = parse_quantity(ref.get("divisor") or "1")  # type: ignore[arg-type]
            if raw is not None:
                amount = parse_quantity(raw)
            elif kind == "requests":
                amount = Decimal(0)
            elif name == "cpu":
                amount = Decimal(str(self.node_cpu if self.node_cpu is not None else host_cpu_count()))
            elif name == "memory":
                amount = Decimal(self.node_memory if self.node_memory is not None else host_memory_bytes())
            else:
                raise ConfigError(f"resourceFieldRef {resource!r} has no limit to report")
        except QuantityError as exc:
            raise ConfigError(f"resourceFieldRef {resource!r}: {exc}") from None
        if divisor <= 0:
            raise ConfigError(f"resourceFieldRef {resource!r}: divisor must be positive")
        if name == "cpu":
            # The kubelet divides millicores by millicores and rounds up.
            value = math.ceil(math.ceil(amount * 1000) / math.ceil(divisor * 1000))
        else:
            value = math.ceil(math.ceil(amount) / math.ceil(divisor))
        return str(value)


def resolve_env(
    pod: Mapping[str, object],
    container: Mapping[str, object],
    lookup: Lookup,
    *,
    node_cpu: float | None = None,
    node_memory: int | None = None,
    node_name: str | None = None,
    service_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's own environment, in the kubelet's order: ``envFrom`` sources first
    (with their ``prefix``), then ``env`` entries, each value expanded against the variables
    defined before it. ``resourceFieldRef`` limits that are unset report the node's
    ``node_cpu`` / ``node_memory`` (the host's when not given).

    ``service_env`` (``KUBERNETES_SERVICE_HOST`` …) is in the result under the pod's own
    variables, and ``$(VAR)`` expansion sees it, as it sees the kubelet's service variables.

    Raises :class:`ConfigError` for a missing ConfigMap, Secret or key that is not optional.
    """
    resolver = _Resolver(pod, lookup, node_cpu, node_memory, node_name)
    services = service_env or {}
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:  # type: ignore[union-attr]
        prefix = str(source.get("prefix") or "")
        for kind, ref_key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(ref_key)
            if ref is None:
                continue
            name = str(ref.get("name") or "")
            data = resolver.source(kind, name)
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind.lower()} "{name}" not found')
            for key, value in data.items():
                # Keys that cannot be variable names are skipped, as the kubelet does.
                if _valid_env_name(prefix + key):
                    env[prefix + key] = os.fsdecode(value)
    for entry in container.get("env") or []:  # type: ignore[union-attr]
        name = str(entry.get("name") or "")
        value_from = entry.get("valueFrom")
        if value_from is None:
            env[name] = expand(str(entry.get("value") or ""), ChainMap(env, services))
            continue
        if "fieldRef" in value_from:
            env[name] = resolver.field_ref(value_from["fieldRef"])
        elif "resourceFieldRef" in value_from:
            env[name] = resolver.resource_field_ref(value_from["resourceFieldRef"], container)
        elif "configMapKeyRef" in value_from:
            resolved = resolver.key_ref("ConfigMap", value_from["configMapKeyRef"])
            if resolved is not None:
                env[name] = resolved
        elif "secretKeyRef" in value_from:
            resolved = resolver.key_ref("Secret", value_from["secretKeyRef"])
            if resolved is not None:
                env[name] = resolved
        else:
            raise ConfigError(f"env {name!r}: valueFrom names no supported source")
    return {**services, **env}


def expand_command(
    container: Mapping[str, object],
    env: Mapping[str, str],
    image_entrypoint: Sequence[str] | None = None,
    image_cmd: Sequence[str] | None = None,
) -> list[str]:
    """The process to run, with ``$(VAR)`` expanded against the container's environment.

    With an image (``image_entrypoint``/``image_cmd`` not None), the kubelet's rules: no
    ``command`` and no ``args`` runs Entrypoint + Cmd; ``command`` runs command + args (the
    image's Cmd is dropped too); ``args`` alone runs Entrypoint + args. Only the pod's own parts
    are expanded, as upstream. Without an image (a host process) there is no entrypoint to fall
    back on, so a container without ``command`` is a configuration error.
    """
    command = [str(part) for part in container.get("command") or []]  # type: ignore[union-attr]
    args = [str(part) for part in container.get("args") or []]  # type: ignore[union-attr]
    command = [expand(part, env) for part in command]
    args = [expand(part, env) for part in args]
    if image_entrypoint is None and image_cmd is None:
        if not command:
            what = "args but no command" if args else "no command"
            raise ConfigError(
                f"container {container.get('name')!r} has {what}: it runs as a host process, "
                f"which has no image entrypoint, so set command (e.g. [python, train.py]) or "
                f"run its image (annotation trimaran.io/image-policy: image)"
            )
        return command + args
    if command:
        argv = command + args
    else:
        argv = list(image_entrypoint or []) + (args if args else list(image_cmd or []))
    if not argv:
        raise ConfigError(f"container {container.get('name')!r}: no command specified: the image "
                          f"has no Entrypoint or Cmd and the container sets no command")
    return argv
