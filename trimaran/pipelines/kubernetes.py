"""kfp-kubernetes' platform document applied to a step's pod, as KFP's driver applies its
``KubernetesExecutorConfig``: PVC mounts, Secrets and ConfigMaps as volumes or env, field paths as
env, empty dirs and shared memory, node selectors, tolerations, pod labels and annotations, image pull
secrets and policy, the active deadline and the container's securityContext.

A name (a claim's, a Secret's, a ConfigMap's) is a constant or one of the task's input parameters,
as kfp-kubernetes writes them (``pvcNameParameter``, ``secretNameParameter``: ``runtimeValue`` or
``componentInputParameter``/``taskOutputParameter`` resolved into the task's inputs). What Trimaran
does not apply (node and pod affinity, generic ephemeral volumes) is an error naming it: a step
never runs without what its pipeline asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PlatformError", "apply_config", "executor_config"]


class PlatformError(ValueError):
    """A kfp-kubernetes setting that cannot be applied: the message says which."""


def executor_config(platform: Mapping[str, Any] | None, executor_label: str) -> Mapping[str, Any]:
    """The KubernetesExecutorConfig of `executor_label` in a run's platformSpec (``{platforms:
    {kubernetes: {deploymentSpec: {executors: {LABEL: ...}}}}}``); empty when there is none."""
    kubernetes = ((platform or {}).get("platforms") or {}).get("kubernetes") or {}
    return ((kubernetes.get("deploymentSpec") or {}).get("executors") or {}).get(executor_label) or {}


def _value(source: Mapping[str, Any], parameters: Mapping[str, Any], what: str) -> Any:
    """A kfp-kubernetes parameter: a constant, or one of the task's inputs."""
    if "runtimeValue" in source:
        return (source.get("runtimeValue") or {}).get("constant")
    if source.get("componentInputParameter") is not None:
        key = source["componentInputParameter"]
        if key not in parameters:
            raise PlatformError(f"{what}: the task has no input {key!r} to take it from")
        return parameters[key]
    if "taskOutputParameter" in source:
        output = source["taskOutputParameter"] or {}
        return parameters.get(f"pipelinechannel--{output.get('producerTask')}-{output.get('outputParameterKey')}")
    return None


def _name(item: Mapping[str, Any], parameter_key: str, legacy_keys: tuple[str, ...],
          parameters: Mapping[str, Any], what: str) -> str:
    value = _value(item.get(parameter_key) or {}, parameters, what)
    if value is None:
        value = next((item[k] for k in legacy_keys if item.get(k)), None)
    if not isinstance(value, str) or not value:
        raise PlatformError(f"{what}: no name given ({parameter_key} or {', '.join(legacy_keys)})")
    return value


def apply_config(pod: dict[str, Any], config: Mapping[str, Any], parameters: Mapping[str, Any]) -> None:
    """Add `config` (one executor's KubernetesExecutorConfig) to `pod`, whose first container is
    the step's; `parameters` are the task's input values (names may come from them)."""
    unsupported = sorted(k for k in ("nodeAffinity", "podAffinity", "genericEphemeralVolume") if config.get(k))
    if unsupported:
        raise PlatformError(f"kfp-kubernetes' {', '.join(unsupported)} is not supported here")
    spec = pod.setdefault("spec", {})
    container = spec["containers"][0]
    volumes = spec.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    env = container.setdefault("env", [])

    def mount(volume: dict[str, Any], item: Mapping[str, Any], read_only: bool = False) -> None:
        name = f"kfp-{len(volumes)}"
        volumes.append({"name": name, **volume})
        entry: dict[str, Any] = {"name": name, "mountPath": item["mountPath"]}
        if item.get("subPath"):
            entry["subPath"] = item["subPath"]
        if read_only:
            entry["readOnly"] = True
        mounts.append(entry)

    for item in config.get("pvcMount") or []:
        claim = _name(item, "pvcNameParameter", ("constant", "componentInputParameter"), parameters, "pvcMount")
        mount({"persistentVolumeClaim": {"claimName": claim}}, item)
    for item in config.get("secretAsVolume") or []:
        secret = _name(item, "secretNameParameter", ("secretName",), parameters, "secretAsVolume")
        mount({"secret": {"secretName": secret, "optional": bool(item.get("optional"))}}, item, read_only=True)
    for item in config.get("configMapAsVolume") or []:
        name = _name(item, "configMapNameParameter", ("configMapName",), parameters, "configMapAsVolume")
        mount({"configMap": {"name": name, "optional": bool(item.get("optional"))}}, item, read_only=True)
    for item in config.get("emptyDirMounts") or []:
        empty = {k: item[k] for k in ("medium", "sizeLimit") if item.get(k)}
        mount({"emptyDir": empty}, item)
    shared = config.get("enabledSharedMemory")
    if shared is not None:
        size = {"sizeLimit": shared["size"]} if shared.get("size") else {}
        mount({"emptyDir": {"medium": "Memory", **size}}, {"mountPath": "/dev/shm"})
    for item in config.get("secretAsEnv") or []:
        secret = _name(item, "secretNameParameter", ("secretName",), parameters, "secretAsEnv")
        env += [{"name": pair["envVar"], "valueFrom": {"secretKeyRef": {
            "name": secret, "key": pair["secretKey"], "optional": bool(item.get("optional"))}}}
            for pair in item.get("keyToEnv") or []]
    for item in config.get("configMapAsEnv") or []:
        name = _name(item, "configMapNameParameter", ("configMapName",), parameters, "configMapAsEnv")
        env += [{"name": pair["envVar"], "valueFrom": {"configMapKeyRef": {
            "name": name, "key": pair["configMapKey"], "optional": bool(item.get("optional"))}}}
            for pair in item.get("keyToEnv") or []]
    for item in config.get("fieldPathAsEnv") or []:
        env.append({"name": item["name"], "valueFrom": {"fieldRef": {"fieldPath": item["fieldPath"]}}})

    selector = config.get("nodeSelector") or {}
    labels = dict(selector.get("labels") or {})
    if selector.get("nodeSelectorJson"):
        chosen = _value(selector["nodeSelectorJson"], parameters, "nodeSelector")
        if not isinstance(chosen, Mapping):
            raise PlatformError(f"nodeSelector: {chosen!r} is not a map of labels")
        labels.update(chosen)
    if labels:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **labels}
    tolerations = []
    for item in config.get("tolerations") or []:
        if item.get("tolerationJson"):
            given = _value(item["tolerationJson"], parameters, "tolerations")
            tolerations += given if isinstance(given, list) else [given]
        else:
            tolerations.append({k: item[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds")
                                if k in item})
    if tolerations:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *tolerations]
    metadata = pod.setdefault("metadata", {})
    for field in ("labels", "annotations"):
        extra = (config.get("podMetadata") or {}).get(field) or {}
        # The run's own labels (which pod is which task) win over the pipeline's.
        metadata[field] = {**extra, **(metadata.get(field) or {})}
    secrets = [{"name": _name(item, "secretNameParameter", ("secretName",), parameters, "imagePullSecret")}
               for item in config.get("imagePullSecret") or []]
    if secrets:
        spec["imagePullSecrets"] = [*(spec.get("imagePullSecrets") or []), *secrets]
    if config.get("imagePullPolicy"):
        container["imagePullPolicy"] = config["imagePullPolicy"]
    if config.get("activeDeadlineSeconds"):
        spec["activeDeadlineSeconds"] = int(config["activeDeadlineSeconds"])
    if config.get("securityContext"):
        container["securityContext"] = {**(container.get("securityContext") or {}), **config["securityContext"]}
