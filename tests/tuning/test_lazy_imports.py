"""The control plane starts without the search algorithms' libraries and loads one when an
experiment asks for its algorithm.

Optuna, NumPy, SciPy and cmaes cost the control plane most of its idle memory when they loaded at
start; what a process has imported is checked in a fresh interpreter (this one has imported
everything other tests needed). Idle RSS itself is measured by bench/bench_idle_rss.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO
from trimaran.tuning.algorithms import algorithm_class, available_algorithms

HEAVY = ("optuna", "scipy", "numpy", "cmaes", "torch", "tensorflow", "sklearn", "pandas", "grpc")

PROBE = """
import json, sys
from pathlib import Path

import trimaran.api, trimaran.controllers.tuning, trimaran.sdk, trimaran.tuning
import trimaran.tuning.algorithms, trimaran.tuning.early_stopping, trimaran.tuning.metrics
from trimaran.server.controlplane import build_control_plane

plane = build_control_plane(Path(sys.argv[1]))
names = trimaran.tuning.available_algorithms()


class Impostor(trimaran.tuning.Algorithm):
    name = "cmaes"

    def _suggest(self, space, trials, objective, count):
        raise NotImplementedError


try:
    trimaran.tuning.register_algorithm(Impostor)
    taken = None
except ValueError as exc:
    taken = str(exc)
at_start = sorted(sys.modules)

# An experiment asks for tpe: validated as `apply` does, then passes of its reconciler.
from trimaran.api import validate
from trimaran.controllers.base import Key
from trimaran.controllers.tuning import ExperimentReconciler

experiment = validate({
    "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "quad"},
    "spec": {
        "objective": {"type": "minimize", "objectiveMetricName": "loss"},
        "algorithm": {"algorithmName": "tpe", "algorithmSettings": [{"name": "random_state", "value": "3"}]},
        "parallelTrialCount": 2, "maxTrialCount": 4,
        "parameters": [{"name": "x", "parameterType": "double", "feasibleSpace": {"min": "-5", "max": "5"}}],
        "trialTemplate": {
            "primaryContainerName": "main",
            "trialParameters": [{"name": "x", "reference": "x"}],
            "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "x",
                                "command": ["python", "-c", "pass", "${trialParameters.x}"]}]}}}},
        },
    },
}).object
plane.store.create(experiment)
reconciler = ExperimentReconciler(plane.store)
for _ in range(3):
    reconciler.reconcile(Key("Experiment", "default", "quad"))
trials = plane.store.list("Trial", "default")
plane.stop()
plane.release()  # its pod network too: the bridge and rules go when no pod has one
print(json.dumps({
    "names": names,
    "taken": taken,
    "at_start": at_start,
    "after": sorted(sys.modules),
    "assignments": [{a["name"]: a["value"] for a in t["spec"]["parameterAssignments"]} for t in trials],
}))
"""


def _loaded(modules: list[str], roots: tuple[str, ...]) -> set[str]:
    return {m.split(".")[0] for m in modules} & set(roots)


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("home")
    out = subprocess.run([sys.executable, "-c", PROBE, str(home)], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_building_the_control_plane_loads_no_algorithm_library(probe: dict) -> None:
    assert "trimaran.controllers.tuning.experiment" in probe["at_start"]
    assert _loaded(probe["at_start"], HEAVY) == set()
    # Listing the names (as an error message does) imports no algorithm either.
    assert {"tpe", "cmaes", "bayesianoptimization", "nsga2"} <= set(probe["names"])
    assert not [m for m in probe["at_start"] if m.startswith("trimaran.tuning.algorithms._")
                and m != "trimaran.tuning.algorithms._base"]


def test_a_builtin_name_is_taken_before_its_algorithm_is_loaded(probe: dict) -> None:
    assert probe["taken"] == 'algorithm name "cmaes" is already registered by CmaEsSearch'


def test_an_experiment_loads_its_algorithm_and_only_that(probe: dict) -> None:
    assert len(probe["assignments"]) == 2  # parallelTrialCount
    assert all(-5 <= float(a["x"]) <= 5 for a in probe["assignments"])
    assert "trimaran.tuning.algorithms._tpe" in probe["after"]
    assert "optuna" in _loaded(probe["after"], HEAVY)
    assert "trimaran.tuning.algorithms._cmaes" not in probe["after"]
    assert "cmaes" not in _loaded(probe["after"], HEAVY)


@pytest.mark.parametrize("name", available_algorithms())
def test_each_listed_name_resolves_to_a_class_that_answers_to_it(name: str) -> None:
    cls = algorithm_class(name)
    assert name in (cls.name, *cls.aliases)
    for other in (cls.name, *cls.aliases):
        assert algorithm_class(other) is cls

