"""The overview and the pages of jobs, InferenceServices and pods."""

from __future__ import annotations

from trimaran.api import kinds
from trimaran.api.printers import age, pod_status
from trimaran.controllers.conditions import is_true
from trimaran.controllers.pods import owned_pods
from trimaran.runtime import NodeAPI
from trimaran.server.dashboard import html as h
from trimaran.server.dashboard.logs import log_tail
from trimaran.server.dashboard.tuning import experiment_finished
from trimaran.server.kube.table import table
from trimaran.store import Store

TRAINING_KINDS = kinds.kubeflow_job_kinds()
JOBSET_KINDS = kinds.jobset_backed_kinds()
JOB_KINDS = (*TRAINING_KINDS, *JOBSET_KINDS, "Job")
# What the overview lists, in this order.
OVERVIEW = ("Run", "Experiment", "TrainJob", *TRAINING_KINDS, "JobSet", "Job", "InferenceService", "Pod")


def detail_url(obj: dict) -> str:
    kind, ns, name = obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
    if kind in JOB_KINDS:
        return h.url("jobs", kind, ns, name)
    return h.url({"Experiment": "experiments", "InferenceService": "inferenceservices", "Trial": "trials",
                  "Pod": "pods", "Run": "runs"}[kind], ns, name)


def settled(obj: dict) -> bool:
    """Whether nothing about ``obj`` is still changing on its own, so its page need not refresh."""
    status = obj.get("status") or {}
    kind = obj["kind"]
    if kind == "Experiment":
        return experiment_finished(obj)
    if kind == "Job":
        return any(is_true(status, c) for c in ("Complete", "Failed", "Suspended"))
    if kind in TRAINING_KINDS:
        return any(is_true(status, c) for c in ("Succeeded", "Failed", "Suspended"))
    if kind in JOBSET_KINDS:
        return any(is_true(status, c) for c in ("Complete", "Completed", "Failed", "Suspended"))
    if kind == "InferenceService":
        return is_true(status, "Ready")
    if kind == "Pod":
        return status.get("phase") in ("Succeeded", "Failed")
    if kind == "Run":
        return status.get("state") in ("SUCCEEDED", "SKIPPED", "FAILED", "CANCELED")
    return True


def overview_page(store: Store) -> h.Page:
    """Every listed kind's objects in all namespaces, with kubectl's columns; refreshes while a
    workload (not a serving pod, which runs for good) is unfinished."""
    body, busy = [], False
    for kind in OVERVIEW:
        title = f"{kind}s"
        items = store.list(kind)
        if kind != "Pod":
            busy = busy or not all(settled(o) for o in items)
        # kubectl's columns (the kind's printer columns, as the API's Table), across namespaces.
        shown = table(kinds.lookup(kind), items, "", include_object="None")
        defs = shown["columnDefinitions"]
        keep = [i for i, c in enumerate(defs) if not c["priority"]]
        rows = []
        for obj, row in zip(items, shown["rows"], strict=True):
            cells = [h.esc(obj["metadata"].get("namespace", ""))]
            for i in keep:
                text = "" if row["cells"][i] is None else str(row["cells"][i])
                cells.append(h.link(detail_url(obj), text) if i == 0
                             else h.state(text) if defs[i]["name"] in ("Status", "State") else h.esc(text))
            rows.append(cells)
        headers = ["namespace", *(defs[i]["name"].lower() for i in keep)]
        body.append(f"<h2>{h.esc(title)}</h2>" + h.table(headers, rows, empty=f"no {title}"))
    return h.Page("Overview", "".join(body), busy)


def _pods_table(pods: list[dict]) -> str:
    rows = [[h.link(h.url("pods", p["metadata"]["namespace"], p["metadata"]["name"]), p["metadata"]["name"]),
             h.state(pod_status(p)),
             h.esc(sum(cs.get("restartCount", 0) for cs in (p.get("status") or {}).get("containerStatuses") or [])),
             h.esc(age(p["metadata"].get("creationTimestamp"))), h.link(_pod_log_url(p), "log")]
            for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
    return h.table(["pod", "status", "restarts", "age", "log"], rows, empty="no pods")


def _pod_log_url(pod: dict) -> str:
    return h.url("pods", pod["metadata"]["namespace"], pod["metadata"]["name"]) + "#log"


def _header(obj: dict) -> list[tuple[str, str]]:
    status = obj.get("status") or {}
    pairs = [("Kind", h.esc(obj["kind"])), ("Age", h.esc(age(obj["metadata"].get("creationTimestamp"))))]
    pairs += [(label, h.esc(status[f])) for label, f in (("Started", "startTime"), ("Completed", "completionTime"))
              if status.get(f)]
    return pairs


def job_page(store: Store, job: dict) -> h.Page:
    ns, name, status = job["metadata"]["namespace"], job["metadata"]["name"], job.get("status") or {}
    pairs = _header(job)
    if job["kind"] == "Job":
        pairs.append(("Pods", h.esc(f"{status.get('active', 0)} active / {status.get('succeeded', 0)} succeeded / "
                                    f"{status.get('failed', 0)} failed (completions "
                                    f"{job['spec'].get('completions', 1)}, parallelism "
                                    f"{job['spec'].get('parallelism', 1)})")))
    body = [h.fields(pairs), "<h2>Conditions</h2>", h.conditions(job)]
    replicas = status.get("replicaStatuses") or {}
    if replicas:
        rows = [[h.esc(rtype), h.esc(rs.get("active", 0)), h.esc(rs.get("succeeded", 0)), h.esc(rs.get("failed", 0))]
                for rtype, rs in replicas.items()]
        body.append("<h2>Replicas</h2>" + h.table(["replica type", "active", "succeeded", "failed"], rows))
    jobs = status.get("jobsStatus") or status.get("replicatedJobsStatus") or []
    if jobs:
        rows = [[h.esc(j.get("name")), *(h.esc(j.get(k, 0)) for k in ("ready", "active", "succeeded", "failed"))]
                for j in jobs]
        body.append("<h2>Jobs</h2>" + h.table(["replicated job", "ready", "active", "succeeded", "failed"], rows))
    label = kinds.pods_label_of(job["kind"])
    if label:
        pods = store.list("Pod", ns, label_selector={label: name})
    else:
        pods = owned_pods(store, job)
    body.append("<h2>Pods</h2>" + _pods_table(pods))
    body.append("<h2>Events</h2>" + h.events(store.list_events(job["kind"], ns, name)))
    return h.Page(f"{job['kind']} {ns}/{name}", "".join(body), not settled(job))


def isvc_page(store: Store, isvc: dict) -> h.Page:
    ns, name, status = isvc["metadata"]["namespace"], isvc["metadata"]["name"], isvc.get("status") or {}
    pairs = [("URL", h.esc(status.get("url") or "pending")), *_header(isvc)]
    address = (status.get("address") or {}).get("url")
    if address:
        pairs.append(("Address", h.esc(address)))
    model = status.get("modelStatus") or {}
    if model:
        pairs.append(("Model", h.esc(f"{model.get('transitionStatus', '')}: "
                                     f"{(model.get('states') or {}).get('activeModelState', '')}")))
    body = [h.fields(pairs), "<h2>Conditions</h2>", h.conditions(isvc)]
    for component, cstatus in (status.get("components") or {}).items():
        traffic = {t.get("revisionName"): t for t in cstatus.get("traffic") or []}
        replicas = cstatus.get("replicas") or {}
        rows = []
        for rev in sorted(set(traffic) | set(replicas)):
            target, counts = traffic.get(rev) or {}, replicas.get(rev) or {}
            rows.append([h.esc(rev), h.esc(f"{target['percent']}%" if target else "-"), h.esc(target.get("tag")),
                         h.esc("yes" if target.get("latestRevision") else ""),
                         h.esc(f"{counts.get('ready', 0)}/{counts.get('total', 0)}")])
        body.append(f"<h2>{h.esc(component.capitalize())} traffic</h2>")
        body.append(h.table(["revision", "traffic", "tag", "latest", "ready replicas"], rows, empty="no revisions"))
    body.append("<h2>Pods</h2>" + _pods_table(owned_pods(store, isvc)))
    body.append("<h2>Events</h2>" + h.events(store.list_events("InferenceService", ns, name)))
    return h.Page(f"InferenceService {ns}/{name}", "".join(body), not settled(isvc))


def pod_page(store: Store, runtime: NodeAPI, pod: dict) -> h.Page:
    ns, name, status = pod["metadata"]["namespace"], pod["metadata"]["name"], pod.get("status") or {}
    pairs = [("Status", h.state(pod_status(pod))), *_header(pod), ("IP", h.esc(status.get("podIP")))]
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") in (*JOB_KINDS, "InferenceService"):
            owner = {"kind": ref["kind"], "metadata": {"namespace": ns, "name": ref.get("name", "")}}
            pairs.append(("Owner", h.link(detail_url(owner), f"{ref['kind']} {ref.get('name', '')}")))
    body = [h.fields(pairs), "<h2>Conditions</h2>", h.conditions(pod)]
    statuses = {cs.get("name"): cs for cs in status.get("containerStatuses") or []}
    body.append('<h2 id="log">Logs (last lines)</h2>')
    for c in pod["spec"].get("containers") or []:
        restarts = statuses.get(c["name"], {}).get("restartCount", 0)
        body.append(f"<h3>{h.esc(c['name'])} <span class=\"muted\">restarts {h.esc(restarts)}</span></h3>")
        body.append(h.log_block(log_tail(runtime, ns, name, c["name"]), "no output yet"))
    body.append("<h2>Events</h2>" + h.events(store.list_events("Pod", ns, name)))
    return h.Page(f"Pod {ns}/{name}", "".join(body), not settled(pod))
