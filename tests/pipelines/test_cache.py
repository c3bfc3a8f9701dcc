"""cache: a task's key is stable (across processes, key order, kfp.Client's doubles, defaults given
or not) and changes with what determines its outputs, never with the run it belongs to."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.pipelines.kfp_corpus import compiled
from trimaran.pipelines.cache import cache_key


def _stamp() -> tuple[dict, dict]:
    spec = compiled("caching").pipeline_spec
    component = spec["components"]["comp-stamp"]
    return component, spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]


def test_same_inputs_same_key_in_another_process() -> None:
    component, executor = _stamp()
    key = cache_key(component, executor, {"seed": 1}, {})
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key(component, executor, {"seed": 1.0}, {}) == key  # kfp.Client sends a double
    script = ("import json, sys; from trimaran.pipelines.cache import cache_key; "
              "a = json.loads(sys.argv[1]); print(cache_key(a[0], a[1], {'seed': 1}, {}))")
    other = subprocess.run([sys.executable, "-c", script, json.dumps([component, executor])],
                           capture_output=True, text=True, timeout=60, check=True)
    assert other.stdout.strip() == key


def test_key_follows_inputs_outputs_and_container_not_order() -> None:
    component, executor = _stamp()
    key = cache_key(component, executor, {"seed": 1}, {})
    assert cache_key(component, executor, {"seed": 2}, {}) != key
    assert cache_key(component, {**executor, "image": "python:3.12"}, {"seed": 1}, {}) != key
    assert cache_key(component, {**executor, "args": [*executor["args"], "-x"]}, {"seed": 1}, {}) != key
    assert cache_key(component, {**executor, "env": [{"name": "A", "value": "1"}]}, {"seed": 1}, {}) != key
    renamed = {**component, "outputDefinitions": {"parameters": {"Other": {"parameterType": "STRING"}}}}
    assert cache_key(renamed, executor, {"seed": 1}, {}) != key
    reordered = json.loads(json.dumps(component, sort_keys=True))
    assert cache_key(reordered, dict(reversed(list(executor.items()))), {"seed": 1}, {}) == key


def test_artifacts_by_uri_and_defaults_filled_in() -> None:
    spec = compiled("parameters").pipeline_spec
    component = spec["components"]["comp-describe"]
    executor = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    given = {"text": "a", "count": 1, "ratio": 0.5, "flag": True, "items": [], "config": {}}
    # scale defaults to 10: giving it as 10 is the same task; 11 is another.
    assert cache_key(component, executor, {**given, "scale": 10}, {}) == cache_key(component, executor, given, {})
    assert cache_key(component, executor, {**given, "scale": 11}, {}) != cache_key(component, executor, given, {})
    # An input artifact keys by its URI, type and metadata (KFP's metadata store tells artifacts apart
    # by all three: an importer of one file with other metadata is another artifact), and an
    # importer's reimport makes each import another; not by its name.
    refs = {"data": [{"name": "data", "uri": "/runs/a/t/data", "type": "system.Dataset", "metadata": {"n": 1}}]}
    moved = {"data": [{**refs["data"][0], "uri": "/runs/b/t/data"}]}
    relabelled = {"data": [{**refs["data"][0], "metadata": {"n": 2}}]}
    reimported = {"data": [{**refs["data"][0], "importId": "run-uid/importer"}]}
    renamed = {"data": [{**refs["data"][0], "name": "other"}]}
    key = cache_key(component, executor, given, refs)
    for other in (moved, relabelled, reimported):
        assert cache_key(component, executor, given, other) != key
    assert cache_key(component, executor, given, renamed) == key
