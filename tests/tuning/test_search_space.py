"""The search space: Katib's parameter rules, coordinates, and the strings trials receive."""

from __future__ import annotations

import math
import statistics

import pytest

from trimaran.tuning import SearchSpace, SearchSpaceError


def one(ptype: str, **fs: object) -> SearchSpace:
    return SearchSpace.from_parameters([{"name": "p", "parameterType": ptype, "feasibleSpace": fs}])


@pytest.mark.parametrize(("spec", "message"), [
    ([], "spec.parameters: Required value"),
    ([{"parameterType": "int", "feasibleSpace": {"min": "1", "max": "2"}}], "spec.parameters[0].name: Required"),
    ([{"name": "a", "parameterType": "float", "feasibleSpace": {"min": "1", "max": "2"}}],
     'spec.parameters[0].parameterType: Unsupported value: "float"'),
    ([{"name": "a", "parameterType": "int", "feasibleSpace": {"max": "2"}}],
     "spec.parameters[0].feasibleSpace.min: Required value"),
    ([{"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1.5", "max": "2"}}],
     'feasibleSpace.min: Invalid value: "1.5": must be an integer'),
    ([{"name": "a", "parameterType": "double", "feasibleSpace": {"min": "x", "max": "2"}}],
     'feasibleSpace.min: Invalid value: "x": must be a number'),
    ([{"name": "a", "parameterType": "double", "feasibleSpace": {"min": "3", "max": "2"}}],
     'feasibleSpace.max: Invalid value: "2": must not be less than min "3"'),
    ([{"name": "a", "parameterType": "double", "feasibleSpace": {"min": "1", "max": "2", "step": "0"}}],
     "feasibleSpace.step: Invalid value"),
    ([{"name": "a", "parameterType": "double",
       "feasibleSpace": {"min": "0", "max": "2", "distribution": "logUniform"}}],
     "must be greater than 0 for distribution logUniform"),
    ([{"name": "a", "parameterType": "double", "feasibleSpace": {"min": "1", "max": "2", "distribution": "beta"}}],
     'distribution: Unsupported value: "beta"'),
    ([{"name": "a", "parameterType": "categorical", "feasibleSpace": {"list": ["x"], "min": "1"}}],
     "feasibleSpace.min: Forbidden"),
    ([{"name": "a", "parameterType": "categorical", "feasibleSpace": {}}], "feasibleSpace.list: Required value"),
    ([{"name": "a", "parameterType": "categorical", "feasibleSpace": {"list": ["x", "x"]}}], 'Duplicate value: "x"'),
    ([{"name": "a", "parameterType": "discrete", "feasibleSpace": {"list": ["1", "b"]}}],
     'discrete values must be numbers'),
    ([{"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "2", "list": ["1"]}}],
     "feasibleSpace.list: Forbidden"),
    ([{"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "2"}},
      {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "2"}}],
     'spec.parameters[1].name: Duplicate value: "a"'),
])
def test_katib_webhook_rules_are_enforced_with_the_field_named(spec: list, message: str) -> None:
    with pytest.raises(SearchSpaceError) as err:
        SearchSpace.from_parameters(spec)
    assert message in str(err.value)


def test_api_models_and_snake_case_keys_are_accepted() -> None:
    from trimaran.api.tuning import ParameterSpec

    model = ParameterSpec.model_validate(
        {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "1"}})
    snake = {"name": "n", "parameter_type": "int", "feasible_space": {"min": 1, "max": 3}}
    space = SearchSpace.from_parameters([model, snake])
    assert space.names == ("lr", "n")
    assert space["n"].grid_values() == ("1", "2", "3")


def test_strings_are_written_as_katib_writes_them() -> None:
    assert one("int", min="1", max="10").parameters[0].decode(3) == "3"
    stepped = one("double", min="0", max="1", step="0.1").parameters[0]
    assert [stepped.decode(k) for k in (0, 3, 10)] == ["0.0", "0.3", "1.0"]
    assert stepped.encode("0.30000000000000004") == 3  # another writer's binary rounding is forgiven
    assert stepped.encode("0.35") is None  # off the step
    plain = one("double", min="0", max="1").parameters[0]
    assert plain.decode(0.1) == "0.1" and plain.encode("0.1") == 0.1
    assert plain.encode("1.5") is None


@pytest.mark.parametrize("spec", [
    {"name": "a", "parameterType": "double", "feasibleSpace": {"min": "-2", "max": "3"}},
    {"name": "a", "parameterType": "double",
     "feasibleSpace": {"min": "1e-5", "max": "1", "distribution": "logUniform"}},
    {"name": "a", "parameterType": "double", "feasibleSpace": {"min": "0.5", "max": "2.5", "step": "0.25"}},
    {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "-3", "max": "17", "step": "4"}},
    {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "1000", "distribution": "logUniform"}},
    {"name": "a", "parameterType": "categorical", "feasibleSpace": {"list": ["x", "y", "z"]}},
])
def test_exact_parameters_round_trip_through_their_strings(spec: dict) -> None:
    p = SearchSpace.from_parameters([spec]).parameters[0]
    assert p.exact
    for i in range(200):
        value = p.from_unit(i / 200)
        text = p.decode(value)
        assert p.encode(text) == value
        assert p.canonical(text) == text


def test_unit_mapping_covers_discrete_values_evenly() -> None:
    p = one("int", min="1", max="4").parameters[0]
    counts = {v: 0 for v in range(1, 5)}
    for i in range(400):
        counts[p.from_unit((i + 0.5) / 400)] += 1
    assert set(counts.values()) == {100}
    assert [p.to_unit(v) for v in (1, 4)] == [0.125, 0.875]


def test_log_uniform_is_uniform_in_log_space() -> None:
    p = one("double", min="0.001", max="1000", distribution="logUniform").parameters[0]
    assert math.isclose(p.from_unit(0.5), 1.0, rel_tol=1e-12)
    assert math.isclose(p.from_unit(0.25), 10 ** -1.5, rel_tol=1e-12)
    assert math.isclose(p.to_unit(10.0), 2 / 3, rel_tol=1e-12)


def test_normal_follows_katibs_hyperopt_mapping_truncated_to_the_bounds() -> None:
    p = one("double", min="0", max="6", distribution="normal").parameters[0]
    assert not p.exact
    rng_values = [float(p.decode(p.from_unit((i + 0.5) / 2000))) for i in range(2000)]
    # mu = (min+max)/2 = 3, sigma = (max-min)/6 = 1, truncated to [0, 6].
    assert abs(statistics.fmean(rng_values) - 3.0) < 0.01
    assert abs(statistics.pstdev(rng_values) - 1.0) < 0.02
    assert min(rng_values) >= 0 and max(rng_values) <= 6
    q = one("int", min="1", max="100", distribution="logNormal").parameters[0]
    samples = [q.decode(q.from_unit((i + 0.5) / 1000)) for i in range(1000)]
    assert all(s.isdigit() and 1 <= int(s) <= 100 for s in samples)
    assert statistics.median(int(s) for s in samples) == 10  # exp((ln 1 + ln 100) / 2)


def test_grid_values_follow_katibs_enumeration() -> None:
    assert one("int", min="1", max="10", step="3").parameters[0].grid_values() == ("1", "4", "7", "10")
    assert one("int", min="2", max="8", distribution="logUniform").parameters[0].grid_values() == tuple(
        str(i) for i in range(2, 9))  # grid ignores the distribution
    assert one("double", min="0.1", max="0.5", step="0.1").parameters[0].grid_values() == (
        "0.1", "0.2", "0.3", "0.4", "0.5")  # decimal-exact: numpy.arange would end at 0.5000000000000001
    assert one("double", min="0", max="1", step="0.3").parameters[0].grid_values() == ("0.0", "0.3", "0.6", "0.9")
    with pytest.raises(SearchSpaceError, match="grid needs feasibleSpace.step"):
        one("double", min="0", max="1").parameters[0].grid_values()


def test_space_size_and_keys() -> None:
    space = SearchSpace.from_parameters([
        {"name": "a", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "3"}},
        {"name": "b", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1", "step": "0.5"}},
    ])
    assert space.size == 9
    assert space.key({"a": "2", "b": "0.50"}) == ("2", "0.5")
    assert space.key({"a": "2"}) is None
    assert space.key({"a": "4", "b": "0"}) is None
