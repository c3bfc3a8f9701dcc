"""conditions: the CEL the kfp compiler writes for dsl.If/Elif/Else, evaluated; exactly one branch of
an If/Elif/Else holds; bad expressions are clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.pipelines.kfp_corpus import compiled
from trimaran.pipelines.conditions import ConditionError, evaluate


def _conditions(pipeline: str) -> dict[str, str]:
    """Every task's condition in the compiled pipeline, by task name."""
    spec = compiled(pipeline).pipeline_spec
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    return {name: task["triggerPolicy"]["condition"] for dag in dags for name, task in dag["tasks"].items()
            if (task.get("triggerPolicy") or {}).get("condition")}


def _holding(conditions: dict[str, str], values: dict[str, Any]) -> list[str]:
    return sorted(name for name, expression in conditions.items()
                  if set(_channels(expression)) <= set(values) and evaluate(expression, values))


def _channels(expression: str) -> list[str]:
    return [part.split("']", 1)[0] for part in expression.split("parameter_values['")[1:]]


@pytest.mark.parametrize(("flip", "branch"),
                         [("heads", "condition-2"), ("tails", "condition-3"), ("edge", "condition-4")])
def test_if_elif_else_exactly_one_branch_holds(flip: str, branch: str) -> None:
    conditions = _conditions("conditions")
    branches = {name: c for name, c in conditions.items() if "flip" in c}
    assert len(branches) == 3, conditions
    assert _holding(branches, {"pipelinechannel--flip": flip}) == [branch]


def test_integer_outputs_are_cast_as_the_compiler_says_and_numbers_arrive_as_doubles() -> None:
    conditions = _conditions("conditions")
    by_number = {name: c for name, c in conditions.items() if "number-Output" in c}
    assert all("int(" in c for c in by_number.values()), by_number
    # kfp.Client and the driver hand numbers on as doubles: 7.0 and 7 are the same input.
    for n in (7, 7.0):
        assert len(_holding(by_number, {"pipelinechannel--number-Output": n})) == 1
    big, small = sorted(by_number, key=lambda name: "<=" in by_number[name])
    assert evaluate(by_number[big], {"pipelinechannel--number-Output": 4})
    assert evaluate(by_number[small], {"pipelinechannel--number-Output": 3})
    nested = next(c for c in conditions.values() if "pipelinechannel--x" in c)
    assert evaluate(nested, {"pipelinechannel--x": 0.25}) and not evaluate(nested, {"pipelinechannel--x": 1})


def test_oneof_elif_chain() -> None:
    conditions = _conditions("oneof_parameter")
    assert [len(_holding(conditions, {"pipelinechannel--n": n})) for n in (1, 2, 3)] == [1, 1, 1]


def test_operators_of_the_grammar() -> None:
    values = {"s": "a", "n": 2.0, "b": True}
    assert evaluate("inputs.parameter_values['s'] != 'b' && inputs.parameter_values['b'] == true", values)
    assert evaluate("int(inputs.parameter_values['n']) >= 2 || inputs.parameter_values['s'] == 'z'", values)
    assert not evaluate("!(double(1) <= inputs.parameter_values['n'])", values)


@pytest.mark.parametrize(("expression", "values", "reason"), [
    ("inputs.parameter_values['x'] ==", {}, "does not parse"),
    ("inputs.parameter_values['x'] == 'a'", {}, "no input 'x'"),
    ("inputs.parameter_values['x']", {"x": "a"}, "not a boolean"),
    ("int(inputs.parameter_values['x']) > 'a'", {"x": 1}, "no matching overload"),
    ("  ", {}, "non-empty"),
])
def test_bad_conditions_are_clear_errors(expression: str, values: dict, reason: str) -> None:
    with pytest.raises(ConditionError, match=reason):
        evaluate(expression, values)
