"""What a run does next, from its compiled IR and what its steps did so far (pure: no store, no
processes).

The run controller keeps the *facts* (each container or importer task that started: its pod,
attempts, state, inputs and outputs) and calls :func:`plan` after every change. Everything else
is derived again on every pass from the IR and those facts: which tasks are waiting, which are
skipped and why (a false ``dsl.If``, an upstream failure), the states and outputs of DAG tasks
(nested pipelines, conditions, loops and their iterations, exit handlers), and the run's state.
Deriving instead of remembering keeps a restarted control plane, a retried run and a cache hit
on the same path.

Task ids are the task's name at the root and ``<parent id>.<name>`` below it; a loop's iterations
are ``<loop id>.iteration-<i>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trimaran.api.pipelines import FINISHED_TASK_STATES
from trimaran.pipelines import conditions

__all__ = ["LEAF_TYPES", "Plan", "Ready", "coerce", "plan"]

_BAD = frozenset({"FAILED", "CANCELED"})
LEAF_TYPES = ("container", "importer")
_ALL_UPSTREAM = "ALL_UPSTREAM_TASKS_COMPLETED"
_SELECTOR = re.compile(r"""parseJson\(string_value\)\[["']([^"']+)["']\]""")


@dataclass
class Ready:
    """A container or importer task whose inputs are all known: the controller starts it (a pod, a
    cache hit or the importer's artifact)."""

    id: str
    name: str
    component_name: str
    component: dict[str, Any]
    executor_label: str
    executor: dict[str, Any]
    inputs: dict[str, Any]  # {"parameters": {...}, "artifacts": {name: [ArtifactRef]}}
    enable_cache: bool
    custom_cache_key: str  # cachingOptions.cacheKey: when set, the task's cache key instead of its fingerprint
    retry_policy: dict[str, Any] | None


@dataclass
class Plan:
    tasks: list[dict[str, Any]] = field(default_factory=list)  # every task's status, parents first
    ready: list[Ready] = field(default_factory=list)
    state: str = "PENDING"  # the run's: PENDING, RUNNING, SUCCEEDED, FAILED, CANCELED


@dataclass
class _Result:
    state: str
    outputs: dict[str, Any] | None = None
    upstream_failed: bool = False  # skipped because something it waited for failed
    message: str | None = None


def coerce(value: Any, parameter_type: str | None) -> Any:
    """A value as its declared type: KFP writes integer constants as floats and ``kfp.Client``
    sends every number as a double."""
    if parameter_type == "NUMBER_INTEGER" and isinstance(value, float) and value.is_integer():
        return int(value)
    if parameter_type == "NUMBER_DOUBLE" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if parameter_type in ("LIST", "STRUCT") and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def plan(spec: Mapping[str, Any], parameters: Mapping[str, Any], facts: Mapping[str, Mapping[str, Any]], *,
         run_name: str = "", terminating: bool = False) -> Plan:
    """The run's next step. ``facts``: task id → the status of each container/importer task that
    started (or ended); ``run_name`` goes into exit handlers' PipelineTaskFinalStatus;
    ``terminating``: nothing new starts and what never started is CANCELED."""
    planner = _Planner(spec, facts, terminating, run_name)
    root = spec["root"]
    declared = (root.get("inputDefinitions") or {}).get("parameters") or {}
    values = {name: coerce(parameters[name] if name in parameters else d.get("defaultValue"),
                           d.get("parameterType"))
              for name, d in declared.items() if name in parameters or "defaultValue" in d}
    result = planner.dag(root, "", None, {"parameters": values, "artifacts": {}})
    out = planner.plan
    if result.state in FINISHED_TASK_STATES:
        out.state = "CANCELED" if terminating else ("FAILED" if result.state in _BAD else "SUCCEEDED")
    else:
        out.state = "RUNNING" if any(t["state"] != "PENDING" for t in out.tasks
                                     if t["type"] in LEAF_TYPES) else "PENDING"
    return out


class _Planner:
    def __init__(self, spec: Mapping[str, Any], facts: Mapping[str, Mapping[str, Any]], terminating: bool,
                 run_name: str) -> None:
        self.run_name = run_name
        self.components = spec.get("components") or {}
        self.executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
        self.facts = facts
        self.terminating = terminating
        self.plan = Plan()

    def _record(self, **fields: Any) -> dict[str, Any]:
        record = {k: v for k, v in fields.items() if v is not None}
        self.plan.tasks.append(record)
        return record

    def dag(self, component: Mapping[str, Any], prefix: str, parent: str | None,
            inputs: Mapping[str, Any]) -> _Result:
        """Every task of one DAG instance; its state and outputs."""
        tasks = (component.get("dag") or {}).get("tasks") or {}
        results: dict[str, _Result] = {}
        for name in tasks:
            self._task(name, tasks, prefix, parent, inputs, results, ())
        states = [r.state for r in results.values()]
        if any(s not in FINISHED_TASK_STATES for s in states):
            state = "RUNNING" if any(s != "PENDING" for s in states) else "PENDING"
            return _Result(state)
        failed = [n for n, r in results.items() if r.state in _BAD or r.upstream_failed]
        if failed:
            first = results[failed[0]]
            return _Result("FAILED", message=first.message or f"task {failed[0]} failed")
        return _Result("SUCCEEDED", self._dag_outputs(component, results))

    def _dag_outputs(self, component: Mapping[str, Any], results: Mapping[str, _Result]) -> dict[str, Any]:
        spec = (component.get("dag") or {}).get("outputs") or {}
        parameters: dict[str, Any] = {}
        for name, source in (spec.get("parameters") or {}).items():
            selectors = ((source.get("valueFromOneof") or {}).get("parameterSelectors")
                         or [source.get("valueFromParameter") or {}])
            for sel in selectors:
                got = (results.get(sel.get("producerSubtask", "")) or _Result("")).outputs or {}
                if sel.get("outputParameterKey") in (got.get("parameters") or {}):
                    parameters[name] = got["parameters"][sel["outputParameterKey"]]
                    break
        artifacts: dict[str, list[Any]] = {}
        for name, source in (spec.get("artifacts") or {}).items():
            for sel in source.get("artifactSelectors") or []:
                got = (results.get(sel.get("producerSubtask", "")) or _Result("")).outputs or {}
                if sel.get("outputArtifactKey") in (got.get("artifacts") or {}):
                    artifacts[name] = got["artifacts"][sel["outputArtifactKey"]]
                    break
        return {"parameters": parameters, "artifacts": artifacts}

    def _task(self, name: str, tasks: Mapping[str, Any], prefix: str, parent: str | None,
              dag_inputs: Mapping[str, Any], results: dict[str, _Result], visiting: tuple[str, ...]) -> _Result:
        if name in results:
            return results[name]
        task = tasks[name]
        tid = prefix + name
        display = (task.get("taskInfo") or {}).get("name") or name
        component_name = (task.get("componentRef") or {}).get("name") or ""
        component = self.components.get(component_name) or {}
        kind = _kind(task, component_name, component)
        upstream = set(task.get("dependentTasks") or []) | _producers(task)
        for dep in sorted(upstream):
            if dep in tasks and dep not in visiting:
                self._task(dep, tasks, prefix, parent, dag_inputs, results, (*visiting, name))
        common = {"id": tid, "name": display, "parent": parent, "component": component_name, "type": kind}
        waiting = [d for d in upstream if d in results and results[d].state not in FINISHED_TASK_STATES]
        if waiting or any(d in tasks and d not in results for d in upstream):
            results[name] = self._not_started(common, tid, "PENDING")
            return results[name]
        bad = sorted(d for d in upstream if d in results and (results[d].state in _BAD or results[d].upstream_failed))
        policy = task.get("triggerPolicy") or {}
        if bad and policy.get("strategy") != _ALL_UPSTREAM:
            message = f"upstream task {', '.join(bad)} did not succeed"
            self._record(**common, state="SKIPPED", message=message)
            results[name] = _Result("SKIPPED", upstream_failed=True, message=results[bad[0]].message)
            return results[name]
        inputs = self._inputs(task, component, dag_inputs, results, tasks)
        if policy.get("condition"):
            values = dict(inputs["parameters"])
            try:
                passed = conditions.evaluate(policy["condition"], values)
            except Exception as exc:  # a condition that cannot be evaluated fails its task, not the run's loop
                self._record(**common, state="FAILED", message=f"condition {policy['condition']!r}: {exc}")
                results[name] = _Result("FAILED", message=f"condition of {display}: {exc}")
                return results[name]
            if not passed:
                self._record(**common, state="SKIPPED", message=f"condition {policy['condition']} is false")
                results[name] = _Result("SKIPPED")
                return results[name]
        if "dag" in component:
            results[name] = self._dag_task(task, component, common, tid, inputs)
        else:
            results[name] = self._leaf(task, component, common, tid, inputs)
        return results[name]

    def _not_started(self, common: dict[str, Any], tid: str, state: str) -> _Result:
        if self.terminating:
            self._record(**common, state="CANCELED", message="the run was terminated")
            return _Result("CANCELED", message="the run was terminated")
        self._record(**common, state=state)
        return _Result(state)

    def _leaf(self, task: Mapping[str, Any], component: Mapping[str, Any], common: dict[str, Any], tid: str,
              inputs: dict[str, Any]) -> _Result:
        fact = self.facts.get(tid)
        label = component.get("executorLabel") or ""
        executor = self.executors.get(label) or {}
        common["type"] = "importer" if "importer" in executor else "container"
        if fact is not None and (fact.get("podName") or fact.get("state") in FINISHED_TASK_STATES):
            record = self._record(**{**fact, **common})
            return _Result(record["state"], record.get("outputs"), message=_leaf_message(record))
        if self.terminating:
            return self._not_started(common, tid, "PENDING")
        self._record(**{**(fact or {}), **common, "state": "PENDING", "inputs": inputs})
        self.plan.ready.append(Ready(
            id=tid, name=common["name"], component_name=common["component"], component=dict(component),
            executor_label=label, executor=executor, inputs=inputs,
            enable_cache=bool((task.get("cachingOptions") or {}).get("enableCache")),
            custom_cache_key=str((task.get("cachingOptions") or {}).get("cacheKey") or ""),
            retry_policy=task.get("retryPolicy")))
        return _Result("PENDING")

    def _dag_task(self, task: Mapping[str, Any], component: Mapping[str, Any], common: dict[str, Any], tid: str,
                  inputs: dict[str, Any]) -> _Result:
        record = self._record(**common, state="PENDING", inputs=inputs)
        first = len(self.plan.tasks)
        if "parameterIterator" in task or "artifactIterator" in task:
            result = self._loop(task, component, tid, inputs)
        else:
            result = self.dag(component, tid + ".", tid, inputs)
        record["state"] = result.state
        if result.state in _BAD:
            record["message"] = result.message
        if result.outputs:
            record["outputs"] = result.outputs
        _span(record, self.plan.tasks[first:], tid)
        return result

    def _loop(self, task: Mapping[str, Any], component: Mapping[str, Any], tid: str,
              inputs: dict[str, Any]) -> _Result:
        iterator = task.get("parameterIterator") or task.get("artifactIterator") or {}
        items_spec = iterator.get("items") or {}
        if "raw" in items_spec:
            items = json.loads(items_spec["raw"]) if isinstance(items_spec["raw"], str) else items_spec["raw"]
        elif "inputParameter" in items_spec:
            items = coerce(inputs["parameters"].get(items_spec["inputParameter"]), "LIST") or []
        else:
            items = [[a] for a in inputs["artifacts"].get(items_spec.get("inputArtifact", ""), [])]
        is_artifact = "artifactIterator" in task
        limit = int((task.get("iteratorPolicy") or {}).get("parallelismLimit") or 0)
        item_input = iterator.get("itemInput")
        declared = (component.get("inputDefinitions") or {}).get("parameters") or {}
        results: list[_Result] = []
        open_now = 0
        for i, item in enumerate(items):
            iid = f"{tid}.iteration-{i}"
            common = {"id": iid, "name": f"iteration-{i}", "parent": tid, "component": task["componentRef"]["name"],
                      "type": "iteration", "iteration": i}
            if limit and open_now >= limit and not self._started(iid):
                results.append(self._not_started(common, iid, "PENDING"))
                continue
            child_inputs = {"parameters": dict(inputs["parameters"]), "artifacts": dict(inputs["artifacts"])}
            if is_artifact:
                child_inputs["artifacts"][item_input] = item
            else:
                child_inputs["parameters"][item_input] = coerce(item, (declared.get(item_input) or {}).get(
                    "parameterType"))
            record = self._record(**common, state="PENDING")
            first = len(self.plan.tasks)
            result = self.dag(component, iid + ".", iid, child_inputs)
            record["state"] = result.state
            if result.state in _BAD:
                record["message"] = result.message
            _span(record, self.plan.tasks[first:], iid)
            if result.state not in FINISHED_TASK_STATES:
                open_now += 1
            results.append(result)
        states = [r.state for r in results]
        if any(s not in FINISHED_TASK_STATES for s in states):
            return _Result("RUNNING" if any(s != "PENDING" for s in states) else "PENDING")
        failed = [r for r in results if r.state in _BAD]
        if failed:
            return _Result("FAILED", message=failed[0].message)
        # The loop's outputs are its iterations' outputs collected in order (dsl.Collected).
        spec = (component.get("dag") or {}).get("outputs") or {}
        outputs: dict[str, Any] = {"parameters": {}, "artifacts": {}}
        for name in spec.get("parameters") or {}:
            outputs["parameters"][name] = [((r.outputs or {}).get("parameters") or {}).get(name) for r in results]
        for name in spec.get("artifacts") or {}:
            outputs["artifacts"][name] = [a for r in results for a in ((r.outputs or {}).get("artifacts") or {})
                                          .get(name, [])]
        return _Result("SUCCEEDED", outputs)

    def _started(self, prefix: str) -> bool:
        return any(tid.startswith(prefix + ".") for tid in self.facts)

    def _inputs(self, task: Mapping[str, Any], component: Mapping[str, Any], dag_inputs: Mapping[str, Any],
                results: Mapping[str, _Result], tasks: Mapping[str, Any]) -> dict[str, Any]:
        declared = (component.get("inputDefinitions") or {})
        spec = task.get("inputs") or {}
        parameters: dict[str, Any] = {}
        for name, source in (spec.get("parameters") or {}).items():
            found, value = self._parameter(source, dag_inputs, results, tasks)
            if not found:
                continue
            selector = _SELECTOR.fullmatch(source.get("parameterExpressionSelector") or "")
            if selector:
                value = coerce(value, "STRUCT")
                value = value.get(selector.group(1)) if isinstance(value, dict) else None
            kind = ((declared.get("parameters") or {}).get(name) or {}).get("parameterType")
            parameters[name] = coerce(value, kind)
        for name, definition in (declared.get("parameters") or {}).items():
            if name not in parameters and "defaultValue" in definition:
                parameters[name] = coerce(definition["defaultValue"], definition.get("parameterType"))
        artifacts: dict[str, list[Any]] = {}
        for name, source in (spec.get("artifacts") or {}).items():
            if "componentInputArtifact" in source:
                got = dag_inputs["artifacts"].get(source["componentInputArtifact"])
            else:
                ref = source.get("taskOutputArtifact") or {}
                outs = (results.get(ref.get("producerTask", "")) or _Result("")).outputs or {}
                got = (outs.get("artifacts") or {}).get(ref.get("outputArtifactKey"))
            if got is not None:
                artifacts[name] = got
        return {"parameters": parameters, "artifacts": artifacts}

    def _parameter(self, source: Mapping[str, Any], dag_inputs: Mapping[str, Any], results: Mapping[str, _Result],
                   tasks: Mapping[str, Any]) -> tuple[bool, Any]:
        if "componentInputParameter" in source:
            key = source["componentInputParameter"]
            return key in dag_inputs["parameters"], dag_inputs["parameters"].get(key)
        if "taskOutputParameter" in source:
            ref = source["taskOutputParameter"]
            outs = ((results.get(ref.get("producerTask", "")) or _Result("")).outputs or {}).get("parameters") or {}
            key = ref.get("outputParameterKey")
            return key in outs, outs.get(key)
        if "runtimeValue" in source:
            return True, (source["runtimeValue"] or {}).get("constant")
        if "taskFinalStatus" in source:
            producer = source["taskFinalStatus"].get("producerTask", "")
            result = results.get(producer) or _Result("FAILED")
            state = "FAILED" if result.state in _BAD or result.upstream_failed else result.state
            error = {"code": 0, "message": ""} if state == "SUCCEEDED" else {"code": 1, "message": result.message or ""}
            name = ((tasks.get(producer) or {}).get("taskInfo") or {}).get("name") or producer
            return True, {"state": state, "pipelineJobResourceName": self.run_name, "pipelineTaskName": name,
                          "error": error}
        return False, None


def _kind(task: Mapping[str, Any], component_name: str, component: Mapping[str, Any]) -> str:
    if "parameterIterator" in task or "artifactIterator" in task:
        return "loop"
    if "dag" not in component:
        return "container"
    if (task.get("triggerPolicy") or {}).get("condition"):
        return "condition"
    if component_name.startswith("comp-exit-handler-"):
        return "exit-handler"
    return "dag"


def _producers(task: Mapping[str, Any]) -> set[str]:
    spec = task.get("inputs") or {}
    out = set()
    for source in (spec.get("parameters") or {}).values():
        ref = source.get("taskOutputParameter") or source.get("taskFinalStatus") or {}
        if ref.get("producerTask"):
            out.add(ref["producerTask"])
    for source in (spec.get("artifacts") or {}).values():
        ref = source.get("taskOutputArtifact") or {}
        if ref.get("producerTask"):
            out.add(ref["producerTask"])
    return out


def _leaf_message(record: Mapping[str, Any]) -> str | None:
    if record.get("state") in _BAD:
        return f"{record.get('name')}: {record.get('message') or record['state'].lower()}"
    return None


def _span(record: dict[str, Any], children: list[dict[str, Any]], tid: str) -> None:
    """A DAG task's times: its first child's start to its last child's end."""
    mine = [c for c in children if c.get("parent") == tid]
    starts = [c["startedAt"] for c in mine if c.get("startedAt")]
    if starts:
        record["startedAt"] = min(starts)
    ends = [c.get("finishedAt") for c in mine]
    if record["state"] in FINISHED_TASK_STATES and ends and all(ends):
        record["finishedAt"] = max(e for e in ends if e)
