"""Pipeline runs in the dashboard: the list of runs, a run's page (its graph, each task's inputs,
outputs, artifacts and log) and its artifacts.

Artifacts are files under the run's pipeline root, served by :func:`artifact_response` only from
there. HTML and Markdown artifacts are shown in a sandboxed frame whose answer carries a
Content-Security-Policy that forbids scripts and every fetch, so an artifact a step wrote can
neither run code in the dashboard's origin nor reach the network; Markdown is rendered by
markdown-it with raw HTML off (it is escaped) and its links checked by markdown-it's own rule.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from urllib.parse import urlencode, urlsplit
from urllib.request import url2pathname

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

from trimaran.api.pipelines import FINISHED_RUN_STATES, FINISHED_TASK_STATES
from trimaran.api.printers import age, elapsed
from trimaran.runtime import NodeAPI
from trimaran.server.dashboard import html as h
from trimaran.server.dashboard.charts import Series, chart
from trimaran.server.dashboard.dag import build, svg
from trimaran.server.dashboard.logs import log_tail
from trimaran.store import NotFound, Store

STEP_TYPES = ("container", "importer")
# A run's page frames its HTML and Markdown artifacts (from this origin only).
RUN_PAGE_HEADERS = {**h.HEADERS,
                    "Content-Security-Policy": h.HEADERS["Content-Security-Policy"] + "; frame-src 'self'"}
# What an artifact is answered with: no script, nothing fetched, its own opaque origin (sandbox),
# framed only by the dashboard.
ARTIFACT_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                                               "sandbox; frame-ancestors 'self'",
                    "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_MARKDOWN_LIMIT = 2 * 1024 * 1024


def run_finished(run: dict) -> bool:
    return (run.get("status") or {}).get("state") in FINISHED_RUN_STATES


def _steps(run: dict) -> list[dict]:
    return [t for t in (run.get("status") or {}).get("tasks") or [] if t.get("type", "container") in STEP_TYPES]


def run_url(run: dict) -> str:
    return h.url("runs", run["metadata"]["namespace"], run["metadata"]["name"])


def runs_page(store: Store) -> h.Page:
    """Every run, newest first: state, steps done, duration, experiment, when it started."""
    runs = sorted(store.list("Run"), key=lambda r: r["metadata"].get("creationTimestamp") or "", reverse=True)
    rows = []
    for r in runs:
        status, spec = r.get("status") or {}, r["spec"]
        steps = _steps(r)
        done = sum(t.get("state") in FINISHED_TASK_STATES for t in steps)
        rows.append([h.esc(r["metadata"]["namespace"]), h.link(run_url(r), r["metadata"]["name"]),
                     h.esc(spec.get("displayName")), h.state(status.get("state") or "PENDING"),
                     h.esc(f"{done}/{len(steps)}"), h.esc(elapsed(status.get("startedAt"), status.get("finishedAt"))),
                     h.esc(spec.get("experiment")), h.esc(status.get("startedAt")),
                     h.esc(age(r["metadata"].get("creationTimestamp")))])
    body = h.table(["namespace", "run", "display name", "state", "tasks done", "duration", "experiment", "started",
                    "age"], rows, empty="no runs")
    return h.Page("Pipeline runs", body, not all(run_finished(r) for r in runs))


def pipeline_spec_of(store: Store, run: dict) -> dict:
    """The run's compiled pipeline: its own, else the stored version it names (the newest one when
    it names only the pipeline)."""
    spec = run["spec"]
    if spec.get("pipelineSpec"):
        return spec["pipelineSpec"]
    ref = spec.get("pipelineVersionRef") or {}
    ns = run["metadata"]["namespace"]
    try:
        if ref.get("version"):
            return store.get("PipelineVersion", ns, ref["version"])["spec"]["pipelineSpec"]
    except NotFound:
        return {}
    versions = [v for v in store.list("PipelineVersion", ns) if v["spec"].get("pipelineName") == ref.get("pipeline")]
    newest = max(versions, key=lambda v: v["metadata"].get("creationTimestamp") or "", default=None)
    return newest["spec"]["pipelineSpec"] if newest else {}


def _task_anchor(task_id: str) -> str:
    return f"task-{task_id}"


def run_page(store: Store, runtime: NodeAPI, run: dict) -> h.Page:
    ns, name = run["metadata"]["namespace"], run["metadata"]["name"]
    spec, status = run["spec"], run.get("status") or {}
    tasks = status.get("tasks") or []
    pairs = [("State", h.state(status.get("state") or "PENDING")), ("Display name", h.esc(spec.get("displayName"))),
             ("Experiment", h.esc(spec.get("experiment") or "-")), ("Started", h.esc(status.get("startedAt") or "-")),
             ("Finished", h.esc(status.get("finishedAt") or "-")),
             ("Duration", h.esc(elapsed(status.get("startedAt"), status.get("finishedAt")) or "-")),
             ("Pipeline root", h.esc(status.get("pipelineRoot") or spec.get("pipelineRoot") or "-")),
             ("Caching", h.esc("on" if spec.get("enableCaching", True) else "off"))]
    if status.get("message"):
        pairs.append(("Message", h.message(status["message"])))
    body = [h.fields(pairs), "<h2>Parameters</h2>", _values(spec.get("parameters"), "no parameters")]
    body.append("<h2>Graph</h2>")
    body.append('<div style="overflow:auto">' + svg(build(pipeline_spec_of(store, run), tasks),
                                                    lambda task_id: "#" + _task_anchor(task_id)) + "</div>")
    rows = [[h.link("#" + _task_anchor(t["id"]), t["id"]) if t.get("type", "container") in STEP_TYPES
             else h.esc(t["id"]), h.esc(t.get("type", "container")), h.state(t.get("state") or "PENDING"),
             h.esc(elapsed(t.get("startedAt"), t.get("finishedAt"))), h.esc(t.get("attempts")),
             h.esc(t.get("cachedFrom")), _pod_link(ns, t.get("podName"))] for t in tasks]
    body.append("<h2>Tasks</h2>" + h.table(["task", "type", "state", "duration", "attempts", "cached from", "pod"],
                                           rows, empty="no tasks yet"))
    for t in tasks:
        if t.get("type", "container") in STEP_TYPES:
            body.append(_task_section(runtime, run, t))
    body.append("<h2>Events</h2>" + h.events(store.list_events("Run", ns, name)))
    return h.Page(f"Run {ns}/{name}", "".join(body), not run_finished(run))


def _pod_link(ns: str, pod: str | None) -> str:
    return h.link(h.url("pods", ns, pod), pod) if pod else ""


def _values(values: dict | None, empty: str) -> str:
    rows = [[h.esc(k), h.esc(v if isinstance(v, str) else json.dumps(v))] for k, v in (values or {}).items()]
    return h.table(["name", "value"], rows, empty=empty)


def _task_section(runtime: NodeAPI, run: dict, task: dict) -> str:
    ns = run["metadata"]["namespace"]
    pairs = [("State", h.state(task.get("state") or "PENDING")), ("Component", h.esc(task.get("component"))),
             ("Duration", h.esc(elapsed(task.get("startedAt"), task.get("finishedAt")) or "-")),
             ("Attempts", h.esc(task.get("attempts") or "-")), ("Pod", _pod_link(ns, task.get("podName")) or "-")]
    if task.get("cachedFrom"):
        pairs.append(("Cached from", h.esc(task["cachedFrom"])))
    if task.get("message"):
        pairs.append(("Message", h.message(task["message"])))
    out = [f'<section id="{h.esc(_task_anchor(task["id"]))}" class="task">',
           f"<h2>Task {h.esc(task['id'])}</h2>", h.fields(pairs)]
    for title, io in (("Inputs", task.get("inputs") or {}), ("Outputs", task.get("outputs") or {})):
        out.append(f"<h3>{title}</h3>" + _values(io.get("parameters"), "no parameters"))
        for artifact_name, refs in (io.get("artifacts") or {}).items():
            for ref in refs:
                out.append(_artifact(run, artifact_name, ref))
    if task.get("podName"):
        out.append(f"<h3>Log (last lines, {h.link(h.url('pods', ns, task['podName']) + '#log', 'its pod')})</h3>")
        out.append(h.log_block(log_tail(runtime, ns, task["podName"], None), "no output yet"))
    out.append("</section>")
    return "".join(out)


def artifact_url(run: dict, uri: str, render: str | None = None) -> str:
    query = {"uri": uri, **({"render": render} if render else {})}
    return run_url(run) + "/artifact?" + urlencode(query)


def _artifact(run: dict, name: str, ref: dict) -> str:
    kind = ref.get("type") or "system.Artifact"
    metadata = ref.get("metadata") or {}
    head = (f'<h4 class="artifact" data-type="{h.esc(kind)}">{h.esc(name)} <span class="muted">{h.esc(kind)}</span> '
            f'{h.link(artifact_url(run, ref["uri"]), ref["uri"])}</h4>')
    if kind == "system.Metrics":
        metrics = {k: v for k, v in metadata.items() if k != "display_name"}
        return head + h.table(["metric", "value"], [[h.esc(k), h.fmt(v)] for k, v in metrics.items()],
                              empty="no metrics logged")
    if kind == "system.ClassificationMetrics":
        return head + _classification(metadata)
    if kind in ("system.HTML", "system.Markdown"):
        render = "html" if kind == "system.HTML" else "markdown"
        return head + (f'<iframe class="artifact-view" sandbox="" referrerpolicy="no-referrer" '
                       f'title="{h.esc(name)}" style="width:100%;height:360px;background:#fff" '
                       f'src="{h.esc(artifact_url(run, ref["uri"], render))}"></iframe>')
    shown = {k: v for k, v in metadata.items() if k != "display_name"}
    return head + (_values(shown, "") if shown else "")


def _classification(metadata: dict) -> str:
    out = []
    matrix = metadata.get("confusionMatrix") or {}
    labels = [spec.get("displayName", "") for spec in matrix.get("annotationSpecs") or []]
    if labels:
        rows = [[f"<th>{h.esc(label)}</th>", *(h.fmt(v) for v in (row.get("row") or []))]
                for label, row in zip(labels, matrix.get("rows") or [], strict=False)]
        out.append('<table class="confusion-matrix"><thead><tr><th>actual \\ predicted</th>'
                   + "".join(f"<th>{h.esc(label)}</th>" for label in labels) + "</tr></thead><tbody>"
                   + "".join("<tr>" + "".join(c if c.startswith("<th>") else f"<td>{c}</td>" for c in row) + "</tr>"
                             for row in rows) + "</tbody></table>")
    roc = metadata.get("confidenceMetrics") or []
    points = sorted((float(p["falsePositiveRate"]), float(p["recall"])) for p in roc
                    if "falsePositiveRate" in p and "recall" in p)
    if points:
        out.append(chart([Series("ROC", points)], "false positive rate", "true positive rate"))
    return "".join(out) or '<p class="muted">no confusion matrix or ROC logged</p>'


def _local_path(uri: str) -> Path | None:
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(url2pathname(parts.path))
    if not parts.scheme and uri.startswith("/"):
        return Path(uri)
    return None


def artifact_response(store: Store, namespace: str, name: str, uri: str, render: str | None) -> Response:
    """One artifact's file, if it lies under the run's pipeline root; HTML and Markdown rendered
    for the sandboxed frame with ``render``."""
    run = store.get("Run", namespace, name)
    root_uri = (run.get("status") or {}).get("pipelineRoot")
    root, path = _local_path(root_uri or ""), _local_path(uri)

    def refuse(code: int, why: str) -> Response:
        return Response(why + "\n", status_code=code, media_type="text/plain", headers=ARTIFACT_HEADERS)

    if root is None:
        return refuse(404, f"run {name} has no local pipeline root (yet)")
    if path is None:
        return refuse(400, f"{uri}: only local artifacts (file:// or an absolute path) are served")
    real, real_root = path.resolve(), root.resolve()
    if not real.is_relative_to(real_root):
        return refuse(403, f"{uri} is outside the run's pipeline root {root_uri}")
    if real.is_dir():
        files = sorted(p for p in real.rglob("*") if p.is_file())[:500]
        items = "".join(f"<li>{h.link(artifact_url(run, p.as_uri()), p.relative_to(real))}</li>" for p in files)
        return HTMLResponse(f"<!doctype html><meta charset=utf-8><ul>{items}</ul>", headers=ARTIFACT_HEADERS)
    if not real.is_file():
        return refuse(404, f"{uri} does not exist (yet)")
    if render == "markdown":
        from markdown_it import MarkdownIt

        with real.open("rb") as fh:
            text = fh.read(_MARKDOWN_LIMIT).decode(errors="replace")
        rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
        return HTMLResponse(f"<!doctype html><meta charset=utf-8><body>{rendered}</body>", headers=ARTIFACT_HEADERS)
    if render == "html":
        return FileResponse(real, media_type="text/html; charset=utf-8", headers=ARTIFACT_HEADERS)
    guessed = mimetypes.guess_type(real.name)[0] or ""
    # Never as a page of this origin: text stays text, anything else is a download.
    media = "text/plain; charset=utf-8" if guessed.startswith("text/") or guessed in ("application/json", "") \
        else guessed
    return FileResponse(real, media_type=media, headers=ARTIFACT_HEADERS)


def add_routes(router: APIRouter, store: Store, runtime: NodeAPI) -> None:
    """The runs pages on the dashboard's router."""

    def respond(render, headers: dict[str, str] = h.HEADERS) -> HTMLResponse:  # noqa: ANN001
        try:
            page = render()
        except NotFound as exc:
            return HTMLResponse(h.document(h.Page("Not found", f"<p>{h.esc(exc)}</p>")), status_code=404,
                                headers=h.HEADERS)
        return HTMLResponse(h.document(page), headers=headers)

    @router.get("/runs", response_class=HTMLResponse)
    def runs() -> HTMLResponse:
        return respond(lambda: runs_page(store))

    @router.get("/runs/{namespace}/{name}", response_class=HTMLResponse)
    def run(namespace: str, name: str) -> HTMLResponse:
        return respond(lambda: run_page(store, runtime, store.get("Run", namespace, name)), RUN_PAGE_HEADERS)

    @router.get("/runs/{namespace}/{name}/artifact")
    def artifact(namespace: str, name: str, uri: str, render: str | None = None) -> Response:
        try:
            return artifact_response(store, namespace, name, uri, render)
        except NotFound as exc:
            return Response(f"{exc}\n", status_code=404, media_type="text/plain", headers=ARTIFACT_HEADERS)
