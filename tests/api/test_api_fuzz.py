"""Fuzzing the loader: whatever comes in, the only failure is a ManifestError, and whatever is
accepted is a fixed point (validating the stored form again changes nothing).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.builders import FIXTURES, batch_job, container, pod, pytorchjob, replica, tfjob
from trimaran.api import ManifestError, load_and_validate, validate

# FUZZ_EXAMPLES=5000 searches harder than the default run.
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

VALID: list[dict[str, Any]] = [
    *(yaml.safe_load(p.read_text()) for p in sorted(FIXTURES.glob("*.yaml"))),
    tfjob(
        {
            "Chief": replica([container("tensorflow")]),
            "worker": replica([container("tensorflow")], replicas=2),
            "Evaluator": replica([container("tensorflow")]),
        },
        enableDynamicWorker=True,
    ),
    pytorchjob(
        {
            "Worker": replica(
                [container("pytorch", env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])]
            )
        },
        elasticPolicy={"maxReplicas": 4, "nProcPerNode": 2},
    ),
    batch_job(
        {"containers": [container("c")], "restartPolicy": "Never"},
        completionMode="Indexed",
        completions=3,
        backoffLimitPerIndex=1,
        maxFailedIndexes=1,
    ),
    pod(
        {
            "containers": [container("c", ports=[{"containerPort": 80, "name": "http"}])],
            "volumes": [{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "k"}]}}],
        }
    ),
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}},
]

# Values that sit on the boundaries the models care about, mixed with arbitrary JSON.
INTERESTING = st.sampled_from(
    [
        None,
        "",
        0,
        -1,
        1,
        2**31,
        2**63,
        1.5,
        True,
        False,
        "Worker",
        "worker",
        "Master",
        "PS",
        "Chief",
        "auto",
        "0",
        "500m",
        "4Gi",
        "-1Gi",
        "Always",
        "Never",
        "OnFailure",
        "ExitCode",
        "Indexed",
        "In",
        "Exists",
        "Gt",
        "NoExecute",
        "tensorflow",
        "pytorch",
        "a/b/c",
        "nvidia.com/gpu",
        "metadata.name",
        "../x",
        "/abs",
        [],
        {},
        [{}],
        {"": None},
    ]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | INTERESTING,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a JSON-like tree, the root included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, (*prefix, i))
    return out


def mutate(obj: dict[str, Any], data: st.DataObject) -> Any:
    """Replace, delete or add something at a random location of a copy of `obj`."""

    def value() -> Any:
        # A copy: the sampled boundary values are shared objects, and appending one into itself loops.
        return copy.deepcopy(data.draw(JSON))

    target: Any = copy.deepcopy(obj)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        if not isinstance(target, (dict, list)):
            return target
        path = data.draw(st.sampled_from(paths(target)))
        if not path:
            return value()
        parent = target
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = value()
        elif action == "delete":
            del parent[path[-1]]
        else:
            node = parent[path[-1]]
            if isinstance(node, dict):
                node[data.draw(st.text(max_size=12) | st.sampled_from(["replicas", "name", "spec", "template"]))] = (
                    value()
                )
            elif isinstance(node, list):
                node.append(value())
    return target


def assert_fixed_point(obj: Any) -> None:
    """Only ManifestError may escape; an accepted object validates to itself."""
    try:
        first = validate(obj)
    except ManifestError:
        return
    json.dumps(first.object)  # the stored form is plain JSON
    again = validate(first.object)
    assert again.object == first.object
    assert again.warnings == [w for w in again.warnings if "deprecated" in w]


@FUZZ
@given(st.data())
def test_mutated_manifests(data: st.DataObject) -> None:
    assert_fixed_point(mutate(data.draw(st.sampled_from(VALID)), data))


@FUZZ
@given(JSON)
def test_arbitrary_json_values(value: Any) -> None:
    assert_fixed_point(value)


@FUZZ
@given(st.text(), st.sampled_from(["x.yaml", "x.json", "-"]))
def test_arbitrary_text(text: str, name: str) -> None:
    try:
        load_and_validate(name, text)
    except ManifestError as exc:
        assert exc.problems and all("\n" not in p for p in exc.problems)


@FUZZ
@given(st.data())
def test_edited_yaml_text(data: st.DataObject) -> None:
    text = yaml.safe_dump_all([data.draw(st.sampled_from(VALID)) for _ in range(data.draw(st.integers(1, 3)))])
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 5))
        text = (
            text[:pos]
            + data.draw(st.text(max_size=5) | st.sampled_from([":", "-", "\n", "  ", "---\n", "[", "&a", "*a"]))
            + text[pos + cut :]
        )
    try:
        for manifest in load_and_validate("x.yaml", text):
            assert validate(manifest.object).object == manifest.object
    except ManifestError as exc:
        assert exc.problems and all(p.startswith("x.yaml") and "\n" not in p for p in exc.problems)
