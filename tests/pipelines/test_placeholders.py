"""placeholders: the ExecutorInput we build is the one kfp's own executor reads (the real
``kfp.dsl.executor_main`` runs the corpus' components on it), commands resolve every placeholder the
compiler writes, and outputs are read back as KFP's launcher reads them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.pipelines.kfp_corpus import compiled, kfp_python
from trimaran.pipelines.placeholders import (
    PlaceholderError,
    executor_input,
    read_outputs,
    resolve_args,
    resolve_metadata,
)

CONTEXT = {"pipeline_job_name": "run-1", "pipeline_job_uuid": "uid-1", "pipeline_task_name": "show",
           "pipeline_task_uuid": "uid-1-show", "pipeline_root": "/runs/run-1"}


def _component(pipeline: str, name: str) -> tuple[dict, dict]:
    spec = compiled(pipeline).pipeline_spec
    component = spec["components"][f"comp-{name}"]
    return component, spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]


def _run(container: dict, document: dict, tmp_path: Path) -> None:
    """The container's command as a pod runs it, without the pip preamble (sh -c PREAMBLE sh ...):
    `python3` is the kfp venv's, so kfp's own executor reads our ExecutorInput."""
    command = resolve_args(container["command"], document, CONTEXT)
    if command[:2] == ["sh", "-c"] and "pip install" in command[2]:
        command = command[3:]
    argv = command + resolve_args(container.get("args") or [], document, CONTEXT)
    env = {**os.environ, "PATH": f"{Path(kfp_python()).parent}:{os.environ['PATH']}"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, f"{argv[:4]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def test_parameters_are_typed_as_declared_kfp_client_doubles_included() -> None:
    component, _ = _component("parameters", "produce")
    document = executor_input(component, parameters={"text": "a", "count": 3.0, "ratio": 2, "flag": "true",
                                                     "items": [1, "x"], "config": '{"k": 1}'},
                              artifacts={}, outputs_dir="/o", artifacts_uri="/a")
    assert document["inputs"]["parameterValues"] == {"text": "a", "count": 3, "ratio": 2.0, "flag": True,
                                                     "items": [1, "x"], "config": {"k": 1}}
    assert document["outputs"]["parameters"]["count"] == {"outputFile": "/o/count"}
    assert document["outputs"]["outputFile"] == "/o/executor_output.json"
    with pytest.raises(PlaceholderError, match="'count'.*NUMBER_INTEGER"):
        executor_input(component, parameters={"count": 2.5}, artifacts={}, outputs_dir="/o", artifacts_uri="/a")


def test_kfp_executor_runs_on_our_executor_input_and_its_outputs_read_back(tmp_path: Path) -> None:
    train, train_container = _component("artifacts", "train")
    first = executor_input(train, parameters={"rows": 3.0}, artifacts={}, outputs_dir=str(tmp_path / "t" / ".kfp"),
                           artifacts_uri=str(tmp_path / "t"))
    assert first["outputs"]["artifacts"]["metrics"]["artifacts"][0]["type"] == {"schemaTitle": "system.Metrics",
                                                                                 "schemaVersion": "0.0.1"}
    _run(train_container, first, tmp_path)
    parameters, artifacts = read_outputs(train, first)
    assert parameters == {"raw": "raw text"}  # an OutputPath(str) file
    assert artifacts["metrics"] == [{"name": "metrics", "uri": str(tmp_path / "t" / "metrics"),
                                     "type": "system.Metrics", "metadata": {"accuracy": 0.75, "rows": 3}}]
    assert artifacts["confusion"][0]["metadata"]["confusionMatrix"]["rows"][0]["row"] == [3, 1]
    assert Path(artifacts["dataset"][0]["uri"]).read_text().splitlines() == ["0", "1", "2"]

    evaluate, evaluate_container = _component("artifacts", "evaluate")
    second = executor_input(evaluate, parameters=parameters,
                            artifacts={name: artifacts[name] for name in ("dataset", "model", "metrics", "extra")},
                            outputs_dir=str(tmp_path / "e"), artifacts_uri=str(tmp_path / "e"))
    _run(evaluate_container, second, tmp_path)
    # As on a cluster: metadata numbers stay as written (kfp.local would print rows=3.0).
    assert read_outputs(evaluate, second) == ({"Output": "3 rows=3 weights none acc=0.75 extra raw text"}, {})


def test_named_tuple_outputs_are_typed(tmp_path: Path) -> None:
    component, container = _component("parameters", "produce")
    document = executor_input(component, parameters={"text": "ab", "count": 2, "ratio": 1, "flag": False,
                                                     "items": [], "config": {}},
                              artifacts={}, outputs_dir=str(tmp_path), artifacts_uri=str(tmp_path))
    _run(container, document, tmp_path)
    assert read_outputs(component, document) == ({"text": "AB", "count": 4, "ratio": 0.5, "flag": True,
                                                  "items": [0], "config": {"seen": True}}, {})


def test_container_placeholders_concat_if_present_and_context(tmp_path: Path) -> None:
    produce, produce_container = _component("container", "produce")
    made = executor_input(produce, parameters={"word": "yo", "count": 2.0}, artifacts={},
                          outputs_dir=str(tmp_path / "p" / ".kfp"), artifacts_uri=str(tmp_path / "p"))
    assert resolve_args(produce_container["args"], made, CONTEXT) == [
        "yo", "2", str(tmp_path / "p" / "data"), str(tmp_path / "p" / ".kfp" / "size")]
    _run(produce_container, made, tmp_path)
    parameters, artifacts = read_outputs(produce, made)
    assert parameters == {"size": 2}
    assert Path(artifacts["data"][0]["uri"]).read_text() == "yo\nyo\n"

    show, show_container = _component("container", "show")
    data = {"data": artifacts["data"]}
    uri = artifacts["data"][0]["uri"]
    context_args = ["run-1", "show", "uid-1", "uid-1-show", "/runs/run-1"]
    with_suffix = executor_input(show, parameters={"label": "with", "suffix": "s"}, artifacts=data,
                                 outputs_dir="/o", artifacts_uri="/a")
    assert resolve_args(show_container["args"], with_suffix, CONTEXT) == [
        uri, f"label=with/{uri}", "--suffix", "s", *context_args]
    without = executor_input(show, parameters={"label": "without"}, artifacts=data, outputs_dir="/o",
                             artifacts_uri="/a")
    assert resolve_args(show_container["args"], without, CONTEXT) == [
        uri, f"label=without/{uri}", "--no-suffix", *context_args]


def test_executor_input_placeholder_and_input_artifact_metadata() -> None:
    document = {"inputs": {"parameterValues": {"n": 3, "s": "x"},
                           "artifacts": {"d": {"artifacts": [{"name": "d", "uri": "file:///r/d",
                                                              "metadata": {"k": "v", "n": 1.0}}]}}},
                "outputs": {"outputFile": "/o/executor_output.json"}}
    assert json.loads(resolve_args(["{{$}}"], document, {})[0]) == document
    assert resolve_args(["{{$.inputs.artifacts['d'].path}}", "{{$.inputs.artifacts['d'].metadata['k']}}",
                         "{{$.inputs.artifacts['d'].metadata}}", "n={{$.inputs.parameters['n']}}",
                         "{{$.outputs.output_file}}", '{"Concat": ["{{$.inputs.parameters[\'s\']}}", "-", '
                         '{"IfPresent": {"InputName": "absent", "Then": "yes", "Else": "no"}}]}'],
                        document, {}) == ["/r/d", "v", '{"k": "v", "n": 1.0}', "n=3",
                                          "/o/executor_output.json", "x-no"]
    # An f-string argument: the compiler passes a constant that refers to an injected input.
    component = {"inputDefinitions": {"parameters": {"msg": {"parameterType": "STRING"}}}}
    built = executor_input(component, parameters={"msg": "{{$.inputs.parameters['pipelinechannel--x']}}-b",
                                                  "pipelinechannel--x": "a"},
                           artifacts={}, outputs_dir="/o", artifacts_uri="/a")
    assert built["inputs"]["parameterValues"]["msg"] == "a-b"


def test_bad_placeholders_and_missing_outputs_say_which(tmp_path: Path) -> None:
    document = executor_input({}, parameters={}, artifacts={}, outputs_dir=str(tmp_path), artifacts_uri="/a")
    with pytest.raises(PlaceholderError, match="pipeline_job_create_time_utc.*does not provide"):
        resolve_args(["{{$.pipeline_job_create_time_utc}}"], document, CONTEXT)
    with pytest.raises(PlaceholderError, match="not a placeholder KFP's compiler writes"):
        resolve_args(["{{$.inputs.nonsense}}"], document, CONTEXT)
    with pytest.raises(PlaceholderError, match="not a Concat or IfPresent"):
        resolve_args(['{"Concat": "not a list"}'], document, CONTEXT)
    component = {"outputDefinitions": {"parameters": {"score": {"parameterType": "NUMBER_DOUBLE"}}}}
    document = executor_input(component, parameters={}, artifacts={}, outputs_dir=str(tmp_path), artifacts_uri="/a")
    with pytest.raises(PlaceholderError, match="'score' was not written"):
        read_outputs(component, document)
    (tmp_path / "score").write_text("high")
    with pytest.raises(PlaceholderError, match="'score'.*not a NUMBER_DOUBLE"):
        read_outputs(component, document)
    (tmp_path / "score").write_text("7")
    assert read_outputs(component, document) == ({"score": 7.0}, {})


def test_importer_metadata_placeholders_keep_a_lone_values_type() -> None:
    spec = compiled("importer").pipeline_spec
    component = spec["components"]["comp-importer"]
    metadata = spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]["metadata"]
    document = executor_input(component, parameters={"metadata": "csv", "metadata-2": 4.0, "uri": "/d"},
                              artifacts={}, outputs_dir="/o", artifacts_uri="/a")
    assert resolve_metadata(metadata, document, CONTEXT) == {"source": "csv", "rows": 4, "by-csv": "constant"}
    nested = {"list": ["{{$.inputs.parameters['metadata-2']}}", "of {{$.pipeline_job_name}}"], "n": 1.5,
              "absent": "{{$.inputs.parameters['nothing']}}"}
    assert resolve_metadata(nested, document, CONTEXT) == {"list": [4, "of run-1"], "n": 1.5, "absent": None}
