"""The Experiment and Trial pages: the best trial, every trial's curves, and why each stopped trial
stopped (the message of the condition that ended it)."""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlencode

from trimaran.api.labels import EXPERIMENT_LABEL
from trimaran.api.printers import age
from trimaran.api.tuning import DEFAULT_PARALLEL_TRIAL_COUNT
from trimaran.controllers.conditions import get_condition, is_true
from trimaran.controllers.pods import owned_pods
from trimaran.controllers.tuning.records import experiment_trials, metric_value, strategy_for
from trimaran.controllers.tuning.trial import trial_state
from trimaran.runtime import NodeAPI
from trimaran.server.dashboard import html as h
from trimaran.server.dashboard.charts import Series, Style, chart
from trimaran.server.dashboard.logs import log_tail
from trimaran.store import NotFound, Store

# States whose condition message says why the trial ended without succeeding.
STOPPED = ("EarlyStopped", "Failed", "MetricsUnavailable", "Killed")
_STATE_STYLE: dict[str, Style] = {"EarlyStopped": "stopped", "Failed": "failed", "MetricsUnavailable": "failed",
                                  "Killed": "stopped"}
_COUNTS = (("Succeeded", "trialsSucceeded"), ("Running", "trialsRunning"), ("Pending", "trialsPending"),
           ("Early stopped", "trialsEarlyStopped"), ("Failed", "trialsFailed"),
           ("Metrics unavailable", "trialMetricsUnavailable"), ("Killed", "trialsKilled"))


def experiment_finished(exp: dict) -> bool:
    status = exp.get("status") or {}
    return is_true(status, "Succeeded") or is_true(status, "Failed")


def stop_message(trial: dict) -> str | None:
    """Why a trial that did not succeed ended: the message of its terminal condition."""
    state = trial_state(trial)
    if state not in STOPPED:
        return None
    cond = get_condition(trial.get("status") or {}, state) or {}
    return cond.get("message") or cond.get("reason")


def _objective(exp: dict, trial: dict) -> float | None:
    metric = exp["spec"]["objective"]["objectiveMetricName"]
    return metric_value((trial.get("status") or {}).get("observation"), metric, strategy_for(exp["spec"], metric))


def _latest(trial: dict, metric: str) -> float | None:
    return metric_value((trial.get("status") or {}).get("observation"), metric, "latest")


def _curves(store: Store, namespace: str, trials: list[str], metric: str) -> dict[str, list[tuple[float, float]]]:
    curves: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in store.list_observations(namespace, trials=trials, metric=metric):
        curves[row["trial"]].append((float(row["step"] or 0), float(row["value"])))
    return {name: sorted(points, key=lambda p: p[0]) for name, points in curves.items()}


def _params(trial: dict) -> dict[str, str]:
    return {a["name"]: a["value"] for a in trial["spec"].get("parameterAssignments") or []}


def experiment_page(store: Store, exp: dict, metric: str | None) -> h.Page:
    spec, status = exp["spec"], exp.get("status") or {}
    ns, name = exp["metadata"]["namespace"], exp["metadata"]["name"]
    objective = spec["objective"]
    metrics = [objective["objectiveMetricName"], *(objective.get("additionalMetricNames") or [])]
    metric = metric if metric in metrics else metrics[0]
    trials = experiment_trials(store, exp)
    best = (status.get("currentOptimalTrial") or {}).get("bestTrialName")
    body = [h.fields(_summary(exp)), "<h2>Conditions</h2>", h.conditions(exp)]

    body.append("<h2>Best trial</h2>")
    if best:
        optimal = status["currentOptimalTrial"]
        observed = ", ".join(f"{m['name']} = {m.get('latest')} (min {m.get('min')}, max {m.get('max')})"
                             for m in (optimal.get("observation") or {}).get("metrics") or [])
        params = ", ".join(f"{a['name']} = {a['value']}" for a in optimal.get("parameterAssignments") or [])
        body.append(h.fields([("Trial", "★ " + h.link(h.url("trials", ns, best), best)),
                              ("Parameters", h.esc(params)), ("Observation", h.esc(observed))]))
    else:
        body.append('<p class="muted">no trial has reported the objective yet</p>')

    body.append(f"<h2>{h.esc(metric)} by step, every trial</h2>")
    if len(metrics) > 1:
        choices = " ".join(h.link(h.url("experiments", ns, name) + "?" + urlencode({"metric": m}), m) if m != metric
                           else f"<b>{h.esc(m)}</b>" for m in metrics)
        body.append(f"<p>metric: {choices}</p>")
    curves = _curves(store, ns, [t["metadata"]["name"] for t in trials], metric)
    series = []
    for t in trials:
        tname, state = t["metadata"]["name"], trial_state(t)
        style: Style = "best" if tname == best else _STATE_STYLE.get(state, "other")
        series.append(Series(tname, curves.get(tname, []), style, end_marker=state == "EarlyStopped"))
    body.append(chart(series, "step", metric))
    body.append('<p class="legend"><span class="sw-best"></span>best trial<span class="sw-stopped"></span>'
                'early stopped (✕ where it stopped)<span class="sw-failed"></span>failed'
                '<span class="sw-other"></span>other trials</p>')

    body.append(f"<h2>Best {h.esc(objective['objectiveMetricName'])} so far, by trial</h2>")
    body.append(_best_so_far(exp, trials))
    front = status.get("paretoOptimalTrials")
    if front is not None and len(metrics) >= 2:
        body.append(f"<h2>Pareto front: {h.esc(metrics[0])} against {h.esc(metrics[1])}</h2>")
        body.append(_pareto(trials, metrics[0], metrics[1], front))
        body.append('<p class="legend"><span class="sw-best"></span>the front: trials no other trial beats on '
                    "every objective</p>")

    body.append("<h2>Trials, best objective first</h2>")
    body.append(_trials_table(exp, trials, best, front))
    body.append("<h2>Events</h2>")
    body.append(h.events(store.list_events("Experiment", ns, name)))
    return h.Page(f"Experiment {ns}/{name}", "".join(body), not experiment_finished(exp))


def _summary(exp: dict) -> list[tuple[str, str]]:
    spec, status = exp["spec"], exp.get("status") or {}
    objective = spec["objective"]
    algorithm = spec.get("algorithm") or {}
    early = spec.get("earlyStopping") or {}

    def settings(block: dict) -> str:
        pairs = ", ".join(f"{s['name']}={s['value']}" for s in block.get("algorithmSettings") or [])
        return f" ({pairs})" if pairs else ""

    goal = f", goal {objective['goal']}" if objective.get("goal") is not None else ""
    extra = objective.get("additionalMetricNames") or []
    counts = ", ".join(f"{n} {status[f]}" for n, f in _COUNTS if status.get(f))
    pairs = [("Status", h.state(_experiment_state(exp))),
             ("Objective", h.esc(f"{objective.get('type')} {objective['objectiveMetricName']}{goal}"
                                 + (f"; also recorded: {', '.join(extra)}" if extra else ""))),
             ("Algorithm", h.esc(algorithm.get("algorithmName", "") + settings(algorithm)))]
    if early.get("algorithmName"):
        pairs.append(("Early stopping", h.esc(early["algorithmName"] + settings(early))))
    parallel = spec.get("parallelTrialCount", DEFAULT_PARALLEL_TRIAL_COUNT)
    pairs += [("Trials", h.esc(f"{status.get('trials', 0)} of max {spec.get('maxTrialCount', 'unbounded')}, "
                               f"{parallel} in parallel" + (f": {counts}" if counts else ""))),
              ("Age", h.esc(age(exp["metadata"].get("creationTimestamp"))))]
    return pairs


def _experiment_state(exp: dict) -> str:
    true = [c["type"] for c in (exp.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return true[-1] if true else "Pending"


def _best_so_far(exp: dict, trials: list[dict]) -> str:
    sign = -1.0 if exp["spec"]["objective"]["type"] == "maximize" else 1.0
    each, running, best = [], [], None
    for number, t in enumerate(trials, start=1):
        value = _objective(exp, t)
        if value is None:
            continue
        each.append((float(number), value))
        if best is None or sign * value < sign * best:
            best = value
        running.append((float(number), best))
    return chart([Series("every trial's objective", each, "point", "points"),
                  Series("best so far", running, "best", "step")], "trial number", "objective", integer_x=True)


def _pareto(trials: list[dict], x_metric: str, y_metric: str, front: list[str]) -> str:
    points, on_front = [], []
    for t in trials:
        x, y = _latest(t, x_metric), _latest(t, y_metric)
        if x is None or y is None:
            continue
        points.append((x, y))
        if t["metadata"]["name"] in front:
            on_front.append((x, y))
    return chart([Series("every trial", points, "point", "points"),
                  Series("Pareto front", sorted(on_front), "front")], x_metric, y_metric)


def _trials_table(exp: dict, trials: list[dict], best: str | None, front: list[str] | None) -> str:
    ns = exp["metadata"]["namespace"]
    sign = -1.0 if exp["spec"]["objective"]["type"] == "maximize" else 1.0
    params = [p["name"] for p in exp["spec"].get("parameters") or []]
    scored = [(t, _objective(exp, t)) for t in trials]
    scored.sort(key=lambda tv: (tv[1] is None, sign * (tv[1] or 0.0)))
    headers = ["trial", "state", "objective", *params, *(["pareto"] if front is not None else []),
               "why it stopped", "age"]
    rows, classes = [], []
    for t, value in scored:
        tname, state = t["metadata"]["name"], trial_state(t)
        assigned = _params(t)
        reason = (get_condition(t.get("status") or {}, state) or {}).get("reason") if state in STOPPED else None
        why = (f"<b>{h.esc(reason)}</b>: " if reason else "") + h.message(stop_message(t))
        marker = "★ " if tname == best else ""
        rows.append([marker + h.link(h.url("trials", ns, tname), tname), h.state(state), h.fmt(value),
                     *(h.esc(assigned.get(p)) for p in params),
                     *(["yes" if tname in front else ""] if front is not None else []),
                     why if state in STOPPED else "", h.esc(age(t["metadata"].get("creationTimestamp")))])
        classes.append("best" if tname == best else "")
    return h.table(headers, rows, classes, empty="no trials yet")


def trial_page(store: Store, runtime: NodeAPI, trial: dict) -> h.Page:
    ns, name = trial["metadata"]["namespace"], trial["metadata"]["name"]
    state = trial_state(trial)
    objective = trial["spec"].get("objective") or {}
    experiment = (trial["metadata"].get("labels") or {}).get(EXPERIMENT_LABEL)
    pairs = [("State", h.state(state))]
    if experiment:
        pairs.append(("Experiment", h.link(h.url("experiments", ns, experiment), experiment)))
    pairs += [(p, h.esc(v)) for p, v in _params(trial).items()]
    for m in ((trial.get("status") or {}).get("observation") or {}).get("metrics") or []:
        pairs.append((m["name"], h.esc(f"latest {m.get('latest')}, min {m.get('min')}, max {m.get('max')}")))
    job, pod = _primary_pod(store, trial)
    if job is not None:
        pairs.append(("Job", h.link(h.url("jobs", job["kind"], ns, name), f"{job['kind']} {name}")))
    if pod is not None:
        pairs.append(("Primary pod", h.link(h.url("pods", ns, pod["metadata"]["name"]), pod["metadata"]["name"])))
    body = [h.fields(pairs)]
    why = stop_message(trial)
    if why:
        body.append(f"<h2>Why it stopped</h2><p>{h.message(why)}</p>")
    body.append("<h2>Conditions</h2>" + h.conditions(trial))
    metrics = [objective.get("objectiveMetricName"), *(objective.get("additionalMetricNames") or [])]
    for metric in filter(None, metrics):
        points = _curves(store, ns, [name], metric).get(name, [])
        body.append(f"<h2>{h.esc(metric)}</h2>")
        body.append(chart([Series(name, points, _STATE_STYLE.get(state, "other"),
                                  end_marker=state == "EarlyStopped")], "step", metric))
    body.append("<h2>Log (last lines of the primary container)</h2>")
    if pod is None:
        body.append('<p class="muted">the trial\'s job and its pods are gone (a finished trial\'s job is deleted '
                    "unless the experiment's trialTemplate sets retain: true); a failed trial's condition "
                    "keeps the last lines of its log</p>")
    else:
        tail = log_tail(runtime, ns, pod["metadata"]["name"], trial["spec"].get("primaryContainerName"))
        body.append(h.log_block(tail, "no output yet"))
    body.append("<h2>Events</h2>" + h.events(store.list_events("Trial", ns, name)))
    return h.Page(f"Trial {ns}/{name}", "".join(body), state not in (*STOPPED, "Succeeded"))


def _primary_pod(store: Store, trial: dict) -> tuple[dict | None, dict | None]:
    """The trial's job (if it still exists) and the newest pod of it that the metrics come from."""
    ns, name = trial["metadata"]["namespace"], trial["metadata"]["name"]
    kind = (trial["spec"].get("runSpec") or {}).get("kind", "Job")
    try:
        job = store.get(kind, ns, name)
    except NotFound:
        return None, None
    if not any(o.get("uid") == trial["metadata"]["uid"] for o in job["metadata"].get("ownerReferences") or []):
        return None, None
    wanted = trial["spec"].get("primaryPodLabels") or {}
    pods = [p for p in owned_pods(store, job)
            if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return job, (pods[-1] if pods else None)
