"""Katib's pbt run locally: generations of trials, each starting from a copy of its parent's
checkpoint directory in the experiment's volume, which goes with the experiment."""

from __future__ import annotations

import json

import yaml

from tests.helpers import EXAMPLES, poll

PBT = EXAMPLES / "katib-pbt"
GENERATION = "pbt.suggestion.katib.kubeflow.org/generation"
PARENT = "pbt.suggestion.katib.kubeflow.org/parent"


def _trials(plane, experiment: str) -> list[dict]:
    return plane.client().list("Trial", "default", f"katib.kubeflow.org/experiment={experiment}")


def _condition(obj: dict, ctype: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype
                 and c["status"] == "True"), None)


def test_simple_pbt_breeds_generations_from_their_parents_checkpoints(plane):
    plane.cli("apply", "-f", str(PBT / "code-configmap.yaml"), "-f", str(PBT / "experiment.yaml"))
    plane.cli("wait", "experiment/simple-pbt", "--for=condition=Succeeded", "--timeout=240s")
    exp = plane.get("experiment", "simple-pbt")
    assert _condition(exp, "Succeeded")["reason"] == "ExperimentMaxTrialsReached"
    trials = {t["metadata"]["name"]: t for t in _trials(plane, "simple-pbt")}
    assert len(trials) == 12 and exp["status"]["trialsSucceeded"] == 12

    volume = plane.home / "volumes" / "default" / "simple-pbt-pbt"
    claim = plane.get("persistentvolumeclaim", "simple-pbt-pbt")
    assert claim["status"]["phase"] == "Bound"
    suggestion = plane.get("suggestion", "simple-pbt")
    assert "volume simple-pbt-pbt is kept" in _condition(suggestion, "Succeeded")["message"]

    def checkpoint(name: str) -> dict:
        return json.loads((volume / "simple-pbt" / name / "training.json").read_text())

    children = [t for t in trials.values() if int(t["metadata"]["labels"][GENERATION]) >= 1]
    assert {t["metadata"]["labels"][GENERATION] for t in children} == {"1", "2"}
    for child in children:
        labels = child["metadata"]["labels"]
        assert labels == child["spec"]["labels"]
        parent = trials[labels[PARENT]]
        assert int(parent["metadata"]["labels"][GENERATION]) == int(labels[GENERATION]) - 1
        mine, theirs = checkpoint(child["metadata"]["name"]), checkpoint(parent["metadata"]["name"])
        # The child's directory began as a copy of its parent's: it resumed at the parent's step.
        assert mine["resumed_from_step"] == theirs["step"] == 10 * int(labels[GENERATION])
        assert mine["trials"] == [*theirs["trials"], child["metadata"]["name"]]
        value = next(m for m in child["status"]["observation"]["metrics"] if m["name"] == "Validation-accuracy")
        assert abs(float(value["latest"]) - round(mine["accuracy"] / 100, 4)) < 1e-9
    for trial in trials.values():
        if trial["metadata"]["labels"][GENERATION] == "0":
            assert PARENT not in trial["metadata"]["labels"]
            assert checkpoint(trial["metadata"]["name"])["resumed_from_step"] == 0, "generation 0 starts empty"
    # `trimaran trials` shows each trial's generation and parent.
    rows = {r["trial"]: r for r in json.loads(plane.cli("trials", "simple-pbt", "-o", "json").stdout)}
    for name, trial in trials.items():
        labels = trial["metadata"]["labels"]
        assert (rows[name]["generation"], rows[name]["parent"]) == (labels[GENERATION], labels.get(PARENT))

    plane.cli("delete", "experiment", "simple-pbt")
    poll(lambda: not volume.exists(), timeout=30, what="the experiment's volume directory to be removed")
    assert plane.client().list("PersistentVolumeClaim", "default") == []


def test_a_restarted_pbt_experiment_breeds_from_the_checkpoints_in_its_volume(plane, tmp_path):
    doc = yaml.safe_load((PBT / "experiment.yaml").read_text())
    doc["metadata"]["name"] = "pbt-resume"
    doc["spec"]["maxTrialCount"] = 5
    path = tmp_path / "pbt.yaml"
    path.write_text(yaml.safe_dump(doc))
    plane.cli("apply", "-f", str(PBT / "code-configmap.yaml"), "-f", str(path))
    plane.cli("wait", "experiment/pbt-resume", "--for=condition=Succeeded", "--timeout=120s")
    assert _condition(plane.get("suggestion", "pbt-resume"), "Succeeded") is not None
    first = {t["metadata"]["name"] for t in _trials(plane, "pbt-resume")}
    assert len(first) == 5

    doc["spec"]["maxTrialCount"] = 8
    path.write_text(yaml.safe_dump(doc))
    plane.cli("apply", "-f", str(path))
    poll(lambda: plane.get("experiment", "pbt-resume")["status"].get("trialsSucceeded") == 8
         and _condition(plane.get("experiment", "pbt-resume"), "Succeeded"), timeout=120,
         what="the restarted experiment to finish")
    volume = plane.home / "volumes" / "default" / "pbt-resume-pbt" / "pbt-resume"
    children = [t for t in _trials(plane, "pbt-resume") if t["metadata"]["name"] not in first]
    assert len(children) == 3
    for child in children:
        labels = child["metadata"]["labels"]
        assert labels[GENERATION] == "1" and labels[PARENT] in first
        state = json.loads((volume / child["metadata"]["name"] / "training.json").read_text())
        assert state["resumed_from_step"] == 10 and state["trials"][0] == labels[PARENT]


def test_pbt_without_resume_policy_from_volume_is_rejected_at_apply(plane, tmp_path):
    doc = yaml.safe_load((PBT / "experiment.yaml").read_text())
    doc["spec"]["resumePolicy"] = "LongRunning"
    doc["spec"]["algorithm"]["algorithmSettings"] = [s for s in doc["spec"]["algorithm"]["algorithmSettings"]
                                                     if s["name"] != "n_population"]
    path = tmp_path / "pbt.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = plane.cli("apply", "-f", str(path), check=False)
    assert proc.returncode != 0
    assert ('Experiment "simple-pbt": spec.resumePolicy: Invalid value: "LongRunning": must be "FromVolume" when '
            "spec.algorithm.algorithmName is pbt") in proc.stderr
    assert 'spec.algorithm.algorithmSettings: Required value: algorithm "pbt": setting "n_population" is ' \
           "required" in proc.stderr
    assert plane.cli("get", "experiment", "simple-pbt", check=False).returncode != 0
