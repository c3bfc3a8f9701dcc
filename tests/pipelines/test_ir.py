"""ir: every pipeline of the corpus (as kfp's compiler writes it) passes; each kind of bad input is
refused with its path in the spec and the reason, at the API too (a Run that is never stored)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.pipelines.kfp_corpus import compiled, corpus_names
from trimaran.api.errors import ManifestError
from trimaran.api.loader import validate
from trimaran.pipelines.ir import parameter_errors, spec_errors

P = "spec.pipelineSpec"


def _spec(name: str) -> dict[str, Any]:
    return copy.deepcopy(compiled(name).pipeline_spec)


def _errors(spec: Any, platform: Any = None) -> list[str]:
    return [str(e) for e in spec_errors(spec, P, platform, "spec.platformSpec")]


def test_every_corpus_pipeline_passes() -> None:
    for name in corpus_names():
        pipeline = compiled(name)
        assert spec_errors(pipeline.pipeline_spec, P, pipeline.platform_spec, "spec.platformSpec") == [], name
        assert parameter_errors(pipeline.pipeline_spec, pipeline.arguments, "spec.parameters") == [] or name in (
            "exit_handler", "retries", "importer"), name  # their marker_dir or uri comes from the test


def test_not_a_pipeline_and_unknown_schema_version() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {}}
    assert _errors(deployment) == [f"{P}: Invalid value: \"<document>\": not a compiled pipeline (a PipelineSpec "
                                   "has pipelineInfo, root, components, deploymentSpec and schemaVersion)"]
    assert "not a compiled pipeline" in _errors(["a", "list"])[0]
    spec = _spec("hello")
    spec["schemaVersion"] = "3.0.0"
    assert _errors(spec) == [f'{P}.schemaVersion: Unsupported value: "3.0.0": supported values: "2.0.0", "2.1.0"']
    spec = _spec("hello")
    spec["components"] = ["not", "a", "mapping"]
    assert _errors(spec) == [f'{P}.components: Invalid value: "array": must map component names to ComponentSpecs']


def test_unknown_component_executor_and_parameter_type() -> None:
    spec = _spec("hello")
    spec["root"]["dag"]["tasks"]["greet"]["componentRef"]["name"] = "comp-missing"
    spec["components"]["comp-greet"]["executorLabel"] = "exec-missing"
    spec["root"]["inputDefinitions"]["parameters"]["name"]["parameterType"] = "TEXT"
    assert _errors(spec) == [
        f'{P}.root.inputDefinitions.parameters.name.parameterType: Unsupported value: "TEXT": supported values: '
        '"STRING", "NUMBER_INTEGER", "NUMBER_DOUBLE", "BOOLEAN", "LIST", "STRUCT", "TASK_FINAL_STATUS", "TASK_CONFIG"',
        f'{P}.root.dag.tasks.greet.componentRef.name: Invalid value: "comp-missing": no such component in components',
        f'{P}.components.comp-greet.executorLabel: Invalid value: "exec-missing": no such executor in '
        "deploymentSpec.executors"]


def test_unknown_task_output_and_input() -> None:
    spec = _spec("artifacts")
    inputs = spec["root"]["dag"]["tasks"]["evaluate"]["inputs"]
    inputs["parameters"]["raw"]["taskOutputParameter"]["outputParameterKey"] = "cooked"
    inputs["artifacts"]["model"]["taskOutputArtifact"]["producerTask"] = "prepare"
    spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["rows"]["componentInputParameter"] = "lines"
    assert sorted(_errors(spec)) == sorted([
        f'{P}.root.dag.tasks.evaluate.inputs.parameters.raw.taskOutputParameter.outputParameterKey: Invalid value: '
        '"cooked": task train has no such output parameter (it has: raw)',
        f'{P}.root.dag.tasks.evaluate.inputs.artifacts.model.taskOutputArtifact.producerTask: Invalid value: '
        '"prepare": no such task in this dag',
        f'{P}.root.dag.tasks.train.inputs.parameters.rows.componentInputParameter: Invalid value: "lines": the '
        "enclosing component declares no such input parameter"])


def test_cycle_names_its_tasks() -> None:
    spec = _spec("artifacts")
    spec["root"]["dag"]["tasks"]["train"]["dependentTasks"] = ["evaluate"]
    assert _errors(spec) == [f'{P}.root.dag.tasks: Invalid value: "evaluate -> train -> evaluate": a cycle: '
                             "evaluate -> train -> evaluate (through dependentTasks and inputs)"]
    spec = _spec("nested")
    inner = next(name for name, c in spec["components"].items() if "dag" in c and name.startswith("comp-inner"))
    spec["components"][inner]["dag"]["tasks"]["self"] = {"componentRef": {"name": inner}, "taskInfo": {"name": "s"}}
    errors = _errors(spec)
    assert len(errors) == 1 and f"components contain each other: {inner} -> {inner}" in errors[0], errors


def test_dag_outputs_loops_and_dependent_tasks_refer_to_what_exists() -> None:
    spec = _spec("loops")
    loop = next(t for t in spec["root"]["dag"]["tasks"].values() if "parameterIterator" in t)
    loop["parameterIterator"]["items"]["inputParameter"] = "pipelinechannel--nothing"
    loop["dependentTasks"] = ["ghost"]
    spec["root"]["dag"]["outputs"]["parameters"]["Output"]["valueFromParameter"]["producerSubtask"] = "ghost"
    errors = _errors(spec)
    assert len(errors) == 3, errors
    assert any(".parameterIterator.items.inputParameter: " in e and "no such input parameter" in e for e in errors)
    assert any(".dependentTasks: Invalid value: \"ghost\": no such task in this dag" in e for e in errors)
    output = f"{P}.root.dag.outputs.parameters.Output.valueFromParameter.producerSubtask"
    assert any(e.startswith(output) for e in errors)


def test_importer_reads_local_absolute_paths_only() -> None:
    spec = _spec("importer")
    importer = next(e for e in spec["deploymentSpec"]["executors"].values() if "importer" in e)["importer"]
    importer["artifactUri"] = {"runtimeValue": {"constant": "gs://bucket/data.csv"}}
    label = next(k for k, e in spec["deploymentSpec"]["executors"].items() if "importer" in e)
    assert _errors(spec) == [f'{P}.deploymentSpec.executors.{label}.importer.artifactUri.runtimeValue.constant: '
                             'Invalid value: "gs://bucket/data.csv": an importer reads a local file: an absolute '
                             "path or a file:// URI"]
    importer["artifactUri"] = {"runtimeValue": {"constant": "file:///data/x.csv"}}
    assert _errors(spec) == []


def test_platforms_document_shape() -> None:
    pipeline = compiled("kubernetes")
    platform = copy.deepcopy(pipeline.platform_spec)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    config = executors["exec-inspect"]
    del config["pvcMount"][0]["mountPath"]
    config["tolerations"] = {"key": "x"}
    config["runtimeClass"] = "gvisor"
    executors["exec-gone"] = {}
    base = "spec.platformSpec.platforms.kubernetes.deploymentSpec.executors"
    assert sorted(_errors(pipeline.pipeline_spec, platform)) == sorted([
        f"{base}.exec-inspect.pvcMount[0].mountPath: Required value: where it is mounted",
        f'{base}.exec-inspect.tolerations: Invalid value: "object": must be a list of objects',
        f'{base}.exec-inspect.runtimeClass: Unsupported value: "runtimeClass": supported values: ' + ", ".join(
            f'"{k}"' for k in ("pvcMount", "secretAsEnv", "secretAsVolume", "configMapAsEnv", "configMapAsVolume",
                               "imagePullSecret", "fieldPathAsEnv", "tolerations", "genericEphemeralVolume",
                               "nodeAffinity", "podAffinity", "emptyDirMounts", "nodeSelector", "podMetadata",
                               "enabledSharedMemory", "securityContext", "imagePullPolicy", "activeDeadlineSeconds")),
        f'{base}.exec-gone: Invalid value: "exec-gone": no such executor in the pipeline\'s deploymentSpec'])
    assert "must be kfp-kubernetes' platforms document" in _errors(pipeline.pipeline_spec, {"kubernetes": {}})[0]


def test_parameters_missing_unknown_and_of_the_wrong_type() -> None:
    spec = _spec("parameters")
    assert parameter_errors(spec, {"count": 3.0, "ratio": 2}, "spec.parameters") == []  # kfp.Client's doubles
    errors = [str(e) for e in parameter_errors(spec, {"count": 2.5, "flag": "yes", "colour": "red"}, "spec.parameters")]
    assert errors == ["spec.parameters.count: Invalid value: 2.5: must be NUMBER_INTEGER",
                      'spec.parameters.flag: Invalid value: "yes": must be BOOLEAN',
                      'spec.parameters.colour: Invalid value: "red": the pipeline has no such input (it takes: '
                      "config, count, flag, items, ratio, text)"]
    assert [str(e) for e in parameter_errors(_spec("retries"), {}, "spec.parameters")] == [
        "spec.parameters.marker_dir: Required value: the pipeline's input has no default"]


def test_a_bad_run_is_refused_at_the_api_with_the_path() -> None:
    spec = _spec("artifacts")
    spec["root"]["dag"]["tasks"]["train"]["dependentTasks"] = ["evaluate"]
    run = {"apiVersion": "pipelines.trimaran.io/v1", "kind": "Run", "metadata": {"name": "r"},
           "spec": {"pipelineSpec": spec, "parameters": {"rows": "many"}}}
    with pytest.raises(ManifestError, match=r"spec\.pipelineSpec\.root\.dag\.tasks: .*a cycle: evaluate -> train"):
        validate(run)
    run["spec"]["pipelineSpec"] = _spec("artifacts")
    with pytest.raises(ManifestError, match=r'spec\.parameters\.rows: Invalid value: "many": must be NUMBER_INTEGER'):
        validate(run)


def test_retry_loop_trigger_and_caching_values() -> None:
    spec = _spec("retries")
    task = spec["root"]["dag"]["tasks"]["flaky"]
    task["retryPolicy"].update(maxRetryCount=-1, backoffDuration="1m", backoffFactor="double")
    task["triggerPolicy"] = {"strategy": "SOMETIMES", "condition": 1}
    task["cachingOptions"] = {"enableCache": "yes", "cacheKey": 7}
    task["iteratorPolicy"] = {"parallelismLimit": 1.5}
    at = f"{P}.root.dag.tasks.flaky"
    assert _errors(spec) == [
        f"{at}.retryPolicy.maxRetryCount: Invalid value: -1: must be a whole number, 0 or more",
        f"{at}.retryPolicy.backoffDuration: Invalid value: \"1m\": must be a duration in seconds, as '30s'",
        f'{at}.retryPolicy.backoffFactor: Invalid value: "double": must be a number, 0 or more',
        f"{at}.iteratorPolicy.parallelismLimit: Invalid value: 1.5: must be a whole number, 0 or more (0: no limit)",
        f'{at}.triggerPolicy.strategy: Unsupported value: "SOMETIMES": supported values: '
        '"TRIGGER_STRATEGY_UNSPECIFIED", "ALL_UPSTREAM_TASKS_SUCCEEDED", "ALL_UPSTREAM_TASKS_COMPLETED"',
        f"{at}.triggerPolicy.condition: Invalid value: 1: must be a CEL expression",
        f'{at}.cachingOptions.enableCache: Invalid value: "yes": must be true or false',
        f"{at}.cachingOptions.cacheKey: Invalid value: 7: must be a string"]


def test_defaults_and_constants_of_the_wrong_type() -> None:
    spec = _spec("parameters")
    spec["root"]["inputDefinitions"]["parameters"]["count"]["defaultValue"] = "three"
    spec["root"]["dag"]["tasks"]["describe"]["inputs"]["parameters"]["note"] = {"runtimeValue": {"constant": 7}}
    assert _errors(spec) == [
        f'{P}.root.inputDefinitions.parameters.count.defaultValue: Invalid value: "three": must be NUMBER_INTEGER',
        f"{P}.root.dag.tasks.describe.inputs.parameters.note.runtimeValue.constant: Invalid value: 7: component "
        "comp-describe's input note is STRING"]
