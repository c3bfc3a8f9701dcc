"""Build the Katib Experiment (and the objective's ConfigMap) that `TuningClient.tune` applies."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trimaran.api.labels import EXPERIMENT_LABEL
from trimaran.sdk.search import ParameterSpec

__all__ = ["SdkParameters", "build_configmap", "build_experiment", "early_stopping_spec", "split_parameters"]

#: The container that runs the objective, as Katib's tune names it.
CONTAINER = "training-container"
PAYLOAD_DIR = "/app"
PAYLOAD_FILE = "objective.pkl"
RUNNER = "trimaran.sdk._trial_runner"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trimaran-sdk"}
#: Annotation holding each categorical parameter's Python values (when JSON can hold them).
PARAMETERS_ANNOTATION = "sdk.trimaran.io/categorical-values"
CONFIGMAP_LIMIT = 1024 * 1024
DEFAULT_IMAGE = "docker.io/library/python:3.11-slim"


@dataclass
class SdkParameters:
    """``tune``'s ``parameters`` argument, split into Katib's ``parameters[]`` and the rest."""

    katib: list[dict[str, Any]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    choices: dict[str, dict[str, Any]] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)


def split_parameters(parameters: Mapping[str, Any] | None) -> SdkParameters:
    """Searched parameters (a `search` helper's result, or a Katib entry with ``parameterType``)
    become Katib ``parameters[]``; any other value is passed to the objective unchanged."""
    if not parameters:
        raise ValueError("parameters: give at least one searched parameter, e.g. {'lr': search.double(1e-4, 1e-1)}")
    out = SdkParameters()
    for name, value in parameters.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"parameters: names must be non-empty strings, not {name!r}")
        if isinstance(value, Mapping) and "parameterType" in value:
            if re.search(r"[={}\s]", name):
                raise ValueError(f"parameter {name!r}: a searched parameter's name may not contain '=', braces "
                                 "or whitespace (it is passed as --param NAME=VALUE)")
            entry = {"name": name, **copy.deepcopy({k: v for k, v in value.items() if k != "name"})}
            out.katib.append(entry)
            out.types[name] = str(value["parameterType"])
            choices = value.choices if isinstance(value, ParameterSpec) else None
            if choices is not None:
                out.choices[name] = dict(zip(value["feasibleSpace"]["list"], choices, strict=True))
        else:
            out.fixed[name] = value
    if not out.katib:
        raise ValueError("parameters: none is searched; use the search helpers, e.g. search.double(0, 1)")
    return out


def early_stopping_spec(early_stopping: Any) -> dict[str, Any] | None:
    """Katib's ``earlyStopping`` from a name, ``{"algorithmName", "algorithmSettings"}`` or the
    snake_case ``{"algorithm_name", "algorithm_settings"}``; settings as a dict or Katib's list."""
    if early_stopping is None:
        return None
    if isinstance(early_stopping, str):
        return {"algorithmName": early_stopping}
    if not isinstance(early_stopping, Mapping):
        raise TypeError(f"early_stopping: expected a name or a dict, not {type(early_stopping).__name__}")
    name = early_stopping.get("algorithmName", early_stopping.get("algorithm_name"))
    if not name:
        raise ValueError("early_stopping: algorithmName is required (e.g. 'medianstop')")
    settings = early_stopping.get("algorithmSettings", early_stopping.get("algorithm_settings"))
    spec: dict[str, Any] = {"algorithmName": str(name)}
    if settings:
        spec["algorithmSettings"] = settings_list(settings)
    return spec


def settings_list(settings: Any) -> list[dict[str, str]]:
    """Katib's ``[{name, value}]`` (values as strings) from a dict or such a list."""
    if isinstance(settings, Mapping):
        return [{"name": str(k), "value": _text(v)} for k, v in settings.items()]
    return [{"name": str(s["name"]), "value": _text(s.get("value", ""))} for s in settings]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def build_experiment(*, name: str, namespace: str, params: SdkParameters, objective_metric_name: str,
                     objective_type: str, additional_metric_names: list[str] | None, objective_goal: float | None,
                     max_trial_count: int | None, parallel_trial_count: int | None,
                     max_failed_trial_count: int | None, algorithm_name: str, algorithm_settings: Any,
                     early_stopping: Any, trial_spec: dict[str, Any] | None) -> dict[str, Any]:
    """The Experiment manifest; ``trial_spec`` None leaves out the trial template (in-process)."""
    if algorithm_name == "pbt":
        raise ValueError('algorithm "pbt" starts each trial from its parent\'s checkpoint directory, which a '
                         "tuned function has no place for: run it as an Experiment manifest with "
                         "resumePolicy FromVolume (see examples/katib-pbt)")
    objective: dict[str, Any] = {"type": objective_type, "objectiveMetricName": objective_metric_name}
    if additional_metric_names:
        objective["additionalMetricNames"] = list(additional_metric_names)
    if objective_goal is not None:
        objective["goal"] = objective_goal
    algorithm: dict[str, Any] = {"algorithmName": algorithm_name}
    if algorithm_settings:
        algorithm["algorithmSettings"] = settings_list(algorithm_settings)
    spec: dict[str, Any] = {"objective": objective, "algorithm": algorithm, "parameters": params.katib,
                            "metricsCollectorSpec": {"collector": {"kind": "Push"}}}
    for key, value in (("maxTrialCount", max_trial_count), ("parallelTrialCount", parallel_trial_count),
                       ("maxFailedTrialCount", max_failed_trial_count)):
        if value is not None:
            spec[key] = value
    early = early_stopping_spec(early_stopping)
    if early:
        spec["earlyStopping"] = early
    if trial_spec is not None:
        spec["trialTemplate"] = {
            "primaryContainerName": CONTAINER,
            "trialParameters": [{"name": p["name"], "reference": p["name"]} for p in params.katib],
            "trialSpec": trial_spec,
        }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}
    values = _json_choices(params)
    if values:
        metadata["annotations"] = {PARAMETERS_ANNOTATION: json.dumps(values, separators=(",", ":"))}
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": metadata, "spec": spec}


def _json_choices(params: SdkParameters) -> dict[str, list[Any]]:
    """Categorical values that are not strings, when JSON writes them back unchanged."""
    out = {}
    for name, lookup in params.choices.items():
        values = list(lookup.values())
        if all(isinstance(v, str) for v in values):
            continue
        try:
            if json.loads(json.dumps(values)) == values:
                out[name] = values
        except (TypeError, ValueError):
            continue
    return out


def configmap_name(experiment: str) -> str:
    return f"{experiment}-objective"


def build_configmap(experiment: str, namespace: str, payload: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(payload).decode("ascii")
    if len(encoded) > CONFIGMAP_LIMIT - 1024:
        raise ValueError(f"the pickled objective is {len(payload):,} bytes, more than a ConfigMap holds (1 MiB): "
                         "do not capture large data in the objective; load it inside the function instead")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": configmap_name(experiment), "namespace": namespace,
                         "labels": {**MANAGED_BY, EXPERIMENT_LABEL: experiment}},
            "binaryData": {PAYLOAD_FILE: encoded}}


def build_trial_spec(*, experiment: str, params: SdkParameters, image: str, resources: Any,
                     env: Mapping[str, str] | list[dict[str, Any]] | None) -> dict[str, Any]:
    """The trial's batch/v1 Job: the runner with one ``--param NAME=${trialParameters.NAME}`` per
    searched parameter (separate arguments: no shell reads the values)."""
    command = ["python", "-m", RUNNER, f"{PAYLOAD_DIR}/{PAYLOAD_FILE}"]
    for p in params.katib:
        command += ["--param", f"{p['name']}=${{trialParameters.{p['name']}}}"]
    container: dict[str, Any] = {
        "name": CONTAINER, "image": image, "command": command,
        "volumeMounts": [{"name": "sdk-objective", "mountPath": PAYLOAD_DIR, "readOnly": True}],
    }
    env_list = env_entries(env)
    if env_list:
        container["env"] = env_list
    requirements = resource_requirements(resources)
    if requirements:
        container["resources"] = requirements
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": {
        # A failing objective fails the trial at once; Kubernetes' default (6 retries) would rerun it.
        "backoffLimit": 0,
        "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [{"name": "sdk-objective", "configMap": {"name": configmap_name(experiment)}}],
        }},
    }}


def env_entries(env: Mapping[str, str] | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not env:
        return []
    if isinstance(env, Mapping):
        return [{"name": str(k), "value": str(v)} for k, v in env.items()]
    return [dict(e) for e in env]


def resource_requirements(resources: Any) -> dict[str, Any] | None:
    """Container ``resources`` from Katib's ``resources_per_trial``.

    ``{"cpu": "1", "memory": "1Gi", "gpu": 1}`` gives requests and limits of cpu and memory, and
    ``nvidia.com/gpu`` as a limit; a dict with ``requests``/``limits`` is used as written.

    Example:
        >>> resource_requirements({"cpu": "1", "memory": "1Gi", "gpu": 1})
        {'requests': {'cpu': '1', 'memory': '1Gi'}, 'limits': {'cpu': '1', 'memory': '1Gi', 'nvidia.com/gpu': '1'}}
    """
    if not resources:
        return None
    if not isinstance(resources, Mapping):
        raise TypeError("resources_per_trial: expected a dict such as {'cpu': '1', 'memory': '1Gi'}")
    if "requests" in resources or "limits" in resources:
        return {k: {str(n): str(v) for n, v in (resources.get(k) or {}).items()}
                for k in ("requests", "limits") if resources.get(k)}
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for key, value in resources.items():
        if key == "gpu":
            limits["nvidia.com/gpu"] = str(value)
        else:
            requests[str(key)] = str(value)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    limits = {**requests, **limits}
    if limits:
        out["limits"] = limits
    return out
