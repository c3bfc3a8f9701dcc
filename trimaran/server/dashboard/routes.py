"""The dashboard's routes: read-only pages over the store, mounted at ``/dashboard``."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from trimaran.server.controlplane import ControlPlane
from trimaran.server.dashboard import html as h
from trimaran.server.dashboard.pipelines import add_routes as add_pipeline_routes
from trimaran.server.dashboard.tuning import experiment_page, trial_page
from trimaran.server.dashboard.workloads import JOB_KINDS, isvc_page, job_page, overview_page, pod_page
from trimaran.store import NotFound


def _respond(render: Callable[[], h.Page]) -> HTMLResponse:
    try:
        page = render()
    except NotFound as exc:
        return HTMLResponse(h.document(h.Page("Not found", f"<p>{h.esc(exc)}</p>")), status_code=404,
                            headers=h.HEADERS)
    return HTMLResponse(h.document(page), headers=h.HEADERS)


def dashboard_router(plane: ControlPlane) -> APIRouter:
    """The pages, each rendered from the store on every request."""
    store, runtime = plane.store, plane.kubelet.runtime
    router = APIRouter(prefix=h.PREFIX)

    def job_of(kind: str, namespace: str, name: str) -> dict:
        if kind not in JOB_KINDS:  # the job page shows only jobs; other kinds have their own pages
            raise NotFound(kind, namespace, name)
        return store.get(kind, namespace, name)

    @router.get("/", response_class=HTMLResponse)
    def overview() -> HTMLResponse:
        return _respond(lambda: overview_page(store))

    @router.get("/experiments/{namespace}/{name}", response_class=HTMLResponse)
    def experiment(namespace: str, name: str, metric: str | None = None) -> HTMLResponse:
        return _respond(lambda: experiment_page(store, store.get("Experiment", namespace, name), metric))

    @router.get("/trials/{namespace}/{name}", response_class=HTMLResponse)
    def trial(namespace: str, name: str) -> HTMLResponse:
        return _respond(lambda: trial_page(store, runtime, store.get("Trial", namespace, name)))

    @router.get("/jobs/{kind}/{namespace}/{name}", response_class=HTMLResponse)
    def job(kind: str, namespace: str, name: str) -> HTMLResponse:
        return _respond(lambda: job_page(store, job_of(kind, namespace, name)))

    @router.get("/inferenceservices/{namespace}/{name}", response_class=HTMLResponse)
    def inference_service(namespace: str, name: str) -> HTMLResponse:
        return _respond(lambda: isvc_page(store, store.get("InferenceService", namespace, name)))

    @router.get("/pods/{namespace}/{name}", response_class=HTMLResponse)
    def pod(namespace: str, name: str) -> HTMLResponse:
        return _respond(lambda: pod_page(store, runtime, store.get("Pod", namespace, name)))

    add_pipeline_routes(router, store, runtime)
    return router
