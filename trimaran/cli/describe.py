"""``trimaran describe``: one object as ``kubectl describe`` lays it out."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trimaran.cli.render import age, pod_status
from trimaran.cli.tables import print_table


def _kv(console: Console, key: str, value: object, indent: int = 0) -> None:
    console.print(f"{' ' * indent}{key + ':':<22}{value}", highlight=False)


def _mapping(console: Console, title: str, data: dict | None) -> None:
    if not data:
        _kv(console, title, "<none>")
        return
    items = list(data.items())
    _kv(console, title, f"{items[0][0]}={items[0][1]}")
    for k, v in items[1:]:
        console.print(f"{'':<22}{k}={v}", highlight=False)


def describe_object(console: Console, obj: dict, events: list[dict], pods: list[dict]) -> None:
    meta = obj["metadata"]
    _kv(console, "Name", meta["name"])
    if meta.get("namespace"):
        _kv(console, "Namespace", meta["namespace"])
    _mapping(console, "Labels", meta.get("labels"))
    _mapping(console, "Annotations", {k: v for k, v in (meta.get("annotations") or {}).items()
                                      if not k.startswith("trimaran.io/")})
    _kv(console, "API Version", obj.get("apiVersion", ""))
    _kv(console, "Kind", obj["kind"])
    _kv(console, "UID", meta.get("uid", ""))
    _kv(console, "Created", f"{meta.get('creationTimestamp', '')} ({age(meta.get('creationTimestamp'))} ago)")
    status = obj.get("status") or {}

    if obj["kind"] == "Pod":
        _describe_pod(console, obj)
    else:
        for field in ("startTime", "completionTime"):
            if status.get(field):
                _kv(console, field[0].upper() + field[1:].replace("Time", " Time"), status[field])
        if status.get("replicaStatuses"):
            console.print("Replica Statuses:")
            t = Table(box=None, pad_edge=False, header_style="bold")
            for col in ("  TYPE", "ACTIVE", "SUCCEEDED", "FAILED"):
                t.add_column(col)
            for rtype, rs in status["replicaStatuses"].items():
                t.add_row(f"  {rtype}", str(rs.get("active", 0)), str(rs.get("succeeded", 0)), str(rs.get("failed", 0)))
            print_table(console, t)
        if obj["kind"] == "Job":
            _kv(console, "Completions", obj["spec"].get("completions", "<unset>"))
            _kv(console, "Parallelism", obj["spec"].get("parallelism", 1))
            _kv(console, "Completion Mode", obj["spec"].get("completionMode", "NonIndexed"))
            _kv(console, "Pods Statuses", f"{status.get('active', 0)} Active / {status.get('succeeded', 0)} "
                                          f"Succeeded / {status.get('failed', 0)} Failed")
            if status.get("completedIndexes"):
                _kv(console, "Completed Indexes", status["completedIndexes"])

    if obj["kind"] == "Experiment":
        _describe_experiment(console, obj)
    if obj["kind"] == "InferenceService":
        _describe_isvc(console, obj)
    if obj["kind"] == "Run":
        from trimaran.cli.pipelines import describe_run

        describe_run(console, obj)

    if status.get("conditions"):
        console.print("Conditions:")
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("  TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"):
            t.add_column(col)
        for c in status["conditions"]:
            t.add_row(f"  {c.get('type', '')}", str(c.get("status", "")), c.get("reason", ""),
                      c.get("lastTransitionTime", ""), c.get("message", ""))
        print_table(console, t)

    if pods:
        console.print("Pods:")
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("  NAME", "STATUS", "RESTARTS", "AGE"):
            t.add_column(col)
        for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
            restarts = sum(cs.get("restartCount", 0) for cs in (p.get("status") or {}).get("containerStatuses") or [])
            t.add_row(f"  {p['metadata']['name']}", pod_status(p), str(restarts),
                      age(p["metadata"].get("creationTimestamp")))
        print_table(console, t)

    console.print("Events:" if events else "Events:  <none>")
    if events:
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("  TYPE", "REASON", "AGE", "COUNT", "MESSAGE"):
            t.add_column(col)
        for e in events:
            t.add_row(f"  {e.get('type', '')}", e.get("reason", ""), age(e.get("lastTimestamp")),
                      str(e.get("count", 1)), e.get("message", ""))
        print_table(console, t)


def _describe_pod(console: Console, pod: dict) -> None:
    status = pod.get("status") or {}
    _kv(console, "Status", pod_status(pod))
    _kv(console, "IP", status.get("podIP", ""))
    gpus = (status.get("allocation") or {}).get("gpus") or []
    _kv(console, "GPUs", ",".join(gpus) or "<none>")
    console.print("Containers:")
    statuses = {cs["name"]: cs for cs in status.get("containerStatuses") or []}
    for c in pod["spec"].get("containers") or []:
        console.print(f"  {c['name']}:", highlight=False)
        _kv(console, "Command", " ".join(c.get("command") or []) + " " + " ".join(c.get("args") or []), 4)
        cs = statuses.get(c["name"], {})
        if cs.get("imageID"):
            _kv(console, "Runs", f"image {cs.get('image')} ({cs['imageID'].rpartition('@')[2]})", 4)
        elif cs.get("state", {}).get("running") or cs.get("state", {}).get("terminated"):
            _kv(console, "Runs", "host process", 4)
        state = cs.get("state") or {}
        for name, detail in state.items():
            _kv(console, "State", f"{name.capitalize()} {detail}", 4)
        if cs.get("lastState"):
            _kv(console, "Last State", cs["lastState"], 4)
        _kv(console, "Restart Count", cs.get("restartCount", 0), 4)
        limits = (c.get("resources") or {}).get("limits")
        requests = (c.get("resources") or {}).get("requests")
        if limits:
            _kv(console, "Limits", limits, 4)
        if requests:
            _kv(console, "Requests", requests, 4)
        env = [e["name"] for e in c.get("env") or []]
        if env:
            _kv(console, "Environment", ", ".join(env), 4)


def _describe_experiment(console: Console, exp: dict) -> None:
    spec, status = exp["spec"], exp.get("status") or {}
    objective = spec.get("objective") or {}
    _kv(console, "Objective", f"{objective.get('type')} {objective.get('objectiveMetricName')}"
                              + (f" (goal {objective['goal']})" if objective.get("goal") is not None else ""))
    algorithm = spec.get("algorithm") or {}
    settings = ", ".join(f"{s['name']}={s['value']}" for s in algorithm.get("algorithmSettings") or [])
    _kv(console, "Algorithm", algorithm.get("algorithmName", "") + (f" ({settings})" if settings else ""))
    if spec.get("earlyStopping"):
        _kv(console, "Early Stopping", spec["earlyStopping"].get("algorithmName", ""))
    _kv(console, "Trials", f"{status.get('trials', 0)} total: {status.get('trialsSucceeded', 0)} succeeded, "
                           f"{status.get('trialsRunning', 0)} running, {status.get('trialsPending', 0)} pending, "
                           f"{status.get('trialsFailed', 0)} failed, {status.get('trialsEarlyStopped', 0)} early "
                           f"stopped, {status.get('trialMetricsUnavailable', 0)} metrics unavailable "
                           f"(max {spec.get('maxTrialCount', 'unbounded')}, parallel {spec.get('parallelTrialCount')})")
    if status.get("paretoOptimalTrials") is not None:
        _kv(console, "Pareto Front", ", ".join(status["paretoOptimalTrials"]) or "<none yet>")
    best = status.get("currentOptimalTrial")
    if best:
        _kv(console, "Best Trial", best.get("bestTrialName", ""))
        for a in best.get("parameterAssignments") or []:
            console.print(f"{'':<22}{a['name']} = {a['value']}", highlight=False)
        for m in (best.get("observation") or {}).get("metrics") or []:
            console.print(f"{'':<22}{m['name']}: latest {m.get('latest')}, min {m.get('min')}, max {m.get('max')}",
                          highlight=False)


def _describe_isvc(console: Console, isvc: dict) -> None:
    status = isvc.get("status") or {}
    _kv(console, "URL", status.get("url", "<pending>"))
    address = (status.get("address") or {}).get("url")
    if address:
        host, _, port = address.removeprefix("http://").partition(":")
        # Knative mode's address is a Host on the shared ingress port; Standard mode's a Service name in the cluster.
        _kv(console, "Address", f"{address} (curl -H 'Host: {host}' http://127.0.0.1:{port}/...)" if port else address)
    model = status.get("modelStatus") or {}
    if model:
        states = model.get("states") or {}
        _kv(console, "Model", f"{model.get('transitionStatus', '')}: active {states.get('activeModelState', '')}, "
                              f"target {states.get('targetModelState', '') or '-'}")
        failure = model.get("lastFailureInfo")
        if failure:
            _kv(console, "Last Failure", f"{failure.get('reason')}: {failure.get('message')}")
    for component, cstatus in (status.get("components") or {}).items():
        console.print(f"{component.capitalize()}:", highlight=False)
        if cstatus.get("url"):
            _kv(console, "URL", cstatus["url"], 2)
        if cstatus.get("grpcUrl"):
            _kv(console, "gRPC URL", f"{cstatus['grpcUrl']} (inference.GRPCInferenceService)", 2)
        _kv(console, "Latest Created", cstatus.get("latestCreatedRevision", "-"), 2)
        _kv(console, "Latest Ready", cstatus.get("latestReadyRevision", "-"), 2)
        _kv(console, "Rolled Out", f"{cstatus.get('latestRolledoutRevision', '-')} "
                                   f"(previous {cstatus.get('previousRolledoutRevision', '-')})", 2)
        percent = {t["revisionName"]: t for t in cstatus.get("traffic") or []}
        replicas = cstatus.get("replicas") or {}
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("  REVISION", "TRAFFIC", "TAG", "READY REPLICAS"):
            t.add_column(col)
        for rev in sorted(set(percent) | set(replicas)):
            target = percent.get(rev) or {}
            counts = replicas.get(rev) or {}
            t.add_row(f"  {rev}", f"{target['percent']}%" if target else "-", target.get("tag", ""),
                      f"{counts.get('ready', 0)}/{counts.get('total', 0)}")
        print_table(console, t)
