"""A double's step is compared with its range as the user wrote them, in decimal, not in binary floats
(where 0.6 - 0.4 is 0.19999999999999996, less than a step of 0.2)."""

from __future__ import annotations

from tests.api.test_api_tuning import defaulted, double, error, with_params
from trimaran.tuning import Parameter


def test_a_step_equal_to_the_range_in_decimal_is_accepted() -> None:
    param = double(min="0.4", max="0.6", step="0.2")
    assert defaulted(with_params(param))["spec"]["parameters"][0]["feasibleSpace"]["step"] == "0.2"


def test_grid_counts_the_points_the_grid_enumerates() -> None:
    grid = {"algorithmName": "grid"}
    param = double(min="0.4", max="0.6", step="0.2")
    assert Parameter(name="lr", type="double", min="0.4", max="0.6", step="0.2").grid_values() == ("0.4", "0.6")
    assert defaulted(with_params(param, algorithm=grid, maxTrialCount=2, parallelTrialCount=1))
    assert error(with_params(param, algorithm=grid, maxTrialCount=3, parallelTrialCount=1)) == (
        "spec.maxTrialCount: Invalid value: 3: must not be greater than the number of grid points (2) when "
        "spec.algorithm.algorithmName is grid")


def test_a_step_just_wider_than_the_range_is_refused_with_the_exact_width() -> None:
    assert error(with_params(double(min="0.4", max="0.6", step="0.20001"))) == (
        'spec.parameters[0].feasibleSpace.step: Invalid value: "0.20001": must not be larger than max - min (0.2)')
