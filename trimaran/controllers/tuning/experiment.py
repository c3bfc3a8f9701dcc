"""Katib Experiments: ask the search algorithm for assignments, create Trials, track the best one,
and end the experiment as Katib does (katib.md §1.6, §1.7).

Level-triggered: each pass recounts trials from the store, so a restart after kill -9 neither loses
nor duplicates a trial, and the algorithm's state is rebuilt from the stored trials.

``resumePolicy`` as Katib: ``Never`` ends the Suggestion with the experiment for good;
``LongRunning`` keeps it Running after the experiment completes; ``FromVolume`` gives the experiment
a PersistentVolumeClaim (``<experiment>-<algorithm>``, see `checkpoints`) before its first trial,
marks the Suggestion Succeeded at completion while the claim stays, and runs the Suggestion again
from it when ``maxTrialCount`` is raised. The algorithms' state is the stored trials, so what the
volume holds is pbt's checkpoint directories; for other algorithms it stays empty.
"""

from __future__ import annotations

import copy
import logging
import secrets
import string

from prometheus_client import Counter

from trimaran.api.tuning import DEFAULT_PARALLEL_TRIAL_COUNT, substitute_trial_template, trial_parameter_values
from trimaran.controllers.base import CONFLICT_RETRY_SECONDS, Key, Reconciler, is_being_deleted
from trimaran.controllers.conditions import is_true, now_rfc3339, set_condition
from trimaran.controllers.pods import owner_reference
from trimaran.controllers.tuning.checkpoints import volume_claim, volume_claim_name
from trimaran.controllers.tuning.records import (
    SEQUENCE_ANNOTATION,
    experiment_trials,
    metric_value,
    objectives,
    strategy_for,
    trial_records,
)
from trimaran.controllers.tuning.trial import FINISHED, trial_state
from trimaran.store import AlreadyExists, Conflict, NotFound
from trimaran.tuning import (
    SEARCH_SPACE_EXHAUSTED,
    Outcome,
    SearchSpace,
    experiment_outcome,
    get_algorithm,
    pareto_front,
    trials_wanted,
)
from trimaran.tuning._labels import EXPERIMENT_LABEL, TRIAL_LABEL

log = logging.getLogger(__name__)

# The control plane's /metrics reads it; its rate is trials per second. One control plane per process.
TRIALS_CREATED = Counter("trimaran_katib_trials_created", "Katib trials created by experiments.", registry=None)

_LISTS = {
    "Running": "runningTrialList", "Created": "pendingTrialList", "Succeeded": "succeededTrialList",
    "Failed": "failedTrialList", "Killed": "killedTrialList", "EarlyStopped": "earlyStoppedTrialList",
    "MetricsUnavailable": "metricsUnavailableTrialList",
}
_COUNTS = {
    "Running": "trialsRunning", "Created": "trialsPending", "Succeeded": "trialsSucceeded",
    "Failed": "trialsFailed", "Killed": "trialsKilled", "EarlyStopped": "trialsEarlyStopped",
    "MetricsUnavailable": "trialMetricsUnavailable",
}


def _reason(status: dict, ctype: str) -> str | None:
    return next((c.get("reason") for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def _pending_trial(trials: list[dict]) -> str:
    for trial in trials:
        for cond in (trial.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Running" and cond.get("status") == "True" and cond.get("reason") == "TrialPending":
                return f"; trial {trial['metadata']['name']}: {cond.get('message')}"
    return ""


class ExperimentReconciler(Reconciler):
    name = "experiments"
    kinds = ("Experiment",)
    watches = ("Trial", "PersistentVolumeClaim")

    def reconcile(self, key: Key) -> float | None:
        try:
            exp = self.store.get("Experiment", key.namespace, key.name)
        except NotFound:
            return None
        if is_being_deleted(exp):
            return None
        spec = exp["spec"]
        # The object was decoded for this pass alone: its status is changed in place, against a copy.
        status = exp["status"] = exp.get("status") or {}
        before = copy.deepcopy(status)
        trials = experiment_trials(self.store, exp)
        events: list[tuple[str, str, str]] = []

        if not status.get("conditions"):
            set_condition(status, "Created", "True", "ExperimentCreated", "Experiment is created")
            status["startTime"] = now_rfc3339()
            events.append(("Normal", "ExperimentCreated", f"Experiment {key.name} is created"))

        self._count(status, trials)
        self._best(status, spec, trials)
        multi = objectives(spec)
        if multi:
            # Beyond Katib's status: the trials no other trial beats on every objective.
            front = pareto_front(trial_records(self.store, exp, trials), [direction for _, direction in multi])
            status["paretoOptimalTrials"] = [t.name for t in front]
        completed = sum(status.get(c, 0) for c in ("trialsSucceeded", "trialsFailed", "trialsKilled",
                                                    "trialsEarlyStopped", "trialMetricsUnavailable"))
        active = status.get("trialsRunning", 0) + status.get("trialsPending", 0)
        max_trials = spec.get("maxTrialCount")

        if _finished(status):
            if not self._restart(exp, status, completed, events):
                self._kill_active(trials)
                return self._write(exp, status, before, events)

        outcome = self._outcome(spec, status, completed)
        if outcome is None and not spec.get("trialTemplate"):
            outcome = Outcome("Failed", "ExperimentFailed",
                              "Experiment has no trialTemplate, so no trial can run: add spec.trialTemplate")
        if outcome is None:
            want = trials_wanted(int(spec.get("parallelTrialCount", DEFAULT_PARALLEL_TRIAL_COUNT)),
                                 None if max_trials is None else int(max_trials), completed)
            need = want - active
            if need > 0 and not self._volume_bound(exp):
                need = 0  # the claim's binding wakes this experiment again
            if need > 0:
                exhausted, created = self._create_trials(exp, trials, need, events)
                self._count_created(status, created)
                if exhausted and active == 0 and need == want:
                    outcome = SEARCH_SPACE_EXHAUSTED
            restarting = is_true(status, "Running") and _reason(status, "Running") != "ExperimentRunning"
            if outcome is None and not restarting:
                # A trial whose pods cannot start (ImagePullBackOff, no room) is named here too.
                set_condition(status, "Running", "True", "ExperimentRunning",
                              "Experiment is running" + _pending_trial(trials))
            if need > 0:
                self._record_suggestion(exp, status, len(trials) + len(created), done=False)
        if outcome is not None:
            ctype, reason, message = outcome
            self._record_suggestion(exp, status, len(trials), done=True)
            if is_true(status, "Running"):
                set_condition(status, "Running", "False", reason, message)
            set_condition(status, ctype, "True", reason, message)
            status["completionTime"] = now_rfc3339()
            events.append(("Normal" if ctype == "Succeeded" else "Warning", reason, message))
            self._kill_active(trials)  # no trial was created in a pass that ends the experiment
        return self._write(exp, status, before, events)

    # -- bookkeeping ----------------------------------------------------------------------------
    def _count(self, status: dict, trials: list[dict]) -> None:
        for field in (*_LISTS.values(), *_COUNTS.values()):
            status.pop(field, None)
        status["trials"] = len(trials)
        for trial in trials:
            state = trial_state(trial)
            status.setdefault(_LISTS[state], []).append(trial["metadata"]["name"])
            status[_COUNTS[state]] = status.get(_COUNTS[state], 0) + 1

    def _count_created(self, status: dict, created: list[dict]) -> None:
        """Count the trials this pass created as pending, as the next pass would count them."""
        if not created:
            return
        status["trials"] += len(created)
        status.setdefault(_LISTS["Created"], []).extend(t["metadata"]["name"] for t in created)
        status[_COUNTS["Created"]] = status.get(_COUNTS["Created"], 0) + len(created)

    def _best(self, status: dict, spec: dict, trials: list[dict]) -> None:
        objective = spec["objective"]["objectiveMetricName"]
        strategy = strategy_for(spec, objective)
        sign = -1.0 if spec["objective"]["type"] == "maximize" else 1.0
        best, best_value = None, None
        for trial in trials:
            observation = (trial.get("status") or {}).get("observation")
            value = metric_value(observation, objective, strategy)
            if value is None:
                continue
            if best_value is None or sign * value < sign * best_value:
                best, best_value = trial, value
        if best is not None:
            status["currentOptimalTrial"] = {
                "bestTrialName": best["metadata"]["name"],
                "parameterAssignments": best["spec"].get("parameterAssignments") or [],
                "observation": (best.get("status") or {}).get("observation") or {"metrics": []},
            }

    def _outcome(self, spec: dict, status: dict, completed: int) -> Outcome | None:
        objective = spec["objective"]
        best = status.get("currentOptimalTrial")
        value = metric_value(best.get("observation"), objective["objectiveMetricName"],
                             strategy_for(spec, objective["objectiveMetricName"])) if best else None
        goal, max_failed, max_trials = (objective.get("goal"), spec.get("maxFailedTrialCount"),
                                        spec.get("maxTrialCount"))
        return experiment_outcome(
            objective_type=objective["type"], goal=None if goal is None else float(goal),
            best_name=best["bestTrialName"] if best else None, best_value=value,
            failed=status.get("trialsFailed", 0) + status.get("trialMetricsUnavailable", 0),
            max_failed=None if max_failed is None else int(max_failed), completed=completed,
            max_trials=None if max_trials is None else int(max_trials))

    def _restart(self, exp: dict, status: dict, completed: int, events: list) -> bool:
        """Katib's resume: a LongRunning/FromVolume experiment that ended on maxTrialCount runs on
        when maxTrialCount is raised (re-applied manifest). The algorithm needs no saved state: it
        is rebuilt from the stored trials."""
        spec = exp["spec"]
        reasons = {c.get("reason") for c in status.get("conditions") or [] if c.get("status") == "True"}
        max_trials = spec.get("maxTrialCount")
        if (spec.get("resumePolicy", "Never") in ("LongRunning", "FromVolume")
                and "ExperimentMaxTrialsReached" in reasons
                and (max_trials is None or int(max_trials) > completed)):
            set_condition(status, "Succeeded", "False", "ExperimentRestarting", "Experiment is restarting")
            set_condition(status, "Running", "True", "ExperimentRestarting",
                          "Experiment is running again: maxTrialCount was raised")
            status.pop("completionTime", None)
            message = "maxTrialCount was raised; the experiment continues"
            if spec.get("resumePolicy") == "FromVolume":
                message += f", its suggestion restored from volume {volume_claim_name(exp)}"
            events.append(("Normal", "ExperimentRestarting", message))
            return True
        return False

    def _volume_bound(self, exp: dict) -> bool:
        """For FromVolume, the experiment's claim exists and is bound (created here if missing),
        so trials never write into a directory nothing owns. Always true for other policies."""
        if exp["spec"].get("resumePolicy") != "FromVolume":
            return True
        claim = volume_claim(exp)
        try:
            current = self.store.get("PersistentVolumeClaim", exp["metadata"]["namespace"],
                                     claim["metadata"]["name"])
        except NotFound:
            try:
                self.store.create(claim)
            except AlreadyExists:
                pass  # created by an earlier pass; its binding wakes us
            return False
        return (current.get("status") or {}).get("phase") == "Bound"

    def _create_trials(self, exp: dict, trials: list[dict], need: int, events: list) -> tuple[bool, list[dict]]:
        """Create up to ``need`` trials; return (search space exhausted, the trials created)."""
        spec = exp["spec"]
        settings = {s["name"]: str(s["value"]) for s in spec["algorithm"].get("algorithmSettings") or []}
        settings.pop("objective_types", None)  # read by objectives(), not a sampler setting
        algorithm = get_algorithm(spec["algorithm"]["algorithmName"], settings)
        space = SearchSpace.from_parameters(spec["parameters"])
        multi = objectives(spec)
        objective = [direction for _, direction in multi] if multi else spec["objective"]["type"]
        suggestions = algorithm.suggest(space, trial_records(self.store, exp, trials), objective, need)
        template = self._template(exp)
        created = []
        for offset, assignment in enumerate(suggestions.assignments):
            name = _trial_name(exp["metadata"]["name"])
            sequence = len(trials) + offset
            extra = suggestions.labels[offset] if suggestions.labels else {}
            trial = self._trial(exp, template, name, sequence, assignment, extra)
            created.append(self.create_counted(trial))
            TRIALS_CREATED.inc()
            events.append(("Normal", "TrialCreated", f"Created trial {name} with " +
                           ", ".join(f"{k}={v}" for k, v in assignment.items())))
        return suggestions.exhausted and not suggestions.assignments, created

    def _template(self, exp: dict) -> dict:
        template = exp["spec"]["trialTemplate"]
        if template.get("trialSpec"):
            return template["trialSpec"]
        ref = template["configMap"]
        import yaml

        cm = self.store.get("ConfigMap", ref["configMapNamespace"], ref["configMapName"])
        return yaml.safe_load(cm["data"][ref["templatePath"]])

    def _trial(self, exp: dict, template: dict, name: str, sequence: int, assignment: dict[str, str],
               extra_labels: dict[str, str]) -> dict:
        spec = exp["spec"]
        ns = exp["metadata"]["namespace"]
        # As Katib: the algorithm's labels (pbt's generation and parent) go on the Trial and into
        # spec.labels, so a template can pass them on with ${trialSpec.Labels[<key>]}.
        labels = {**extra_labels, EXPERIMENT_LABEL: exp["metadata"]["name"], TRIAL_LABEL: name}
        values = trial_parameter_values(spec, assignment)
        run_spec = substitute_trial_template(template, values, {
            "name": name, "namespace": ns, "kind": template.get("kind"), "apiVersion": template.get("apiVersion"),
            "labels": labels, "annotations": {}})
        tt = spec["trialTemplate"]
        return {
            "apiVersion": "kubeflow.org/v1beta1",
            "kind": "Trial",
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                         "annotations": {SEQUENCE_ANNOTATION: str(sequence)},
                         "ownerReferences": [owner_reference(exp)]},
            "spec": {
                "objective": spec["objective"],
                "parameterAssignments": [{"name": k, "value": v} for k, v in assignment.items()],
                "runSpec": run_spec,
                "primaryContainerName": tt.get("primaryContainerName"),
                "primaryPodLabels": tt.get("primaryPodLabels"),
                "successCondition": tt.get("successCondition"),
                "failureCondition": tt.get("failureCondition"),
                "retainRun": bool(tt.get("retain")),
                "metricsCollector": spec.get("metricsCollectorSpec") or {"collector": {"kind": "StdOut"}},
                "labels": labels,
            },
            "status": {},
        }

    def _record_suggestion(self, exp: dict, status: dict, count: int, done: bool) -> None:
        """Keep Katib's Suggestion object (same name as the experiment) for `get suggestions`.

        Only the count is kept, not every assignment ever made: Katib's list is what outgrows
        etcd on long experiments, and the trials already hold their assignments.
        """
        ns, name = exp["metadata"]["namespace"], exp["metadata"]["name"]
        spec = exp["spec"]
        suggestion_status = {"suggestionCount": count, "startTime": status.get("startTime")}
        set_condition(suggestion_status, "Created", "True", "SuggestionCreated", "Suggestion is created")
        policy = spec.get("resumePolicy") or "Never"
        if not done:
            set_condition(suggestion_status, "Running", "True", "SuggestionRunning", "Suggestion is running")
        elif policy == "LongRunning":
            set_condition(suggestion_status, "Running", "True", "SuggestionRunning",
                          "Suggestion is running: resumePolicy LongRunning keeps it after the experiment has "
                          "completed, until the experiment is deleted")
        elif policy == "FromVolume":
            set_condition(suggestion_status, "Succeeded", "True", "SuggestionSucceeded",
                          f"Suggestion has finished; its volume {volume_claim_name(exp)} is kept, so the experiment "
                          "can be restarted by raising maxTrialCount")
        else:
            set_condition(suggestion_status, "Succeeded", "True", "SuggestionSucceeded",
                          "Suggestion has finished and cannot be restarted (resumePolicy Never)")
        body = {"algorithm": spec["algorithm"], "requests": count,
                "resumePolicy": spec.get("resumePolicy", "Never")}
        if spec.get("earlyStopping"):
            body["earlyStopping"] = spec["earlyStopping"]
        try:
            current = self.store.get("Suggestion", ns, name)
        except NotFound:
            current = self.store.create({"apiVersion": "kubeflow.org/v1beta1", "kind": "Suggestion",
                                         "metadata": {"name": name, "namespace": ns,
                                                      "labels": {EXPERIMENT_LABEL: name},
                                                      "ownerReferences": [owner_reference(exp)]},
                                         "spec": body})
        try:
            if current.get("spec") != body:
                current["spec"] = body
                current = self.store.update(current)
            current["status"] = suggestion_status
            self.store.update_status(current)
        except (Conflict, NotFound):
            pass  # bookkeeping only: the next pass writes it

    def _kill_active(self, trials: list[dict]) -> None:
        """A finished experiment ends its running trials (their slots are no longer wanted)."""
        for trial in trials:
            if trial_state(trial) in FINISHED:
                continue
            status = copy.deepcopy(trial.get("status") or {})
            set_condition(status, "Killed", "True", "TrialKilled", "The experiment has finished")
            status["completionTime"] = now_rfc3339()
            try:
                self.store.update_status({**trial, "status": status})  # the listed trial is shared
            except (Conflict, NotFound):
                pass  # the next pass tries again

    def _write(self, exp: dict, status: dict, before: dict, events: list) -> float | None:
        if status != before:
            exp["status"] = status
            try:
                self.write_status(exp)
            except Conflict:
                return CONFLICT_RETRY_SECONDS
            except NotFound:
                return None
        for etype, reason, message in events:
            self.store.record_event(exp, etype, reason, message)
        return None


def _finished(status: dict) -> bool:
    return is_true(status, "Succeeded") or is_true(status, "Failed")


def _trial_name(experiment: str) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return f"{experiment}-{''.join(secrets.choice(alphabet) for _ in range(8))}"
