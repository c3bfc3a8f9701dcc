"""The compiled pipeline (KFP's ``PipelineSpec`` IR, schemaVersion 2.x) and kfp-kubernetes' platforms
document, checked whole before a run or pipeline version is stored: every error names its path in the
spec and the reason.

What is checked: the document's shape, the schema version, every reference (a task's component, a
component's executor, a task's inputs to the enclosing component's inputs and to its sibling tasks'
declared outputs, dependent tasks, a DAG's outputs, a loop's items), cycles (a DAG's tasks through
``dependentTasks`` and data edges; components that contain themselves), the values the run acts on
(retry policies, loops' parallelism, trigger strategies, caching), importers' constant URIs (local
and absolute), and the platforms document against the executors. Whether a local path lies
under an allowed root depends on the control plane's home (``pipelines/roots``): the API checks a
run's ``spec.pipelineRoot`` before storing it, the run controller an importer's URI once its
parameters are known and each step's output artifacts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trimaran.api.errors import FieldError, join_path

__all__ = ["PARAMETER_TYPES", "SCHEMA_VERSIONS", "parameter_errors", "spec_errors"]

SCHEMA_VERSIONS = ("2.0.0", "2.1.0")
# parameterType → the JSON types a value of it may have.
_PARAMETER_TYPES: dict[str, tuple[type, ...]] = {
    "STRING": (str,),
    "NUMBER_INTEGER": (int,),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": (bool,),
    "LIST": (list,),
    "STRUCT": (dict,),
    "TASK_FINAL_STATUS": (dict,),
    "TASK_CONFIG": (dict,),
}
PARAMETER_TYPES = tuple(_PARAMETER_TYPES)
# kfp-kubernetes' KubernetesExecutorConfig: the fields that are lists of objects, objects, and scalars.
_K8S_LISTS = ("pvcMount", "secretAsEnv", "secretAsVolume", "configMapAsEnv", "configMapAsVolume", "imagePullSecret",
              "fieldPathAsEnv", "tolerations", "genericEphemeralVolume", "nodeAffinity", "podAffinity",
              "emptyDirMounts")
_K8S_OBJECTS = ("nodeSelector", "podMetadata", "enabledSharedMemory", "securityContext")
_K8S_SCALARS = {"imagePullPolicy": str, "activeDeadlineSeconds": (int, str)}
_STRATEGIES = ("TRIGGER_STRATEGY_UNSPECIFIED", "ALL_UPSTREAM_TASKS_SUCCEEDED", "ALL_UPSTREAM_TASKS_COMPLETED")
# A protobuf Duration in JSON, as the compiler writes retry back-offs: "0s", "1.5s".
_DURATION = re.compile(r"\d+(\.\d{1,9})?s")
# The list items that mount something: each needs a mountPath.
_K8S_MOUNTS = ("pvcMount", "secretAsVolume", "configMapAsVolume", "emptyDirMounts", "genericEphemeralVolume")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _Checker:
    """One spec's walk: the errors found, each with its path."""

    def __init__(self, spec: Mapping[str, Any], path: str) -> None:
        self.spec = spec
        self.path = path
        self.errors: list[FieldError] = []
        self.components = _mapping(spec.get("components"))
        self.executors = _mapping(_mapping(spec.get("deploymentSpec")).get("executors"))

    def error(self, path: str, value: Any, detail: str) -> None:
        self.errors.append(FieldError.invalid(path, value, detail))

    def shape(self, key: str, kind: type, detail: str) -> bool:
        """Whether spec[key] is a `kind` (an error if present and not)."""
        value = self.spec.get(key)
        if value is None or isinstance(value, kind):
            return True
        self.error(join_path(self.path, key), value, detail)
        return False

    def check(self) -> list[FieldError]:
        ok = self.shape("components", Mapping, "must map component names to ComponentSpecs")
        ok = self.shape("deploymentSpec", Mapping, "must hold executors") and ok
        ok = self.shape("root", Mapping, "must be the pipeline's ComponentSpec (a dag)") and ok
        if not isinstance(_mapping(self.spec.get("deploymentSpec")).get("executors", {}), Mapping):
            self.error(join_path(self.path, "deploymentSpec", "executors"), "<value>",
                       "must map executor labels to executors")
            ok = False
        if not ok:
            return self.errors
        root = _mapping(self.spec.get("root"))
        root_path = join_path(self.path, "root")
        if not isinstance(root.get("dag"), Mapping):
            self.errors.append(FieldError.required(join_path(root_path, "dag"), "the pipeline's tasks"))
        self.definitions(root, root_path)
        self.component(root, root_path)
        for name, component in self.components.items():
            component_path = join_path(self.path, "components", name)
            if not isinstance(component, Mapping):
                self.error(component_path, component, "must be a ComponentSpec")
                continue
            self.definitions(component, component_path)
            if "dag" in component:
                self.component(component, component_path)
            elif "executorLabel" in component:
                label = component["executorLabel"]
                if label not in self.executors:
                    self.error(join_path(component_path, "executorLabel"), label,
                               "no such executor in deploymentSpec.executors")
            else:
                self.errors.append(FieldError.required(component_path, "a component has a dag or an executorLabel"))
        for label, executor in self.executors.items():
            self.executor(executor, join_path(self.path, "deploymentSpec", "executors", label))
        self.recursion()
        return self.errors

    def definitions(self, component: Mapping[str, Any], path: str) -> None:
        for side in ("inputDefinitions", "outputDefinitions"):
            for name, definition in _mapping(_mapping(component.get(side)).get("parameters")).items():
                kind = _mapping(definition).get("parameterType")
                if kind not in _PARAMETER_TYPES:
                    self.errors.append(FieldError.not_supported(
                        join_path(path, side, "parameters", name, "parameterType"), kind, PARAMETER_TYPES))
                elif "defaultValue" in definition and not _fits(definition["defaultValue"], kind):
                    self.error(join_path(path, side, "parameters", name, "defaultValue"), definition["defaultValue"],
                               f"must be {kind}")

    def declared(self, component_name: Any, side: str, kind: str) -> Mapping[str, Any] | None:
        """A component's declared inputs or outputs; None when there is no such component."""
        component = self.components.get(component_name) if isinstance(component_name, str) else None
        if not isinstance(component, Mapping):
            return None
        return _mapping(_mapping(component.get(side)).get(kind))

    def component(self, component: Mapping[str, Any], path: str) -> None:
        """A DAG component: its tasks' references, its outputs, and cycles among its tasks."""
        dag = _mapping(component.get("dag"))
        dag_path = join_path(path, "dag")
        tasks = dag.get("tasks", {})
        if not isinstance(tasks, Mapping):
            self.error(join_path(dag_path, "tasks"), tasks, "must map task names to tasks")
            return
        inputs = _mapping(component.get("inputDefinitions"))
        edges: dict[str, set[str]] = {name: set() for name in tasks}
        for name, task in tasks.items():
            task_path = join_path(dag_path, "tasks", name)
            if not isinstance(task, Mapping):
                self.error(task_path, task, "must be a task")
                continue
            ref = _mapping(task.get("componentRef")).get("name")
            if ref not in self.components:
                self.error(join_path(task_path, "componentRef", "name"), ref, "no such component in components")
            for upstream in task.get("dependentTasks") or []:
                if upstream not in tasks:
                    self.error(join_path(task_path, "dependentTasks"), upstream, "no such task in this dag")
                else:
                    edges[name].add(upstream)
            edges[name] |= self.task_inputs(task, task_path, tasks, inputs)
            self.iterator(task, task_path)
            self.policies(task, task_path)
        self.dag_outputs(dag, dag_path, tasks)
        cycle = _find_cycle(edges)
        if cycle:
            self.error(join_path(dag_path, "tasks"), " -> ".join(cycle),
                       f"a cycle: {' -> '.join(cycle)} (through dependentTasks and inputs)")

    def task_inputs(self, task: Mapping[str, Any], path: str, tasks: Mapping[str, Any],
                    scope: Mapping[str, Any]) -> set[str]:
        """A task's inputs checked against the enclosing component's inputs and its siblings'
        outputs; the sibling tasks it reads from."""
        upstream: set[str] = set()
        task_inputs = _mapping(task.get("inputs"))
        for kind, own, output_key, producer_outputs in (
                ("parameters", "componentInputParameter", "outputParameterKey", "parameters"),
                ("artifacts", "componentInputArtifact", "outputArtifactKey", "artifacts")):
            for name, source in _mapping(task_inputs.get(kind)).items():
                source = _mapping(source)
                input_path = join_path(path, "inputs", kind, name)
                if kind == "parameters" and "runtimeValue" in source:
                    self.constant(task, name, _mapping(source["runtimeValue"]).get("constant"),
                                  join_path(input_path, "runtimeValue", "constant"))
                if own in source and source[own] not in _mapping(scope.get(kind)):
                    self.error(join_path(input_path, own), source[own],
                               f"the enclosing component declares no such input {kind[:-1]}")
                for key in ("taskOutputParameter", "taskOutputArtifact", "taskFinalStatus"):
                    if key not in source:
                        continue
                    producer = _mapping(source[key]).get("producerTask")
                    if producer not in tasks:
                        self.error(join_path(input_path, key, "producerTask"), producer, "no such task in this dag")
                        continue
                    upstream.add(producer)
                    if key == "taskFinalStatus":
                        continue
                    output = _mapping(source[key]).get(output_key)
                    ref = _mapping(_mapping(tasks[producer]).get("componentRef")).get("name")
                    declared = self.declared(ref, "outputDefinitions", producer_outputs)
                    if declared is not None and output not in declared:
                        self.error(join_path(input_path, key, output_key), output,
                                   f"task {producer} has no such output {kind[:-1]} "
                                   f"(it has: {', '.join(sorted(declared)) or 'none'})")
        return upstream

    def constant(self, task: Mapping[str, Any], name: str, value: Any, path: str) -> None:
        """A constant passed to an input its component declares: of the declared type."""
        ref = _mapping(task.get("componentRef")).get("name")
        declared = self.declared(ref, "inputDefinitions", "parameters") or {}
        kind = _mapping(declared.get(name)).get("parameterType")
        if kind in _PARAMETER_TYPES and value is not None and not _fits(value, kind):
            self.error(path, value, f"component {ref}'s input {name} is {kind}")

    def iterator(self, task: Mapping[str, Any], path: str) -> None:
        """A loop's items refer to one of the task's own inputs."""
        for key, item_key, kind in (("parameterIterator", "inputParameter", "parameters"),
                                    ("artifactIterator", "inputArtifact", "artifacts")):
            items = _mapping(_mapping(task.get(key)).get("items"))
            if item_key in items and items[item_key] not in _mapping(_mapping(task.get("inputs")).get(kind)):
                self.error(join_path(path, key, "items", item_key), items[item_key],
                           f"the task has no such input {kind[:-1]} to iterate over")

    def policies(self, task: Mapping[str, Any], path: str) -> None:
        """Retries, loops' parallelism, trigger strategy and caching: the values the run acts on."""
        retry = _mapping(task.get("retryPolicy"))
        count = retry.get("maxRetryCount", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            self.error(join_path(path, "retryPolicy", "maxRetryCount"), count, "must be a whole number, 0 or more")
        for key in ("backoffDuration", "backoffMaxDuration"):
            if key in retry and not (isinstance(retry[key], str) and _DURATION.fullmatch(retry[key])):
                self.error(join_path(path, "retryPolicy", key), retry[key], "must be a duration in seconds, as '30s'")
        factor = retry.get("backoffFactor", 2.0)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 0:
            self.error(join_path(path, "retryPolicy", "backoffFactor"), factor, "must be a number, 0 or more")
        limit = _mapping(task.get("iteratorPolicy")).get("parallelismLimit", 0)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            self.error(join_path(path, "iteratorPolicy", "parallelismLimit"), limit,
                       "must be a whole number, 0 or more (0: no limit)")
        strategy = _mapping(task.get("triggerPolicy")).get("strategy")
        if strategy is not None and strategy not in _STRATEGIES:
            self.errors.append(FieldError.not_supported(join_path(path, "triggerPolicy", "strategy"), strategy,
                                                        _STRATEGIES))
        condition = _mapping(task.get("triggerPolicy")).get("condition")
        if condition is not None and not isinstance(condition, str):
            self.error(join_path(path, "triggerPolicy", "condition"), condition, "must be a CEL expression")
        enable = _mapping(task.get("cachingOptions")).get("enableCache", True)
        if not isinstance(enable, bool):
            self.error(join_path(path, "cachingOptions", "enableCache"), enable, "must be true or false")
        custom_key = _mapping(task.get("cachingOptions")).get("cacheKey", "")
        if not isinstance(custom_key, str):
            self.error(join_path(path, "cachingOptions", "cacheKey"), custom_key, "must be a string")

    def dag_outputs(self, dag: Mapping[str, Any], path: str, tasks: Mapping[str, Any]) -> None:
        outputs = _mapping(dag.get("outputs"))
        selectors: list[tuple[str, Mapping[str, Any], str, str]] = []
        for name, spec in _mapping(outputs.get("parameters")).items():
            spec = _mapping(spec)
            output_path = join_path(path, "outputs", "parameters", name)
            if "valueFromParameter" in spec:
                selectors.append((join_path(output_path, "valueFromParameter"), _mapping(spec["valueFromParameter"]),
                                  "outputParameterKey", "parameters"))
            for i, selector in enumerate(_mapping(spec.get("valueFromOneof")).get("parameterSelectors") or []):
                selectors.append((join_path(output_path, "valueFromOneof", "parameterSelectors", i),
                                  _mapping(selector), "outputParameterKey", "parameters"))
        for name, spec in _mapping(outputs.get("artifacts")).items():
            for i, selector in enumerate(_mapping(spec).get("artifactSelectors") or []):
                selectors.append((join_path(path, "outputs", "artifacts", name, "artifactSelectors", i),
                                  _mapping(selector), "outputArtifactKey", "artifacts"))
        for selector_path, selector, output_key, kind in selectors:
            producer = selector.get("producerSubtask")
            if producer not in tasks:
                self.error(join_path(selector_path, "producerSubtask"), producer, "no such task in this dag")
                continue
            ref = _mapping(_mapping(tasks[producer]).get("componentRef")).get("name")
            declared = self.declared(ref, "outputDefinitions", kind)
            if declared is not None and selector.get(output_key) not in declared:
                self.error(join_path(selector_path, output_key), selector.get(output_key),
                           f"task {producer} has no such output {kind[:-1]}")

    def executor(self, executor: Any, path: str) -> None:
        if not isinstance(executor, Mapping) or not ({"container", "importer"} & set(executor)):
            if not (isinstance(executor, Mapping) and executor):  # resolvers and others: left to the controller
                self.error(path, executor, "an executor is a container or an importer")
            return
        if "container" in executor:
            container = _mapping(executor["container"])
            if not isinstance(container.get("image"), str) or not container.get("image"):
                self.errors.append(FieldError.required(join_path(path, "container", "image"), "an image to run"))
            for key in ("command", "args"):
                values = container.get(key)
                if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
                    self.error(join_path(path, "container", key), values, "must be a list of strings")
        if "importer" in executor:
            uri = _mapping(_mapping(executor["importer"]).get("artifactUri"))
            constant = _mapping(uri.get("runtimeValue")).get("constant")
            if "runtimeParameter" not in uri and constant is None:
                self.errors.append(FieldError.required(join_path(path, "importer", "artifactUri"),
                                                       "a constant or a runtimeParameter"))
            elif constant is not None and not (isinstance(constant, str) and _local_absolute(constant)):
                self.error(join_path(path, "importer", "artifactUri", "runtimeValue", "constant"), constant,
                           "an importer reads a local file: an absolute path or a file:// URI")

    def recursion(self) -> None:
        """A component whose DAG contains itself, directly or through others, would never end."""
        edges = {name: {_mapping(_mapping(task).get("componentRef")).get("name")
                        for task in _mapping(_mapping(_mapping(component).get("dag")).get("tasks")).values()}
                 & set(self.components)
                 for name, component in self.components.items()}
        cycle = _find_cycle(edges)
        if cycle:
            self.error(join_path(self.path, "components", cycle[0], "dag"), " -> ".join(cycle),
                       f"components contain each other: {' -> '.join(cycle)}")


def _local_absolute(uri: str) -> bool:
    return uri.startswith("/") or uri.startswith("file:///")


def _find_cycle(edges: Mapping[str, set[str]]) -> list[str]:
    """One cycle in the graph (node → the nodes it depends on), as its nodes in order with the first
    repeated at the end; empty when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(edges.get(start, ())))]
        path = [start]
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            following = pending.pop(0)
            if state.get(following) == 1:
                cycle = path[path.index(following):] + [following]
                return list(reversed(cycle))  # producers first, as the run would order them
            if not state.get(following):
                state[following] = 1
                path.append(following)
                stack.append((following, sorted(edges.get(following, ()))))
    return []


def _platform_errors(platform: Any, path: str, executors: Mapping[str, Any]) -> list[FieldError]:
    """kfp-kubernetes' platforms document: ``{platforms: {kubernetes: {deploymentSpec: {executors:
    {LABEL: KubernetesExecutorConfig}}}}}``, each label one of the pipeline's executors."""
    if not isinstance(platform, Mapping) or not isinstance(platform.get("platforms"), Mapping):
        return [FieldError.invalid(path, "<document>", "must be kfp-kubernetes' platforms document "
                                   "({platforms: {kubernetes: {deploymentSpec: {executors: ...}}}})")]
    errs: list[FieldError] = []
    platforms = platform["platforms"]
    for name in platforms:
        if name != "kubernetes":
            errs.append(FieldError.not_supported(join_path(path, "platforms", name), name, ["kubernetes"]))
    kubernetes = platforms.get("kubernetes")
    if kubernetes is None:
        return errs
    k8s_path = join_path(path, "platforms", "kubernetes")
    configs = _mapping(kubernetes).get("deploymentSpec", {})
    configs = configs.get("executors", {}) if isinstance(configs, Mapping) else None
    if not isinstance(kubernetes, Mapping) or not isinstance(configs, Mapping):
        return [*errs, FieldError.invalid(join_path(k8s_path, "deploymentSpec", "executors"), "<value>",
                                          "must map executor labels to kubernetes executor configs")]
    for label, config in configs.items():
        config_path = join_path(k8s_path, "deploymentSpec", "executors", label)
        if label not in executors:
            errs.append(FieldError.invalid(config_path, label, "no such executor in the pipeline's deploymentSpec"))
        if not isinstance(config, Mapping):
            errs.append(FieldError.invalid(config_path, config, "must be a kubernetes executor config"))
            continue
        for key, value in config.items():
            field = join_path(config_path, key)
            if key in _K8S_LISTS:
                if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
                    errs.append(FieldError.invalid(field, value, "must be a list of objects"))
                elif key in _K8S_MOUNTS:
                    errs += [FieldError.required(join_path(field, i, "mountPath"), "where it is mounted")
                             for i, item in enumerate(value) if not item.get("mountPath")]
            elif key in _K8S_OBJECTS:
                if not isinstance(value, Mapping):
                    errs.append(FieldError.invalid(field, value, "must be an object"))
            elif key in _K8S_SCALARS:
                if not isinstance(value, _K8S_SCALARS[key]):
                    errs.append(FieldError.invalid(field, value, "must be a string" if key == "imagePullPolicy"
                                                   else "must be a number of seconds"))
            else:
                errs.append(FieldError.not_supported(field, key, (*_K8S_LISTS, *_K8S_OBJECTS, *_K8S_SCALARS)))
    return errs


def spec_errors(spec: Any, path: str, platform: Any = None, platform_path: str = "") -> list[FieldError]:
    """What makes `spec` not a runnable pipeline: each problem with its path under `path` (and under
    `platform_path` for the platforms document)."""
    if not isinstance(spec, dict) or "root" not in spec or "pipelineInfo" not in spec:
        return [FieldError.invalid(path, "<document>", "not a compiled pipeline (a PipelineSpec has "
                                   "pipelineInfo, root, components, deploymentSpec and schemaVersion)")]
    version = spec.get("schemaVersion")
    if version not in SCHEMA_VERSIONS:
        return [FieldError.not_supported(join_path(path, "schemaVersion"), version, SCHEMA_VERSIONS)]
    errs = _Checker(spec, path).check()
    if platform is not None:
        executors = _mapping(_mapping(spec.get("deploymentSpec")).get("executors"))
        errs += _platform_errors(platform, platform_path, executors)
    return errs


def _declared_parameters(spec: dict[str, Any]) -> dict[str, Any]:
    return ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}


def _fits(value: Any, kind: str) -> bool:
    if kind == "NUMBER_INTEGER" and isinstance(value, float):
        return value.is_integer()  # kfp.Client sends every number as a double
    allowed = _PARAMETER_TYPES.get(kind, (object,))
    return not (isinstance(value, bool) and bool not in allowed) and isinstance(value, allowed)


def parameter_errors(spec: dict[str, Any], values: dict[str, Any], path: str) -> list[FieldError]:
    """The run's parameters against the pipeline's inputs: unknown, missing or of the wrong type."""
    declared = _declared_parameters(spec)
    errs: list[FieldError] = []
    for name, value in values.items():
        definition = declared.get(name)
        if definition is None:
            errs.append(FieldError.invalid(join_path(path, name), value, "the pipeline has no such input "
                                           f"(it takes: {', '.join(sorted(declared)) or 'none'})"))
            continue
        kind = definition.get("parameterType", "STRING")
        if not _fits(value, kind):
            errs.append(FieldError.invalid(join_path(path, name), value, f"must be {kind}"))
    for name, definition in declared.items():
        if name not in values and "defaultValue" not in definition and not definition.get("isOptional"):
            errs.append(FieldError.required(join_path(path, name), "the pipeline's input has no default"))
    return errs
