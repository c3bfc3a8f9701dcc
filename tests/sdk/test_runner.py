"""The trial runner: arguments, typed parameters, the payload round trip, and what it reports."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from trimaran.sdk import _payload
from trimaran.sdk._trial_runner import build_parameters, parse_arguments


def scaled(params):
    return params["x"] * params["factor"]


def test_arguments_split_on_the_first_equals_sign():
    path, values = parse_arguments(["/app/objective.pkl", "--param", "x=1", "--param=s=a=b", "--param", "e="])
    assert path == "/app/objective.pkl" and values == {"x": "1", "s": "a=b", "e": ""}
    with pytest.raises(SystemExit):
        parse_arguments(["/p", "--param", "novalue"])
    with pytest.raises(SystemExit):
        parse_arguments([])


def test_parameters_are_typed_and_fixed_ones_added():
    payload = {"types": {"x": "double", "n": "int", "c": "categorical", "d": "discrete"},
               "choices": {"c": {"32": 32, "auto": "auto"}}, "fixed": {"epochs": 3}}
    params = build_parameters(payload, {"x": "0.5", "n": "4", "c": "32", "d": "2.5"})
    assert params == {"x": 0.5, "n": 4, "c": 32, "d": 2.5, "epochs": 3}
    with pytest.raises(SystemExit, match="no value given"):
        build_parameters(payload, {"x": "0.5"})


def test_payload_round_trip_by_value_and_by_reference(tmp_path):
    closure_factor = 3

    def closure(params):
        return params["x"] * closure_factor

    for objective in (closure, scaled, lambda p: p["x"] + 1):
        path = tmp_path / "objective.pkl"
        by_value = _payload.user_module(objective)
        path.write_bytes(_payload.dump_payload({"format": 1, "objective": objective}, by_value))
        loaded = _payload.load_payload(path)["objective"]
        assert loaded({"x": 2, "factor": 3}) == objective({"x": 2, "factor": 3})
    assert _payload.import_reference("tests.sdk.test_runner:scaled") is scaled
    assert _payload.module_root("tests.sdk.test_runner") == str(REPO)


def test_runner_outside_a_trial_says_so(tmp_path):
    path = tmp_path / "objective.pkl"
    path.write_bytes(_payload.dump_payload({"format": 1, "objective": scaled, "metric": "loss",
                                            "types": {"x": "double"}, "fixed": {"factor": 2}},
                                           _payload.user_module(scaled)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIMARAN_TRIAL", "KATIB_"))}
    proc = subprocess.run([sys.executable, "-m", "trimaran.sdk._trial_runner", str(path), "--param", "x=1.5"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1
    assert "NotInTrialError" in proc.stderr
